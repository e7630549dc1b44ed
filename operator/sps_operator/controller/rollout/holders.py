"""Part of the rollout step: the Deployments a table is rolled onto hold it (ownership.py says why).

A target's Deployment holds exactly this profile's tables its pod template mounts, plus
the one about to be rolled onto it (held before the template names it, so no moment
exists where the template mounts a table only the profile owns). A table rolled off stays
held until the Deployment's rollout completed: pods of the old ReplicaSet still mount it.
Every write is a merge patch conditional on the ConfigMap as read; a conflict or a gone
ConfigMap leaves it to the next pass.
"""

from __future__ import annotations

from kubernetes.client.rest import ApiException

from sps_operator.api import labels as L
from sps_operator.controller.passes.state import Target
from sps_operator.controller.policies.deployments import deployment_rolled_out
from sps_operator.controller.policies.ownership import held_owner_references, mounted_config_maps
from sps_operator.controller.rollout.state import RolloutPass


def hold_tables(p: RolloutPass, target: Target, rolling: str | None = None) -> None:
    mounted = mounted_config_maps(target.deployment)
    settled = deployment_rolled_out(target.deployment)
    names = set(p.snapshot.config_maps) | set(p.created) | ({rolling} if rolling else set())
    for name in sorted(names):
        cm = p.created.get(name) or p.snapshot.config_maps.get(name)
        labels = ((cm or {}).get("metadata") or {}).get("labels") or {}
        if cm is None or labels.get(L.LABEL_COMPONENT) != L.COMPONENT_TABLE:
            continue
        holds = name in mounted or name == rolling
        if not holds and not settled:
            continue  # the old ReplicaSet's pods may still need it
        refs = held_owner_references(cm, target.deployment, holds)
        if refs is None:
            continue
        meta = cm["metadata"]
        patch = {
            "metadata": {"resourceVersion": meta.get("resourceVersion"), "ownerReferences": refs}
        }
        try:
            # The next target of this pass may share the table: it starts from this write.
            p.created[name] = p.kube.patch_metadata("ConfigMap", p.namespace, name, patch)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
            p.wake_within(5.0)

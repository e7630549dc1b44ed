"""Part of the rollout step: the Deployments a table is rolled onto hold it (ownership.py says why).

A target's Deployment holds exactly this profile's tables its pod template mounts, plus
the one about to be rolled onto it (held before the template names it, so no moment
exists where the template mounts a table only the profile owns). A table rolled off stays
held until the Deployment's rollout completed: pods of the old ReplicaSet still mount it.
Every write is a merge patch conditional on the ConfigMap as read; a conflict or a gone
ConfigMap leaves it to the next pass. A reference something else keeps removing is written
back with a capped backoff (`process.memories.Rewrites`), with a reason.
"""

from __future__ import annotations

from kubernetes.client.rest import ApiException

from sps_operator.api import labels as L
from sps_operator.api.reasons import HOLDER_REFERENCE_CONTESTED
from sps_operator.controller.passes.state import Target
from sps_operator.controller.policies.deployments import deployment_rolled_out
from sps_operator.controller.policies.ownership import held_owner_references, mounted_config_maps
from sps_operator.controller.policies.stable_writers import MAX_REWRITE_SECONDS
from sps_operator.controller.rollout.state import RolloutPass


def hold_tables(p: RolloutPass, target: Target, rolling: str | None = None) -> None:
    mounted = mounted_config_maps(target.deployment)
    settled = deployment_rolled_out(target.deployment)
    names = set(p.snapshot.config_maps) | set(p.created) | ({rolling} if rolling else set())
    dep_uid = str((target.deployment.get("metadata") or {}).get("uid") or "")
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
        key, what = ("holder", p.namespace, name, dep_uid), "hold" if holds else "release"
        if not _may_write_back(p, key, what, name, target.name):
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
            continue
        if p.rewrites.wrote(key, what, p.now) > 1:
            message = _contested(p, key, what, name, target.name)
            p.event("Warning", HOLDER_REFERENCE_CONTESTED, message)
            p.contested.append((HOLDER_REFERENCE_CONTESTED, message))


def _may_write_back(
    p: RolloutPass, key: tuple[str, ...], what: str, table: str, deployment: str
) -> bool:
    """Whether the holder reference may be written now: the operator wrote it a moment ago
    and something removed it since, it waits (memories.Rewrites: capped backoff), and
    Degraded says so once it was written back at least once."""
    wait, count = p.rewrites.wait(key, what, p.now)
    if wait <= 0:
        return True
    p.wake_within(wait)
    if count > 1:  # (once: the cache may not show the operator's own write yet)
        message = _contested(p, key, what, table, deployment)
        p.contested.append((HOLDER_REFERENCE_CONTESTED, message))
    return False


def _contested(p: RolloutPass, key: tuple[str, ...], what: str, table: str, deployment: str) -> str:
    wait, count = p.rewrites.wait(key, what, p.now)
    return (
        f"the reference that makes Deployment {deployment} hold table ConfigMap {table} was "
        f"removed again after the operator wrote it {count} times; it is written back with a "
        f"backoff (next in {wait:.0f} s, at most every {MAX_REWRITE_SECONDS:.0f} s). Without "
        "it the table is deleted with its profile even while the Deployment mounts it: stop "
        f"whatever edits the ConfigMap's ownerReferences (`kubectl get cm {table} "
        "--show-managed-fields -o yaml` names it)"
    )

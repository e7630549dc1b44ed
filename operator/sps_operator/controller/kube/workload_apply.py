"""The server-side-apply and merge-patch bodies the rollout writes into a target workload:
the table's volume, mount, flag and annotations in every pod template (Inject), the
annotation alone (AnnotateOnly), and the serving profile's record."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from sps_operator.api import labels as L
from sps_operator.controller.kube.builders import TABLE_VOLUME
from sps_operator.controller.policies import workloads
from sps_operator.controller.sglang.flags import without_flag
from sps_operator.controller.sglang.serverconfig import TABLE_PATH_FLAG


def inject_apply(
    deployment: Mapping[str, Any],
    container_name: str,
    table_config_map: str,
    table_hash: str,
    table_path: str,
    server_args: Sequence[str],
) -> dict[str, Any]:
    """The server-side-apply body for Inject: only the fields the operator owns, in every
    pod template of the workload (a LeaderWorkerSet's leader and worker templates: every
    rank loads the same table bytes from the same path, or the group must not start).

    The args list is atomic in SSA, so the operator necessarily co-owns `args`; it sends
    each template's container's current args with its flag set (Git's values unchanged):
    `server_args` for the server's template, as read, and the others' as the object holds
    them (a worker's per-rank args differ from the leader's)."""
    directory, filename = posixpath.split(table_path)
    volume = {
        "name": TABLE_VOLUME,
        "configMap": {"name": table_config_map, "items": [{"key": L.TABLE_KEY, "path": filename}]},
    }
    templates: list[tuple[workloads.Path, dict[str, Any]]] = []
    for i, (path, template) in enumerate(workloads.templates(deployment) or [((), {})]):
        args = server_args if i == 0 else _container_args(template, container_name)
        pod_spec: dict[str, Any] = {
            "containers": [
                {
                    "name": container_name,
                    "args": [
                        *without_flag(list(args), TABLE_PATH_FLAG),
                        TABLE_PATH_FLAG,
                        table_path,
                    ],
                    "volumeMounts": [
                        {"name": TABLE_VOLUME, "mountPath": directory, "readOnly": True}
                    ],
                }
            ],
            "volumes": [volume],
        }
        templates.append(
            (path, {**_table_annotations(table_config_map, table_hash), "spec": pod_spec})
        )
    return _workload_apply(deployment, templates)


def _container_args(template: Mapping[str, Any], container_name: str) -> list[str]:
    pod_spec = template.get("spec") or {}
    for container in pod_spec.get("containers") or []:
        if isinstance(container, Mapping) and container.get("name") == container_name:
            return [str(a) for a in container.get("args") or []]
    return []


def annotate_apply(
    deployment: Mapping[str, Any], table_config_map: str, table_hash: str
) -> dict[str, Any]:
    """The server-side-apply body for AnnotateOnly: the pod-template annotation (in every
    template of the workload), nothing else."""
    annotations = _table_annotations(table_config_map, table_hash)
    paths = [path for path, _ in workloads.templates(deployment)] or [()]
    return _workload_apply(deployment, [(path, annotations) for path in paths])


def _table_annotations(table_config_map: str, table_hash: str) -> dict[str, Any]:
    """The pod-template metadata the operator owns: which table, at which hash."""
    return {
        "metadata": {
            "annotations": {
                L.ANNOTATION_TABLE_HASH: table_hash,
                L.ANNOTATION_TABLE: table_config_map,
            }
        }
    }


def _workload_apply(
    workload: Mapping[str, Any], templates: Sequence[tuple[workloads.Path, dict[str, Any]]]
) -> dict[str, Any]:
    """An apply body naming `workload` (of its kind) and carrying only `templates`, each at
    its path, made conditional on the resourceVersion `workload` was read at: the body
    repeats what was read (the args), so the API server must refuse it (409) once anyone
    changed the object."""
    kind = workloads.kind_of(workload)
    meta = workload.get("metadata") or {}
    name = {"name": meta.get("name"), "namespace": meta.get("namespace")}
    if not meta.get("resourceVersion"):
        raise ValueError(f"{kind.kind} {name} has no resourceVersion to apply against")
    body: dict[str, Any] = {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {**name, "resourceVersion": meta["resourceVersion"]},
    }
    for path, template in templates:
        node = body
        for key in (path or kind.template_paths[0])[:-1]:
            node = node.setdefault(key, {})
        node[(path or kind.template_paths[0])[-1]] = template
    return body


def owner_patch(deployment: Mapping[str, Any], owner: str | None) -> dict[str, Any]:
    """A merge patch recording (or, with None, removing) the profile that serves the
    Deployment. It carries the resourceVersion the decision was made on: the API server
    refuses it (409) if the Deployment changed meanwhile. A merge patch, not an apply: an
    apply of only this annotation would drop the template fields the operator applied."""
    meta = deployment.get("metadata") or {}
    return {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "annotations": {L.ANNOTATION_OWNER: owner},
        }
    }

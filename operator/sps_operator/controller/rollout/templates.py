"""Part of the rollout step: what a target's pod templates say (pure): whether every
template makes its server read a table (Inject), and whether its roll failed (a
Deployment's own progress deadline; for the kinds without one, the admin's bound)."""

from __future__ import annotations

import itertools
import posixpath
from datetime import datetime, timedelta

from sps_operator.api import labels as L
from sps_operator.api.status import TableRef
from sps_operator.controller.kube import builders
from sps_operator.controller.passes.state import Target
from sps_operator.controller.policies import clocks, workloads
from sps_operator.controller.sglang.serverconfig import TABLE_PATH_FLAG, find_server_container


def inject_serves(target: Target, table: TableRef, table_path: str) -> bool:
    """Every template of the workload makes its server read `table` (a LeaderWorkerSet's
    leader and workers alike): annotated with its hash, the injected volume holds its
    ConfigMap, mounted where the server's table flag points."""
    if target.running_hash != table.hash or target.config is None:
        return False
    if target.config.table_path != table_path:
        return False
    directory, filename = posixpath.split(table_path)
    for i, (_, template) in enumerate(workloads.templates(target.deployment)):
        pod_spec = template.get("spec") or {}
        volume = next(
            (v for v in pod_spec.get("volumes") or [] if v.get("name") == builders.TABLE_VOLUME),
            None,
        )
        source = (volume or {}).get("configMap") or {}
        items = source.get("items") or [{"key": L.TABLE_KEY, "path": filename}]
        container = find_server_container(pod_spec, _server_name(target)) or {}
        mounted = any(
            m.get("name") == builders.TABLE_VOLUME and m.get("mountPath") == directory
            for m in container.get("volumeMounts") or []
        )
        args = [str(a) for a in container.get("args") or []]
        # (the server's own template: its flag as target.config read it, above)
        flagged = (
            i == 0
            or f"{TABLE_PATH_FLAG}={table_path}" in args
            or any(a == TABLE_PATH_FLAG and b == table_path for a, b in itertools.pairwise(args))
        )
        if not (
            source.get("name") == table.config_map
            and {"key": L.TABLE_KEY, "path": filename} in items
            and mounted
            and flagged
        ):
            return False
    return True


def deadline_name(target: Target) -> str:
    """What bounds the target's roll, for a message."""
    if target.kind == workloads.DEPLOYMENT:
        return "Deployment's progressDeadlineSeconds"
    return f"operator's progress bound for a {target.kind} (chart workloadProgressSeconds)"


def _server_name(target: Target) -> str:
    return str((target.container or {}).get("name") or "")


def rollout_failed(
    target: Target, table: TableRef, rolled_at: str | None, now: datetime, admin_seconds: float
) -> bool:
    """The workload runs `table`'s template and its roll failed: a Deployment's own
    ProgressDeadlineExceeded; for the kinds without a progress deadline, not rolled out
    within the admin's bound since the table went onto the template (a roll that waits
    for the user, OnDelete or a partition, has not failed)."""
    workload = target.deployment
    if target.running_hash != table.hash:
        return False
    if target.kind == workloads.DEPLOYMENT:
        return workloads.deadline_exceeded(workload)
    if workloads.rolled_out(workload) or workloads.roll_waits(workload) is not None:
        return False
    since = clocks.trusted(rolled_at, now)
    bound = workloads.progress_deadline_seconds(workload, admin_seconds)
    return since is not None and now - since > timedelta(seconds=bound)

"""How a run ends, shared by the profiling steps (run, publish): the failure record, the event,
the per-run RBAC removed, the metrics, and objects created (or adopted) for the run."""

from __future__ import annotations

import logging

from sps_operator.api.reasons import (
    DOUBTFUL_MEASUREMENT,
    FIT_FAILED,
    JOB_CREATE_FAILED,
    NAME_TAKEN,
    PROFILING_FAILED,
    SELF_CHECK_FAILED,
    TABLE_REJECTED,
)
from sps_operator.api.status import FailureRecord, RunStatus, TableRef
from sps_operator.api.times import parse_rfc3339
from sps_operator.controller.kube import names
from sps_operator.controller.kube.client import Obj
from sps_operator.controller.policies import conditions as cond
from sps_operator.controller.policies.job_policy import REFUSAL_REASONS
from sps_operator.controller.policies.ownership import adoption_refusal
from sps_operator.controller.policies.triggers import run_spec_hash
from sps_operator.controller.profiling.state import ProfilingPass

log = logging.getLogger(__name__)

# A measurement that went wrong may go right next time; a gate or a mismatched sweep will
# not change without a new trigger.
RETRYABLE = frozenset({DOUBTFUL_MEASUREMENT, FIT_FAILED, SELF_CHECK_FAILED})


class NameTaken(RuntimeError):
    """An object with a name the run derives exists and belongs to someone else."""


def create_owned(p: ProfilingPass, obj: Obj) -> str | None:
    """Create `obj`, or adopt the existing one if it is this profile's own, as the operator
    would have created it (`ownership.adoption_refusal`); else NameTaken, saying what to
    delete. Returns the UID of the object created or adopted (None: unknown)."""
    meta = obj["metadata"]
    uid = p.kube.create(obj)
    if uid is not None:
        if obj["kind"] == "ConfigMap":
            p.created[meta["name"]] = obj
        return uid or None
    existing = p.kube.get(obj["kind"], meta["namespace"], meta["name"])
    if existing is None:  # deleted in between: the next pass creates it
        raise NameTaken(f"{obj['kind']} {meta['name']} was deleted while being created")
    refusal = adoption_refusal(existing, obj, p.ref.uid)
    if refusal is not None:
        raise NameTaken(
            f"a {obj['kind']} named {meta['name']} already exists and does not belong to "
            f"SpsProfile {p.ref.name} ({refusal}): the operator never adopts an object it did "
            f"not create; delete it (kubectl delete {obj['kind'].lower()} {meta['name']} -n "
            f"{meta['namespace']}) and find who created it"
        )
    log.info("adopting %s %s/%s", obj["kind"], meta["namespace"], meta["name"])
    return str((existing.get("metadata") or {}).get("uid") or "") or None


def record_failure(
    p: ProfilingPass, run: RunStatus, reason: str, message: str, retryable: bool = True
) -> None:
    p.status.last_failure = FailureRecord(
        run=run.name,
        reason=reason,
        message=message[:4000],
        at=cond.rfc3339(p.now),
        gpu_product=run.gpu_product,
        fingerprint=run.fingerprint,
        attempts=run.attempt or 1,
        trigger_key=run.trigger_key,
        retryable=retryable,
        spec_hash=run_spec_hash(p.spec),
    )
    event = PROFILING_FAILED if retryable else TABLE_REJECTED
    if reason in (JOB_CREATE_FAILED, NAME_TAKEN) or reason in REFUSAL_REASONS:
        event = JOB_CREATE_FAILED
    p.event("Warning", event, message)


def delete_rbac(p: ProfilingPass, run: str) -> None:
    account = names.profiler_account(run)
    for kind in ("RoleBinding", "Role", "ServiceAccount"):
        p.kube.delete(kind, p.namespace, account)


def end_run(p: ProfilingPass, outcome: str, table: TableRef | None = None) -> None:
    """The run is over. Whatever the outcome a borrowed replica goes back, unless the
    `table` it published needs the slot for its rollout (then it goes back after that)."""
    run = p.status.current_run
    assert run is not None
    p.capacity.close_segment(p, run)
    if table is not None:
        table.gpu_seconds = run.gpu_seconds or 0.0
    p.capacity.return_for_run(p, run, table)
    started = parse_rfc3339(run.started_at) or p.now
    key = f"{run.name}/{run.attempt}@{run.started_at}"
    p.metrics.run_finished(p.ref, outcome, (p.now - started).total_seconds(), run=key)
    p.status.current_run = None


def fail_run(p: ProfilingPass, reason: str, message: str, retryable: bool = True) -> None:
    """End the current run as failed (retried with backoff) or rejected (not retried)."""
    run = p.status.current_run
    assert run is not None
    record_failure(p, run, reason, message, retryable)
    delete_rbac(p, run.name)
    end_run(p, "failed" if retryable else "rejected")

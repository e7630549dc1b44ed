"""One level-triggered pass over an SpsProfile, the one place that orders its steps: read
the world, the profiling reconciler (take requests, observe the targets, follow or start
a run and publish its table), the capacity's orphans, the rollout reconciler (put the
tables of `status.tables` on the servers), the profiling reconciler's history trim, then
the report and the one status write. Each reconciler has its own pass state
(`profiling.state.ProfilingPass`, `rollout.state.RolloutPass`); status is the hand-off
between them and what survives a restart.

The pass never raises: whatever goes wrong in a step becomes `lastFailure`, a Degraded
condition and an event, the run it belongs to ends (and is retried with backoff), and the
next pass of this profile waits out a backoff too.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ValidationError

from sps_operator.api.legacy_tables import V1Servers, v1_servers, with_v1_twins
from sps_operator.api.models import SpsProfile
from sps_operator.api.reasons import CLOCK_SKEW, INVALID_SPEC, RECONCILE_ERROR, STATUS_WRITE_FAILED
from sps_operator.api.status import FailureRecord, SpsProfileStatus
from sps_operator.controller.capacity.service import GpuCapacity
from sps_operator.controller.kube import builders
from sps_operator.controller.kube.client import KubeApi, api_error_detail, is_transient
from sps_operator.controller.kube.serverinfo import ServerReads
from sps_operator.controller.passes.observe import observe
from sps_operator.controller.passes.report import report
from sps_operator.controller.passes.state import Pass, Settings, Snapshot, World
from sps_operator.controller.passes.wakeups import next_wake
from sps_operator.controller.policies import conditions as cond
from sps_operator.controller.policies.clocks import bound_recorded_times
from sps_operator.controller.policies.triggers import backoff_seconds
from sps_operator.controller.process.memories import Rewrites
from sps_operator.controller.process.metrics import Metrics
from sps_operator.controller.profiling import reconciler as profiling
from sps_operator.controller.profiling.state import ProfilingPass
from sps_operator.controller.rollout import reconciler as rollout
from sps_operator.controller.rollout.state import RolloutPass

log = logging.getLogger("sps_operator.reconcile")
# After a pass failed outside its steps (its own handling failed): look again then.
LAST_RESORT_RETRY_SECONDS = 60.0


@dataclass
class ReconcilePass(ProfilingPass, RolloutPass):
    """One pass: the state the profiling and then the rollout reconciler work on."""


@dataclass
class _Backoff:
    failures: int
    until: datetime


class Reconciler:
    def __init__(
        self,
        kube: KubeApi,
        settings: Settings | None = None,
        clock: Callable[[], datetime] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.kube = kube
        self.settings = settings or Settings()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.metrics = metrics or Metrics()
        self._backoff: dict[str, _Backoff] = {}
        # The status this process last wrote per profile, and the resourceVersion of the
        # object it was computed from: a cache that has not yet seen the write hands the
        # next pass that same resourceVersion, and the pass must not act on the old status.
        self._written: dict[str, tuple[str, dict[str, Any]]] = {}
        self.capacity = GpuCapacity(self.settings)
        # What the rollout wrote back into objects something else keeps undoing.
        self.rewrites = Rewrites()
        # The serving servers' /server_info answers, kept by pod UID (rollout/confirm.py).
        self.servers = ServerReads(enabled=self.settings.confirm_servers)

    # ------------------------------------------------------------------ entry

    def reconcile(self, body: Mapping[str, Any], world: World) -> float | None:
        """One pass; returns the seconds until the profile next needs one although nothing
        changes (a schedule, a retry, a settling placement), or None. Never raises: what
        escapes the pass's own handling (which records failures step by step) is written
        as a minimal status here, and the pass is retried after a pause."""
        try:
            return self._reconcile(body, world)
        except Exception as exc:
            log.exception("pass failed outside its steps")
            self._last_resort_status(body, exc)
            return LAST_RESORT_RETRY_SECONDS

    def _last_resort_status(self, body: Mapping[str, Any], exc: BaseException) -> None:
        """Degraded=True ReconcileError with what failed: the one write that needs nothing
        the failed pass computed."""
        try:
            meta = body.get("metadata") or {}
            now = self.clock().replace(microsecond=0)
            message = f"the pass failed: {_detail(exc)}"
            try:
                before = SpsProfileStatus.model_validate(body.get("status") or {}).conditions
            except Exception:
                before = []
            conditions = cond.set_condition(
                before, cond.DEGRADED, True, RECONCILE_ERROR, message, now, meta.get("generation")
            )
            failure = FailureRecord(
                run="", reason=RECONCILE_ERROR, message=message, at=cond.rfc3339(now)
            )
            self.kube.patch_status(
                str(meta["namespace"]),
                str(meta["name"]),
                {"conditions": [c.to_k8s() for c in conditions], "lastFailure": failure.to_k8s()},
            )
        except Exception:
            log.exception("the last-resort status was not written either")

    def _reconcile(self, body: Mapping[str, Any], world: World) -> float | None:
        now = self.clock().replace(microsecond=0)
        meta = body.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return None
        uid = str(meta.get("uid", ""))
        waiting = self._backoff.get(uid)
        if waiting is not None and now < waiting.until:
            return (waiting.until - now).total_seconds()
        body = self._with_written_status(uid, body)
        try:
            profile = SpsProfile.model_validate(body)
        except ValidationError as exc:
            self._report_invalid(body, exc, now)
            return None
        before = _status_dict(profile.status)
        # The tables as stored, twins and all: a status that lacks a twin is written.
        before["tables"] = (body.get("status") or {}).get("tables") or []
        p = ReconcilePass(
            body=body,
            profile=profile,
            ref=builders.ProfileRef(meta["name"], meta["namespace"], uid),
            status=profile.status.model_copy(deep=True),
            now=now,
            generation=meta.get("generation"),
            kube=self.kube,
            settings=self.settings,
            metrics=self.metrics,
            snapshot=Snapshot.empty(),
            capacity=self.capacity,
            rewrites=self.rewrites,
            servers=self.servers,
        )
        started = time.monotonic()
        failed_step: str | None = None
        try:
            self._steps(p, meta, world)
        except Exception as exc:  # every failure becomes status, never a wedge
            failed_step = p.step
            self._record_error(p, exc)
        try:
            p.step = "report"
            report(p)
        except Exception as exc:
            failed_step = failed_step or "report"
            log.exception("report of %s/%s failed", p.namespace, p.ref.name)
            p.status.last_failure = _failure(p, RECONCILE_ERROR, f"report: {_detail(exc)}")
        if self._write_status(p, before, str(meta.get("resourceVersion") or "")):
            self.metrics.cost_written(p.ref, before.get("cost"), p.status.cost)
        else:
            failed_step = failed_step or "status"
        self.metrics.pass_done(time.monotonic() - started, failed_step)
        failed = failed_step not in (None, "status")  # a refused status write has its own path
        for type_, reason, message in p.events:
            self.kube.event(body, type_, reason, message, now)
        self._note_outcome(uid, failed, now)
        self.metrics.passed(p.ref)
        run_after = p.status.current_run.name if p.status.current_run else None
        if (before.get("currentRun") or {}).get("name") != run_after:
            # A run started or ended. Status writes wake nobody, so look again at once: a
            # request that came while the run was busy (a reprofile annotation, a token)
            # starts now, not at the next resync.
            p.wake_within(0)
        wake = next_wake(p, timedelta(seconds=self.settings.gpu_debounce_seconds))
        backoff = self._backoff.get(uid)
        if backoff is not None:
            wake = min(wake or math.inf, (backoff.until - now).total_seconds())
        return wake

    def _steps(self, p: ReconcilePass, meta: Mapping[str, Any], world: World) -> None:
        p.step = "clocks"
        for skew in bound_recorded_times(p.status, p.now):
            p.event("Warning", CLOCK_SKEW, f"{skew}; counted from now instead")
        p.step = "read"
        read = world() if callable(world) else world  # (a unit test's LIST snapshot)
        p.snapshot = read.for_profile(self.kube, p.ref, p.spec)
        profiling.take_requests(p, meta)
        p.step = "observe"
        observe(p)
        profiling.get_table(p)
        p.step = "capacity"
        p.capacity.return_orphans(p)
        rollout.put_tables(p)
        profiling.trim(p)

    # ------------------------------------------------------------------ failures

    def _record_error(self, p: ReconcilePass, exc: BaseException) -> None:
        """A step raised: say which and why; end the run it belongs to unless the cause is
        transient (then the run is followed again after the backoff). Never raises: ending
        the run reads what the step may have choked on (a borrow record, a Deployment),
        so when that fails too, the failure is recorded without it and the run is followed
        again after the backoff."""
        message = f"{p.step}: {_detail(exc)}"
        log.warning("pass of %s/%s failed in %s", p.namespace, p.ref.name, message)
        if p.status.current_run is not None and not is_transient(exc):
            try:
                profiling.end_run_failed(p, RECONCILE_ERROR, message)
                return
            except Exception as again:
                message += f"; ending the run failed too: {_detail(again)}"
                log.warning("ending the run of %s/%s failed", p.namespace, p.ref.name)
        p.status.last_failure = _failure(p, RECONCILE_ERROR, message)
        p.event("Warning", RECONCILE_ERROR, message[:1024])

    def _note_outcome(self, uid: str, failed: bool, now: datetime) -> None:
        if not failed:
            self._backoff.pop(uid, None)
            return
        count = self._backoff[uid].failures + 1 if uid in self._backoff else 1
        self._backoff[uid] = _Backoff(count, now + timedelta(seconds=backoff_seconds(count) / 3))

    def _with_written_status(self, uid: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        written = self._written.get(uid)
        meta = body.get("metadata") or {}
        if written is None or written[0] != str(meta.get("resourceVersion") or ""):
            return body
        return {**body, "status": written[1]}

    def forget(self, uid: str) -> None:
        """A deleted profile: drop what this process remembers of it."""
        self._written.pop(uid, None)
        self._backoff.pop(uid, None)

    def _write_status(self, p: Pass, before: dict[str, Any], read_at: str) -> bool:
        """Write the status the pass computed; False when the API refused it."""
        servers = v1_servers((t.fingerprint, t.legacy_fingerprint) for t in p.targets)
        after = _status_dict(p.status, servers)
        if after == before:
            return True
        try:
            self.kube.patch_status(p.namespace, p.ref.name, after)
            if read_at:
                self._written[p.ref.uid] = (
                    read_at,
                    {**p.status.to_k8s(), "tables": after["tables"]},
                )
            return True
        except Exception as exc:
            detail = api_error_detail(exc)
            log.warning("status of %s/%s not written: %s", p.namespace, p.ref.name, detail)
        # The full status was refused (too large, invalid): write what says so.
        failure = _failure(p, STATUS_WRITE_FAILED, f"the status could not be written: {detail}")
        conditions = cond.set_condition(
            p.status.conditions, cond.DEGRADED, True, STATUS_WRITE_FAILED, failure.message,
            p.now, p.generation,
        )  # fmt: skip
        minimal = {
            "conditions": [c.to_k8s() for c in conditions],
            "lastFailure": failure.to_k8s(),
        }
        try:
            self.kube.patch_status(p.namespace, p.ref.name, minimal)
        except Exception as exc:
            # The next pass writes it again: a throttled or busy API server is a WARNING.
            level = logging.WARNING if is_transient(exc) else logging.ERROR
            log.log(level, "status of %s/%s not written: %s", p.namespace, p.ref.name, exc)
        return False

    def _report_invalid(self, body: Mapping[str, Any], exc: ValidationError, now: datetime) -> None:
        meta = body["metadata"]
        try:
            status = SpsProfileStatus.model_validate(body.get("status") or {})
        except ValidationError:
            status = SpsProfileStatus()
        before = _status_dict(status)
        message = "; ".join(
            f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()
        )[:4000]
        status.conditions = cond.set_condition(
            status.conditions, cond.READY, False, INVALID_SPEC, message, now,
            meta.get("generation"),
        )  # fmt: skip
        status.conditions = cond.with_kstatus(status.conditions, now, meta.get("generation"))
        status.observed_generation = meta.get("generation")
        after = _status_dict(status)
        if after != before:
            try:
                self.kube.patch_status(meta["namespace"], meta["name"], after)
            except Exception as err:
                level = logging.WARNING if is_transient(err) else logging.ERROR
                log.log(level, "status of %s/%s not written: %s", meta["namespace"], meta["name"],
                        err)  # fmt: skip


def _detail(exc: BaseException) -> str:
    """What went wrong, as status may say it; never raises (an exception whose text
    itself fails is named by its type)."""
    try:
        return api_error_detail(exc)[:2000]
    except Exception:
        return type(exc).__name__


def _failure(p: Pass, reason: str, message: str) -> FailureRecord:
    run = p.status.current_run
    return FailureRecord(
        run=run.name if run else "",
        reason=reason,
        message=message[:4000],
        at=cond.rfc3339(p.now),
        gpu_product=run.gpu_product if run else None,
        fingerprint=run.fingerprint if run else None,
        trigger_key=run.trigger_key if run else None,
    )


def _status_dict(status: SpsProfileStatus, servers: V1Servers | None = None) -> dict[str, Any]:
    """The status as a JSON merge patch that replaces the stored one: a merge patch removes
    a field only when it is sent as null, at every level of nested objects (lists are
    replaced whole). Without the nested nulls, `currentRun.waiting` outlived the wait, and
    a new run or failure kept the old one's fields it does not set. A table with a version-1
    key (`adoptedFrom`) is listed under that key too, for 0.1.0, unless a target with that
    key is another server now (`servers`: the pass's targets; api/legacy_tables.py)."""
    wire = _with_nulls(status)
    if wire.get("tables"):
        wire["tables"] = with_v1_twins(wire["tables"], servers)
    return wire


def _with_nulls(model: BaseModel) -> dict[str, Any]:
    wire: dict[str, Any] = model.model_dump(by_alias=True, exclude_none=True, mode="json")
    for name, field in type(model).model_fields.items():
        key = field.alias or name
        value = getattr(model, name)
        if value is None:
            wire[key] = None
        elif isinstance(value, BaseModel) and isinstance(wire.get(key), dict):
            wire[key] = _with_nulls(value)
    return wire

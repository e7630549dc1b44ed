"""When to profile (pure): no table for (GPU product, fingerprint), a refresh request
(token, annotation, schedule), a server change; with retry backoff after failures."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sps_operator.api.cron import next_fire_time
from sps_operator.api.models import FailureRecord, SpsProfileSpec, TableRef
from sps_operator.controller.conditions import rfc3339

MAX_ATTEMPTS = 3
BACKOFF_BASE_SECONDS = 30.0
BACKOFF_MAX_SECONDS = 3600.0

# Trigger reasons (CamelCase: they appear in conditions and events).
NO_TABLE = "NoTable"
GPU_CHANGED = "GpuChanged"
SERVER_CHANGED = "ServerChanged"
TOKEN = "RefreshToken"
REPROFILE = "ReprofileRequested"
SCHEDULE = "Schedule"


@dataclass(frozen=True)
class TargetView:
    """A target Deployment as the trigger logic sees it."""

    deployment: str
    gpu_product: str | None  # None: not placed yet, still debouncing, or mixed
    fingerprint: str


@dataclass(frozen=True)
class RunRequest:
    target: str
    gpu_product: str
    fingerprint: str
    trigger: str
    trigger_key: str  # identifies the trigger; a retry of it shares the key
    attempt: int

    @property
    def nonce(self) -> str:
        return f"{self.trigger_key}#{self.attempt}"


@dataclass(frozen=True)
class TargetTableState:
    table: TableRef | None  # the table for (GPU product, fingerprint), if any
    stale: bool  # the GPU product has tables, but none for this fingerprint
    fallback: TableRef | None  # newest table for the GPU product (kept while stale)


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def table_for(tables: Sequence[TableRef], gpu: str, fingerprint: str) -> TableRef | None:
    return next((t for t in tables if t.gpu_product == gpu and t.fingerprint == fingerprint), None)


def target_table_state(tables: Sequence[TableRef], gpu: str, fingerprint: str) -> TargetTableState:
    exact = table_for(tables, gpu, fingerprint)
    same_gpu = [t for t in tables if t.gpu_product == gpu]
    newest = max(same_gpu, key=lambda t: t.profiled_at or "", default=None)
    return TargetTableState(
        table=exact, stale=exact is None and newest is not None, fallback=newest
    )


def backoff_seconds(attempts: int) -> float:
    return min(BACKOFF_BASE_SECONDS * 2 ** max(attempts - 1, 0), BACKOFF_MAX_SECONDS)


def decide_run(
    spec: SpsProfileSpec,
    targets: Sequence[TargetView],
    tables: Sequence[TableRef],
    refresh_requested_at: str | None,
    refresh_reason: str | None,
    last_failure: FailureRecord | None,
    now: datetime,
) -> RunRequest | None:
    """The next run to start, or None. Targets are visited in order (deterministic)."""
    if spec.suspend:
        return None
    refresh_at = parse_time(refresh_requested_at)
    seen: set[tuple[str, str]] = set()
    for target in targets:
        if target.gpu_product is None:
            continue
        key = (target.gpu_product, target.fingerprint)
        if key in seen:
            continue
        seen.add(key)
        state = target_table_state(tables, *key)
        trigger: str | None = None
        trigger_key = ""
        if state.table is not None:
            profiled = parse_time(state.table.profiled_at)
            if refresh_at is not None and (profiled is None or profiled < refresh_at):
                trigger = refresh_reason or TOKEN
                trigger_key = f"refresh@{refresh_requested_at}"
        elif state.stale:
            if spec.refresh.on_server_change:
                trigger, trigger_key = SERVER_CHANGED, "table"
        elif not tables:
            trigger, trigger_key = NO_TABLE, "table"
        elif spec.refresh.on_gpu_change:
            trigger, trigger_key = GPU_CHANGED, "table"
        if trigger is None:
            continue
        trigger_key = f"{key[0]}/{key[1]}/{trigger_key}"
        attempt = 1
        if last_failure is not None and last_failure.trigger_key == trigger_key:
            if not last_failure.retryable or last_failure.attempts >= MAX_ATTEMPTS:
                continue
            failed_at = parse_time(last_failure.at) or now
            if now < failed_at + timedelta(seconds=backoff_seconds(last_failure.attempts)):
                continue
            attempt = last_failure.attempts + 1
        return RunRequest(
            target=target.deployment,
            gpu_product=key[0],
            fingerprint=key[1],
            trigger=trigger,
            trigger_key=trigger_key,
            attempt=attempt,
        )
    return None


@dataclass(frozen=True)
class ScheduleState:
    due: bool
    next_time: datetime | None


def schedule_state(
    schedule: str | None, last_schedule: str | None, created: str | None, now: datetime
) -> ScheduleState:
    """CronJob-like: due when a scheduled time passed since the last one (or creation).
    Missed times collapse into one run."""
    if not schedule:
        return ScheduleState(False, None)
    base = parse_time(last_schedule) or parse_time(created) or now
    upcoming = next_fire_time(schedule, base)
    if upcoming <= now:
        return ScheduleState(True, next_fire_time(schedule, now))
    return ScheduleState(False, upcoming)


def time_str(value: datetime | None) -> str | None:
    return rfc3339(value) if value is not None else None

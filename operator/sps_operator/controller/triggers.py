"""When to profile (pure): no table for (GPU product, fingerprint), a refresh request
(token, annotation, schedule), a server change; with retry backoff after failures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sps_operator.api.cron import next_fire_time
from sps_operator.api.labels import ANNOTATION_REPROFILE
from sps_operator.api.models import FailureRecord, SpsProfileSpec, SpsProfileStatus, TableRef
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
    running: TableRef | None = None  # the profile's table its template runs now, if any


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


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def table_for(tables: Sequence[TableRef], gpu: str, fingerprint: str) -> TableRef | None:
    return next((t for t in tables if t.gpu_product == gpu and t.fingerprint == fingerprint), None)


def refresh_pending(table: TableRef, refresh_count: int) -> bool:
    """Whether a refresh was requested after the run that measured `table` started.
    Counted, not timed: a request in the second a table was published, or while its run
    measured the server as it was before, still gets its own run."""
    return (table.refresh_count or 0) < refresh_count


def refresh_trigger_key(gpu_product: str, fingerprint: str, refresh_count: int) -> str:
    return f"{gpu_product}/{fingerprint}/refresh#{refresh_count}"


def backoff_seconds(attempts: int) -> float:
    return min(BACKOFF_BASE_SECONDS * 2 ** max(attempts - 1, 0), BACKOFF_MAX_SECONDS)


def decide_run(
    spec: SpsProfileSpec,
    targets: Sequence[TargetView],
    tables: Sequence[TableRef],
    refresh_count: int,
    refresh_reason: str | None,
    last_failure: FailureRecord | None,
    now: datetime,
) -> RunRequest | None:
    """The next run to start, or None. Targets are visited in order (deterministic)."""
    if spec.suspend:
        return None
    seen: set[tuple[str, str]] = set()
    for target in targets:
        if target.gpu_product is None:
            continue
        key = (target.gpu_product, target.fingerprint)
        if key in seen:
            continue
        seen.add(key)
        exact = table_for(tables, *key)
        trigger: str | None = None
        trigger_key = f"{key[0]}/{key[1]}/table"
        if exact is not None:
            if refresh_pending(exact, refresh_count):
                trigger = refresh_reason or TOKEN
                trigger_key = refresh_trigger_key(*key, refresh_count)
        elif target.running is None:
            # Never served by this profile (new, or another model): it needs a table.
            trigger = NO_TABLE
        elif target.running.gpu_product != key[0]:
            if spec.refresh.on_gpu_change:
                trigger = GPU_CHANGED
        elif spec.refresh.on_server_change:
            trigger = SERVER_CHANGED
        if trigger is None:
            continue
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


def note_refresh_requests(
    status: SpsProfileStatus,
    spec: SpsProfileSpec,
    annotations: Mapping[str, str],
    created: str | None,
    now: datetime,
) -> None:
    """Record in `status` a refresh asked for by a new token, a new reprofile annotation
    or a due schedule (tables whose run started before it are measured again)."""

    def request(reason: str) -> None:
        status.refresh_requested_at = rfc3339(now)
        status.refresh_reason = reason
        status.refresh_count += 1

    token = spec.refresh.token
    if token and token != status.observed_token:
        if status.observed_token is not None or status.tables:
            request(TOKEN)
        status.observed_token = token
    annotation = annotations.get(ANNOTATION_REPROFILE)
    if annotation and annotation != status.observed_reprofile:
        request(REPROFILE)
        status.observed_reprofile = annotation
    sched = schedule_state(spec.refresh.schedule, status.last_schedule_time, created, now)
    if sched.due:
        status.last_schedule_time = rfc3339(now)
        if status.tables:
            request(SCHEDULE)
    status.next_schedule_time = time_str(sched.next_time)

"""When to profile (pure): no table for (GPU product, fingerprint), a refresh request
(token, annotation, schedule), a server change; with retry backoff after failures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sps_operator.api.cron import last_fire_time, next_fire_time
from sps_operator.api.hashing import digest
from sps_operator.api.labels import ANNOTATION_REPROFILE
from sps_operator.api.spec import SpsProfileSpec
from sps_operator.api.status import FailureRecord, SpsProfileStatus, TableRef
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


def run_spec_hash(spec: SpsProfileSpec) -> str:
    """What decides how a run turns out: the table and sweep, the gates, the Job, the
    server, the capacity. A failure recorded under another hash does not hold a retry
    back: relaxing a gate, say, is a new attempt."""
    parts = (spec.table, spec.gates, spec.job, spec.server, spec.capacity)
    return digest(*(part.model_dump(by_alias=True, mode="json") for part in parts), length=16)


def _retry(
    last_failure: FailureRecord | None, trigger_key: str, spec_hash: str, now: datetime
) -> tuple[bool, int]:
    """Whether the trigger may run now, and the attempt number."""
    if last_failure is None or last_failure.trigger_key != trigger_key:
        return True, 1
    if last_failure.spec_hash is not None and last_failure.spec_hash != spec_hash:
        return True, 1  # the spec changed since: a new first attempt
    if not last_failure.retryable or last_failure.attempts >= MAX_ATTEMPTS:
        return False, last_failure.attempts
    failed_at = parse_time(last_failure.at) or now
    if now < failed_at + timedelta(seconds=backoff_seconds(last_failure.attempts)):
        return False, last_failure.attempts
    return True, last_failure.attempts + 1


def what_next(failure: FailureRecord, profile: str) -> str:
    """What happens after `failure` for its trigger (for conditions and explain)."""
    if not failure.retryable or failure.attempts >= MAX_ATTEMPTS:
        why = (
            "is not retried"
            if not failure.retryable
            else f"gave up after {failure.attempts} attempts"
        )
        return (
            f"it {why}: change what made it fail (a change of spec.gates, table, job, server "
            f"or capacity starts a new attempt by itself), or `kubectl sps reprofile {profile}` "
            "to try again as is"
        )
    failed_at = parse_time(failure.at)
    when = (
        rfc3339(failed_at + timedelta(seconds=backoff_seconds(failure.attempts)))
        if failed_at is not None
        else "soon"
    )
    return f"attempt {failure.attempts + 1} of {MAX_ATTEMPTS} starts at {when} (backoff)"


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
    spec_hash = run_spec_hash(spec)
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
        may, attempt = _retry(last_failure, trigger_key, spec_hash, now)
        if not may:
            continue
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
    held_back: str | None = None  # the schedule fires more often than the minimum interval
    fired: datetime | None = None  # when due: the fire time this run answers


def _first_fire_from(schedule: str, after: datetime, earliest: datetime | None) -> datetime:
    """The first fire time after `after`, and not before `earliest`."""
    upcoming = next_fire_time(schedule, after)
    if earliest is not None and upcoming < earliest:
        upcoming = next_fire_time(schedule, earliest - timedelta(seconds=1))
    return upcoming


def schedule_state(
    schedule: str | None,
    last_schedule: str | None,
    created: str | None,
    now: datetime,
    min_interval_seconds: float = 0.0,
) -> ScheduleState:
    """CronJob-like: due when a fire time passed since the last scheduled one (or creation)
    and at least the minimum interval after it: a schedule that fires more often
    (`* * * * *`) runs at that interval, and says so. Missed times collapse into one run,
    recorded as the latest fire time passed (not the pass's time, so an hourly schedule
    with a one-hour minimum runs every hour)."""
    if not schedule:
        return ScheduleState(False, None)
    interval = timedelta(seconds=max(min_interval_seconds, 0.0))
    last = parse_time(last_schedule)
    base = last or parse_time(created) or now
    upcoming = _first_fire_from(schedule, base, last + interval if last and interval else None)
    if upcoming <= now:
        fired = last_fire_time(schedule, now)
        next_time = _first_fire_from(schedule, fired, fired + interval if interval else None)
        after = fired
    else:
        fired, next_time, after = None, upcoming, base
    held = None
    if next_fire_time(schedule, after) < next_time:
        held = (
            f"refresh.schedule {schedule!r} fires more often than the minimum interval "
            f"between scheduled runs ({interval.total_seconds():.0f} s: the operator's minimum "
            "and refresh.minIntervalSeconds); the fire times in between are skipped, the "
            f"next run is at {rfc3339(next_time)}"
        )
    return ScheduleState(fired is not None, next_time, held, fired)


def time_str(value: datetime | None) -> str | None:
    return rfc3339(value) if value is not None else None


def note_refresh_requests(
    status: SpsProfileStatus,
    spec: SpsProfileSpec,
    annotations: Mapping[str, str],
    created: str | None,
    now: datetime,
    min_interval_seconds: float = 0.0,
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
    sched = schedule_state(
        spec.refresh.schedule, status.last_schedule_time, created, now, min_interval_seconds
    )
    if sched.due:
        status.last_schedule_time = rfc3339(sched.fired or now)
        if status.tables:
            request(SCHEDULE)
    status.next_schedule_time = time_str(sched.next_time)
    status.schedule_held_back = sched.held_back

"""When to profile (pure): no table for (GPU product, fingerprint), a refresh request
(token, annotation, schedule), a server change; with retry backoff after failures. The
triggers are a chain of named policies (`TRIGGER_POLICIES`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sps_operator.api.cron import last_fire_time, next_fire_time
from sps_operator.api.hashing import digest
from sps_operator.api.labels import ANNOTATION_REPROFILE
from sps_operator.api.reasons import (
    GPU_CHANGED,
    NO_TABLE,
    REFRESH_TOKEN,
    REPROFILE_REQUESTED,
    SCHEDULE,
    SERVER_CHANGED,
)
from sps_operator.api.spec import SpsProfileSpec
from sps_operator.api.status import FailureRecord, SpsProfileStatus, TableRef
from sps_operator.api.times import parse_rfc3339
from sps_operator.controller.policies.conditions import rfc3339

MAX_ATTEMPTS = 3
BACKOFF_BASE_SECONDS = 30.0
BACKOFF_MAX_SECONDS = 3600.0


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


# A refresh a user asked for (a changed refresh.token, `kubectl sps reprofile`): its table
# rolls as soon as it is ready; only a scheduled one waits for the minimum interval.
USER_REQUESTED = frozenset({REFRESH_TOKEN, REPROFILE_REQUESTED})


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
    failed_at = parse_rfc3339(last_failure.at) or now
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
    failed_at = parse_rfc3339(failure.at)
    when = (
        rfc3339(failed_at + timedelta(seconds=backoff_seconds(failure.attempts)))
        if failed_at is not None
        else "soon"
    )
    return f"attempt {failure.attempts + 1} of {MAX_ATTEMPTS} starts at {when} (backoff)"


# --- whether a run is due: a chain of trigger policies ----------------------------------------
#
# Each (GPU product, fingerprint) a placed target runs is put to the trigger policies in
# order (as cert-manager's certificate trigger policies): each returns the `Trigger` it
# fires, or None to pass; the first that fires wins. A trigger then runs when its retry
# backoff allows (`_retry`).


@dataclass(frozen=True)
class TriggerInput:
    """One (GPU product, fingerprint) a placed target runs, as the trigger policies see it."""

    spec: SpsProfileSpec
    target: TargetView
    gpu_product: str
    fingerprint: str
    table: TableRef | None  # this profile's table for exactly the pair, if any
    refresh_count: int
    refresh_reason: str | None

    @property
    def table_key(self) -> str:
        """The key of a trigger that asks for the pair's table (not a refresh)."""
        return f"{self.gpu_product}/{self.fingerprint}/table"


@dataclass(frozen=True)
class Trigger:
    reason: str
    key: str  # identifies the trigger; a retry of it shares the key


TriggerPolicy = Callable[[TriggerInput], Trigger | None]


def refresh_requested(pair: TriggerInput) -> Trigger | None:
    """The pair has a table, and a refresh was asked for after its run started."""
    if pair.table is None or not refresh_pending(pair.table, pair.refresh_count):
        return None
    key = refresh_trigger_key(pair.gpu_product, pair.fingerprint, pair.refresh_count)
    return Trigger(pair.refresh_reason or REFRESH_TOKEN, key)


def never_served(pair: TriggerInput) -> Trigger | None:
    """No table for the pair and the target runs none of this profile's (new, or another
    model): it needs a table."""
    if pair.table is not None or pair.target.running is not None:
        return None
    return Trigger(NO_TABLE, pair.table_key)


def gpu_changed(pair: TriggerInput) -> Trigger | None:
    """The target runs a table of another GPU product (`refresh.onGpuChange`)."""
    running = pair.target.running
    if pair.table is not None or running is None or running.gpu_product == pair.gpu_product:
        return None
    return Trigger(GPU_CHANGED, pair.table_key) if pair.spec.refresh.on_gpu_change else None


def server_changed(pair: TriggerInput) -> Trigger | None:
    """The target runs a table of its GPU product measured for another server
    (`refresh.onServerChange`)."""
    running = pair.target.running
    if pair.table is not None or running is None or running.gpu_product != pair.gpu_product:
        return None
    return Trigger(SERVER_CHANGED, pair.table_key) if pair.spec.refresh.on_server_change else None


TRIGGER_POLICIES: tuple[TriggerPolicy, ...] = (
    refresh_requested,
    never_served,
    gpu_changed,
    server_changed,
)


def first_trigger(policies: Sequence[TriggerPolicy], pair: TriggerInput) -> Trigger | None:
    """The trigger of the first policy that fires, or None."""
    for policy in policies:
        trigger = policy(pair)
        if trigger is not None:
            return trigger
    return None


def placed_pairs(targets: Sequence[TargetView]) -> list[tuple[TargetView, str, str]]:
    """Each (GPU product, fingerprint) of a placed target once, with its first target."""
    seen: set[tuple[str, str]] = set()
    pairs = []
    for target in targets:
        if target.gpu_product is None or (target.gpu_product, target.fingerprint) in seen:
            continue
        seen.add((target.gpu_product, target.fingerprint))
        pairs.append((target, target.gpu_product, target.fingerprint))
    return pairs


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
    for target, gpu, fingerprint in placed_pairs(targets):
        pair = TriggerInput(
            spec,
            target,
            gpu,
            fingerprint,
            table_for(tables, gpu, fingerprint),
            refresh_count,
            refresh_reason,
        )
        trigger = first_trigger(TRIGGER_POLICIES, pair)
        if trigger is None:
            continue
        may, attempt = _retry(last_failure, trigger.key, spec_hash, now)
        if not may:
            continue
        return RunRequest(
            target=target.deployment,
            gpu_product=gpu,
            fingerprint=fingerprint,
            trigger=trigger.reason,
            trigger_key=trigger.key,
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
    last = parse_rfc3339(last_schedule)
    base = last or parse_rfc3339(created) or now
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
            request(REFRESH_TOKEN)
        status.observed_token = token
    annotation = annotations.get(ANNOTATION_REPROFILE)
    if annotation and annotation != status.observed_reprofile:
        request(REPROFILE_REQUESTED)
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

"""Times recorded by another replica's clock (pure).

Status holds times written by whichever operator replica led when they were written;
another replica's clock (or a hand-edited status, or a Deployment's borrow record) may
run ahead of this one. A time ahead of this replica's clock by more than `MAX_CLOCK_SKEW`
is not trusted: left alone, `now - startedAt` stays negative, and a run whose Job
vanished counts as "created a moment ago" for as long as the skew, passing every second.
Such a time is replaced by now (so the rules that count from it start counting) and
reported; an unreadable one likewise. Within the bound, durations are clamped at zero.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from sps_operator.api.models import SpsProfileStatus
from sps_operator.controller.conditions import rfc3339

# Leader election tolerates `lease_duration - renew_deadline` (3 s) of clock rate error;
# NTP-synchronised nodes are within milliseconds. 30 s is generous for both.
MAX_CLOCK_SKEW = timedelta(seconds=30)
CLOCK_SKEW = "ClockSkew"  # the event reason


def parse(stamp: str | None) -> datetime | None:
    """An RFC 3339 time; None when absent or unreadable."""
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def trusted(stamp: str | None, now: datetime) -> datetime | None:
    """`stamp` as a time to count from: None when absent, unreadable or further ahead of
    `now` than the skew bound."""
    when = parse(stamp)
    if when is None or when - now > MAX_CLOCK_SKEW:
        return None
    return when


def elapsed(stamp: str | None, now: datetime) -> float:
    """Seconds since `stamp`, never negative (0 for a time ahead, absent or unreadable)."""
    when = trusted(stamp, now)
    return max((now - when).total_seconds(), 0.0) if when is not None else 0.0


def bound_recorded_times(status: SpsProfileStatus, now: datetime) -> list[str]:
    """Replace every recorded time of `status` that lies beyond the skew bound ahead of
    `now` (or cannot be read) by `now`; returns what was replaced, for the report. Times
    that are in the future by design (nextScheduleTime, heldUntil) are left alone."""
    found: list[str] = []
    stamp = rfc3339(now)

    def check(where: str, value: str | None, put: Callable[[str], None]) -> None:
        if value is None:
            return
        when = parse(value)
        if when is None:
            found.append(f"{where} {value!r} is not a time")
        elif when - now > MAX_CLOCK_SKEW:
            ahead = (when - now).total_seconds()
            found.append(f"{where} {value} was {ahead:.0f} s ahead of this replica's clock")
        else:
            return
        put(stamp)

    run = status.current_run
    if run is not None:
        check("currentRun.startedAt", run.started_at, lambda v: setattr(run, "started_at", v))
        check("currentRun.runningSince", run.running_since,
              lambda v: setattr(run, "running_since", v))  # fmt: skip
        check("currentRun.resultWaitSince", run.result_wait_since,
              lambda v: setattr(run, "result_wait_since", v))  # fmt: skip
        if run.waiting is not None:
            waiting = run.waiting
            check("currentRun.waiting.since", waiting.since, lambda v: setattr(waiting, "since", v))
        if run.borrow is not None:
            borrow = run.borrow
            check("currentRun.borrow.at", borrow.at, lambda v: setattr(borrow, "at", v))
    held = status.rollout_borrow
    if held is not None:
        check("rolloutBorrow.at", held.at, lambda v: setattr(held, "at", v))
        check("rolloutBorrow.heldSince", held.held_since, lambda v: setattr(held, "held_since", v))
    failure = status.last_failure
    if failure is not None:
        check("lastFailure.at", failure.at, lambda v: setattr(failure, "at", v))
    check("lastScheduleTime", status.last_schedule_time,
          lambda v: setattr(status, "last_schedule_time", v))  # fmt: skip
    check("refreshRequestedAt", status.refresh_requested_at,
          lambda v: setattr(status, "refresh_requested_at", v))  # fmt: skip
    for table in status.tables:
        check(f"tables[{table.config_map}].profiledAt", table.profiled_at,
              lambda v, t=table: setattr(t, "profiled_at", v))  # type: ignore[misc]  # fmt: skip
    for target in status.targets:
        name = target.deployment
        check(f"targets[{name}].observedSince", target.observed_since,
              lambda v, t=target: setattr(t, "observed_since", v))  # type: ignore[misc]  # fmt: skip
        check(f"targets[{name}].rolledAt", target.rolled_at,
              lambda v, t=target: setattr(t, "rolled_at", v))  # type: ignore[misc]  # fmt: skip
        check(f"targets[{name}].blockedSince", target.blocked_since,
              lambda v, t=target: setattr(t, "blocked_since", v))  # type: ignore[misc]  # fmt: skip
    return found

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

from datetime import datetime, timedelta
from typing import Any

from sps_operator.api.status import SpsProfileStatus
from sps_operator.api.times import parse_rfc3339
from sps_operator.controller.policies.conditions import rfc3339

# Leader election tolerates `lease_duration - renew_deadline` (3 s) of clock rate error;
# NTP-synchronised nodes are within milliseconds. 30 s is generous for both.
MAX_CLOCK_SKEW = timedelta(seconds=30)


def parse(stamp: str | None) -> datetime | None:
    """An RFC 3339 time with its offset; None when absent, unreadable or naive."""
    when = parse_rfc3339(stamp)
    # A time without an offset could be any zone's: as unreadable as no time.
    return when if when is not None and when.tzinfo is not None else None


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


def _recorded(status: SpsProfileStatus) -> list[tuple[str, Any, str]]:
    """(where, object, attribute) of every time status recorded in the past."""
    found: list[tuple[str, Any, str]] = []
    run = status.current_run
    if run is not None:
        found += [
            ("currentRun.startedAt", run, "started_at"),
            ("currentRun.runningSince", run, "running_since"),
            ("currentRun.resultWaitSince", run, "result_wait_since"),
        ]
        if run.waiting is not None:
            found.append(("currentRun.waiting.since", run.waiting, "since"))
        if run.borrow is not None:
            found.append(("currentRun.borrow.at", run.borrow, "at"))
    if status.rollout_borrow is not None:
        found += [
            ("rolloutBorrow.at", status.rollout_borrow, "at"),
            ("rolloutBorrow.heldSince", status.rollout_borrow, "held_since"),
        ]
    if status.last_failure is not None:
        found.append(("lastFailure.at", status.last_failure, "at"))
    found += [
        ("lastScheduleTime", status, "last_schedule_time"),
        ("refreshRequestedAt", status, "refresh_requested_at"),
    ]
    found += [(f"tables[{t.config_map}].profiledAt", t, "profiled_at") for t in status.tables]
    for target in status.targets:
        name = f"targets[{target.deployment}]"
        found += [
            (f"{name}.observedSince", target, "observed_since"),
            (f"{name}.rolledAt", target, "rolled_at"),
            (f"{name}.blockedSince", target, "blocked_since"),
        ]
    return found


def bound_recorded_times(status: SpsProfileStatus, now: datetime) -> list[str]:
    """Replace every recorded time of `status` that lies beyond the skew bound ahead of
    `now` (or cannot be read) by `now`; returns what was replaced, for the report. Times
    that are in the future by design (nextScheduleTime, heldUntil) are left alone."""
    found: list[str] = []
    for where, owner, attribute in _recorded(status):
        value = getattr(owner, attribute)
        if value is None:
            continue
        when = parse(value)
        if when is None:
            found.append(f"{where} {value!r} is not a time")
        elif when - now > MAX_CLOCK_SKEW:
            ahead = (when - now).total_seconds()
            found.append(f"{where} {value} was {ahead:.0f} s ahead of this replica's clock")
        else:
            continue
        setattr(owner, attribute, rfc3339(now))
    return found

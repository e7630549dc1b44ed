"""When a profile needs its next pass although nothing it watches changes (pure): a
schedule falls due, a retry's backoff ends, a moving placement settles. The daemon sleeps
until then (or the resync, or an event), so time-driven work happens on time without
polling."""

from __future__ import annotations

from datetime import timedelta

from sps_operator.api.models import TargetState
from sps_operator.controller.state import Pass
from sps_operator.controller.triggers import MAX_ATTEMPTS, backoff_seconds, parse_time


def next_wake(p: Pass, debounce: timedelta) -> float | None:
    """Seconds from now until this profile's next time-driven pass (None: none)."""
    st, now = p.status, p.now
    due = []
    if (when := parse_time(st.next_schedule_time)) is not None:
        due.append(when)
    failure = st.last_failure
    if (
        failure is not None
        and failure.retryable
        and failure.attempts < MAX_ATTEMPTS
        and (failed := parse_time(failure.at)) is not None
    ):
        due.append(failed + timedelta(seconds=backoff_seconds(failure.attempts)))
    for target in st.targets:
        since = parse_time(target.observed_since)
        if target.state == TargetState.WAITING and since is not None:
            due.append(since + debounce)
    seconds = [max((when - now).total_seconds(), 0.0) for when in due]
    if p.wake is not None:
        seconds.append(p.wake)
    return min(seconds) if seconds else None

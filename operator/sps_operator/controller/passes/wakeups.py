"""When a profile needs its next pass although nothing it watches changes (pure): a
schedule falls due, a retry's backoff ends, a moving placement settles. The daemon sleeps
until then (or the resync, or an event), so time-driven work happens on time without
polling.

A time already past asks for nothing: the pass that just ran could act on it and did not
(a retry whose target is scaled to zero, pods that cannot be scheduled or sit on
unlabelled nodes), so only an event can change that, and the event wakes the profile.
Asking for "now" instead had an idle fleet pass back to back forever."""

from __future__ import annotations

from datetime import timedelta

from sps_operator.api.status import TargetState
from sps_operator.api.times import parse_rfc3339
from sps_operator.controller.passes.state import Pass
from sps_operator.controller.policies.triggers import MAX_ATTEMPTS, backoff_seconds


def next_wake(p: Pass, debounce: timedelta) -> float | None:
    """Seconds from now until this profile's next time-driven pass (None: none)."""
    st, now = p.status, p.now
    due = []
    if (when := parse_rfc3339(st.next_schedule_time)) is not None:
        due.append(when)
    failure = st.last_failure
    if (
        failure is not None
        and failure.retryable
        and failure.attempts < MAX_ATTEMPTS
        and (failed := parse_rfc3339(failure.at)) is not None
    ):
        due.append(failed + timedelta(seconds=backoff_seconds(failure.attempts)))
    for target in st.targets:
        since = parse_rfc3339(target.observed_since)
        # Only a product seen and not yet stable for the debounce settles with time alone.
        if target.state == TargetState.WAITING and target.observed_gpu and since is not None:
            due.append(since + debounce)
    seconds = [(when - now).total_seconds() for when in due if when > now]
    if p.wake is not None:
        seconds.append(p.wake)
    return min(seconds) if seconds else None

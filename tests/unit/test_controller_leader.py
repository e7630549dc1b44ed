"""Leader election: the pure rule, with an injected clock (the k8s test runs two
electors against the real API server)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from fakerest import FakeRest, Sent

from sps_operator.controller.main import _acquire
from sps_operator.controller.process.leader import LeaseElector, Observed, Timing, decide

T = Timing(lease_duration=10, renew_deadline=7, retry_period=2)


def lease(holder: str | None, version: str) -> dict:
    return {"metadata": {"resourceVersion": version}, "spec": {"holderIdentity": holder}}


def test_no_lease_ours_or_released_is_taken_at_once() -> None:
    assert decide("a", None, None, 0.0, T)[0]
    assert decide("a", lease("a", "5"), None, 0.0, T)[0]
    assert decide("a", lease(None, "6"), None, 0.0, T)[0]


def test_anothers_lease_is_taken_only_after_a_whole_unrenewed_duration() -> None:
    take, seen = decide("b", lease("a", "5"), None, 100.0, T)
    assert not take and seen == Observed("a", "5", 100.0)
    take, seen = decide("b", lease("a", "5"), seen, 109.9, T)
    assert not take
    # Renewed (a new record): the clock starts again, by this process's own clock.
    take, seen = decide("b", lease("a", "7"), seen, 109.95, T)
    assert not take and seen is not None and seen.seen_at == 109.95
    take, _ = decide("b", lease("a", "7"), seen, 119.95, T)
    assert take


def test_a_leader_steps_down_before_a_candidate_may_take_over() -> None:
    assert T.renew_deadline < T.lease_duration
    assert T.lease_duration + T.retry_period <= 15  # failover within the 15 s


def _forbidden(_: Sent) -> tuple[int, dict]:
    """Every Lease request refused, as without a Role."""
    return 403, {"kind": "Status", "reason": "Forbidden"}


def test_a_forbidden_lease_is_said_once_with_what_to_fix(caplog: pytest.LogCaptureFixture) -> None:
    elector = LeaseElector("ops", "elsewhere", "me", api=FakeRest(_forbidden).api, timing=T)
    with caplog.at_level(logging.DEBUG, logger="sps_operator.controller.process.leader"):
        assert not elector.try_once()
        assert not elector.try_once()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, caplog.text
    assert "elsewhere/ops" in errors[0].getMessage()
    assert "--lease-namespace" in errors[0].getMessage()


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Leases:
    """A Lease API that refuses or lets through, as the test says."""

    def __init__(self) -> None:
        self.status = 403

    def __call__(self, sent: Sent) -> tuple[int, dict]:
        if self.status:
            return self.status, {"kind": "Status"}
        return 200, lease("someone-else", "1")


def test_a_lease_refused_for_a_minute_makes_the_replica_unhealthy_with_why() -> None:
    clock, api = _Clock(), _Leases()
    elector = LeaseElector("ops", "elsewhere", "me", api=FakeRest(api).api, timing=T, clock=clock)
    assert not elector.try_once()
    assert elector.problem() is None  # a refusal may be passing
    clock.now = T.refused_unhealthy_after - 1
    assert not elector.try_once()
    assert elector.problem() is None
    clock.now = T.refused_unhealthy_after
    assert not elector.try_once()
    problem = elector.problem()
    assert problem is not None
    assert "elsewhere/ops" in problem and "HTTP 403" in problem
    assert "--lease-namespace" in problem
    # Answered again (another holds it: a plain standby), and the count starts over.
    api.status = 0
    assert not elector.try_once()
    assert elector.problem() is None
    api.status = 500
    clock.now += 1
    assert not elector.try_once()
    assert elector.problem() is None


def test_losing_a_race_is_never_a_problem() -> None:
    clock, api = _Clock(), _Leases()
    api.status = 409
    elector = LeaseElector("ops", "ns", "me", api=FakeRest(api).api, timing=T, clock=clock)
    for step in range(100):
        clock.now = step * T.retry_period
        elector.try_once()
    assert elector.problem() is None


class _HeldLeases:
    """A Lease API whose Lease another replica holds (renewing it: new versions)."""

    def __init__(self) -> None:
        self.holder, self.version = "sps-operator-7d9f-abcde", 1

    def __call__(self, sent: Sent) -> tuple[int, dict]:
        self.version += 1
        return 200, lease(self.holder, str(self.version))


async def test_a_standby_logs_where_the_leader_is_once_per_leader(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`kubectl logs deploy/sps-operator` picks any pod: from a standby, it says which pod
    leads and how to read its log, once, and again when another pod leads."""
    api = _HeldLeases()
    elector = LeaseElector("sps-operator", "sps-system", "me", api=FakeRest(api).api,
                           timing=Timing(retry_period=0.001))  # fmt: skip
    stop = asyncio.Event()
    rounds = 0
    real_try = elector.try_once

    def counting() -> bool:
        nonlocal rounds
        rounds += 1
        if rounds == 4:
            api.holder = "sps-operator-7d9f-fghij"  # the leader changed
        if rounds == 8:
            stop.set()
        return real_try()

    elector.try_once = counting  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="sps_operator.main"):
        assert not await _acquire(elector, stop)
    pointers = [r.getMessage() for r in caplog.records if "the leader is" in r.getMessage()]
    assert pointers == [
        "standing by; the leader is sps-operator-7d9f-abcde (Lease sps-system/sps-operator): "
        "kubectl -n sps-system logs pod/sps-operator-7d9f-abcde",
        "standing by; the leader is sps-operator-7d9f-fghij (Lease sps-system/sps-operator): "
        "kubectl -n sps-system logs pod/sps-operator-7d9f-fghij",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records if "leader is" in r.message)

"""The pace of rollouts (issue 34 §1): how many targets of one profile are mid-rollout at
once (policies/pace.py, pure) and the rollout step that keeps to it (rollout/turns.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from controller_harness import Harness, deployment, profile_body, rounds
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sps_operator.api.result import build_patch
from sps_operator.api.spec import RolloutSpec, max_concurrent_count
from sps_operator.controller.passes.state import Settings
from sps_operator.controller.policies.pace import (
    Waiting,
    concurrency_limit,
    mid_rollout,
    take_turns,
)
from sps_operator.controller.policies.placement import PodInfo
from sps_operator.plugin.explain import explain, render_explain

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)

# ----------------------------------------------------------------------------- the limit


@pytest.mark.parametrize(
    ("asked", "targets", "ceiling", "count", "capped"),
    [
        ("25%", 1, 0, 1, False),  # rounded up, at least one
        ("25%", 4, 0, 1, False),
        ("25%", 5, 0, 2, False),
        ("25%", 1500, 0, 375, False),
        ("25%", 1500, 10, 10, True),  # the operator's ceiling
        ("100%", 7, 0, 7, False),
        (3, 2, 0, 3, False),
        (20, 100, 10, 10, True),
        (10, 100, 10, 10, False),
        ("1%", 1000, 10, 10, False),  # asks exactly the ceiling: not capped
    ],
)
def test_the_limit_is_a_count_or_a_share_rounded_up_under_the_ceiling(
    asked: int | str, targets: int, ceiling: int, count: int, capped: bool
) -> None:
    limit = concurrency_limit(asked, targets, ceiling)
    assert (limit.count, limit.capped) == (count, capped)
    assert ("operator's ceiling" in limit.describe()) == capped


@pytest.mark.parametrize(
    # Digits that are not ASCII: "²" is a digit to str.isdigit() that int() refuses.
    "bad",
    [0, -1, "0%", "101%", "25", "x%", "%", " 5%", 100_001, "²%", "١%", "5%\n", "0100%"],
)
def test_a_limit_that_is_neither_a_count_nor_a_share_is_refused_by_the_api(bad: Any) -> None:
    with pytest.raises(ValidationError, match=r"rollout\.maxConcurrent"):
        RolloutSpec.model_validate({"maxConcurrent": bad})
    assert concurrency_limit(bad, 8).count == 2  # read as the default if it ever got in


@given(st.one_of(st.integers(), st.text(max_size=8)), st.integers(0, 10_000))
def test_any_limit_text_reads_as_none_or_a_count_within_bounds(asked: Any, targets: int) -> None:
    count = max_concurrent_count(asked, targets)
    assert count is None or 0 <= count <= max(targets, 100_000)
    assert concurrency_limit(asked, targets, 10).count in range(1, 11)


# ----------------------------------------------------------------------------- whose turn


def test_the_longest_waiting_goes_first_then_by_name() -> None:
    waiting = [Waiting("c", T0), Waiting("a", T0 + timedelta(1)), Waiting("b", T0)]
    turns = take_turns(waiting, in_flight=1, limit=2)
    assert turns.admitted == ("b",) and turns.queued == ("c", "a")
    assert take_turns(waiting, in_flight=5, limit=2).admitted == ()


@settings(max_examples=200, deadline=None)
@given(
    names=st.lists(
        st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=30, unique=True
    ),
    limit=st.integers(1, 5),
    finishing=st.lists(st.integers(0, 10), min_size=1, max_size=200),
)
def test_never_more_than_the_limit_mid_rollout_and_every_target_gets_its_turn(
    names: list[str], limit: int, finishing: list[int]
) -> None:
    """Passes in a row: each rolls what the pace admits; between passes some of the
    rollouts under way complete (in an order Hypothesis picks). Never more than the limit
    roll at once, and once rollouts keep completing every target has rolled."""
    since: dict[str, datetime] = {}
    rolling: list[str] = []
    done: set[str] = set()
    now = T0
    for step in [*finishing, *([0] * (2 * len(names) + 2))]:
        now += timedelta(seconds=1)
        waiting = [n for n in names if n not in done and n not in rolling]
        for name in waiting:
            since.setdefault(name, now)
        turns = take_turns([Waiting(n, since[n]) for n in waiting], len(rolling), limit)
        rolling += turns.admitted
        assert len(rolling) <= limit
        assert set(turns.admitted) | set(turns.queued) == set(waiting)
        for _ in range(min(step + 1, len(rolling))):  # at least one completes a pass
            done.add(rolling.pop(step % len(rolling)))
    assert done == set(names)


# ----------------------------------------------------------------------------- mid-rollout


def _dep(generation: int = 2, observed: int = 2, **status: Any) -> dict[str, Any]:
    dep = deployment()
    dep["metadata"]["generation"] = generation
    dep["status"] = {"observedGeneration": observed, "replicas": 1, "updatedReplicas": 1,
                     "availableReplicas": 1, **status}  # fmt: skip
    return dep


def _pod(table_hash: str | None) -> PodInfo:
    return PodInfo("server-0", {"app": "sglang", "deploy": "server"}, "n1", ready=True,
                   table_hash=table_hash)  # fmt: skip


def test_a_target_is_mid_rollout_until_every_ready_pod_runs_the_table_or_it_failed() -> None:
    assert mid_rollout(_dep(observed=1), [_pod("new")], "new")  # not observed yet
    assert mid_rollout(_dep(), [_pod("old")], "new")  # an old pod still serves
    assert mid_rollout(_dep(availableReplicas=0), [], "new")
    assert not mid_rollout(_dep(), [_pod("new")], "new")  # rolled out
    failed = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    assert not mid_rollout(_dep(availableReplicas=0, conditions=failed), [], "new")
    # A deadline reported for the previous generation is not this rollout's.
    assert mid_rollout(_dep(observed=1, conditions=failed), [], "new")


# ----------------------------------------------------------------------------- the step

NAMES = ("d-a", "d-b", "d-c", "d-d", "d-e")


def fleet(names: tuple[str, ...] = NAMES, ceiling: int = 0, **spec: Any) -> Harness:
    """Deployments on H100 under one profile; their rollouts complete only when a test
    says so (`complete`)."""
    h = Harness(settings=Settings(gpu_debounce_seconds=0, isolate_fits=False,
                                  max_concurrent_rollouts=ceiling))  # fmt: skip
    for name in names:
        h.add(deployment(name))
        h.place(name)
    h.add(profile_body(**spec))
    h.kube.instant_rollout = False
    return h


def complete(h: Harness, name: str) -> None:
    h.kube.roll(h.kube.obj("Deployment", name))


def rolled(h: Harness, names: tuple[str, ...] = NAMES) -> list[str]:
    """The Deployments whose template carries a table."""
    return [n for n in names if h.running_hash(n)]


def by_name(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["deployment"]: t for t in status["targets"]}


def test_a_profile_of_many_deployments_rolls_them_a_few_at_a_time() -> None:
    """Issue 34: a selector matching 1,500 Deployments restarted every server in one pass."""
    h = fleet(rollout={"maxConcurrent": 2})
    h.profile_once()
    assert rolled(h) == ["d-a", "d-b"]  # by name, two at once
    targets = by_name(h.settle())
    queued = targets["d-e"]
    assert queued["state"] == "Rolling" and queued["reason"] == "RolloutQueued"
    assert queued["nextTable"] and queued["queuedSince"] and "table" not in queued
    assert (
        "3 of 3 in line" in queued["message"]
        and "2 of this profile's targets" in queued["message"]
        and "rollout.maxConcurrent 2 of 5 target(s) allows 2 at once" in queued["message"]
    )
    assert h.condition("RolledOut")[:2] == ("False", "RolloutQueued")
    assert h.condition("Ready")[0] == "False"
    assert "rolls once one of the rolling targets is live" in render_explain(
        explain(h.kube.obj("SpsProfile", "p"), events=[])
    )
    complete(h, "d-a")
    h.settle()
    assert rolled(h) == ["d-a", "d-b", "d-c"]  # one done, one more
    for name in NAMES:
        complete(h, name)
        h.settle()
    assert rolled(h) == list(NAMES)
    assert {t["state"] for t in h.settle()["targets"]} == {"Live"}
    assert h.condition("Ready")[:2] == ("True", "TableLive")


def test_the_default_rolls_a_quarter_and_the_operators_ceiling_caps_what_a_profile_asks() -> None:
    h = fleet()  # 25 % of 5, rounded up
    h.profile_once()
    assert rolled(h) == ["d-a", "d-b"]
    h = fleet(ceiling=1, rollout={"maxConcurrent": "100%"})
    h.profile_once()
    assert rolled(h) == ["d-a"]
    message = by_name(h.status())["d-b"]["message"]
    assert "allows 1 at once (the operator's ceiling" in message


def test_a_stuck_rollout_does_not_hold_the_others_and_a_rollback_is_never_held() -> None:
    h = fleet(names=("d-a", "d-b"), rollout={"maxConcurrent": 1}, refresh={"token": "x"})
    h.profile_once()
    assert rolled(h, ("d-a", "d-b")) == ["d-a"]
    dep = h.kube.obj("Deployment", "d-a")
    dep["status"]["observedGeneration"] = dep["metadata"]["generation"]
    dep["status"]["conditions"] = [
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
    ]
    h.settle()
    # d-a failed with no table to return to: it keeps trying, and d-b gets its turn.
    assert rolled(h, ("d-a", "d-b")) == ["d-a", "d-b"]


def test_a_rollback_rolls_at_once_whatever_the_pace() -> None:
    h = fleet(names=("d-a", "d-b"), rollout={"maxConcurrent": 1}, refresh={"token": "x"})
    h.kube.instant_rollout = True
    (first,) = h.profile_once()["tables"]
    h.settle()
    assert {h.running_hash(n) for n in ("d-a", "d-b")} == {first["hash"]}
    h.kube.instant_rollout = False
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"]["token"] = "y"
    (second,) = h.profile_once(result=build_patch(status="succeeded", rounds=rounds(1.5)))["tables"]
    assert [h.running_hash(n) for n in ("d-a", "d-b")] == [second["hash"], first["hash"]]
    assert by_name(h.status())["d-b"]["reason"] == "RolloutQueued"
    dep = h.kube.obj("Deployment", "d-a")
    dep["status"]["observedGeneration"] = dep["metadata"]["generation"]
    dep["status"]["conditions"] = [
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
    ]
    h.tick()
    status = h.run_pass()
    # d-a goes back to the first table at once; d-b never gets the failed one.
    assert h.running_hash("d-a") == first["hash"] and h.running_hash("d-b") == first["hash"]
    assert "rolled back" in status["lastFailure"]["message"]
    assert [t["hash"] for t in status["tables"]] == [first["hash"]]

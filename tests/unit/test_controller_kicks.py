"""Which profiles an event wakes (the event-driven core), without kopf."""

from __future__ import annotations

import asyncio
from typing import Any

from sps_operator.controller.kicks import (
    Kicks,
    profile_neighbours,
    profiles_for_pdb,
    profiles_for_pod,
    profiles_selecting,
)
from sps_operator.controller.ownership import ProfileSummary


def profile(generation: int = 1, selector: str = "a", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"uid": "u1", "generation": generation, "creationTimestamp": "t0", **meta},
        "spec": {"selector": {"matchLabels": {"app": selector}}},
        "status": {"conditions": []},
    }


def test_a_status_write_wakes_nobody_a_spec_change_its_profile_a_selector_everyone() -> None:
    kicks = Kicks()
    assert kicks.profile_changed(profile()) == (True, True)  # first sight
    status_only = profile()
    status_only["status"] = {"conditions": [{"type": "Ready"}]}
    assert kicks.profile_changed(status_only) == (False, False)
    assert kicks.profile_changed(profile(generation=2)) == (True, False)
    annotated = profile(generation=2, annotations={"sps.dev/reprofile": "r1"})
    assert kicks.profile_changed(annotated) == (True, False)
    reselected = profile(generation=3, selector="b", annotations={"sps.dev/reprofile": "r1"})
    assert kicks.profile_changed(reselected) == (True, True)


def test_kicks_coalesce_and_skip_unknown_profiles() -> None:
    async def scenario() -> None:
        kicks = Kicks()
        event = kicks.event("u1")
        assert kicks.kick(["u1", "u1", "nobody"]) == 1  # set once, unknown ignored
        assert event.is_set()
        kicks.forget("u1")
        assert kicks.kick(["u1"]) == 0

    asyncio.run(scenario())


def test_node_events_count_only_when_labels_change() -> None:
    kicks = Kicks()
    assert kicks.node_labels_changed("n1", {"gpu": "H100"})
    assert not kicks.node_labels_changed("n1", {"gpu": "H100"})  # a status heartbeat
    assert kicks.node_labels_changed("n1", {"gpu": "H200"})
    assert kicks.node_labels_changed("n1", None)  # deleted


def test_a_deployment_event_wakes_its_selectors_and_its_recorded_owner() -> None:
    a = ProfileSummary("a", "ua", "t0", {"matchLabels": {"app": "x"}})
    b = ProfileSummary("b", "ub", "t1", {"matchLabels": {"app": "y"}})
    c = ProfileSummary("c", "uc", "t2", {"matchLabels": {"app": "z"}})
    dep = {"metadata": {"labels": {"app": "x"}, "annotations": {"sps.dev/owner": "b"}}}
    assert profiles_selecting(dep, [a, b, c]) == ["ua", "ub"]


def _dep(name: str, app: str, owner: str | None = None) -> dict[str, Any]:
    annotations = {"sps.dev/owner": owner} if owner else {}
    return {
        "metadata": {"name": name, "labels": {"app": app}, "annotations": annotations},
        "spec": {
            "selector": {"matchLabels": {"pod": name}},
            "template": {"metadata": {"labels": {"pod": name, "tier": "gpu"}}},
        },
    }


A = ProfileSummary("a", "ua", "t0", {"matchLabels": {"app": "x"}})
B = ProfileSummary("b", "ub", "t1", {"matchLabels": {"app": "x"}})
C = ProfileSummary("c", "uc", "t2", {"matchLabels": {"app": "y"}})
IDLE = [
    ProfileSummary(f"idle{i}", f"ui{i}", "t3", {"matchLabels": {"app": f"i{i}"}}) for i in range(50)
]


def test_a_pod_wakes_the_profiles_of_its_deployment_or_of_its_job_not_the_namespace() -> None:
    deps = [_dep("x1", "x"), _dep("y1", "y")]
    profiles = [A, B, C, *IDLE]
    assert profiles_for_pod({"pod": "x1"}, deps, profiles) == ["ua", "ub"]
    assert profiles_for_pod({"pod": "y1"}, deps, profiles) == ["uc"]
    assert profiles_for_pod({"sps.dev/profile-uid": "uc", "pod": "x1"}, deps, profiles) == ["uc"]
    assert profiles_for_pod({"pod": "unrelated"}, deps, profiles) == []


def test_a_pdb_wakes_the_profiles_of_the_deployments_it_covers() -> None:
    deps = [_dep("x1", "x"), _dep("y1", "y")]
    pdb = {"spec": {"selector": {"matchLabels": {"pod": "y1"}}}}
    assert profiles_for_pdb(pdb, deps, [A, B, C, *IDLE]) == ["uc"]
    assert profiles_for_pdb({"spec": {}}, deps, [A, B, C]) == []  # no selector: nothing


def test_a_deleted_or_reselected_profile_wakes_only_profiles_sharing_a_deployment() -> None:
    deps = [
        _dep("x1", "x", owner="a"),
        _dep("y1", "y"),
        *(_dep(f"d{i}", f"i{i}") for i in range(50)),
    ]
    profiles = [A, B, C, *IDLE]
    body = {"metadata": {"name": "a"}, "spec": {"selector": {"matchLabels": {"app": "x"}}}}
    assert sorted(profile_neighbours(body, None, deps, profiles)) == ["ua", "ub"]
    # Reselected from x to y: the Deployments of both selectors (and the one it owns).
    moved = {"metadata": {"name": "a"}, "spec": {"selector": {"matchLabels": {"app": "y"}}}}
    before = {"matchLabels": {"app": "x"}}
    assert sorted(set(profile_neighbours(moved, before, deps, profiles))) == ["ua", "ub", "uc"]
    # A profile with nothing in common wakes nobody else.
    lone = {"metadata": {"name": "idle0"}, "spec": {"selector": {"matchLabels": {"app": "none"}}}}
    assert profile_neighbours(lone, None, deps, profiles) == []


def test_the_selector_seen_is_the_one_before_the_event() -> None:
    kicks = Kicks()
    assert kicks.selector_seen("u1") is None
    kicks.profile_changed(profile(selector="a"))
    assert kicks.selector_seen("u1") == {"matchLabels": {"app": "a"}}
    kicks.profile_changed(profile(generation=2, selector="b"))
    assert kicks.selector_seen("u1") == {"matchLabels": {"app": "b"}}
    kicks.forget("u1")
    assert kicks.selector_seen("u1") is None

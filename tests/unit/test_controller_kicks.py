"""Which profiles an event wakes (the event-driven core), without kopf."""

from __future__ import annotations

import asyncio
from typing import Any

from sps_operator.controller.kicks import Kicks, profiles_selecting
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

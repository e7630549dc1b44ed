"""Which profiles an event wakes (the event-driven core), without kopf."""

from __future__ import annotations

import asyncio
from typing import Any

from sps_operator.controller import indexes as ix
from sps_operator.controller.kicks import (
    Kicks,
    profile_neighbours,
    profiles_for_config_map,
    profiles_for_pdb,
    profiles_for_pod,
    profiles_selecting,
)

NS = "ns"


def indexed(entries: Any, *bodies: dict[str, Any]) -> dict[Any, list[Any]]:
    """A kopf index over `bodies`, built with the operator's own entries function."""
    index: dict[Any, list[Any]] = {}
    for body in bodies:
        for key, value in entries(body).items():
            index.setdefault(key, []).append(value)
    return index


def summary(name: str, uid: str, created: str, app: str, namespace: str = NS) -> dict[str, Any]:
    """An SpsProfile selecting app=`app`."""
    return {
        "metadata": {"name": name, "uid": uid, "creationTimestamp": created,
                     "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": app}}},
    }  # fmt: skip


def profiles(*bodies: dict[str, Any]) -> dict[Any, list[Any]]:
    return indexed(ix.profile_entries, *bodies)


def deployments(*bodies: dict[str, Any]) -> dict[Any, list[Any]]:
    return indexed(ix.deployment_entries, *bodies)


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


def test_kicks_coalesce_skip_unknown_profiles_and_never_cross_namespaces() -> None:
    async def scenario() -> None:
        kicks = Kicks()
        event = kicks.event("u1", NS)
        assert kicks.kick("elsewhere", ["u1"]) == 0  # a UID copied onto another namespace's object
        assert not event.is_set()
        assert kicks.kick(NS, ["u1", "u1", "nobody", None]) == 1  # set once, unknown ignored
        assert event.is_set()
        kicks.forget("u1")
        assert kicks.kick(NS, ["u1"]) == 0

    asyncio.run(scenario())


def test_node_events_count_only_when_labels_change() -> None:
    kicks = Kicks()
    assert kicks.node_labels_changed("n1", {"gpu": "H100"})
    assert not kicks.node_labels_changed("n1", {"gpu": "H100"})  # a status heartbeat
    assert kicks.node_labels_changed("n1", {"gpu": "H200"})
    assert kicks.node_labels_changed("n1", None)  # deleted


def test_a_deployment_event_wakes_its_selectors_and_its_recorded_owner() -> None:
    idx = profiles(
        summary("a", "ua", "t0", "x"),
        summary("b", "ub", "t1", "y"),
        summary("c", "uc", "t2", "z"),
        summary("a2", "ua2", "t0", "x", "other"),
    )
    dep = {"metadata": {"labels": {"app": "x"}, "annotations": {"sps.dev/owner": "b"}}}
    assert profiles_selecting(dep, idx, NS) == ["ua", "ub"]


def _dep(name: str, app: str, owner: str | None = None, namespace: str = NS) -> dict[str, Any]:
    annotations = {"sps.dev/owner": owner} if owner else {}
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app},
                     "annotations": annotations},
        "spec": {
            "selector": {"matchLabels": {"pod": name}},
            "template": {"metadata": {"labels": {"pod": name, "tier": "gpu"}}},
        },
    }  # fmt: skip


A = summary("a", "ua", "t0", "x")
B = summary("b", "ub", "t1", "x")
C = summary("c", "uc", "t2", "y")
IDLE = [summary(f"idle{i}", f"ui{i}", "t3", f"i{i}") for i in range(50)]


def test_a_pod_wakes_the_profiles_of_its_deployment_or_of_its_job_not_the_namespace() -> None:
    deps = deployments(_dep("x1", "x"), _dep("y1", "y"), _dep("x1", "x", namespace="other"))
    idx = profiles(A, B, C, *IDLE)
    assert profiles_for_pod({"pod": "x1"}, NS, deps, idx) == ["ua", "ub"]
    assert profiles_for_pod({"pod": "y1"}, NS, deps, idx) == ["uc"]
    assert profiles_for_pod({"sps.dev/profile-uid": "uc", "pod": "x1"}, NS, deps, idx) == ["uc"]
    assert profiles_for_pod({"pod": "unrelated"}, NS, deps, idx) == []
    assert profiles_for_pod({"pod": "x1"}, "other", deps, idx) == []  # no profile there


def test_a_pdb_wakes_the_profiles_of_the_deployments_it_covers() -> None:
    deps = deployments(_dep("x1", "x"), _dep("y1", "y"))
    pdb = {"spec": {"selector": {"matchLabels": {"pod": "y1"}}}}
    assert profiles_for_pdb(pdb, NS, deps, profiles(A, B, C, *IDLE)) == ["uc"]
    assert profiles_for_pdb({"spec": {}}, NS, deps, profiles(A, B, C)) == []  # no selector


def test_a_configmap_wakes_its_owner_or_the_profiles_naming_it_as_their_stable_one() -> None:
    annotate_only = {"mode": "AnnotateOnly", "tableConfigMap": "llama-sps"}
    writer = {**A, "spec": {**A["spec"], "rollout": annotate_only}}
    elsewhere = {**summary("w", "uw", "t0", "x", "other"), "spec": writer["spec"]}
    idx = profiles(writer, B, elsewhere)
    owned = {"metadata": {"namespace": NS, "name": "r", "ownerReferences": [
        {"apiVersion": "sps.dev/v1alpha1", "kind": "SpsProfile", "uid": "ub", "controller": True}
    ]}}  # fmt: skip
    assert profiles_for_config_map(owned, idx) == ["ub"]
    stable = {"metadata": {"namespace": NS, "name": "llama-sps"}}
    assert profiles_for_config_map(stable, idx) == ["ua"]
    labelled = {"metadata": {"namespace": NS, "name": "x", "labels": {"sps.dev/profile-uid": "ub"}}}
    assert profiles_for_config_map(labelled, idx) == []  # a label is not an owner


def test_a_deleted_or_reselected_profile_wakes_only_profiles_sharing_a_deployment() -> None:
    deps = deployments(
        _dep("x1", "x", owner="a"),
        _dep("y1", "y"),
        *(_dep(f"d{i}", f"i{i}") for i in range(50)),
    )
    idx = profiles(A, B, C, *IDLE)
    body = {"metadata": {"name": "a"}, "spec": {"selector": {"matchLabels": {"app": "x"}}}}
    assert sorted(profile_neighbours(body, (None, None), NS, deps, idx)) == ["ua", "ub"]
    # Reselected from x to y: the Deployments of both selectors (and the one it owns).
    moved = {"metadata": {"name": "a"}, "spec": {"selector": {"matchLabels": {"app": "y"}}}}
    before = ({"matchLabels": {"app": "x"}}, None)
    assert sorted(set(profile_neighbours(moved, before, NS, deps, idx))) == ["ua", "ub", "uc"]
    # A profile with nothing in common wakes nobody else.
    lone = {"metadata": {"name": "idle0"}, "spec": {"selector": {"matchLabels": {"app": "none"}}}}
    assert profile_neighbours(lone, (None, None), NS, deps, idx) == []


def test_the_selector_seen_is_the_one_before_the_event() -> None:
    kicks = Kicks()
    assert kicks.seen("u1") == (None, None)
    kicks.profile_changed(profile(selector="a"))
    assert kicks.seen("u1") == ({"matchLabels": {"app": "a"}}, None)
    kicks.profile_changed(profile(generation=2, selector="b"))
    assert kicks.seen("u1") == ({"matchLabels": {"app": "b"}}, None)
    kicks.forget("u1")
    assert kicks.seen("u1") == (None, None)

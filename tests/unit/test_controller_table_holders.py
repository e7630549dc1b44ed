"""A table a Deployment mounts outlives its profile, the operator and the CRD (issue 36):
the Deployment holds it with an ownerReference of its own, so the garbage collector keeps
it even when the profile's finalizer never runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller_harness import NS, Harness, rounds

from sps_operator.api.result import build_patch
from sps_operator.controller.finalizer import release
from sps_operator.controller.policies.ownership import (
    held_owner_references,
    released_owner_references,
)

PROFILE_REF = {
    "apiVersion": "sps.dev/v1alpha1",
    "kind": "SpsProfile",
    "name": "p",
    "uid": "uid-p",
    "controller": True,
}


def table(namespace: str = NS, refs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p-table-1",
            "namespace": namespace,
            "ownerReferences": [PROFILE_REF] if refs is None else refs,
        }
    }


def dep(name: str = "server", uid: str = "uid-d", namespace: str = NS) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}}


def holder(name: str = "server", uid: str = "uid-d") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid}


def collected(obj: Mapping[str, Any], alive: set[str]) -> bool:
    """What the garbage collector does: an object with owners goes once none is alive."""
    refs = obj["metadata"].get("ownerReferences") or []
    return bool(refs) and not any(r["uid"] in alive for r in refs)


# --------------------------------------------------------------------------- pure


def test_a_deployment_is_added_as_a_plain_owner_once() -> None:
    refs = held_owner_references(table(), dep(), True)
    assert refs == [PROFILE_REF, holder()]
    assert held_owner_references(table(refs=refs), dep(), True) is None  # nothing to write


def test_a_deployment_that_no_longer_mounts_is_removed_and_others_stay() -> None:
    other = holder("other", "uid-o")
    refs = held_owner_references(table(refs=[PROFILE_REF, holder(), other]), dep(), False)
    assert refs == [PROFILE_REF, other]
    assert held_owner_references(table(), dep(), False) is None


def test_a_deployment_of_another_namespace_never_holds_a_table() -> None:
    # The collector resolves owners in the dependent's namespace only: a reference to a
    # Deployment elsewhere would be dangling, and a tenant must not steer the operator's
    # writes across namespaces.
    assert held_owner_references(table(), dep(namespace="other"), True) is None
    assert held_owner_references(table(namespace=""), dep(namespace=""), True) is None
    assert (
        held_owner_references(table(), {"metadata": {"name": "x", "namespace": NS}}, True) is None
    )
    foreign = dep("server", "uid-f", "other")
    assert released_owner_references(table(), "uid-p", [foreign, dep()]) == [holder()]


def test_release_drops_only_the_profile_and_adds_every_mounting_deployment() -> None:
    other = {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "uid-x"}
    cm = table(refs=[PROFILE_REF, other])
    refs = released_owner_references(cm, "uid-p", [dep(), dep("b", "uid-b"), dep()])
    assert refs == [other, holder(), holder("b", "uid-b")]


# --------------------------------------------------------------------------- through passes


def test_the_table_rolled_onto_a_deployment_is_held_by_it() -> None:
    h = Harness.one_target()
    status = h.profile_once()
    live = status["targets"][0]["table"]
    server = h.kube.obj("Deployment", "server")["metadata"]
    refs = h.kube.obj("ConfigMap", live)["metadata"]["ownerReferences"]
    assert holder("server", server["uid"]) in refs
    # The profile's finalizer removed by hand (the CRD deleted without the operator): the
    # collector keeps the table the Deployment mounts.
    assert not collected(h.kube.obj("ConfigMap", live), alive={server["uid"]})


def test_a_table_rolled_off_is_let_go_and_goes_with_the_profile() -> None:
    h = Harness.one_target(refresh={"token": "a"})
    h.profile_once()
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.profile_once(result=build_patch(status="succeeded", rounds=rounds(scale=1.2)))
    h.settle()
    status = h.status()
    live, older = status["targets"][0]["table"], status["tables"][0]["previous"]
    assert live != older
    server_uid = h.kube.obj("Deployment", "server")["metadata"]["uid"]
    assert not collected(h.kube.obj("ConfigMap", live), alive={server_uid})
    assert collected(h.kube.obj("ConfigMap", older), alive={server_uid})


def test_a_table_rolled_off_stays_held_while_the_rollout_runs() -> None:
    # The old ReplicaSet's pods still mount it: a profile gone now must not take it.
    h = Harness.one_target(refresh={"token": "a"})
    first = h.profile_once()["targets"][0]["table"]
    h.kube.instant_rollout = False
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.profile_once(result=build_patch(status="succeeded", rounds=rounds(scale=1.2)))
    h.settle()
    server = h.kube.obj("Deployment", "server")
    assert h.status()["targets"][0]["table"] != first
    assert not collected(h.kube.obj("ConfigMap", first), alive={server["metadata"]["uid"]})
    h.kube.roll(server)
    h.settle()
    assert collected(h.kube.obj("ConfigMap", first), alive={server["metadata"]["uid"]})


def test_release_keeps_the_deployment_holding_its_table() -> None:
    h = Harness.one_target()
    live = h.profile_once()["targets"][0]["table"]
    server_uid = h.kube.obj("Deployment", "server")["metadata"]["uid"]
    uid = h.kube.obj("SpsProfile", "p")["metadata"]["uid"]
    assert release(h.kube, NS, "p", uid) == [live]
    cm = h.kube.obj("ConfigMap", live)
    assert not collected(cm, alive={server_uid})
    assert collected(cm, alive=set())  # goes with the Deployment: no leak

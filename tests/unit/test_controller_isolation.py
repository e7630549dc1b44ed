"""A namespace is a tenant boundary (issue 18 §1): an object is a profile's only when it
is in the profile's namespace and its controller ownerReference is the profile's UID.

Each case is played by a tenant of another namespace who may create ConfigMaps and Jobs
there and knows the victim's UID and names (they are on every label), against the
operator's own caches: the kopf index functions over every namespace's objects, read by
the real `Reconciler`. The LIST snapshot the other unit tests use obeys the same rule."""

from __future__ import annotations

import copy
from typing import Any

from controller_harness import NS, Harness, rounds
from test_controller_safety import ANNOTATE_ONLY, annotate_only_deployment

from sps_operator.api import labels as L
from sps_operator.api.kinds import RunPhase
from sps_operator.api.result import build_patch
from sps_operator.controller.kube import names

B = "tenant-b"


def uid_of(h: Harness, name: str = "p") -> str:
    return str(h.kube.obj("SpsProfile", name)["metadata"]["uid"])


def planted(kind: str, name: str, labels: dict[str, str], namespace: str = B, **rest: Any) -> dict:
    """An object a tenant creates: the operator's labels copied, no ownerReference."""
    api = {"ConfigMap": "v1", "Job": "batch/v1"}[kind]
    meta = {"name": name, "namespace": namespace, "labels": {L.LABEL_MANAGED_BY: L.MANAGED_BY,
                                                              **labels}}  # fmt: skip
    return {"apiVersion": api, "kind": kind, "metadata": meta, **rest}


def user_object(kind: str, name: str) -> dict:
    api = {"ConfigMap": "v1", "Job": "batch/v1"}[kind]
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": NS},
            "data": {"db": "payments"}} if kind == "ConfigMap" else {
            "apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": NS},
            "spec": {"template": {}}}  # fmt: skip


# --------------------------------------------------------------------------- the four cases


def test_a_configmap_in_another_namespace_never_hides_the_stable_one() -> None:
    """Observed: a ConfigMap in B labelled with A's namespace name stood in for A's
    AnnotateOnly stable ConfigMap, which was then never created (the pods could not
    start, and no condition said why)."""
    h = Harness()
    h.add(annotate_only_deployment())
    h.add(profile_body_annotate_only())
    h.place()
    decoy = planted("ConfigMap", "llama-sps", {L.LABEL_PROFILE_UID: NS}, data={"table.json": "x"})
    h.add(decoy)
    h.tick()
    h.run_cached_pass()
    stable = h.kube.objects.get(("ConfigMap", NS, "llama-sps"))
    assert stable is not None, "the stable ConfigMap was never created"
    assert stable["metadata"]["annotations"][L.ANNOTATION_PLACEHOLDER] == "true"
    assert h.kube.obj("ConfigMap", "llama-sps", B)["data"] == {"table.json": "x"}


def test_configmaps_in_another_namespace_never_make_history_trim_delete_here() -> None:
    """Observed on the real bed: four ConfigMaps planted in tenant-b with A's UID, one
    named payments-config, and the operator deleted serving/payments-config."""
    h = Harness.one_target()
    h.profile_once()
    uid = uid_of(h)
    h.add(user_object("ConfigMap", "payments-config"))
    for i, name in enumerate(["payments-config", "decoy-1", "decoy-2", "decoy-3"]):
        cm = planted(
            "ConfigMap",
            name,
            {
                L.LABEL_PROFILE_UID: uid,
                L.LABEL_COMPONENT: L.COMPONENT_TABLE,
                L.LABEL_GPU: names.label_value("NVIDIA-H100-80GB-HBM3"),
            },
            data={"table.json": "{}"},
        )
        cm["metadata"]["creationTimestamp"] = f"2020-01-01T00:00:0{i}Z"
        h.add(cm)
    for _ in range(3):
        h.tick()
        h.run_cached_pass()
    assert h.kube.obj("ConfigMap", "payments-config")["data"] == {"db": "payments"}
    assert len([k for k in h.kube.objects if k[0] == "ConfigMap" and k[1] == B]) == 4


def test_a_job_in_another_namespace_never_makes_run_cleanup_delete_here() -> None:
    """Observed: a Job in B carrying A's UID made A's run cleanup delete A/<that name>."""
    h = Harness.one_target()
    uid = uid_of(h)
    h.add(user_object("Job", "payments-batch"))
    h.add(planted("Job", "payments-batch", {L.LABEL_PROFILE_UID: uid, L.LABEL_RUN: "old"}))
    h.tick()
    status = h.run_cached_pass()
    assert status.get("currentRun"), status  # the run started, after its cleanup
    assert ("Job", NS, "payments-batch") in h.kube.objects
    assert ("Job", B, "payments-batch") in h.kube.objects


def test_a_finished_job_and_result_in_another_namespace_never_become_the_table() -> None:
    """Observed: a completed Job and a result ConfigMap in B under A's run names became
    A's live table (8x too slow) while A's real Job was still running."""
    h = Harness.one_target()
    uid = uid_of(h)
    h.tick()
    run = h.run_cached_pass()["currentRun"]
    labels = {L.LABEL_PROFILE_UID: uid, L.LABEL_RUN: run["name"]}
    job = planted("Job", run["job"], {**labels, L.LABEL_COMPONENT: L.COMPONENT_JOB})
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    forged = build_patch(status="succeeded", rounds=rounds(scale=8.0))
    result = planted(
        "ConfigMap",
        names.result_config_map(run["name"], RunPhase.DIAGONAL),
        {**labels, L.LABEL_COMPONENT: L.COMPONENT_RESULT},
        data={k: v for k, v in forged["data"].items() if v is not None},
    )
    h.add(job)
    h.add(result)
    for _ in range(3):
        h.tick()
        status = h.run_cached_pass()
    assert not status.get("tables"), status["tables"]
    assert status["currentRun"]["name"] == run["name"]  # A's own Job still runs
    assert not [o for o in h.kube.kinds("ConfigMap") if _component(o) == L.COMPONENT_TABLE]


# --------------------------------------------------------------------------- labels never authorize


def test_a_configmap_here_with_the_profiles_labels_but_not_owned_is_never_deleted() -> None:
    """In the profile's own namespace too: its labels on a ConfigMap that it does not own
    (no ownerReference) do not make it the profile's, to trim or to read."""
    h = Harness.one_target()
    h.profile_once()
    uid = uid_of(h)
    for i in range(4):
        cm = planted(
            "ConfigMap",
            f"users-{i}",
            {
                L.LABEL_PROFILE_UID: uid,
                L.LABEL_COMPONENT: L.COMPONENT_TABLE,
                L.LABEL_GPU: names.label_value("NVIDIA-H100-80GB-HBM3"),
            },
            namespace=NS,
            data={"table.json": "{}"},
        )
        cm["metadata"]["creationTimestamp"] = f"2020-01-01T00:00:0{i}Z"
        h.add(cm)
    h.settle()  # LIST snapshots
    for _ in range(2):
        h.tick()
        h.run_cached_pass()
    assert all(("ConfigMap", NS, f"users-{i}") in h.kube.objects for i in range(4))


def _component(obj: dict) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(L.LABEL_COMPONENT)


def profile_body_annotate_only() -> dict:
    from controller_harness import profile_body

    return copy.deepcopy(profile_body(**ANNOTATE_ONLY))

"""What the Deployment path has, for a StatefulSet and a LeaderWorkerSet target (issue 34
§1): a GPU move reprofiles, a second profile selecting the same workload is a Conflict,
AnnotateOnly writes only the annotation into every template (and needs the stable table
mounted in each), deleting the profile releases the table the workload mounts, and the
operator's caches (kopf indexes) find the workload, its pods and its profile."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from controller_harness import H100, H200, NS, SERVER_ARGS, Harness, container, profile_body
from test_controller_rollout_kinds import group_pods, leader_worker_set, stateful_set, sts_pods

from sps_operator.api import labels as L
from sps_operator.controller.finalizer import release
from sps_operator.controller.policies import workloads

STABLE = "llama-sps"
ANNOTATE_ONLY = {"rollout": {"mode": "AnnotateOnly", "tableConfigMap": STABLE}}
FLAG = ["--speculative-dspark-sps-table-path", "/etc/sps/table/table.json"]


def sts_target() -> tuple[dict[str, Any], str, list[Any]]:
    return stateful_set(), "StatefulSet", sts_pods()


def lws_target() -> tuple[dict[str, Any], str, list[Any]]:
    return leader_worker_set(), "LeaderWorkerSet", group_pods()


KINDS = [sts_target, lws_target]


def name_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


@pytest.mark.parametrize("make", KINDS)
def test_a_gpu_move_profiles_the_new_product(make: Any) -> None:
    obj, kind, pods = make()
    h = Harness()
    h.add(obj)
    h.add(profile_body())
    h.pods = pods
    (first,) = h.profile_once()["tables"]
    assert first["gpuProduct"] == H100
    h.pods = [dataclasses.replace(p, node="n2") for p in pods]  # every pod on H200
    h.tick()
    status = h.run_pass()
    assert status["currentRun"]["gpuProduct"] == H200, status
    h.finish()
    status = h.settle()
    assert {t["gpuProduct"] for t in status["tables"]} == {H100, H200}
    (target,) = status["targets"]
    assert (target["kind"], target["gpuProduct"], target["state"]) == (kind, H200, "Live")


@pytest.mark.parametrize("make", KINDS)
def test_two_profiles_selecting_one_workload_one_serves_it(make: Any) -> None:
    obj, kind, pods = make()
    h = Harness()
    h.add(obj)
    h.add(profile_body("p"))
    h.add(profile_body("q"))
    h.pods = pods
    h.profile_once("p")
    h.tick()
    (other,) = h.run_pass("q")["targets"]
    assert (other["kind"], other["state"], other["reason"]) == (kind, "Refused", "Conflict")
    assert h.kube.obj(kind, name_of(obj))["metadata"]["annotations"][L.ANNOTATION_OWNER] == "p"


def annotate_only(obj: dict[str, Any], mounted_everywhere: bool = True) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    found = workloads.templates(obj)
    for i, (_, template) in enumerate(found):
        pod = template["spec"]
        (server,) = pod["containers"]
        server["args"] = [*server["args"], *FLAG]
        if mounted_everywhere or i == 0:
            pod["volumes"] = [{"name": "git-table", "configMap": {"name": STABLE}}]
            server["volumeMounts"] = [{"name": "git-table", "mountPath": "/etc/sps/table"}]
    return obj


@pytest.mark.parametrize("make", KINDS)
def test_annotate_only_writes_only_the_annotation_into_every_template(make: Any) -> None:
    obj, kind, pods = make()
    h = Harness()
    h.add(annotate_only(obj))
    h.add(profile_body(**ANNOTATE_ONLY))
    h.pods = pods
    status = h.profile_once()
    (target,) = status["targets"]
    assert (target["kind"], target["state"]) == (kind, "Live"), target
    (body,) = [a for a in h.kube.applied if a["kind"] == kind]
    for path, template in workloads.templates(body):
        assert set(template) == {"metadata"}, (path, template)  # nothing but the annotation
    for _, template in workloads.templates(h.kube.obj(kind, name_of(obj))):
        assert template["metadata"]["annotations"][L.ANNOTATION_TABLE_HASH] == target["hash"]


def test_annotate_only_needs_the_stable_table_mounted_on_every_rank() -> None:
    h = Harness()
    h.add(annotate_only(leader_worker_set(), mounted_everywhere=False))
    h.add(profile_body(**ANNOTATE_ONLY))
    h.pods = group_pods()
    h.tick()
    (target,) = h.run_pass()["targets"]
    assert (target["state"], target["reason"]) == ("Refused", "TableNotMounted"), target


@pytest.mark.parametrize("make", KINDS)
def test_deleting_the_profile_releases_the_table_the_workload_mounts(make: Any) -> None:
    obj, kind, pods = make()
    h = Harness()
    h.add(obj)
    h.add(profile_body())
    h.pods = pods
    (target,) = h.profile_once()["targets"]
    meta = h.kube.obj("SpsProfile", "p")["metadata"]
    released = release(h.kube, NS, "p", meta["uid"])
    assert target["table"] in released
    cm = h.kube.obj("ConfigMap", target["table"])
    assert cm["metadata"]["labels"][L.LABEL_RELEASED] == "true"
    # The workload's claim is removed; its template keeps serving the table.
    workload = h.kube.obj(kind, name_of(obj))
    assert L.ANNOTATION_OWNER not in (workload["metadata"].get("annotations") or {})
    hashes = {t["metadata"]["annotations"][L.ANNOTATION_TABLE_HASH]
              for _, t in workloads.templates(workload)}  # fmt: skip
    assert hashes == {target["hash"]}


@pytest.mark.parametrize("make", KINDS)
def test_the_operators_caches_find_the_workload_its_pods_and_profile(make: Any) -> None:
    """The pass as the operator runs it, on its kopf indexes (an index per kind)."""
    obj, kind, pods = make()
    h = Harness()
    h.add(obj)
    h.add(profile_body())
    h.pods = pods
    h.tick()
    h.run_cached_pass()
    (target,) = h.status()["targets"]
    assert (target["kind"], target["gpuProduct"]) == (kind, H100), target
    assert h.status()["currentRun"]["gpuProduct"] == H100


def test_an_lws_without_a_separate_leader_serves_its_one_template() -> None:
    lws = leader_worker_set(size=1)
    del lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"] = [
        container(args=[*SERVER_ARGS])
    ]
    h = Harness()
    h.add(lws)
    h.add(profile_body())
    h.pods = group_pods(size=1)
    (target,) = h.profile_once()["targets"]
    assert target["state"] == "Live", target
    lwt = h.kube.obj("LeaderWorkerSet", "big")["spec"]["leaderWorkerTemplate"]
    assert "leaderTemplate" not in lwt
    assert lwt["workerTemplate"]["metadata"]["annotations"][L.ANNOTATION_TABLE_HASH]

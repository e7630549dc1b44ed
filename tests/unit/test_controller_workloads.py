"""The workload-kind adapter (policies/workloads.py): per kind where its templates are,
which pods are its own, when its roll is done, how much of it a roll takes down, its
progress bound and what in its update strategy waits for a person; and that no object a
tenant writes makes it raise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sps_operator.controller.kube import workload_apply
from sps_operator.controller.policies import deployments, workloads
from sps_operator.controller.policies.placement import PodInfo


def stateful_set(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "ns", "generation": 2, "resourceVersion": "7"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": []}},
            **spec,
        },
        "status": {
            "observedGeneration": 2,
            "replicas": 2,
            "readyReplicas": 2,
            "updatedReplicas": 2,
            "currentRevision": "r2",
            "updateRevision": "r2",
        },
    }


def server(args: list[str]) -> dict[str, Any]:
    return {"name": "sglang", "image": "img", "args": args}


def lws(leader: bool = True, **spec: Any) -> dict[str, Any]:
    lwt: dict[str, Any] = {
        "size": 2,
        "workerTemplate": {"spec": {"containers": [server(["--node-rank", "1"])]}},
    }
    if leader:
        lwt["leaderTemplate"] = {"spec": {"containers": [server(["--node-rank", "0"])]}}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "big", "namespace": "ns", "generation": 3, "resourceVersion": "9"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": lwt, **spec},
        "status": {
            "observedGeneration": 3,
            "replicas": 2,
            "readyReplicas": 2,
            "updatedReplicas": 2,
        },
    }


def test_each_kind_names_its_api_and_templates() -> None:
    assert workloads.kind_of(stateful_set()).api_version == "apps/v1"
    assert workloads.kind_of(lws()).plural == "leaderworkersets"
    assert workloads.kind_of({"kind": "Pod"}).kind == "Deployment"  # never raises
    assert [p for p, _ in workloads.templates(stateful_set())] == [("spec", "template")]
    assert [p[-1] for p, _ in workloads.templates(lws())] == ["leaderTemplate", "workerTemplate"]
    # No separate leader: the worker template is the one (and the server's).
    (only,) = workloads.templates(lws(leader=False))
    assert only[0][-1] == "workerTemplate"
    assert workloads.server_template(lws())["spec"]["containers"][0]["args"][1] == "0"
    assert workloads.group_size(lws()) == 2 and workloads.group_size(stateful_set()) == 1


def test_an_lws_selects_its_pods_by_its_name_label_every_group() -> None:
    name = workloads.LWS_NAME_LABEL
    pods = [
        PodInfo("big-0", {name: "big", workloads.LWS_WORKER_INDEX_LABEL: "0"}, "n1", ready=True),
        PodInfo("big-0-1", {name: "big", workloads.LWS_WORKER_INDEX_LABEL: "1"}, "n2", ready=True),
        PodInfo("other-0", {name: "other"}, "n1", ready=True),
    ]
    assert [p.name for p in deployments.target_pods(lws(), pods)] == ["big-0", "big-0-1"]
    # Live needs every ready pod of every group: a worker without the hash says no.
    pods = [
        p if p.name != "big-0" else PodInfo(p.name, p.labels, p.node, ready=True, table_hash="h")
        for p in pods
    ]
    assert not deployments.every_ready_pod_runs(lws(), pods, "h")


def test_rolled_out_per_kind() -> None:
    assert workloads.rolled_out(stateful_set())
    behind = stateful_set()
    behind["status"]["updateRevision"] = "r3"  # pods still on r2
    assert not workloads.rolled_out(behind)
    unobserved = stateful_set()
    unobserved["metadata"]["generation"] = 3
    assert not workloads.rolled_out(unobserved)
    # OnDelete: the controller never moves currentRevision on; every pod updated and ready
    # is rolled out.
    deleted = stateful_set(updateStrategy={"type": "OnDelete"})
    deleted["status"]["currentRevision"] = "r1"
    assert workloads.rolled_out(deleted)
    deleted["status"]["updatedReplicas"] = 1
    assert not workloads.rolled_out(deleted)
    assert workloads.rolled_out(lws())
    updating = lws()
    updating["status"]["conditions"] = [{"type": "UpdateInProgress", "status": "True"}]
    assert not workloads.rolled_out(updating)
    short = lws()
    short["status"]["readyReplicas"] = 1
    assert not workloads.rolled_out(short)


def test_unavailable_budget_per_kind() -> None:
    assert workloads.max_unavailable(stateful_set(), 4) == 1  # one pod at a time
    wide = stateful_set(updateStrategy={"rollingUpdate": {"maxUnavailable": "50%"}})
    assert workloads.max_unavailable(wide, 4) == 2
    assert workloads.max_unavailable(lws(), 4) == 1  # LWS's default: one group
    surge = lws(
        rolloutStrategy={"rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 0}}
    )
    assert workloads.max_unavailable(surge, 4) == 0
    recreate = {"kind": "Deployment", "spec": {"strategy": {"type": "Recreate"}}}
    assert workloads.max_unavailable(recreate, 3) is None


def test_progress_bound_is_the_admins_for_kinds_without_a_deadline() -> None:
    dep = {"kind": "Deployment", "spec": {"progressDeadlineSeconds": 120}}
    assert workloads.progress_deadline_seconds(dep, 900) == 120
    assert workloads.progress_deadline_seconds(stateful_set(), 900) == 900
    assert workloads.progress_deadline_seconds(lws(), 900) == 900
    assert not workloads.deadline_exceeded(stateful_set())


def test_what_waits_for_a_person() -> None:
    on_delete = stateful_set(updateStrategy={"type": "OnDelete"})
    assert "waits for you to delete them" in str(workloads.roll_waits(on_delete))
    parted = stateful_set(
        updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}
    )
    assert "partition is 1" in str(workloads.roll_waits(parted))
    assert workloads.roll_waits(stateful_set()) is None
    lws_parted = lws(rolloutStrategy={"rollingUpdateConfiguration": {"partition": 2}})
    assert "partition is 2" in str(workloads.roll_waits(lws_parted))
    # Status says so while the roll is not done.
    on_delete["status"]["updatedReplicas"] = 0  # its pods still run the old template
    blockers = deployments.rollout_blockers(on_delete, [], "h")
    assert blockers is not None and "OnDelete" in blockers


def test_inject_writes_every_template_with_its_own_args() -> None:
    body = workload_apply.inject_apply(
        lws(), "sglang", "t-cm", "h1", "/etc/sps/table.json", ["--node-rank", "0"]
    )
    assert (body["apiVersion"], body["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    lwt = body["spec"]["leaderWorkerTemplate"]
    leader, worker = lwt["leaderTemplate"], lwt["workerTemplate"]
    for template in (leader, worker):
        assert template["metadata"]["annotations"]["sps.dev/table-hash"] == "h1"
        assert template["spec"]["volumes"][0]["configMap"]["name"] == "t-cm"
    assert leader["spec"]["containers"][0]["args"][:2] == ["--node-rank", "0"]
    assert worker["spec"]["containers"][0]["args"][:2] == ["--node-rank", "1"]
    assert worker["spec"]["containers"][0]["args"][-2:] == [
        "--speculative-dspark-sps-table-path",
        "/etc/sps/table.json",
    ]
    # Without a leader template, none is created by the apply.
    body = workload_apply.inject_apply(lws(leader=False), "sglang", "t", "h", "/etc/sps/t.json", [])
    assert "leaderTemplate" not in body["spec"]["leaderWorkerTemplate"]
    sts = workload_apply.annotate_apply(stateful_set(), "t", "h")
    assert (sts["kind"], sts["metadata"]["resourceVersion"]) == ("StatefulSet", "7")
    assert sts["spec"]["template"]["metadata"]["annotations"]["sps.dev/table"] == "t"


# Anything JSON can hold, where the adapter reads.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
FIELDS = st.dictionaries(
    st.sampled_from(
        [
            "replicas",
            "selector",
            "template",
            "leaderWorkerTemplate",
            "strategy",
            "updateStrategy",
            "rolloutStrategy",
            "progressDeadlineSeconds",
        ]
    ),
    JSON,
    max_size=5,
)
WORKLOADS = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["Deployment", "StatefulSet", "LeaderWorkerSet", "x", None]),
        "metadata": st.one_of(JSON, st.fixed_dictionaries({"name": JSON, "generation": JSON})),
        "spec": st.one_of(JSON, FIELDS),
        "status": st.one_of(
            JSON,
            st.dictionaries(
                st.sampled_from(
                    [
                        "observedGeneration",
                        "replicas",
                        "readyReplicas",
                        "updatedReplicas",
                        "availableReplicas",
                        "conditions",
                        "updateRevision",
                    ]
                ),
                JSON,
                max_size=5,
            ),
        ),
    }
)


@settings(max_examples=300, deadline=None)
@given(WORKLOADS, st.integers(min_value=0, max_value=10_000))
def test_no_workload_a_tenant_writes_makes_the_adapter_raise(obj: Any, count: int) -> None:
    workloads.templates(obj)
    workloads.server_template(obj)
    selector = workloads.pod_selector(obj)
    assert selector is None or isinstance(selector, Mapping)
    assert isinstance(workloads.rolled_out(obj), bool)
    budget = workloads.max_unavailable(obj, count)
    assert budget is None or budget >= 0
    assert workloads.progress_deadline_seconds(obj, 600) >= 0
    assert isinstance(workloads.deadline_exceeded(obj), bool)
    workloads.roll_waits(obj)
    workloads.controller_failure(obj)
    assert workloads.replicas(obj) >= 0 and workloads.group_size(obj) >= 1


def test_borrow_replica_guards_every_kind_as_it_guards_a_deployment() -> None:
    """A StatefulSet lends a replica (its highest ordinal), a LeaderWorkerSet a whole group:
    each guard of the Deployment path holds for both (issue 34 §1)."""
    from sps_operator.api.spec import CapacitySpec
    from sps_operator.controller.policies.borrow import borrow_refusal

    capacity = CapacitySpec.model_validate({"mode": "BorrowReplica"})
    for make, pods in ((stateful_set, {"app": "db"}),
                       (lws, {workloads.LWS_NAME_LABEL: "big"})):  # fmt: skip
        obj = make()
        name, kind = obj["metadata"]["name"], obj["kind"]
        assert borrow_refusal(obj, capacity, [], []) is None, kind
        hpa = {"metadata": {"name": "auto"},
               "spec": {"scaleTargetRef": {"kind": kind, "name": name}}}  # fmt: skip
        assert "HorizontalPodAutoscaler auto" in str(borrow_refusal(obj, capacity, [], [hpa]))
        other = {"metadata": {"name": "auto"},
                 "spec": {"scaleTargetRef": {"kind": "Deployment", "name": name}}}  # fmt: skip
        assert borrow_refusal(obj, capacity, [], [other]) is None  # another kind's HPA
        pdb = {"metadata": {"name": "keep"}, "spec": {"selector": {"matchLabels": pods}},
               "status": {"disruptionsAllowed": 0}}  # fmt: skip
        assert "PodDisruptionBudget keep" in str(borrow_refusal(obj, capacity, [pdb], []))
        gitops = make()
        gitops["metadata"]["managedFields"] = [
            {"manager": "argocd-controller", "operation": "Apply",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}}]  # fmt: skip
        assert "argocd-controller" in str(borrow_refusal(gitops, capacity, [], []))
        rolling = make()
        rolling["status"]["updatedReplicas"] = 1
        assert "rolling out" in str(borrow_refusal(rolling, capacity, [], []))
        one = make(replicas=1)
        one["status"].update(replicas=1, readyReplicas=1, updatedReplicas=1)
        unit = "group" if kind == "LeaderWorkerSet" else "replica"
        assert f"single {unit}" in str(borrow_refusal(one, capacity, [], []))
        downtime = CapacitySpec.model_validate({"mode": "BorrowReplica", "allowDowntime": True})
        assert borrow_refusal(one, downtime, [], []) is None
        floor = CapacitySpec.model_validate({"mode": "BorrowReplica", "minAvailable": 2})
        assert f"2 ready {unit}s" in str(borrow_refusal(obj, floor, [], []))
        queued = make()
        queued["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
        assert "managed by Kueue" in str(borrow_refusal(queued, capacity, [], []))


def test_a_pdb_over_a_leader_worker_sets_workers_alone_blocks_its_borrow() -> None:
    from sps_operator.api.spec import CapacitySpec
    from sps_operator.controller.policies.borrow import borrow_refusal

    obj = lws()
    obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] = {
        "labels": {"role": "worker"}
    }
    pdb = {"metadata": {"name": "workers"}, "spec": {"selector": {"matchLabels": {
        "role": "worker"}}}, "status": {"disruptionsAllowed": 0}}  # fmt: skip
    capacity = CapacitySpec.model_validate({"mode": "BorrowReplica"})
    assert "PodDisruptionBudget workers" in str(borrow_refusal(obj, capacity, [pdb], []))
    assert borrow_refusal(obj, capacity, [], []) is None

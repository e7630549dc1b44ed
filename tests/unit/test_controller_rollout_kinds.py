"""The rollout reconciler onto a StatefulSet and a LeaderWorkerSet: the table goes into
every template (both of a group: every rank loads the same bytes), Live when every ready
pod of every group carries it, a StatefulSet's OnDelete roll says it waits for the user,
a roll that does not complete within the admin's bound goes back to the previous table;
a group whose ranks are not one server is refused."""

from __future__ import annotations

import copy
from typing import Any

from controller_harness import NS, SERVER_ARGS, Harness, container, profile_body, rounds, started

from sps_operator.api.result import build_patch
from sps_operator.controller.passes.state import Settings
from sps_operator.controller.policies import workloads
from sps_operator.controller.policies.placement import PodInfo

FLAG = "--speculative-dspark-sps-table-path"


def stateful_set(name: str = "db", **spec: Any) -> dict[str, Any]:
    pod_labels = {"app": "sglang", "sts": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "sglang"}},
        "spec": {
            "replicas": 2,
            "serviceName": name,
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {"containers": [container()]},
            },
            **spec,
        },
        "status": {
            "observedGeneration": 1,
            "replicas": 2,
            "readyReplicas": 2,
            "updatedReplicas": 2,
        },
    }


def leader_worker_set(
    name: str = "big", size: int = 2, worker_args: list[str] | None = None
) -> dict[str, Any]:
    group = ["--nnodes", str(size), "--dist-init-addr", "$(LWS_LEADER_ADDRESS):5000"]
    leader = container(args=[*SERVER_ARGS, *group, "--node-rank", "0"])
    worker = container(
        args=worker_args or [*SERVER_ARGS, *group, "--node-rank", "$(LWS_WORKER_INDEX)"]
    )
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "sglang"}},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": {"spec": {"containers": [leader]}},
                "workerTemplate": {"spec": {"containers": [worker]}},
            },
        },
        "status": {
            "observedGeneration": 1,
            "replicas": 1,
            "readyReplicas": 1,
            "updatedReplicas": 1,
        },
    }


def sts_pods(name: str = "db", count: int = 2) -> list[PodInfo]:
    labels = {"app": "sglang", "sts": name}
    return [PodInfo(f"{name}-{i}", labels, "n1", ready=True) for i in range(count)]


def group_pods(name: str = "big", size: int = 2) -> list[PodInfo]:
    return [
        PodInfo(
            f"{name}-0" + (f"-{i}" if i else ""),
            {workloads.LWS_NAME_LABEL: name, workloads.LWS_WORKER_INDEX_LABEL: str(i)},
            "n1",
            ready=True,
        )
        for i in range(size)
    ]


def server_args(template: dict[str, Any]) -> list[str]:
    return list(template["spec"]["containers"][0]["args"])


def served(template: dict[str, Any], table: str) -> bool:
    volumes = template["spec"].get("volumes") or []
    return (
        template["metadata"]["annotations"]["sps.dev/table"] == table
        and any((v.get("configMap") or {}).get("name") == table for v in volumes)
        and FLAG in server_args(template)
    )


def test_a_stateful_set_gets_its_table_live_and_status_names_its_kind() -> None:
    h = Harness()
    h.add(stateful_set())
    h.add(profile_body())
    h.pods = sts_pods()
    status = h.profile_once()
    (target,) = status["targets"]
    assert (target["deployment"], target["kind"], target["state"]) == (
        "db",
        "StatefulSet",
        "Live",
    ), target
    sts = h.kube.obj("StatefulSet", "db")
    assert served(sts["spec"]["template"], target["table"])
    assert sts["metadata"]["annotations"]["sps.dev/owner"] == "p"  # claimed as its own
    assert [a["kind"] for a in h.kube.applied if a["kind"] != "ConfigMap"] == ["StatefulSet"]


def test_an_on_delete_stateful_set_says_the_roll_waits_for_the_users_deletes() -> None:
    h = Harness()
    h.add(stateful_set(updateStrategy={"type": "OnDelete"}))
    h.add(profile_body())
    h.pods = sts_pods()
    h.kube.instant_rollout = False
    h.tick()
    h.run_pass()
    h.finish()
    status = h.settle()
    (target,) = status["targets"]
    assert target["state"] == "Rolling" and target["reason"] == "RolloutBlocked", target
    assert "OnDelete" in target["message"] and "delete" in target["message"]
    # Hours later it has not failed: it waits for the user, not for a deadline.
    h.tick(7200)
    (target,) = h.run_pass()["targets"]
    assert target["state"] == "Rolling" and not h.status().get("lastFailure")


def test_a_stateful_set_roll_past_the_admins_bound_goes_back_to_the_previous_table() -> None:
    h = Harness(
        settings=Settings(gpu_debounce_seconds=0, isolate_fits=False, workload_progress_seconds=300)
    )
    h.add(stateful_set())
    h.add(profile_body(refresh={"token": "a"}))
    h.pods = sts_pods()
    (first,) = h.profile_once()["tables"]
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.kube.instant_rollout = False
    started(h)
    h.finish(result=build_patch(status="succeeded", rounds=rounds(scale=1.5)))
    (second,) = h.settle()["tables"]
    sts = h.kube.obj("StatefulSet", "db")
    assert (
        sts["spec"]["template"]["metadata"]["annotations"]["sps.dev/table-hash"] == second["hash"]
    )
    h.tick(200)
    assert not h.run_pass().get("lastFailure")  # within the bound: still rolling
    h.tick(200)
    status = h.run_pass()
    assert status["lastFailure"]["reason"] == "RolloutFailed", status
    assert "StatefulSet db" in status["lastFailure"]["message"]
    assert status["rejectedTable"]["hash"] == second["hash"]
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations["sps.dev/table-hash"] == first["hash"]


def test_a_leader_worker_set_gets_one_table_in_both_templates_live_on_every_rank() -> None:
    h = Harness()
    h.add(leader_worker_set())
    h.add(profile_body())
    h.pods = group_pods()
    h.pods_follow_templates = True
    status = h.profile_once()
    (target,) = status["targets"]
    assert (target["kind"], target["state"]) == ("LeaderWorkerSet", "Live"), target
    lwt = h.kube.obj("LeaderWorkerSet", "big")["spec"]["leaderWorkerTemplate"]
    assert served(lwt["leaderTemplate"], target["table"])
    assert served(lwt["workerTemplate"], target["table"])
    # Each rank keeps its own per-rank arguments.
    assert server_args(lwt["leaderTemplate"])[-4:-2] == ["--node-rank", "0"]
    assert "$(LWS_WORKER_INDEX)" in server_args(lwt["workerTemplate"])


def test_a_worker_without_the_table_keeps_the_group_from_live() -> None:
    h = Harness()
    h.add(leader_worker_set())
    h.add(profile_body())
    h.pods = group_pods()
    h.profile_once()
    # Someone strips the worker template's annotation: the group runs no one table, and a
    # worker pod made from it carries no hash.
    lws = h.kube.obj("LeaderWorkerSet", "big")
    worker = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    saved = copy.deepcopy(worker)
    h.kube.instant_rollout = False
    h.kube.edit(
        "LeaderWorkerSet",
        "big",
        lambda o: o["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"][
            "annotations"
        ].clear(),
    )
    h.tick()
    (target,) = h.run_pass()["targets"]
    assert target["state"] != "Live", target
    # The pass writes the table back into the worker template.
    worker = h.kube.obj("LeaderWorkerSet", "big")["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert worker["metadata"]["annotations"] == saved["metadata"]["annotations"]


def test_a_group_whose_ranks_are_not_one_server_is_refused() -> None:
    h = Harness()
    other = [*SERVER_ARGS, "--nnodes", "2", "--tp-size", "8", "--node-rank", "1"]
    h.add(leader_worker_set(worker_args=other))
    h.add(profile_body())
    h.pods = group_pods()
    h.tick()
    (target,) = h.run_pass()["targets"]
    assert (target["state"], target["reason"]) == ("Refused", "GroupMismatch"), target
    assert "tp" in target["message"]
    assert h.kube.obj("LeaderWorkerSet", "big")["metadata"].get("annotations") is None


def test_nnodes_must_be_the_group_size() -> None:
    h = Harness()
    h.add(leader_worker_set(size=2))
    h.kube.edit(
        "LeaderWorkerSet", "big", lambda o: o["spec"]["leaderWorkerTemplate"].update(size=4)
    )
    h.add(profile_body())
    h.pods = group_pods(size=4)
    h.tick()
    (target,) = h.run_pass()["targets"]
    assert target["reason"] == "GroupMismatch" and "--nnodes 2" in target["message"], target


def test_a_group_whose_workers_ask_for_other_gpus_than_the_leader_is_refused() -> None:
    """redteam4's lead: the clone gives every rank the leader's GPUs, and a group lent to a
    clone frees what its own ranks ask for; a leader asking for 8 and workers for 1 made a
    lent group free less than its clone needs, the shared pool held meanwhile."""
    h = Harness()
    h.add(leader_worker_set())

    def workers_ask_for_one(o: dict[str, Any]) -> None:
        worker = o["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
        worker["resources"] = {"limits": {"nvidia.com/gpu": "1"}}

    h.kube.edit("LeaderWorkerSet", "big", workers_ask_for_one)
    h.add(profile_body())
    h.pods = group_pods()
    h.tick()
    (target,) = h.run_pass()["targets"]
    assert (target["state"], target["reason"]) == ("Refused", "GroupMismatch"), target
    assert "asks for 1 GPUs" in target["message"], target


def test_target_kinds_narrows_the_selection_and_an_uninstalled_kind_says_so_at_once() -> None:
    """spec.targetKinds: only the kinds named are targets; a named kind the cluster does
    not serve (no LeaderWorkerSet CRD) makes the profile Degraded in its first pass, and
    the kinds it does serve are served meanwhile."""
    h = Harness()
    h.add(stateful_set())
    h.add(leader_worker_set())
    h.add(profile_body(targetKinds=["StatefulSet"]))
    h.pods = sts_pods() + group_pods()
    h.tick()
    status = h.run_pass()
    assert [(t["kind"], t["deployment"]) for t in status["targets"]] == [("StatefulSet", "db")]
    assert h.condition("Degraded")[0] == "False"

    h.kube.lws_installed = False
    h.kube.obj("SpsProfile", "p")["spec"]["targetKinds"] = ["StatefulSet", "LeaderWorkerSet"]
    h.tick()
    status = h.run_pass()
    degraded = h.condition("Degraded")
    assert degraded[:2] == ("True", "KindNotInstalled"), degraded
    assert "LeaderWorkerSet" in degraded[2] and "spec.targetKinds" in degraded[2]
    assert [t["kind"] for t in status["targets"]] == ["StatefulSet"]
    # The kinds served go on: the StatefulSet's table goes live.
    h.finish()
    h.settle()
    (target,) = h.status()["targets"]
    assert target["state"] == "Live", target
    assert h.condition("Degraded")[1] == "KindNotInstalled"

    # The default asks nothing of discovery and says nothing: it takes what is served.
    del h.kube.obj("SpsProfile", "p")["spec"]["targetKinds"]
    h.tick()
    h.run_pass()
    assert h.condition("Degraded")[0] == "False"


def test_a_stateful_set_named_like_a_selected_deployment_is_left_alone_and_says_why() -> None:
    from controller_harness import deployment

    h = Harness()
    h.add(deployment(name="db"))
    h.add(stateful_set(name="db"))
    h.add(profile_body())
    h.place("db")
    h.profile_once()
    targets = h.status()["targets"]
    assert [(t["kind"], t["state"]) for t in targets] == [
        ("Deployment", "Live"),
        ("StatefulSet", "Refused"),
    ], targets
    assert "of the same name" in targets[1]["message"]
    template = h.kube.obj("StatefulSet", "db")["spec"]["template"]
    assert "annotations" not in (template.get("metadata") or {})

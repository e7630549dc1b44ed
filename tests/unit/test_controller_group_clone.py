"""The profiling clone of a multi-node server (issue 34 §2): one Indexed Job of N pods and
a headless Service; every cost input the target's, the per-pod flags the Job's own."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
from typing import Any

import pytest
from controller_harness import NS, Harness, deployment, profile_body, started
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.client.rest import ApiException
from test_controller_builders import PROFILE, spec

from sps_operator.api import labels as L
from sps_operator.api.kinds import RunPhase
from sps_operator.api.result import build_patch
from sps_operator.controller.kube import builders, group_clone, names
from sps_operator.controller.policies import job_policy as policy
from sps_operator.controller.policies.cost import job_gpus, pod_gpus
from sps_operator.controller.policies.placement import PodInfo
from sps_operator.controller.sglang.serverconfig import TABLE_PATH_FLAG, parse_server

LWS_ARGS = [
    "--model-path", "sim/dspark-8b", "--tp", "4", "--speculative-algorithm", "DSPARK",
    "--speculative-dspark-block-size", "3", "--cuda-graph-max-bs", "16",
    "--max-running-requests", "16", "--speculative-dspark-sps-table-path", "/sps/table.json",
    "--host", "0.0.0.0", "--port", "30000", "--nnodes", "2",
    "--node-rank", "$(LWS_WORKER_INDEX)", "--dist-init-addr", "$(LWS_LEADER_ADDRESS):5000",
]  # fmt: skip


def group_pod(args: list[str], gpus: int = 2) -> dict[str, Any]:
    """A LeaderWorkerSet leader's pod template as SGLang's Helm chart writes it."""
    return {
        "containers": [
            {
                "name": "sglang",
                "image": "lmsysorg/sglang:v1",
                "command": ["python3", "-m", "sglang.launch_server"],
                "args": args,
                "env": [
                    {"name": "SGLANG_RAGGED_VERIFY_MODE", "value": "compact"},
                    {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
                    {"name": "HOST_TAG", "value": "$(LWS_LEADER_ADDRESS)-x"},
                ],
                "readinessProbe": {"httpGet": {"path": "/health", "port": 30000}},
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ]
    }


def group_plan(
    args: list[str] | None = None, phase: RunPhase = RunPhase.DIAGONAL, **spec_overrides: Any
) -> builders.RunPlan:
    pod = group_pod(list(args or LWS_ARGS))
    return builders.RunPlan(
        profile=PROFILE,
        spec=spec(**spec_overrides),
        run="llama-abc",
        phase=phase,
        gpu_product="NVIDIA-H100-80GB-HBM3",
        fingerprint="f" * 16,
        target_pod_spec=pod,
        server_container="sglang",
        server=parse_server(pod["containers"][0]),
        seed_table_config_map="llama-abc-seed" if phase == RunPhase.OFF_DIAGONAL else None,
    )


def server_of(job: dict[str, Any]) -> dict[str, Any]:
    pod = job["spec"]["template"]["spec"]
    return next(c for c in pod["initContainers"] if c["name"] == builders.SERVER_CONTAINER)


def flag_values(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_a_two_node_target_gets_an_indexed_job_of_two_ranks_and_a_headless_service() -> None:
    p = group_plan()
    job = builders.profiling_job(p)
    spec_ = job["spec"]
    assert spec_["completionMode"] == "Indexed"
    assert spec_["completions"] == spec_["parallelism"] == 2
    assert spec_["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    # A lost rank fails the Job at once, naming its index; no backoffLimit beside it.
    assert (spec_["backoffLimitPerIndex"], spec_["maxFailedIndexes"]) == (0, 0)
    assert "backoffLimit" not in spec_
    pod = spec_["template"]["spec"]
    service = builders.group_service(p, "uid-job")
    assert pod["subdomain"] == service["metadata"]["name"] == "sps-llama-abc"
    assert pod["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert service["spec"] == {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {"batch.kubernetes.io/job-name": "llama-abc"},
    }
    # The Job owns it (the garbage collector deletes it with the Job), not the profile.
    assert service["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "llama-abc", "uid": "uid-job",
         "controller": True}
    ]  # fmt: skip
    assert service["metadata"]["labels"][L.LABEL_RUN] == "llama-abc"
    assert service["metadata"]["labels"][L.LABEL_COMPONENT] == L.COMPONENT_GROUP_SERVICE

    server = server_of(job)
    args = server["args"]
    leader = "llama-abc-0.sps-llama-abc.serving"
    assert flag_values(args, "--nnodes") == ["2"] and flag_values(args, "--tp") == ["4"]
    assert flag_values(args, "--node-rank") == ["$(SPS_GROUP_RANK)"]
    assert flag_values(args, "--dist-init-addr") == [f"{leader}:5000"]
    assert not any("LWS_" in a for a in args)
    assert TABLE_PATH_FLAG not in args  # phase 1 starts without a table, on every rank
    # No probe: only rank 0 serves HTTP and the ranks share one template.
    assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(server)
    env = server["env"]
    assert env[0]["name"] == "SPS_GROUP_RANK"
    assert env[0]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    by_name = {e["name"]: e for e in env}
    assert by_name["LWS_LEADER_ADDRESS"]["value"] == leader
    assert by_name["LWS_WORKER_INDEX"]["value"] == "$(SPS_GROUP_RANK)"
    assert by_name["LWS_GROUP_SIZE"]["value"] == "2"
    # The target's own variables stay, after those they may use.
    names_in_order = [e["name"] for e in env]
    assert names_in_order.index("HOST_TAG") > names_in_order.index("LWS_LEADER_ADDRESS")
    assert by_name["NCCL_SOCKET_IFNAME"]["value"] == "eth0"

    (profiler,) = pod["containers"]
    assert profiler["args"][-2:] == ["--node-rank", "$(SPS_GROUP_RANK)"]
    assert {"name": "SPS_GROUP_RANK"}.items() <= profiler["env"][-1].items()
    # Every pod holds the target's GPUs: the run holds N times them.
    assert (pod_gpus(job), job_gpus(job)) == (2, 4)


def test_kueue_never_admits_part_of_a_group() -> None:
    p = dataclasses.replace(
        group_plan(),
        defaults=builders.JobDefaults(
            annotations={group_clone.KUEUE_MIN_PARALLELISM: "1", "team": "a"}
        ),
    )
    meta = builders.profiling_job(p)["metadata"]
    assert meta["annotations"] == {"team": "a"}


def test_phase_two_gives_every_rank_the_same_seed_table() -> None:
    job = builders.profiling_job(group_plan(phase=RunPhase.OFF_DIAGONAL))
    args = server_of(job)["args"]
    assert flag_values(args, TABLE_PATH_FLAG) == [f"{builders.SEED_MOUNT_DIR}/{L.TABLE_KEY}"]
    assert flag_values(args, "--node-rank") == ["$(SPS_GROUP_RANK)"]
    assert job["spec"]["template"]["spec"]["subdomain"] == "sps-llama-abc-p2"


@pytest.mark.parametrize(
    ("per_pod", "port"),
    [
        (["--node-rank=1", "--dist-init-addr=10.0.0.1:6000"], 6000),
        (["--nccl-init-addr", "head:7000", "--node-rank", "0"], 7000),
        (["--node-ra", "3", "--dist-init-addr", "$(HEAD)"], group_clone.DEFAULT_DIST_PORT),
    ],
)
def test_the_per_pod_flags_are_rewritten_however_written(per_pod: list[str], port: int) -> None:
    args = ["--model-path", "m", "--speculative-algorithm", "DSPARK", "--nnodes", "4", *per_pod]
    server = server_of(builders.profiling_job(group_plan(args)))
    assert server["args"] == [
        "--model-path", "m", "--speculative-algorithm", "DSPARK", "--nnodes", "4",
        "--node-rank", "$(SPS_GROUP_RANK)",
        "--dist-init-addr", f"llama-abc-0.sps-llama-abc.serving:{port}",
    ]  # fmt: skip


@pytest.mark.parametrize("nnodes", [None, "1"])
def test_a_single_node_server_keeps_the_one_pod_job(nnodes: str | None) -> None:
    args = ["--model-path", "m", "--speculative-algorithm", "DSPARK"]
    p = group_plan(args + (["--nnodes", nnodes] if nnodes else []))
    job = builders.profiling_job(p)
    assert p.group is None and job["spec"]["backoffLimit"] == 0
    assert not {"completionMode", "parallelism", "successPolicy"} & set(job["spec"])
    assert "subdomain" not in job["spec"]["template"]["spec"]
    assert "--node-rank" not in job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "startupProbe" in server_of(job)


def test_a_group_size_the_operator_cannot_read_is_refused_with_what_to_write() -> None:
    args = [*LWS_ARGS[:-6], "--nnodes", "$(LWS_GROUP_SIZE)"]
    with pytest.raises(ValueError, match=r"--nnodes is '\$\(LWS_GROUP_SIZE\)', not a number"):
        builders.profiling_job(group_plan(args))


def test_a_profile_name_with_a_dot_cannot_name_a_group_s_pods() -> None:
    p = dataclasses.replace(group_plan(), run="my.profile-abc")
    with pytest.raises(ValueError, match=r"without '\.'"):
        builders.profiling_job(p)


def test_external_profiling_of_a_multi_node_server_is_unchanged() -> None:
    p = group_plan(server={"source": "External", "url": "http://lead.serving.svc:30000"})
    job = builders.profiling_job(p)
    assert p.group is None and job["spec"]["backoffLimit"] == 0
    assert "completionMode" not in job["spec"]
    (profiler,) = job["spec"]["template"]["spec"]["containers"]
    assert "--node-rank" not in profiler["args"]


def test_the_admin_bounds_pods_per_run_and_gpus_per_pod() -> None:
    big = [*LWS_ARGS[:-6], "--nnodes", "9"]
    job = builders.profiling_job(group_plan(big))
    refusal = policy.size_refusal(policy.JobPolicy(), job)
    assert refusal is not None and refusal.rule == "jobPolicy.maxRunPods"
    assert "group of 9 nodes" in refusal.message and "External" in refusal.message
    assert policy.size_refusal(policy.JobPolicy(max_run_pods=9), job) is None
    wide = builders.profiling_job(group_plan())
    refusal = policy.size_refusal(policy.JobPolicy(max_gpus_per_pod=1), wide)
    assert refusal is not None and refusal.rule == "jobPolicy.maxGpusPerPod"
    assert "2 GPUs" in refusal.message
    # job_refusal, the check every run passes, applies them.
    assert policy.job_refusal(
        policy.JobPolicy(max_run_pods=1),
        wide,
        spec=group_plan().spec,
        default_labels={},
        default_priority_class=None,
    ) == policy.size_refusal(policy.JobPolicy(max_run_pods=1), wide)


# ----------------------------------------------------------------------------- property

COST_FLAGS = st.fixed_dictionaries(
    {},
    optional={
        "--tp": st.sampled_from(["2", "4", "8", "16"]),
        "--dp": st.sampled_from(["1", "2"]),
        "--ep-size": st.sampled_from(["1", "8"]),
        "--cuda-graph-max-bs": st.sampled_from(["16", "64"]),
        "--max-running-requests": st.sampled_from(["16", "32"]),
    },
)
PER_POD = st.lists(
    st.sampled_from(
        [
            ["--node-rank", "$(LWS_WORKER_INDEX)"],
            ["--node-rank=2"],
            ["--dist-init-addr", "$(LWS_LEADER_ADDRESS):5000"],
            ["--dist-init-addr=head.ns:20000"],
            ["--nccl-init-addr", "x:1"],
        ]
    ),
    max_size=3,
)


def cost_inputs(container: dict[str, Any]) -> list[tuple[str, Any]]:
    """The flags a step's cost depends on, as SGLang reads them (per-pod ones and the
    table path apart)."""
    skip = group_clone.PER_POD_FLAGS | {TABLE_PATH_FLAG}
    return [(f.flag, f.value) for f in parse_server(container).flags if f.flag not in skip]


@settings(max_examples=60, deadline=None)
@given(
    nnodes=st.integers(min_value=2, max_value=16),
    cost=COST_FLAGS,
    per_pod=PER_POD,
    order=st.randoms(use_true_random=False),
)
def test_any_group_command_gets_ranks_0_to_n_minus_1_and_the_target_s_cost_inputs(
    nnodes: int, cost: dict[str, str], per_pod: list[list[str]], order: Any
) -> None:
    words = [["--model-path", "m"], ["--speculative-algorithm", "DSPARK"]]
    words += [[k, v] for k, v in cost.items()] + per_pod + [["--nnodes", str(nnodes)]]
    order.shuffle(words)
    args = [w for pair in words for w in pair]
    p = group_plan(args)
    job = builders.profiling_job(p)
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == nnodes
    server = server_of(job)
    target = p.target_pod_spec["containers"][0]
    assert cost_inputs(server) == cost_inputs(target)
    for rank in range(nnodes):
        # What the kubelet gives rank `rank` (its completion index in SPS_GROUP_RANK).
        argv = [a.replace("$(SPS_GROUP_RANK)", str(rank)) for a in server["args"]]
        flags = {f.flag: f.value for f in parse_server({**server, "args": argv}).flags}
        assert flags["--node-rank"] == str(rank)
        assert flags["--nnodes"] == str(nnodes)
        assert flags["--dist-init-addr"].startswith("llama-abc-0.sps-llama-abc.serving:")


# ----------------------------------------------------------------------------- the run

GROUP_ARGS = ["--tp", "4", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "head:5000"]


def group_harness(gpus: int = 0) -> Harness:
    h = Harness()
    dep = deployment()
    server = dep["spec"]["template"]["spec"]["containers"][0]
    server["args"] += GROUP_ARGS
    if gpus:
        server["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    h.add(dep)
    h.add(profile_body())
    h.place()
    return h


def test_a_group_run_creates_its_service_owned_by_its_job_which_takes_it_along() -> None:
    h = group_harness()
    run = started(h)
    job = h.kube.obj("Job", run["job"], NS)
    assert job["spec"]["parallelism"] == 2
    service = h.kube.obj("Service", names.group_service(run["job"]), NS)
    assert service["metadata"]["ownerReferences"] == [
        group_clone.job_owner_reference(run["job"], job["metadata"]["uid"])
    ]
    # Its name is looked up before the Job is made; the Service follows the Job at once.
    creates = [c for c in h.kube.calls if c in ("get", "create_Job", "create_Service")]
    at = creates.index("create_Job")
    assert creates[at - 1 : at + 2] == ["get", "create_Job", "create_Service"]
    # The run fails; the next run's start deletes the old Job, and its Service goes with it.
    h.finish(result=build_patch(status="failed", message="boom"), ok=False)
    h.tick()
    h.run_pass()
    h.tick(60)
    second = h.run_pass()["currentRun"]
    assert second["job"] != run["job"]
    assert ("Job", NS, run["job"]) not in h.kube.objects
    h.kube.collect_garbage()
    assert ("Service", NS, names.group_service(run["job"])) not in h.kube.objects
    assert ("Service", NS, names.group_service(second["job"])) in h.kube.objects


def test_the_service_never_outlives_its_job_however_the_job_goes() -> None:
    """Before, the profile owned it, and only the next run's start deleted it, with the
    Job it found: a Job deleted by someone else (or with the operator down) left its
    Service behind for the profile's life."""
    h = group_harness()
    run = started(h)
    h.kube.objects.pop(("Job", NS, run["job"]))  # `kubectl delete job`, the operator down
    h.kube.collect_garbage()
    assert ("Service", NS, names.group_service(run["job"])) not in h.kube.objects


def test_a_job_whose_service_could_not_be_made_is_deleted_at_once() -> None:
    h = group_harness()
    h.kube.fail["create_Service"] = ApiException(status=500, reason="etcd timed out")
    h.tick()
    status = h.run_pass()
    assert status.get("currentRun") is None
    assert status["lastFailure"]["reason"] == "JobCreateFailed", status["lastFailure"]
    assert not h.kube.kinds("Job")  # its pods would have held their GPUs with no group


def test_a_service_the_profile_owns_from_an_older_operator_is_adopted_and_deleted() -> None:
    job = started(group_harness())["job"]  # names are deterministic: the same run again
    h = group_harness()
    profile = h.kube.obj("SpsProfile", "p", NS)["metadata"]["uid"]
    owner = builders.ProfileRef("p", NS, profile).owner_reference()
    meta = {"name": names.group_service(job), "namespace": NS, "ownerReferences": [owner]}
    h.add(group_clone.headless_service(meta, job))
    run = started(h)
    assert run["job"] == job and h.kube.kinds("Job")
    h.finish(result=build_patch(status="failed", message="boom"), ok=False)
    h.tick()
    h.run_pass()
    h.tick(60)
    h.run_pass()  # the next run's start deletes the old Job and, by hand, that Service
    assert ("Service", NS, names.group_service(job)) not in h.kube.objects


def test_a_group_run_publishes_its_table_and_costs_both_pods_gpus() -> None:
    h = group_harness(gpus=2)
    run = started(h)
    job = h.kube.obj("Job", run["job"], NS)
    uid, labels = job["metadata"]["uid"], {L.LABEL_RUN: run["name"]}
    h.pods += [
        PodInfo(f"{run['job']}-{i}-x", labels, f"n{i}", controller="Job", controller_uid=uid)
        for i in (0, 1)
    ]
    h.tick()
    h.run_pass()  # running: its clock starts
    h.tick(100)
    h.finish()
    # What the Job controller says first, once rank 0 succeeded (Complete follows).
    job["status"]["conditions"] = [{"type": "SuccessCriteriaMet", "status": "True"}]
    status = h.settle()
    (table,) = status["tables"]
    assert table["fingerprint"] == run["fingerprint"] and status.get("currentRun") is None
    # 2 pods x 2 GPUs x 101 s (100 s, and the collecting pass's tick); one pod's: 202
    assert table["gpuSeconds"] == 404.0


def test_a_service_of_that_name_that_is_not_ours_is_never_deleted() -> None:
    h = group_harness()
    run = started(h)
    name = names.group_service(run["job"])
    h.kube.objects.pop(("Service", NS, name))
    h.add({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS}})
    h.finish(result=build_patch(status="failed", message="boom"), ok=False)
    h.tick()
    h.run_pass()
    h.tick(60)
    h.run_pass()
    assert ("Service", NS, name) in h.kube.objects


def test_a_service_created_ahead_under_the_group_s_name_is_never_adopted() -> None:
    job = started(group_harness())["job"]  # names are deterministic: the same run again
    h = group_harness()
    foreign = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": names.group_service(job), "namespace": NS}}  # fmt: skip
    h.add(foreign)
    h.tick()
    status = h.run_pass()
    failure = status["lastFailure"]
    assert failure["reason"] == "NameTaken" and status.get("currentRun") is None, failure
    assert f"a Service named {names.group_service(job)} already exists" in failure["message"]
    assert ("Job", NS, job) not in h.kube.objects  # nothing runs without its Service
    assert "ownerReferences" not in h.kube.obj("Service", names.group_service(job))["metadata"]


def lose_rank(h: Harness, run: dict[str, Any], pod: PodInfo | None) -> dict[str, Any]:
    """The Job controller's part when a rank is lost: the index failed, the Job Failed."""
    job = h.kube.obj("Job", run["job"], NS)
    job["status"] = {
        "failedIndexes": "1",
        "conditions": [
            {"type": "Failed", "status": "True", "reason": "MaxFailedIndexesExceeded",
             "message": "Job has exceeded the specified maximal number of failed indexes"},
        ],
    }  # fmt: skip
    if pod is not None:
        h.pods.append(dataclasses.replace(pod, controller_uid=job["metadata"]["uid"]))
    h.tick()
    return h.run_pass()


def test_an_evicted_worker_ends_the_run_with_the_kubelet_s_words() -> None:
    h = group_harness()
    run = started(h)
    evicted = PodInfo(
        f"{run['job']}-1-abcde",
        {L.LABEL_RUN: run["name"], "batch.kubernetes.io/job-completion-index": "1"},
        "n3",
        phase="Failed",
        controller="Job",
        lost="Evicted: The node was low on resource: memory.",
    )
    status = lose_rank(h, run, evicted)
    failure = status["lastFailure"]
    assert failure["reason"] == "ProfilingFailed" and status.get("currentRun") is None
    assert "MaxFailedIndexesExceeded" in failure["message"]
    assert (
        f"the group lost rank 1 (pod {run['job']}-1-abcde): Evicted: The node was low on "
        "resource: memory." in failure["message"]
    )


def test_a_deleted_worker_ends_the_run_saying_its_pod_is_gone() -> None:
    h = group_harness()
    run = started(h)
    status = lose_rank(h, run, None)
    assert "rank 1: its pod was deleted" in status["lastFailure"]["message"]


def test_a_group_waits_while_any_of_its_pods_is_unschedulable() -> None:
    h = group_harness()
    run = started(h)
    job = h.kube.obj("Job", run["job"], NS)
    uid = job["metadata"]["uid"]
    labels = {L.LABEL_RUN: run["name"]}
    h.pods += [
        PodInfo(f"{run['job']}-0-a", labels, "n1", controller="Job", controller_uid=uid),
        PodInfo(
            f"{run['job']}-1-b",
            labels,
            None,
            controller="Job",
            controller_uid=uid,
            unschedulable="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        ),
    ]
    h.tick()
    waiting = h.run_pass()["currentRun"]["waiting"]
    assert waiting["reason"] == "WaitingForGPUs"
    assert f"pod {run['job']}-1-b of the group" in waiting["message"]
    assert "Insufficient nvidia.com/gpu" in waiting["message"]


# ----------------------------------------------------------------------------- the profiler


def test_the_profiler_on_a_worker_rank_holds_its_pod_until_sigterm() -> None:
    code = "from sps_operator.profiler.cli import main; raise SystemExit(main())"
    argv = [sys.executable, "-c", code, "run", "--base-url", "http://127.0.0.1:9", "--out",
            "/nonexistent/x.json", "--node-rank", "1"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # said once it holds: no server, no output touched
    assert "node rank 1 of a group: rank 0 profiles; holding" in line
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    # Rank 0 profiles: here it fails at once on the unreachable server's output directory.
    rank0 = subprocess.run([*argv[:-1], "0"], capture_output=True, text=True, timeout=60)
    assert rank0.returncode != 0 and "holding" not in rank0.stdout

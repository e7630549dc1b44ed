"""A profile's Job queued by the real Kueue (issue 21 §2), end to end on the bed.

The admin's `jobDefaults.labels` name the queue `profiling`; the test's own ClusterQueue
(nothing else uses it, so the bed's `gpu` queue and other tests are untouched) first holds
no GPU quota, then enough. One run goes through what a user sees:
- no LocalQueue `profiling` in the namespace: `LocalQueueMissing` naming the queue, at
  once (not after `waitTimeoutSeconds`);
- the LocalQueue, but no quota: `QueuedInKueue` with Kueue's own words from the Job's
  Workload ("insufficient quota ..."), not a generic "queued";
- a newer Job of another team with the higher WorkloadPriorityClass (`high`; the profile's
  is `low`) queues too: Kueue's visibility API puts the profile's Workload second, and
  status and `kubectl sps get -o wide` say so;
- quota for one Job: Kueue admits the higher priority first (the profile stays queued);
  once that Job is gone, it admits the profile's, it runs, the table goes live, and the
  table records the GPU seconds it took.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_env import Env, create, kubectl_sps, server_deployment, sps_profile, wait_ready

from sps_operator.constants import GPU_PRODUCT_LABEL, GPU_RESOURCE
from sps_sim.costmodel import GPU_H100, GPU_H200
from sps_testbed.kueue import (
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    KueueSetup,
    cluster_queue_manifest,
    condition,
    create_local_queue,
)
from waiting import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.slow]

QUEUE = "profiling"
WAIT_TIMEOUT = 900  # far beyond the test: no state below comes from the wait timing out


@pytest.fixture
def cluster_queue(env: Env, realnode_kueue: KueueSetup) -> Iterator[str]:
    """A ClusterQueue of this test only, with no GPU quota yet."""
    name = f"sps-e2e-{env.namespace}"[:63].rstrip("-")
    set_gpu_quota(env, name, realnode_kueue, 0)
    try:
        yield name
    finally:
        env.cluster.kubectl("delete", "clusterqueues.kueue.x-k8s.io", name, "--wait=false",
                            check=False)  # fmt: skip


def set_gpu_quota(env: Env, name: str, kueue: KueueSetup, gpus: int) -> None:
    manifest = cluster_queue_manifest(name, dict.fromkeys(kueue.flavors, gpus))
    env.cluster.kubectl("apply", "--server-side", "--field-manager=sps-e2e", "-f", "-",
                        input=json.dumps(manifest))  # fmt: skip


def waiting(env: Env, reason: str, text: str = "") -> dict[str, Any]:
    """Profiling=False with `reason` and `text` in its message."""

    def seen() -> dict[str, Any] | None:
        c = env.condition("Profiling")
        ok = (c.get("status"), c.get("reason")) == ("False", reason) and text in c["message"]
        return c if ok else None

    try:
        found: dict[str, Any] = wait_for(f"Profiling=False {reason} {text!r}", seen, timeout=90)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{env.diagnostics()}") from None
    return found


def workload(env: Env, job_uid: str) -> dict[str, Any]:
    out = env.cluster.kubectl("get", "workloads.kueue.x-k8s.io", "-n", env.namespace, "-o", "json")
    for wl in json.loads(out)["items"]:
        if any(ref.get("uid") == job_uid for ref in wl["metadata"].get("ownerReferences") or []):
            return dict(wl)
    return {}


def other_teams_job(env: Env, priority: str) -> dict[str, Any]:
    """A plain Job of one GPU of the same product in the same queue (created suspended
    for Kueue, as its webhook would make it anyway)."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"other-{priority}", "namespace": env.namespace,
                     "labels": {QUEUE_NAME_LABEL: QUEUE, PRIORITY_CLASS_LABEL: priority}},
        "spec": {"suspend": True, "backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "nodeSelector": {GPU_PRODUCT_LABEL: GPU_H100},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.invalid/none:1",
                            "resources": {"limits": {GPU_RESOURCE: "1"}}}],
        }}},
    }  # fmt: skip
    env.cluster.kubectl("apply", "-f", "-", input=json.dumps(job))
    out = env.cluster.kubectl("get", "job", job["metadata"]["name"], "-n", env.namespace,
                              "-o", "json")  # fmt: skip
    return dict(json.loads(out))


def test_e2e_kueue_queue_missing_then_no_quota_then_admitted_and_live(
    env: Env, realnode_kueue: KueueSetup, cluster_queue: str
) -> None:
    flavor = realnode_kueue.flavors[GPU_H100]
    env.operator.extra_values = [f"jobDefaults.labels.kueue\\.x-k8s\\.io/queue-name={QUEUE}"]
    capacity = {"mode": "Wait", "waitTimeoutSeconds": WAIT_TIMEOUT}
    job_spec = {"activeDeadlineSeconds": 600, "labels": {PRIORITY_CLASS_LABEL: "low"}}
    create(env, server_deployment(GPU_H100), sps_profile(capacity=capacity, job=job_spec))
    env.operator.start()

    # 1. No LocalQueue: said in the pass that sees the suspended Job.
    cond = waiting(env, "LocalQueueMissing")
    assert (
        f"names Kueue queue {QUEUE}, but this namespace has no LocalQueue {QUEUE}"
        in (cond["message"])
    ), cond
    (job,) = env.jobs()
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"][QUEUE_NAME_LABEL] == QUEUE
    assert job["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "low"  # where Kueue reads it
    run = env.profile()["status"]["currentRun"]
    assert (run["job"], run["waiting"]["reason"]) == (job["metadata"]["name"], "LocalQueueMissing")

    # 2. The LocalQueue, on a ClusterQueue without GPU quota: Kueue's words, from the
    # Workload Kueue keeps for this Job.
    create_local_queue(env.cluster, env.namespace, QUEUE, cluster_queue)
    cond = waiting(env, "QueuedInKueue", "insufficient quota")
    # Kueue's message as it wrote it, one clause per flavor of the ClusterQueue.
    said = "Kueue says QuotaReserved: couldn't assign flavors to pod set main: "
    no_quota = (
        f"insufficient quota for {GPU_RESOURCE} in flavor {flavor}, previously considered "
        "podsets requests (0) + current podset request (1) > maximum capacity (0)"
    )
    other = f"flavor {realnode_kueue.flavors[GPU_H200]} doesn't match node affinity"
    assert all(words in cond["message"] for words in (said, no_quota, other)), cond
    wl = workload(env, job["metadata"]["uid"])
    assert condition(wl, "QuotaReserved")["status"] == "False", wl.get("status")
    (row,) = json.loads(kubectl_sps(env, "get", "-o", "json"))
    assert row["state"] == "QueuedInKueue" and no_quota in row["waitingMessage"], row
    assert env.jobs()[0]["spec"]["suspend"] is True

    # 3. A newer Job with the higher WorkloadPriorityClass goes before it in the queue
    # (Kueue's order: priority, then age), as Kueue's visibility API reports it.
    high = other_teams_job(env, "high")
    cond = waiting(env, "QueuedInKueue", "position 2 in its ClusterQueue")
    assert f"(2 in LocalQueue {QUEUE})" in cond["message"], cond
    assert env.profile()["status"]["currentRun"]["waiting"]["queuePosition"] == 2
    wide = kubectl_sps(env, "get", "-o", "wide").splitlines()
    header, row = wide[0].split(), wide[1].split()
    assert header[-4:] == ["GPU-SECONDS", "ERROR-BOUND", "QUEUE", "AGE"], wide
    assert row[header.index("QUEUE") - len(header)] == "#2", wide

    # 4. Quota for one Job: Kueue admits the higher priority first, the profile waits.
    set_gpu_quota(env, cluster_queue, realnode_kueue, 1)
    wait_for(
        "Kueue admits the high-priority Job",
        lambda: (
            condition(workload(env, high["metadata"]["uid"]), "Admitted").get("status") == "True"
        ),
        timeout=60,
    )
    assert condition(workload(env, job["metadata"]["uid"]), "Admitted").get("status") != "True"
    assert env.jobs()[0]["spec"]["suspend"] is True
    env.cluster.kubectl("delete", "job", high["metadata"]["name"], "-n", env.namespace,
                        "--cascade=foreground", "--wait=true")  # fmt: skip

    # 5. Its quota back: the profile's Job is admitted, runs, and the table goes live.
    ready = wait_ready(env, timeout=240)
    assert ready["reason"] == "TableLive", ready
    wl = workload(env, job["metadata"]["uid"])
    assert condition(wl, "Admitted")["status"] == "True", wl.get("status")
    assert wl["status"]["admission"]["clusterQueue"] == cluster_queue
    status = env.profile()["status"]
    (table,) = status["tables"]
    assert (table["gpuProduct"], table["run"]) == (GPU_H100, run["name"])
    assert status.get("currentRun") is None
    # What the table cost: one GPU for as long as its Job ran (not its wait in the queue).
    assert 0 < table["gpuSeconds"] < 240, table
    (cost,) = status["cost"]
    assert (cost["gpuProduct"], cost["gpuSeconds"]) == (GPU_H100, table["gpuSeconds"])

"""What tables cost (issue 21 §3): GPU seconds of profiling Jobs and seconds of lent
replicas, in status and as counters that a leader change never counts twice."""

from __future__ import annotations

from typing import Any

from capacity_harness import BORROW, job_pod
from controller_harness import H100, NS, Harness, deployment, profile_body
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client.rest import ApiException
from test_controller_metrics import samples

from sps_operator.api.status import CostRecord
from sps_operator.controller.policies.cost import add_cost, cost_added, job_gpus
from sps_operator.controller.process.metrics import Metrics
from sps_operator.controller.reconcile.reconciler import Reconciler

GPUS = 2


def gpu_harness(**spec: Any) -> Harness:
    """The capacity harness, with a server of GPUS GPUs (the clone asks for as many)."""
    h = Harness()
    dep = deployment(resources={"limits": {"nvidia.com/gpu": str(GPUS)}})
    dep["spec"]["replicas"] = 2
    h.add(dep)
    h.kube.roll(h.kube.obj("Deployment", "server"))
    h.add(profile_body(**spec))
    h.place(count=2)
    return h


def counter(m: Metrics, name: str) -> float:
    key = (name, (("gpu_product", H100), ("namespace", NS), ("profile", "p")))
    return samples(m).get(key, 0.0)


def cost(h: Harness) -> dict[str, Any]:
    (record,) = h.status()["cost"]
    assert record["gpuProduct"] == H100
    return dict(record)


def borrow_and_run(h: Harness) -> None:
    """Borrow after 31 s of waiting (at 12:00:33), then run from 12:00:34."""
    h.tick()
    h.run_pass()
    job_pod(h)
    h.tick()
    h.run_pass()
    h.tick(31)
    assert h.run_pass()["currentRun"]["borrow"]
    job_pod(h, unschedulable=None)
    h.tick()
    assert h.run_pass()["currentRun"]["gpus"] == GPUS


def test_a_tables_gpu_seconds_and_the_lent_seconds_are_recorded_and_counted_once() -> None:
    h = gpu_harness(**BORROW)
    borrow_and_run(h)
    h.tick(100)
    h.finish()
    status = h.run_pass()
    (table,) = status["tables"]
    assert table["gpuSeconds"] == GPUS * 100  # running time only: not the 32 s of waiting
    assert cost(h)["gpuSeconds"] == GPUS * 100
    # The replica stays lent for the new table's rollout (the surge slot), then comes back.
    assert (h.status()["rolloutBorrow"] and "lentSeconds" not in h.status()["cost"][0]) or (
        cost(h)["lentSeconds"] == 0
    )
    h.settle(passes=5)
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2
    assert not h.status().get("rolloutBorrow")
    lent = cost(h)["lentSeconds"]
    assert lent >= 101  # from the borrow (12:00:33) to the give-back, after the rollout
    assert h.reconciler is not None
    m = h.reconciler.metrics
    assert counter(m, "sps_gpu_seconds_total") == GPUS * 100
    assert counter(m, "sps_replica_lent_seconds_total") == lent
    h.settle()
    assert counter(m, "sps_gpu_seconds_total") == GPUS * 100  # later passes add nothing
    assert counter(m, "sps_replica_lent_seconds_total") == lent


def test_a_preempted_job_counts_each_time_it_ran_and_not_its_wait() -> None:
    h = gpu_harness()
    h.tick()
    h.run_pass()
    job_pod(h, unschedulable=None)
    h.tick()
    h.run_pass()
    h.tick(50)
    job_pod(h)  # its pod lost its node (preempted): waiting again
    h.run_pass()
    assert h.status()["currentRun"]["gpuSeconds"] == GPUS * 50
    h.tick(1000)
    job_pod(h, unschedulable=None)
    h.run_pass()
    h.tick(30)
    h.finish()
    (table,) = h.run_pass()["tables"]
    assert table["gpuSeconds"] == GPUS * 80


def test_a_leader_change_and_a_failed_status_write_never_count_twice() -> None:
    h = gpu_harness(**BORROW)
    borrow_and_run(h)
    first = h.reconciler
    assert first is not None
    h.tick(40)
    job_pod(h)  # preempted: the first 40 s are recorded
    # The status write of that pass fails: nothing was recorded, so nothing is counted.
    h.kube.fail["patch_status"] = ApiException(status=500, reason="Internal")
    h.run_pass()
    assert counter(first.metrics, "sps_gpu_seconds_total") == 0
    assert h.status()["currentRun"].get("gpuSeconds") is None
    # The leader moves: a new replica, its own counters, continues from status.
    h.reconciler = Reconciler(h.kube, h.settings, clock=lambda: h.now)
    second = h.reconciler
    h.tick()
    h.run_pass()
    assert counter(second.metrics, "sps_gpu_seconds_total") == GPUS * 41
    job_pod(h, unschedulable=None)
    h.tick()
    h.run_pass()
    h.tick(9)
    h.finish()
    h.run_pass()
    h.reconciler = first  # and back: the old leader counts only what it writes from now
    h.settle()
    total = sum(counter(r.metrics, "sps_gpu_seconds_total") for r in (first, second))
    assert total == cost(h)["gpuSeconds"] == h.status()["tables"][0]["gpuSeconds"] == GPUS * 50
    lent = sum(counter(r.metrics, "sps_replica_lent_seconds_total") for r in (first, second))
    assert lent == cost(h)["lentSeconds"] > 0


def test_times_ahead_of_the_clock_or_far_in_the_past_add_a_bounded_cost() -> None:
    h = gpu_harness(**BORROW)
    borrow_and_run(h)
    run = h.kube.obj("SpsProfile", "p")["status"]["currentRun"]
    run["runningSince"] = "1970-01-01T00:00:00Z"  # a hand-edited status
    h.tick()
    h.finish()
    (table,) = h.run_pass()["tables"]
    bound = 3600 + 3600  # spec.job.activeDeadlineSeconds + capacity.waitTimeoutSeconds
    assert table["gpuSeconds"] == GPUS * bound


def test_job_gpus_counts_containers_and_sidecars_or_the_larger_init_container() -> None:
    def c(gpus: int, **extra: Any) -> dict[str, Any]:
        return {"name": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}, **extra}

    def job(containers: list[Any], inits: list[Any] | None = None) -> dict[str, Any]:
        pod = {"containers": containers, "initContainers": inits or []}
        return {"spec": {"template": {"spec": pod}}}

    assert job_gpus(job([c(0), {"name": "profiler"}], [c(4, restartPolicy="Always")])) == 4
    assert job_gpus(job([c(1)], [c(8)])) == 8
    assert job_gpus(job([{"resources": {"limits": {"nvidia.com/gpu": "lots"}}}])) == 0
    assert job_gpus({}) == 0


_number = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(), st.none()
)
_records = st.lists(
    st.fixed_dictionaries(
        {"gpuProduct": st.sampled_from([H100, "B", 3])},
        optional={"gpuSeconds": _number, "lentSeconds": _number},
    ),
    max_size=4,
)


@given(_records, _records)
def test_what_a_write_adds_is_never_negative_nor_infinite(before: Any, after: Any) -> None:
    for _, gpu, lent in cost_added(before, after):
        assert 0 <= gpu < float("inf") and 0 <= lent < float("inf") and (gpu or lent)


def test_add_cost_keeps_one_record_per_product_and_ignores_nothing_added() -> None:
    records = add_cost([], H100, gpu_seconds=10)
    records = add_cost(records, H100, lent_seconds=5)
    records = add_cost(records, "B", gpu_seconds=0)
    assert records == [CostRecord(gpu_product=H100, gpu_seconds=10, lent_seconds=5)]
    assert cost_added([r.to_k8s() for r in records], add_cost(records, H100, gpu_seconds=2)) == [
        (H100, 2.0, 0.0)
    ]

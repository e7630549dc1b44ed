"""Metrics and the operator's command line (no cluster)."""

from __future__ import annotations

import platform
from datetime import UTC, datetime
from pathlib import Path

from controller_harness import Harness
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sps_operator import __version__
from sps_operator.api.status import SpsProfileStatus
from sps_operator.controller.kube.builders import ProfileRef
from sps_operator.controller.main import make_clock, parse_args
from sps_operator.controller.process.metrics import Metrics

REF = ProfileRef("p", "ns", "uid")


def samples(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(generate_latest(m.registry).decode())
        for sample in family.samples
    }


def of(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, tuple(sorted({"namespace": "ns", "profile": "p", **labels}.items())))


def test_runs_started_and_finished_are_separate_counters() -> None:
    # A rate of runs_total{outcome!="started"} once mixed starts with ends; now a run is
    # counted once when it starts and once, by outcome, when it ends.
    m = Metrics()
    m.run_started(REF)
    m.run_started(REF)
    m.run_finished(REF, "succeeded", 12.5)
    m.run_finished(REF, "failed", 3.0)
    m.rollout(REF, "Inject")
    got = samples(m)
    assert got[of("sps_profiling_runs_started_total")] == 2.0
    assert got[of("sps_profiling_runs_finished_total", outcome="succeeded")] == 1.0
    assert got[of("sps_profiling_runs_finished_total", outcome="failed")] == 1.0
    assert of("sps_profiling_runs_finished_total", outcome="started") not in got
    # The histograms are per namespace: no profile label.
    assert got[("sps_profiling_duration_seconds_count", (("namespace", "ns"),))] == 2.0
    assert got[("sps_profiling_duration_seconds_sum", (("namespace", "ns"),))] == 15.5
    assert not [
        k for k in got if k[0].startswith("sps_profiling_duration") and "profile" in dict(k[1])
    ]
    assert got[of("sps_rollouts_total", mode="Inject")] == 1.0


def status(**fields: object) -> SpsProfileStatus:
    return SpsProfileStatus.model_validate(fields)


TABLE = {
    "gpuProduct": "NVIDIA-H200",
    "fingerprint": "f1",
    "configMap": "p-table-1",
    "hash": "h",
    "kind": "Diagonal",
    "profiledAt": "2026-03-01T12:00:00Z",
}
RUN = {
    "name": "p-1",
    "job": "p-1",
    "phase": "Diagonal",
    "gpuProduct": "NVIDIA-H200",
    "fingerprint": "f1",
    "target": "server",
    "trigger": "NoTable",
    "startedAt": "2026-03-01T11:00:00Z",
}


def test_status_gauges_mirror_the_status_and_go_with_it() -> None:
    m = Metrics()
    waiting = {"reason": "WaitingForGPUs", "message": "0/3 nodes", "since": "2026-03-01T11:00:05Z"}
    borrow = {"deployment": "server", "replicas": 2, "at": "2026-03-01T11:00:10Z"}
    m.status(
        REF,
        status(
            tables=[TABLE],
            currentRun={**RUN, "waiting": waiting, "borrow": borrow},
            conditions=[
                {"type": "Ready", "status": "False", "reason": "WaitingForGPUs",
                 "lastTransitionTime": "2026-03-01T11:00:05Z"},
            ],
        ),
    )  # fmt: skip
    got = samples(m)
    # A timestamp, not an age: the gauge does not tick, `time() - x` is the age.
    profiled = got[of("sps_table_profiled_timestamp_seconds", gpu_product="NVIDIA-H200")]
    assert profiled == datetime(2026, 3, 1, 12, tzinfo=UTC).timestamp()
    assert got[of("sps_run_waiting_since_timestamp_seconds", reason="WaitingForGPUs")] == (
        datetime(2026, 3, 1, 11, 0, 5, tzinfo=UTC).timestamp()
    )
    assert got[of("sps_replica_borrowed_timestamp_seconds", deployment="server")] == (
        datetime(2026, 3, 1, 11, 0, 10, tzinfo=UTC).timestamp()
    )
    # One series per condition type, labelled with its status now (not one per status).
    assert got[of("sps_profile_condition", type="Ready", status="false")] == 1.0
    assert of("sps_profile_condition", type="Ready", status="true") not in got
    assert of("sps_profile_condition", type="Ready", status="unknown") not in got

    # The wait and the borrow end, the table is gone, Ready turns True: their series go.
    m.status(
        REF,
        status(
            conditions=[{"type": "Ready", "status": "True", "reason": "TableLive",
                         "lastTransitionTime": "2026-03-01T12:00:05Z"}],
        ),
    )  # fmt: skip
    got = samples(m)
    assert not [k for k in got if k[0].startswith("sps_run_waiting_since")]
    assert not [k for k in got if k[0].startswith("sps_replica_borrowed")]
    assert not [k for k in got if k[0].startswith("sps_table_profiled")]
    assert got[of("sps_profile_condition", type="Ready", status="true")] == 1.0
    assert of("sps_profile_condition", type="Ready", status="false") not in got


def test_a_time_that_is_not_one_sets_no_gauge() -> None:
    m = Metrics()
    m.status(REF, status(tables=[{**TABLE, "profiledAt": "yesterday"}]))
    assert not [k for k in samples(m) if k[0].startswith("sps_table_profiled")]


def test_a_deleted_profiles_series_are_removed() -> None:
    m = Metrics()
    other = ProfileRef("q", "ns", "uid-2")
    for ref in (REF, other):
        m.run_finished(ref, "succeeded", 1.0)
        m.rollout(ref, "Inject")
        m.status(ref, status(tables=[TABLE]))
        m.passed(ref)
    m.gpu_wait(REF, 5.0)
    m.gpu_wait(ProfileRef("r", "other", "uid-3"), 5.0)
    m.forget("ns", "p")
    text = generate_latest(m.registry).decode()
    assert 'profile="p"' not in text
    # The namespace's histograms stay while a profile of it lives, and go with the last.
    assert 'sps_gpu_wait_seconds_count{namespace="ns"}' in text
    assert (
        'sps_table_profiled_timestamp_seconds{gpu_product="NVIDIA-H200",namespace="ns",'
        'profile="q"}' in text
    )
    m.forget("ns", "p")  # twice: nothing left, no error
    m.forget("ns", "q")
    text = generate_latest(m.registry).decode()
    assert 'namespace="ns"' not in text
    assert 'sps_gpu_wait_seconds_count{namespace="other"} 1.0' in text


def test_build_info_leader_passes_and_the_process_collectors() -> None:
    m = Metrics()
    m.leading(True)
    m.pass_done(0.2, None)
    m.pass_done(0.1, "rollout")
    m.pass_done(0.1, "not-a-step")
    got = samples(m)
    assert got[("sps_build_info", (("python_version", platform.python_version()),
                                   ("version", __version__)))] == 1.0  # fmt: skip
    assert got[("sps_leader", ())] == 1.0
    assert got[("sps_reconcile_duration_seconds_count", ())] == 3.0
    assert got[("sps_reconcile_errors_total", (("step", "rollout"),))] == 1.0
    assert got[("sps_reconcile_errors_total", (("step", "other"),))] == 1.0
    names = {name for name, _ in got}
    assert {"process_cpu_seconds_total", "python_info", "python_gc_collections_total"} <= names
    m.leading(False)
    assert samples(m)[("sps_leader", ())] == 0.0


def test_run_flags_and_injectable_clock(tmp_path: Path) -> None:
    args = parse_args(
        ["-n", "a", "--namespace", "b", "--metrics-port", "0", "--resync-seconds", "2"]
    )
    assert args.namespace == ["a", "b"] and args.metrics_port == 0 and args.resync_seconds == 2.0
    assert parse_args([]).namespace == [] and parse_args([]).gpu_debounce_seconds == 30.0
    offset = tmp_path / "offset"
    clock = make_clock(offset)
    before = clock()
    offset.write_text("3600")
    assert (clock() - before).total_seconds() >= 3600
    offset.write_text("")
    assert (clock() - before).total_seconds() < 60


async def test_the_leader_gauge_is_1_while_the_operator_acts() -> None:
    from sps_operator.controller.main import run

    m = Metrics()
    seen: list[float] = []

    async def operator(stop_flag: object) -> None:
        seen.append(samples(m)[("sps_leader", ())])

    assert await run(operator, None, None, m) == 0
    assert seen == [1.0]  # no election: this replica acts
    assert samples(m)[("sps_leader", ())] == 0.0  # stopped


def test_a_pass_that_fails_is_counted_by_its_step() -> None:
    from kubernetes.client.exceptions import ApiException

    h = Harness.with_finished_job()
    assert h.reconciler is not None
    m = h.reconciler.metrics
    passes = samples(m)[("sps_reconcile_duration_seconds_count", ())]
    h.kube.fail["create_ConfigMap"] = ApiException(status=422, reason="Invalid")
    h.tick()
    h.run_pass()
    got = samples(m)
    assert got[("sps_reconcile_duration_seconds_count", ())] == passes + 1
    assert got[("sps_reconcile_errors_total", (("step", "run"),))] == 1.0
    h.kube.fail["patch_status"] = ApiException(status=422, reason="Invalid")
    h.tick(60)
    h.run_pass()
    assert samples(m).get(("sps_reconcile_errors_total", (("step", "status"),))) == 1.0


def test_every_pass_that_reads_the_world_is_counted() -> None:
    h = Harness.one_target()
    assert h.reconciler is not None
    for _ in range(3):
        h.tick()
        h.run_pass()
    text = generate_latest(h.reconciler.metrics.registry).decode()
    assert 'sps_reconcile_passes_total{namespace="serving",profile="p"} 3.0' in text


def test_one_wait_for_gpus_is_observed_once_however_many_passes_end_it() -> None:
    """A pass that reads a status without the previous pass's write yet (another writer's
    change came between) ends the same wait again: counted once (e2e capacity saw 2)."""
    m = Metrics()
    other = ProfileRef("q", "ns", "uid-2")
    m.gpu_wait(REF, 5.0, wait="run-1@2026-12-07T10:00:00Z")
    m.gpu_wait(REF, 6.0, wait="run-1@2026-12-07T10:00:00Z")  # the same wait, again
    m.gpu_wait(other, 5.0, wait="run-1@2026-12-07T10:00:00Z")  # another profile's
    m.gpu_wait(REF, 7.0, wait="run-1@2026-12-07T10:05:00Z")  # the run waited again later
    assert samples(m)[("sps_gpu_wait_seconds_count", (("namespace", "ns"),))] == 3.0
    m.forget("ns", REF.name)
    m.gpu_wait(REF, 5.0, wait="run-1@2026-12-07T10:00:00Z")  # a new profile of that name
    assert samples(m)[("sps_gpu_wait_seconds_count", (("namespace", "ns"),))] == 4.0


def test_a_run_is_counted_started_and_finished_once_each_attempt_apart() -> None:
    m = Metrics()
    for _ in range(2):  # a pass that read the status from before the first one's write
        m.run_started(REF, run="run-1/1@2026-12-07T10:00:00Z")
        m.run_finished(REF, "failed", 3.0, run="run-1/1@2026-12-07T10:00:00Z")
    m.run_started(REF, run="run-1/2@2026-12-07T10:05:00Z")  # its next attempt
    m.run_finished(REF, "succeeded", 4.0, run="run-1/2@2026-12-07T10:05:00Z")
    got = samples(m)
    assert got[of("sps_profiling_runs_started_total")] == 2.0
    assert got[of("sps_profiling_runs_finished_total", outcome="failed")] == 1.0
    assert got[of("sps_profiling_runs_finished_total", outcome="succeeded")] == 1.0

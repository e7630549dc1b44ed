"""Metrics and the operator's command line (no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from controller_harness import Harness
from prometheus_client import generate_latest

from sps_operator.controller.builders import ProfileRef
from sps_operator.controller.main import make_clock, parse_args
from sps_operator.controller.metrics import Metrics

REF = ProfileRef("p", "ns", "uid")


def test_metrics_count_runs_durations_rollouts_and_table_age() -> None:
    m = Metrics()
    m.run_started(REF)
    m.run_finished(REF, "succeeded", 12.5)
    m.run_finished(REF, "failed", 3.0)
    m.rollout(REF, "Inject")
    now = datetime(2026, 3, 1, 12, 0, 10, tzinfo=UTC)
    m.table_age(REF, "NVIDIA-H200", "2026-03-01T12:00:00Z", now)
    m.passed(REF)
    m.passed(REF)
    text = generate_latest(m.registry).decode()
    assert 'sps_reconcile_passes_total{namespace="ns",profile="p"} 2.0' in text
    assert 'sps_profiling_runs_total{namespace="ns",outcome="succeeded",profile="p"} 1.0' in text
    assert 'sps_profiling_runs_total{namespace="ns",outcome="failed",profile="p"} 1.0' in text
    assert 'sps_profiling_duration_seconds_count{namespace="ns",profile="p"} 2.0' in text
    assert 'sps_profiling_duration_seconds_sum{namespace="ns",profile="p"} 15.5' in text
    assert 'sps_rollouts_total{mode="Inject",namespace="ns",profile="p"} 1.0' in text
    assert (
        'sps_table_age_seconds{gpu_product="NVIDIA-H200",namespace="ns",profile="p"} 10.0' in text
    )


def test_a_deleted_profiles_series_are_removed() -> None:
    m = Metrics()
    other = ProfileRef("q", "ns", "uid-2")
    now = datetime(2026, 3, 1, 12, 0, 10, tzinfo=UTC)
    for ref in (REF, other):
        m.run_finished(ref, "succeeded", 1.0)
        m.rollout(ref, "Inject")
        m.table_age(ref, "NVIDIA-H200", "2026-03-01T12:00:00Z", now)
        m.passed(ref)
    m.forget("ns", "p")
    text = generate_latest(m.registry).decode()
    assert 'profile="p"' not in text
    assert 'sps_table_age_seconds{gpu_product="NVIDIA-H200",namespace="ns",profile="q"}' in text
    m.forget("ns", "p")  # twice: nothing left, no error


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


def test_every_pass_that_reads_the_world_is_counted() -> None:
    h = Harness.one_target()
    assert h.reconciler is not None
    for _ in range(3):
        h.tick()
        h.run_pass()
    text = generate_latest(h.reconciler.metrics.registry).decode()
    assert 'sps_reconcile_passes_total{namespace="serving",profile="p"} 3.0' in text

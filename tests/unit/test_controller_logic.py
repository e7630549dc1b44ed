"""Conditions, gates, history trimming, GPU placement and how it settles."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sps_operator.api.spec import GatesSpec
from sps_operator.api.status import FitQuality
from sps_operator.controller.policies import conditions as cond
from sps_operator.controller.policies.deployments import deployment_rolled_out
from sps_operator.controller.policies.gates import check_gates, relative_change
from sps_operator.controller.policies.placement import MIXED, PodInfo, Settled, placement, settle
from sps_operator.controller.policies.selectors import matches_selector
from sps_operator.controller.profiling.history import PublishedTable, tables_to_delete
from sps_operator.tables.formats import SpsCostTable

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def test_condition_transition_time_kept_while_status_unchanged() -> None:
    cs = cond.set_condition([], "Ready", False, "Profiling", "a", T0, 1)
    later = T0 + timedelta(minutes=5)
    cs = cond.set_condition(cs, "Ready", False, "NoTable", "b", later, 2)
    assert cs[0].last_transition_time == "2026-03-01T12:00:00Z"
    assert (cs[0].reason, cs[0].message, cs[0].observed_generation) == ("NoTable", "b", 2)
    cs = cond.set_condition(cs, "Ready", True, "TableLive", "", later, 2)
    assert cs[0].last_transition_time == "2026-03-01T12:05:00Z" and cs[0].status == "True"
    cs = cond.set_condition(cs, "Stale", None, "Unknown", "", later, 2)
    assert [c.type for c in cs] == ["Ready", "Stale"] and cs[1].status == "Unknown"


def diag(sps: list[float]) -> SpsCostTable:
    return SpsCostTable([8, 16, 32], sps, 32)


def test_gates_fit_quality_and_change() -> None:
    good = FitQuality(rms_ms=0.1, r2=0.99)
    noisy = FitQuality(rms_ms=3.0, r2=0.5)
    new, live = diag([100.0, 90.0, 80.0]), diag([100.0, 90.0, 40.0])
    assert check_gates(GatesSpec(), noisy, new, live).passed
    verdict = check_gates(GatesSpec(max_rms_ms=1.0), noisy, new, None)
    assert not verdict.passed and verdict.reason == "FitQualityGateFailed"
    assert "3.000 ms exceeds gates.maxRmsMs 1 ms" in verdict.message
    assert not check_gates(GatesSpec(min_r2=0.9), noisy, new, None).passed
    assert not check_gates(GatesSpec(min_r2=0.9), FitQuality(rms_ms=0.0), new, None).passed
    assert check_gates(GatesSpec(max_rms_ms=1.0, min_r2=0.9), good, new, None).passed
    change = relative_change(new, live)
    assert change is not None and abs(change - 1.0) < 1e-9
    verdict = check_gates(GatesSpec(max_change=0.5), good, new, live)
    assert not verdict.passed and verdict.reason == "ChangeGateFailed"
    assert check_gates(GatesSpec(max_change=0.5), good, new, new).passed


def test_history_keeps_live_and_newest_per_gpu() -> None:
    tables = [
        PublishedTable("h100-a", "H100", "2026-01-01T00:00:00Z"),
        PublishedTable("h100-b", "H100", "2026-01-02T00:00:00Z"),
        PublishedTable("h100-c", "H100", "2026-01-03T00:00:00Z"),
        PublishedTable("h200-a", "H200", "2026-01-01T00:00:00Z"),
    ]
    assert tables_to_delete(tables, keep=["h100-c"], limit=2) == ["h100-a"]
    assert tables_to_delete(tables, keep=["h100-a"], limit=1) == ["h100-b", "h100-c"]
    assert tables_to_delete(tables, keep=[], limit=5) == []


def pod(name: str, node: str | None, deleting: bool = False, app: str = "srv") -> PodInfo:
    return PodInfo(name, {"app": app}, node, deleting)


NODES = {"n1": {"nvidia.com/gpu.product": "H100"}, "n2": {"nvidia.com/gpu.product": "H200"}}


def test_placement_from_pod_and_node_indexes() -> None:
    sel = {"matchLabels": {"app": "srv"}}
    one = placement(sel, [pod("a", "n1"), pod("b", None), pod("c", "n2", deleting=True)], NODES,
                    "nvidia.com/gpu.product")  # fmt: skip
    assert one.product == "H100" and not one.mixed and one.pods == 1
    mixed = placement(sel, [pod("a", "n1"), pod("b", "n2")], NODES, "nvidia.com/gpu.product")
    assert mixed.mixed and mixed.product is None
    other = placement(sel, [pod("a", "n1", app="x")], NODES, "nvidia.com/gpu.product")
    assert other.pods == 0 and other.product is None
    assert placement(sel, [pod("a", "n9")], NODES, "nvidia.com/gpu.product").unlabelled == 1


def test_selector_matching() -> None:
    sel = {
        "matchLabels": {"app": "srv"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "canary", "operator": "DoesNotExist"},
        ],
    }
    assert matches_selector(sel, {"app": "srv", "tier": "a"})
    assert not matches_selector(sel, {"app": "srv", "tier": "c"})
    assert not matches_selector(sel, {"app": "srv", "tier": "a", "canary": "1"})
    assert not matches_selector({}, {"app": "srv"})


def test_a_moving_placement_counts_after_the_debounce_a_settled_one_at_once() -> None:
    period = timedelta(seconds=30)

    def at(seconds: float, observed: str | None, prev: Settled | None, done: bool) -> Settled:
        return settle(
            observed,
            prev.observed if prev else None,
            prev.since if prev else None,
            T0 + timedelta(seconds=seconds),
            period,
            rollout_complete=done,
        )

    moving = at(0, "H100", None, done=False)
    assert moving.product is None and moving.since == T0
    moving = at(29, "H100", moving, done=False)
    assert moving.product is None and moving.since == T0  # the observation held since T0
    assert at(30, "H100", moving, done=False).product == "H100"
    flap = at(31, "H200", moving, done=False)  # a flap restarts the clock
    assert flap.product is None and flap.since == T0 + timedelta(seconds=31)
    # A rollout that completed on one product is settled now: no blind wait.
    assert at(0, "H100", None, done=True).product == "H100"
    mixed = at(0, MIXED, None, done=True)
    assert mixed.mixed and mixed.product is None
    assert not at(0, MIXED, None, done=False).mixed  # still moving: not yet a problem
    assert at(0, None, None, done=True).product is None


def test_rollout_status_like_kubectl() -> None:
    dep = {
        "metadata": {"generation": 3},
        "spec": {"replicas": 2},
        "status": {
            "observedGeneration": 3,
            "updatedReplicas": 2,
            "availableReplicas": 2,
            "replicas": 2,
        },
    }
    assert deployment_rolled_out(dep)
    assert not deployment_rolled_out({**dep, "status": {**dep["status"], "observedGeneration": 2}})
    assert not deployment_rolled_out({**dep, "status": {**dep["status"], "replicas": 3}})
    assert not deployment_rolled_out({**dep, "status": {**dep["status"], "availableReplicas": 1}})


def test_the_error_bound_gate_judges_the_honest_figure() -> None:
    table = diag([100.0, 90.0, 80.0])
    # A diagonal fit through its medians: RMS 0, R² 1 pass anything ...
    perfect_looking = FitQuality(rms_ms=0.0, r2=1.0, error_bound_rel=0.12, loo_rel_max=0.1)
    assert check_gates(GatesSpec(max_rms_ms=0.01, min_r2=0.99), perfect_looking, table, None).passed
    # ... the error bound does not.
    verdict = check_gates(GatesSpec(max_error_bound=0.05), perfect_looking, table, None)
    assert not verdict.passed and verdict.reason == "ErrorBoundGateFailed"
    assert "12.0% exceeds gates.maxErrorBound 5.0%" in verdict.message
    ok = FitQuality(rms_ms=0.0, r2=1.0, error_bound_rel=0.03)
    assert check_gates(GatesSpec(max_error_bound=0.05), ok, table, None).passed
    unknown = FitQuality(rms_ms=0.0, r2=1.0)
    assert not check_gates(GatesSpec(max_error_bound=0.05), unknown, table, None).passed

"""The two reconcilers of a pass (issue 35 §1): profiling gets a table, rollout puts it on
the servers, `reconcile/` orders them, and both reach the GPU capacity only through the
`Capacity` interface the pass hands them (the layer test holds the imports; these hold
the calls)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from capacity_harness import BORROW, harness, job_pod, start_waiting
from controller_harness import Harness

from sps_operator.api.status import RunStatus, TableRef, TargetStatus
from sps_operator.controller.capacity.service import GpuCapacity
from sps_operator.controller.passes.state import Pass, Settings


class RecordingCapacity(GpuCapacity):
    """The real service, noting which call came in which step of the pass."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.calls: list[tuple[str, str]] = []

    def follow_wait(self, p: Pass, run: RunStatus, job: Mapping[str, Any]) -> str | None:
        self.calls.append(("follow_wait", p.step))
        return super().follow_wait(p, run, job)

    def return_for_run(
        self, p: Pass, run: RunStatus, table: TableRef | None = None, why: str = ""
    ) -> None:
        self.calls.append(("return_for_run", p.step))
        super().return_for_run(p, run, table, why)

    def follow_rollout_borrow(self, p: Pass, statuses: Sequence[TargetStatus]) -> None:
        self.calls.append(("follow_rollout_borrow", p.step))
        super().follow_rollout_borrow(p, statuses)

    def return_orphans(self, p: Pass) -> None:
        self.calls.append(("return_orphans", p.step))
        super().return_orphans(p)


def test_both_reconcilers_borrow_and_give_back_through_the_capacity_service() -> None:
    h = harness(**BORROW)
    assert h.reconciler is not None
    door = RecordingCapacity(h.settings)
    h.reconciler.capacity = door
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    assert h.kube.scales == [("server", 1)]  # borrowed through the service
    job_pod(h, unschedulable=None)
    h.finish()
    status = h.settle(passes=5)
    assert status["tables"] and h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2
    called = set(door.calls)
    assert ("follow_wait", "run") in called  # profiling: the run's wait and borrow
    assert ("return_for_run", "run") in called  # profiling: the run that published ends
    assert ("follow_rollout_borrow", "rollout") in called  # rollout: the held slot goes back
    assert ("return_orphans", "capacity") in called  # the orchestrator, every pass
    assert {step for _, step in door.calls} == {"run", "rollout", "capacity"}


def test_a_table_published_in_a_pass_goes_onto_its_server_in_that_same_pass() -> None:
    """The rollout reconciler runs after the profiling one and reads `status.tables` as
    it left it (and the ConfigMap it created, not in the caches yet)."""
    h = Harness.one_target()
    h.tick()
    h.run_pass()
    h.finish()
    h.tick()
    status = h.run_pass()  # one pass: the result is judged, published and rolled
    assert status.get("currentRun") is None
    (table,) = status["tables"]
    (target,) = status["targets"]
    assert target["table"] == table["configMap"] and target["hash"] == table["hash"]
    assert h.running_hash() == table["hash"]

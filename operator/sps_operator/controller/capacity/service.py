"""`GpuCapacity`: the one door to the GPU capacity (the pool, borrowing, Kueue, cost) that
the profiling and the rollout reconcilers call, as the `passes.state.Capacity` interface
they see (they import neither this package nor its policies)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sps_operator.api.status import RunStatus, TableRef, TargetStatus
from sps_operator.controller.capacity import runs
from sps_operator.controller.capacity.memory import CapacityMemory
from sps_operator.controller.kube.kueue_cache import KUEUE_READ_SECONDS, KueueCache
from sps_operator.controller.kube.ratelimit import Periodic
from sps_operator.controller.passes.state import Pass, Settings
from sps_operator.controller.policies.kueue import run_limit
from sps_operator.controller.process.memories import PoolLines


class GpuCapacity:
    """What the process remembers of the capacity (the orphan sweep's period, Kueue's
    words, the pool lines) is here only (`memory`), handed by these methods to the steps
    that need it; what a pass remembers (the pool Leases it read, the replicas it gave
    back) is on the pass."""

    def __init__(self, settings: Settings) -> None:
        self.memory = CapacityMemory(
            pool_sweep=Periodic(settings.pool_sweep_seconds),
            # Read at most half as often as a queued run looks again (15 s by default).
            kueue_reads=KueueCache(
                seconds=min(KUEUE_READ_SECONDS, settings.kueue_recheck_seconds / 2)
            ),
            pool_lines=PoolLines(),
        )

    # ------------------------------------------------------------ a profiling run

    def job_labels(self, p: Pass) -> dict[str, str]:
        """The labels of a profiling Job (the admin's defaults, then the profile's)."""
        return runs.job_labels(p)

    def run_limit(self, p: Pass) -> tuple[int, str]:
        """How long a run may run once its Job runs, and what sets it (the spec or
        Kueue's maximum execution time)."""
        return run_limit(p.spec.job.active_deadline_seconds, runs.job_labels(p))

    def follow_wait(self, p: Pass, run: RunStatus, job: Mapping[str, Any]) -> str | None:
        """Follow why the run's Job waits and borrow for it; why it must fail, else None."""
        return runs.follow_wait(p, self.memory, run, job)

    def reattach_borrow(self, p: Pass, run: RunStatus) -> None:
        """Re-attach a borrow record the status lost (a restart, a refused write)."""
        runs.reattach_borrow(p, run)

    def close_segment(self, p: Pass, run: RunStatus) -> None:
        """Add the GPU time the run's Job ran since it last started to the profile's cost."""
        runs.close_segment(p, run)

    def return_for_run(
        self, p: Pass, run: RunStatus, table: TableRef | None = None, why: str = ""
    ) -> None:
        """The run ended: give back what it borrowed, or hold it for `table`'s rollout."""
        runs.return_for_run(p, run, table, why)

    # ------------------------------------------------------------ a rollout

    def follow_rollout_borrow(self, p: Pass, statuses: Sequence[TargetStatus]) -> None:
        """Give back the replica held for a rollout once it is done (or bounded out)."""
        runs.follow_rollout_borrow(p, statuses)

    # ------------------------------------------------------------ every pass and event

    def queue_created(self, namespace: str, name: str) -> None:
        """A Kueue LocalQueue appeared: forget what Kueue said of it (it was missing)."""
        self.memory.kueue_reads.forget_queue(namespace, name)

    def return_orphans(self, p: Pass) -> None:
        """Give back what no run of this profile holds any more; sweep orphaned pools."""
        runs.return_orphans(p, self.memory)

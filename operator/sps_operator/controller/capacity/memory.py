"""What the GPU capacity service remembers across passes, process-wide: owned by the
service (`service.GpuCapacity.memory`) and handed by it to the steps that need it, never
copied onto a pass. Each part is thread-safe (passes run in a pool of threads)."""

from __future__ import annotations

from dataclasses import dataclass

from sps_operator.controller.kube.kueue_cache import KueueCache
from sps_operator.controller.kube.ratelimit import Periodic
from sps_operator.controller.process.memories import PoolLines


@dataclass(frozen=True)
class CapacityMemory:
    # Work many passes may ask for and one does (the orphaned-pool sweep).
    pool_sweep: Periodic
    # What Kueue last said about a suspended Job (read at most every few seconds).
    kueue_reads: KueueCache
    # Who was offered each GPU product's free pool since when, and who stalled.
    pool_lines: PoolLines

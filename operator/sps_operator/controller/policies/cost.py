"""What tables cost in GPU time (pure): GPU seconds of profiling Jobs, seconds of lent replicas.

Recorded in status, which every operator replica reads and the leader writes:
`currentRun.gpuSeconds` accumulates the run's running segments (GPUs of its Job × seconds
from `runningSince` to when it stopped running: preempted, phase done, run over), the
published table keeps its run's total (`tables[].gpuSeconds`), and `status.cost` sums, per
GPU product, every segment and every lent replica given back since the profile exists.

The Prometheus counters (`sps_gpu_seconds_total`, `sps_replica_lent_seconds_total`) count
what a replica's successful status write added to `status.cost` (`cost_added`): the write
is the one place where a pass's work becomes the truth the next leader continues from, so
a pass whose write fails counts nothing (the next pass, of any replica, redoes that work
from the old status and counts it then), and a new leader never counts again what its
predecessor wrote. Each process's counter is its own share; the total is their sum
(`sum without (pod, instance)`). A crash between the write and the count loses that
share (never counts it twice).

Every duration comes from recorded times through `clocks.elapsed` (never negative, a time
ahead of this clock beyond the skew bound counts as now) and is capped by how long the
thing can last at all (`bound`): a hand-edited or stale time cannot add a year.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sps_operator.api.status import CostRecord
from sps_operator.controller.policies.clocks import elapsed
from sps_operator.controller.policies.run_job import group_pods
from sps_operator.controller.policies.workloads import container_gpus

MAX_COST_PRODUCTS = 32  # GPU products kept in status.cost (a profile sees a handful)


def pod_gpus(job: Mapping[str, Any]) -> int:
    """GPUs one pod of the Job holds: its containers and native sidecars (init containers
    with restartPolicy Always: the cloned server) together, or a plain init container's own
    if larger (as the scheduler computes a pod's request)."""
    pod = (((job.get("spec") or {}).get("template") or {}).get("spec")) or {}
    inits = [c for c in pod.get("initContainers") or [] if isinstance(c, Mapping)]
    running = sum(container_gpus(c) for c in pod.get("containers") or [] if isinstance(c, Mapping))
    running += sum(container_gpus(c) for c in inits if c.get("restartPolicy") == "Always")
    plain = [container_gpus(c) for c in inits if c.get("restartPolicy") != "Always"]
    return max([running, *plain])


def job_gpus(job: Mapping[str, Any]) -> int:
    """GPUs the Job holds while it runs: every pod of a group counts."""
    return pod_gpus(job) * group_pods(job)


def bounded_seconds(since: str | None, now: datetime, bound: float) -> float:
    """Seconds from a recorded time to now: never negative, at most `bound`."""
    return min(elapsed(since, now), max(bound, 0.0))


def add_cost(
    cost: list[CostRecord], product: str, gpu_seconds: float = 0.0, lent_seconds: float = 0.0
) -> list[CostRecord]:
    """`cost` with these seconds added to `product`'s record (created if absent; the
    least recently added product goes when more than MAX_COST_PRODUCTS are kept)."""
    if gpu_seconds <= 0 and lent_seconds <= 0:
        return cost
    found = next((c for c in cost if c.gpu_product == product), None)
    if found is None:
        found = CostRecord(gpu_product=product)
    rest = [c for c in cost if c is not found]
    updated = found.model_copy(
        update={
            "gpu_seconds": round(found.gpu_seconds + max(gpu_seconds, 0.0), 3),
            "lent_seconds": round(found.lent_seconds + max(lent_seconds, 0.0), 3),
        }
    )
    return [*rest, updated][-MAX_COST_PRODUCTS:]


def _totals(records: Iterable[Any]) -> dict[str, tuple[float, float]]:
    """{product: (gpu seconds, lent seconds)} of status.cost as written (camelCase dicts)
    or as models; anything unreadable counts as nothing."""
    totals: dict[str, tuple[float, float]] = {}
    for record in records:
        data = record.to_k8s() if isinstance(record, CostRecord) else record
        if not isinstance(data, Mapping) or not isinstance(data.get("gpuProduct"), str):
            continue
        values = []
        for key in ("gpuSeconds", "lentSeconds"):
            value = data.get(key)
            number = float(value) if isinstance(value, int | float) else 0.0
            ok = not isinstance(value, bool) and 0 <= number < float("inf")
            values.append(number if ok else 0.0)
        totals[data["gpuProduct"]] = (values[0], values[1])
    return totals


def cost_added(
    before: Sequence[Any] | None, after: Sequence[Any] | None
) -> list[tuple[str, float, float]]:
    """(product, GPU seconds, lent seconds) that `after` adds to `before`, per product;
    never negative (a record removed or lowered by hand takes nothing back)."""
    old, new = _totals(before or ()), _totals(after or ())
    added = []
    for product, (gpu, lent) in sorted(new.items()):
        gpu0, lent0 = old.get(product, (0.0, 0.0))
        delta = (max(gpu - gpu0, 0.0), max(lent - lent0, 0.0))
        if delta[0] > 0 or delta[1] > 0:
            added.append((product, *delta))
    return added

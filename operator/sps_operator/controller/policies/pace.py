"""How many targets of one profile roll at once, and whose turn it is (pure).

Every rollout restarts every server of a Deployment, so a selector that matches 1,500
Deployments must not restart them all in one pass. `rollout.maxConcurrent` (a count or a
percentage of the profile's targets, like a Deployment's maxSurge: rounded up, at least
one) bounds how many targets are mid-rollout at once, under the operator's ceiling (chart
value rollout.maxConcurrent). A target is mid-rollout from the operator's patch of its
template until its rollout completed and every ready pod carries the table, or until the
rollout failed (ProgressDeadlineExceeded): a stuck target cannot wedge the others. The rest
wait in line, the longest waiting first, then by name, so each gets its turn. A rollback
is never held (it returns servers to what ran), but its restart counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sps_operator.api.spec import RolloutSpec, max_concurrent_count
from sps_operator.controller.policies.deployments import deployment_rolled_out, every_ready_pod_runs
from sps_operator.controller.policies.placement import PodInfo

# The default: a quarter of the profile's targets (Deployment's own default for a rolling
# update), at least one. A profile of up to four Deployments rolls one at a time; a table
# that breaks its servers fails on few of them and is rolled back before the rest get it
# (a rollback drops it from status.tables).
DEFAULT_MAX_CONCURRENT = RolloutSpec.model_fields["max_concurrent"].default
# The operator's default ceiling (chart value rollout.maxConcurrent): a selector matching
# 1,500 Deployments restarts at most this many at once.
DEFAULT_CEILING = 10


@dataclass(frozen=True)
class Limit:
    """How many targets may be mid-rollout at once, and how that was decided (for the
    message that says why a target waits)."""

    count: int
    asked: str  # rollout.maxConcurrent as written
    targets: int
    capped: bool  # the operator's ceiling is lower than what the profile asks

    def describe(self) -> str:
        ceiling = " (the operator's ceiling, chart value rollout.maxConcurrent)"
        return (
            f"rollout.maxConcurrent {self.asked} of {self.targets} target(s) allows "
            f"{self.count} at once" + (ceiling if self.capped else "")
        )


def concurrency_limit(asked: int | str, targets: int, ceiling: int = 0) -> Limit:
    """`asked` (a count, or a percentage "N%" of `targets` rounded up) as a count of at
    least one, at most `ceiling` when that is positive. Something unreadable counts as the
    default (the API refuses it before)."""
    wanted = max_concurrent_count(asked, targets)
    if wanted is None:
        wanted = max_concurrent_count(DEFAULT_MAX_CONCURRENT, targets) or 1
    wanted = max(wanted, 1)
    capped = 0 < ceiling < wanted
    return Limit(ceiling if capped else wanted, str(asked), targets, capped)


def mid_rollout(dep: Mapping[str, Any], pods: Iterable[PodInfo], table_hash: str) -> bool:
    """The Deployment's template carries `table_hash` and its rollout is under way: not yet
    complete (observed, available, every ready pod carries the hash), and not failed
    (Progressing False with ProgressDeadlineExceeded on the current generation)."""
    status = dep.get("status") or {}
    current = status.get("observedGeneration", 0) >= (dep.get("metadata") or {}).get(
        "generation", 0
    )
    failed = current and any(
        c.get("type") == "Progressing"
        and c.get("status") == "False"
        and c.get("reason") == "ProgressDeadlineExceeded"
        for c in status.get("conditions") or []
    )
    if failed:
        return False
    return not (deployment_rolled_out(dep) and every_ready_pod_runs(dep, pods, table_hash))


@dataclass(frozen=True)
class Waiting:
    """A target whose template would get a new table now."""

    name: str
    since: datetime  # when it began to wait (now, for one that did not wait before)


@dataclass(frozen=True)
class Turns:
    admitted: tuple[str, ...]  # roll now
    queued: tuple[str, ...]  # wait, in line order


def take_turns(waiting: Sequence[Waiting], in_flight: int, limit: int) -> Turns:
    """Which of `waiting` roll now: as many as the limit leaves beside the `in_flight`
    ones, the longest waiting first, then by name (stable from pass to pass)."""
    line = sorted(waiting, key=lambda w: (w.since, w.name))
    free = max(limit - max(in_flight, 0), 0)
    return Turns(
        tuple(w.name for w in line[:free]),
        tuple(w.name for w in line[free:]),
    )

"""The table kind, the run phase and the workload kinds: one type each, from the spec to
the fit (pure, no pydantic, so tables/ and the profiler use them without the models)."""

from __future__ import annotations

from enum import StrEnum


class TableKind(StrEnum):
    DIAGONAL = "Diagonal"
    ADDITIVE = "Additive"


# A run's phase: every run measures the diagonal (static mode); an Additive run then
# measures the off-diagonal (compact mode) with the diagonal as its seed table. (No
# docstring: the CRD's schema would carry it.)
class RunPhase(StrEnum):
    DIAGONAL = "Diagonal"
    OFF_DIAGONAL = "OffDiagonal"


# The kinds of workload a profile serves (controller/policies/workloads.py says where each
# keeps its pod templates).
class WorkloadKind(StrEnum):
    DEPLOYMENT = "Deployment"
    STATEFUL_SET = "StatefulSet"
    LEADER_WORKER_SET = "LeaderWorkerSet"

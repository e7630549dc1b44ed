"""The profiling reconciler: getting a table. Its steps, in order: take the refresh
requests (annotation, token, schedule, what changed), follow the current run (its Job,
its wait for GPUs, its result) and publish the table it measured, or start the run a
trigger asks for; after the rollout, trim the history of published tables.

It owns `status.currentRun`, the run's failures and `status.tables`, which the rollout
reconciler reads; it reaches the GPU pool only through `p.capacity`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sps_operator.controller.policies.triggers import note_refresh_requests
from sps_operator.controller.profiling.history import trim_history
from sps_operator.controller.profiling.outcome import fail_run
from sps_operator.controller.profiling.publish import publish_table
from sps_operator.controller.profiling.run import maybe_start_run, progress_run
from sps_operator.controller.profiling.state import ProfilingPass


def take_requests(p: ProfilingPass, meta: Mapping[str, Any]) -> None:
    """What asks for a run: the reprofile annotation, a token, the schedule."""
    p.step = "trigger"
    note_refresh_requests(
        p.status, p.spec, meta.get("annotations") or {}, meta.get("creationTimestamp"), p.now,
        p.min_interval_seconds,
    )  # fmt: skip


def get_table(p: ProfilingPass) -> None:
    """Follow the current run and publish what it measured; or start the next run."""
    if p.status.current_run is not None:
        p.step = "run"
        measured = progress_run(p)
        if measured is not None:
            publish_table(p, measured.rounds, measured.manifest)
    if p.status.current_run is None:
        p.step = "start"
        maybe_start_run(p)


def end_run_failed(p: ProfilingPass, reason: str, message: str) -> None:
    """A step raised: end the current run as failed (retried with backoff)."""
    fail_run(p, reason, message)


def trim(p: ProfilingPass) -> None:
    """Delete the published tables no status names and no server mounts any more."""
    p.step = "history"
    trim_history(p)

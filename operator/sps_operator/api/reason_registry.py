"""The registry of reasons: for each reason an SpsProfile's status can carry, what it means,
its health, and the advice `kubectl sps explain` gives, in one entry (pure, no I/O).

The entries live by where the status records them: the profile's own state
(api/reasons_status.py), a refused target (api/reasons_targets.py), a run
(api/reasons_runs.py); the words themselves are spelled in api/reasons.py.

A reason's kind sets its health. What GitOps tools see follows from it: `health` is the
rule the Argo CD health check in docs/gitops.md implements in Lua
(tests/ship/test_ship_argocd_health.py runs the Lua against every reason and checks the
docs' table), and the kstatus conditions `Reconciling` and `Stalled` that Flux reads are set
from it (controller/policies/conditions.py). tests/unit/test_api_reason_registry.py holds
that every reason has its meaning, health and advice, and that no advice lives elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping

from sps_operator.api.reasons import (
    PROFILING,
    READY,
    Advice,
    Health,
    Kind,
    Reason,
)
from sps_operator.api.reasons_runs import GATE_ADVICE, RUN_REASONS
from sps_operator.api.reasons_status import STATUS_REASONS
from sps_operator.api.reasons_targets import TARGET_REASONS

REASONS: dict[str, Reason] = {**STATUS_REASONS, **TARGET_REASONS, **RUN_REASONS}

# The health a reason's kind gives a profile whose Ready condition carries it with no run
# in progress (Ready is True for a live reason; a trigger starts a run, which progresses;
# the False side of another condition says nothing is wrong). While a run's Job waits for
# capacity, a waiting reason is progress; it is Degraded once the run gave up.
KIND_HEALTH: dict[Kind, Health] = {
    Kind.LIVE: Health.HEALTHY,
    Kind.INFO: Health.HEALTHY,
    Kind.TRIGGER: Health.PROGRESSING,
    Kind.PROGRESSING: Health.PROGRESSING,
    Kind.SUSPENDED: Health.SUSPENDED,
    Kind.WAITING: Health.DEGRADED,
    Kind.PROBLEM: Health.DEGRADED,
    Kind.FAILURE: Health.DEGRADED,
}

# What the health rule below reads.
WAITING_REASONS = frozenset(r for r, d in REASONS.items() if d.kind == Kind.WAITING)
PROGRESSING_REASONS = frozenset(r for r, d in REASONS.items() if d.kind == Kind.PROGRESSING)
SUSPENDED_REASONS = frozenset(r for r, d in REASONS.items() if d.kind == Kind.SUSPENDED)

# What `kubectl sps explain` reads, by where it meets a reason.
TARGET_ADVICE: dict[str, Advice] = {r: d.target for r, d in REASONS.items() if d.target}
WAITING_ADVICE: dict[str, Advice] = {r: d.waiting for r, d in REASONS.items() if d.waiting}
FAILURE_ADVICE: dict[str, Advice] = {r: d.failure for r, d in REASONS.items() if d.failure}
# A table that failed an acceptance gate (spec.gates): not retried as it is.
GATE_FAILURES = frozenset(r for r, d in REASONS.items() if d.advice is GATE_ADVICE)


# What an advice may name, filled in by `kubectl sps explain`: the profile, the run, the
# run's GPU product.
PLACEHOLDERS = ("name", "run", "gpu")


def fill(text: str, **values: object) -> str:
    """An advice with its placeholders filled; one not given reads `<run>` (say)."""
    return text.format_map({key: values.get(key, f"<{key}>") for key in PLACEHOLDERS})


def health(conditions: Mapping[str, tuple[str, str]]) -> Health:
    """The profile's health from its conditions ({type: (status, reason)}), once the status
    reflects the latest spec. Waiting is progress, not failure: a run in progress or whose
    Job waits for capacity, a rollout, a target whose GPU settles. Suspended: nothing to do
    by design. Degraded: only what needs someone to act (a failed or refused run, a refused
    target, an invalid spec)."""
    ready = conditions.get(READY)
    if ready is None:
        return Health.PROGRESSING
    status, reason = ready
    if status == "True":
        return Health.HEALTHY
    if reason in SUSPENDED_REASONS:
        return Health.SUSPENDED
    profiling = conditions.get(PROFILING)
    if profiling is not None and (profiling[0] == "True" or profiling[1] in WAITING_REASONS):
        return Health.PROGRESSING  # a run exists: it runs, or its Job waits for capacity
    if reason in PROGRESSING_REASONS:
        return Health.PROGRESSING
    return Health.DEGRADED

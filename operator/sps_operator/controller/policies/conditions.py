"""Status conditions with the metav1.Condition shape (pure).

kopf patches are JSON merge patches, so the whole list is computed each time;
`lastTransitionTime` is kept when a condition's status has not changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sps_operator.api.reason_registry import health
from sps_operator.api.reasons import (
    DEGRADED,
    NO_TABLE,
    PROFILING,
    READY,
    RECONCILING,
    ROLLED_OUT,
    STALE,
    STALLED,
    TABLE_READY,
    Health,
)
from sps_operator.api.status import Condition, ConditionStatus

# The condition types are defined with the reasons (api/reasons.py); re-exported here.
__all__ = [
    "DEGRADED", "PROFILING", "READY", "ROLLED_OUT", "STALE", "TABLE_READY",
    "get_condition", "rfc3339", "set_condition", "with_kstatus",
]  # fmt: skip


def rfc3339(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: Sequence[Condition],
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None,
) -> list[Condition]:
    """The list with `type_` set; other conditions unchanged, order stable."""
    value = (
        ConditionStatus.UNKNOWN
        if status is None
        else (ConditionStatus.TRUE if status else ConditionStatus.FALSE)
    )

    def updated(transition: str) -> Condition:
        return Condition(
            type=type_,
            status=value,
            reason=reason,
            message=message,
            last_transition_time=transition,
            observed_generation=generation,
        )

    out: list[Condition] = []
    found = False
    for cond in conditions:
        if cond.type != type_:
            out.append(cond)
            continue
        found = True
        # The transition time moves only when the status does.
        out.append(updated(cond.last_transition_time if cond.status == value else rfc3339(now)))
    if not found:
        out.append(updated(rfc3339(now)))
    return out


def get_condition(conditions: Sequence[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def with_kstatus(
    conditions: Sequence[Condition], now: datetime, generation: int | None
) -> list[Condition]:
    """The list with kstatus's abnormal-true conditions set from Ready (and Profiling), by
    the rule Argo CD's health check uses (api.reason_registry.health): `Reconciling` True while the
    operator works towards Ready, `Stalled` True when it cannot without a fix. Flux's
    kustomize-controller (kstatus) then waits for a profile that is in progress and fails
    one that is stalled, with Ready's reason and message."""
    verdict = health({c.type: (str(c.status), c.reason) for c in conditions})
    ready = get_condition(conditions, READY)
    reason = ready.reason if ready is not None else NO_TABLE
    message = ready.message if ready is not None else ""
    out = list(conditions)
    for type_, on in ((RECONCILING, Health.PROGRESSING), (STALLED, Health.DEGRADED)):
        active = verdict == on
        out = set_condition(out, type_, active, reason, message if active else "", now, generation)
    return out

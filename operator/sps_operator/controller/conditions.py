"""Status conditions with the metav1.Condition shape (pure).

kopf patches are JSON merge patches, so the whole list is computed each time;
`lastTransitionTime` is kept when a condition's status has not changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sps_operator.api.models import Condition, ConditionStatus

READY = "Ready"
PROFILING = "Profiling"
TABLE_READY = "TableReady"
ROLLED_OUT = "RolledOut"
STALE = "Stale"
DEGRADED = "Degraded"
ALL_TYPES = (READY, PROFILING, TABLE_READY, ROLLED_OUT, STALE, DEGRADED)


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

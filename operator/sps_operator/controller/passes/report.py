"""Step 7 of a pass: conditions from the status the other steps left (pure).

Every target that is not live says why (its `state`, `reason`, `message`), and the
conditions summarise them: Ready is True only when every selected Deployment runs a table
measured for it; anything else names the reason, so `kubectl sps explain` never says
"nothing is wrong" while something is.
"""

from __future__ import annotations

from dataclasses import dataclass

from sps_operator.api.reasons import (
    AS_EXPECTED,
    CURRENT,
    IDLE,
    KIND_NOT_INSTALLED,
    NO_TABLE,
    NO_TARGETS,
    PROFILING,
    REFRESH_REQUESTED,
    ROLLED_OUT,
    ROLLOUT_DISABLED,
    ROLLOUT_HELD,
    ROLLOUT_PENDING,
    ROLLOUT_QUEUED,
    SERVER_CHANGED,
    SUSPENDED,
    TABLE_LIVE,
    TARGET_PROBLEM,
    WAITING,
)
from sps_operator.api.spec import RolloutMode
from sps_operator.api.status import TargetState, TargetStatus
from sps_operator.api.times import parse_rfc3339
from sps_operator.controller.passes.state import Pass
from sps_operator.controller.policies import conditions as cond
from sps_operator.controller.policies.triggers import (
    refresh_pending,
    refresh_trigger_key,
    what_next,
)


def _stale_refresh(p: Pass) -> list[str]:
    """GPU products whose in-use table predates a refresh request (token, annotation,
    schedule): a refresh is pending for them."""
    in_use = {(t.gpu, t.fingerprint) for t in p.targets if t.usable}
    return sorted(
        {
            t.gpu_product
            for t in p.status.tables
            if (t.gpu_product, t.fingerprint) in in_use
            and refresh_pending(t, p.status.refresh_count)
        }
    )


def _after_failure(p: Pass, products: list[str]) -> str:
    """What happens next for a pending refresh whose last attempt failed."""
    failure = p.status.last_failure
    if failure is None or failure.gpu_product not in products:
        return ""
    key = refresh_trigger_key(str(failure.gpu_product), str(failure.fingerprint),
                              p.status.refresh_count)  # fmt: skip
    if failure.trigger_key != key:
        return ""
    return f"; the last attempt failed ({failure.reason}): {what_next(failure, p.ref.name)}"


# A condition's verdict: (status, reason, message).
Verdict = tuple[bool | None, str, str]


def report(p: Pass) -> None:
    st, now, gen = p.status, p.now, p.generation

    def setc(type_: str, verdict: Verdict) -> None:
        status, reason, message = verdict
        st.conditions = cond.set_condition(st.conditions, type_, status, reason, message, now, gen)

    targets = st.targets
    products = {t.gpu for t in p.targets if t.gpu}
    # A target whose pods the rollout is replacing keeps the product it is rolled for.
    products |= {t.gpu_product for t in targets if t.state == TargetState.ROLLING and t.gpu_product}
    st.gpu_product = ",".join(sorted(products)) or None
    st.live_table = ",".join(sorted({t.table for t in targets if t.table})) or None
    setc(cond.PROFILING, _profiling(p))
    table = _table_ready(p)
    setc(cond.TABLE_READY, table)
    setc(cond.STALE, _stale(p))
    rolling = _rolling(p)
    setc(cond.ROLLED_OUT, _rolled_out(p, table, rolling))
    setc(cond.DEGRADED, _degraded(p))
    setc(cond.READY, _ready(p, table, rolling))
    st.conditions = cond.with_kstatus(st.conditions, now, gen)
    st.observed_generation = gen
    p.metrics.status(p.ref, st)


def _profiling(p: Pass) -> Verdict:
    st, run = p.status, p.status.current_run
    if run is not None and run.waiting is not None:
        waited = (p.now - (parse_rfc3339(run.waiting.since) or p.now)).total_seconds()
        return (
            False,
            run.waiting.reason,
            f"run {run.name} for {run.gpu_product} waiting {waited:.0f} s: {run.waiting.message}",
        )
    if run is not None:
        return (
            True,
            run.trigger,
            f"run {run.name} ({run.phase}) for {run.gpu_product} on Job {run.job}"
            + (f", progress {run.progress}" if run.progress else "")
            + (f"; borrowing a replica of {run.borrow.deployment}" if run.borrow else ""),
        )
    idle = "no profiling run in progress"
    return (False, IDLE, f"{idle}; {st.schedule_held_back}" if st.schedule_held_back else idle)


def _refused(p: Pass) -> list[TargetStatus]:
    return [t for t in p.status.targets if t.state == TargetState.REFUSED]


def _table_ready(p: Pass) -> tuple[bool, str, str]:
    targets, run = p.status.targets, p.status.current_run
    refused = _refused(p)
    without = [t for t in targets if t.state in (TargetState.NO_TABLE, TargetState.STALE)]
    waiting = [t for t in targets if t.state == TargetState.WAITING]
    if not targets:
        return (False, NO_TARGETS, "the selector matches no Deployment in this namespace")
    if without or waiting or refused:
        reason = PROFILING if run else (NO_TABLE if without else WAITING)
        if refused and not without and not waiting:
            reason = str(refused[0].reason or TARGET_PROBLEM)
        listing = "; ".join(f"{t.deployment}: {t.message}" for t in [*without, *waiting, *refused])
        return (False, reason, listing)
    return (True, TABLE_LIVE, f"tables for every target: {p.status.live_table}")


def _stale(p: Pass) -> Verdict:
    st = p.status
    stale = [t for t in st.targets if t.state == TargetState.STALE]
    refresh = _stale_refresh(p)
    if stale:
        return (True, SERVER_CHANGED, "; ".join(f"{t.deployment}: {t.message}" for t in stale))
    if refresh:
        return (
            True,
            st.refresh_reason or REFRESH_REQUESTED,
            f"refresh requested at {st.refresh_requested_at} for: {', '.join(refresh)}"
            + _after_failure(p, refresh),
        )
    return (False, CURRENT, "every table in use matches its server")


@dataclass(frozen=True)
class _Rolling:
    """Targets being rolled, those whose newer table waits, and what the rollout says."""

    deployments: list[str]
    held: list[TargetStatus]
    reason: str
    message: str


def _rolling(p: Pass) -> _Rolling:
    targets = p.status.targets
    rolling = [t.deployment for t in targets if t.state == TargetState.ROLLING]
    # What blocks a rollout comes before a target waiting for its turn (RolloutQueued).
    blocked = sorted(
        (t for t in targets if t.state == TargetState.ROLLING and t.reason),
        key=lambda t: t.reason == ROLLOUT_QUEUED,
    )
    held = [t for t in targets if t.held_until]
    roll_reason, roll_message = ROLLOUT_PENDING, f"rolling: {', '.join(rolling)}"
    if blocked:
        roll_reason = str(blocked[0].reason)
        roll_message = "; ".join(f"{t.deployment}: {t.message}" for t in blocked)
    elif any(t.message for t in targets if t.state == TargetState.ROLLING):
        roll_message = "; ".join(
            f"{t.deployment}: {t.message or 'rolling'}"
            for t in targets
            if t.state == TargetState.ROLLING
        )
    return _Rolling(rolling, held, roll_reason, roll_message)


def _rolled_out(p: Pass, table: tuple[bool, str, str], rolling: _Rolling) -> Verdict:
    if p.spec.rollout.mode == RolloutMode.DISABLED:
        return (False, ROLLOUT_DISABLED, "spec.rollout.mode is Disabled")
    if rolling.deployments:
        return (False, rolling.reason, rolling.message)
    if rolling.held and table[0]:
        return (
            False,
            ROLLOUT_HELD,
            "; ".join(f"{t.deployment}: {t.message}" for t in rolling.held),
        )
    if table[0]:
        return (True, ROLLED_OUT, "every target runs its table")
    return (False, NO_TABLE, "no table to roll out to some targets")


def _degraded(p: Pass) -> Verdict:
    refused, failure = _refused(p), p.status.last_failure
    if refused:
        first = refused[0]
        return (
            True,
            str(first.reason or TARGET_PROBLEM),
            "; ".join(f"{t.deployment}: {t.message}" for t in refused),
        )
    contested = "; ".join(message for _, message in [*_unserved(p), *p.contested])
    if failure is not None:
        return (True, failure.reason, failure.message + (f"; {contested}" if contested else ""))
    notes = [*_unserved(p), *p.contested]
    if notes:
        return (True, notes[0][0], contested)
    return (False, AS_EXPECTED, "")


def _unserved(p: Pass) -> list[tuple[str, str]]:
    """spec.targetKinds names kinds the API server does not serve: said at once."""
    kinds = p.snapshot.unserved_kinds
    if not kinds:
        return []
    return [
        (
            KIND_NOT_INSTALLED,
            f"spec.targetKinds names {', '.join(kinds)}, which this cluster does not serve "
            "(its CRD is not installed): install it, or remove it from spec.targetKinds; the "
            "other kinds are served",
        )
    ]


def _ready(p: Pass, table: tuple[bool, str, str], rolling: _Rolling) -> Verdict:
    run, failure, refused = p.status.current_run, p.status.last_failure, _refused(p)
    live = table[0] and (p.spec.rollout.mode == RolloutMode.DISABLED or not rolling.deployments)
    if live:
        degraded = f"; degraded: {failure.reason}" if failure is not None else ""
        held = rolling.held
        waits = (
            f"; newer tables wait for the minimum rollout interval ({len(held)})" if held else ""
        )
        return (True, TABLE_LIVE, f"tables live{degraded}{waits}")
    if p.spec.suspend and not table[0]:
        return (False, SUSPENDED, "spec.suspend is true")
    if run is not None:
        why = run.waiting.reason if run.waiting is not None else PROFILING
        return (False, why, table[2])
    if refused:
        return (False, str(refused[0].reason or TARGET_PROBLEM), table[2])
    if failure is not None and not table[0]:
        return (False, failure.reason, failure.message)
    if not table[0]:
        return (False, table[1], table[2])
    return (False, rolling.reason, rolling.message)

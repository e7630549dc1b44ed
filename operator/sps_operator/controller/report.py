"""Step 7 of a pass: conditions from the status the other steps left (pure).

Every target that is not live says why (its `state`, `reason`, `message`), and the
conditions summarise them: Ready is True only when every selected Deployment runs a table
measured for it; anything else names the reason, so `kubectl sps explain` never says
"nothing is wrong" while something is.
"""

from __future__ import annotations

from sps_operator.api.reasons import (
    AS_EXPECTED,
    CURRENT,
    IDLE,
    NO_TABLE,
    NO_TARGETS,
    PROFILING,
    REFRESH_REQUESTED,
    ROLLED_OUT,
    ROLLOUT_DISABLED,
    ROLLOUT_HELD,
    ROLLOUT_PENDING,
    SERVER_CHANGED,
    SUSPENDED,
    TABLE_LIVE,
    TARGET_PROBLEM,
    WAITING,
)
from sps_operator.api.spec import RolloutMode
from sps_operator.api.status import TargetState
from sps_operator.controller import conditions as cond
from sps_operator.controller.state import Pass
from sps_operator.controller.triggers import (
    parse_time,
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


def report(p: Pass) -> None:
    st, now, gen = p.status, p.now, p.generation

    def setc(type_: str, status: bool | None, reason: str, message: str) -> None:
        st.conditions = cond.set_condition(st.conditions, type_, status, reason, message, now, gen)

    targets = st.targets
    products = {t.gpu for t in p.targets if t.gpu}
    # A target whose pods the rollout is replacing keeps the product it is rolled for.
    products |= {t.gpu_product for t in targets if t.state == TargetState.ROLLING and t.gpu_product}
    st.gpu_product = ",".join(sorted(products)) or None
    st.live_table = ",".join(sorted({t.table for t in targets if t.table})) or None
    run = st.current_run
    if run is not None and run.waiting is not None:
        waited = (now - (parse_time(run.waiting.since) or now)).total_seconds()
        setc(
            cond.PROFILING,
            False,
            run.waiting.reason,
            f"run {run.name} for {run.gpu_product} waiting {waited:.0f} s: {run.waiting.message}",
        )
    elif run is not None:
        setc(
            cond.PROFILING,
            True,
            run.trigger,
            f"run {run.name} ({run.phase}) for {run.gpu_product} on Job {run.job}"
            + (f", progress {run.progress}" if run.progress else "")
            + (f"; borrowing a replica of {run.borrow.deployment}" if run.borrow else ""),
        )
    else:
        idle = "no profiling run in progress"
        setc(cond.PROFILING, False, IDLE, f"{idle}; {st.schedule_held_back}"
             if st.schedule_held_back else idle)  # fmt: skip

    refused = [t for t in targets if t.state == TargetState.REFUSED]
    without = [t for t in targets if t.state in (TargetState.NO_TABLE, TargetState.STALE)]
    waiting = [t for t in targets if t.state == TargetState.WAITING]
    if not targets:
        table = (False, NO_TARGETS, "the selector matches no Deployment in this namespace")
    elif without or waiting or refused:
        reason = PROFILING if run else (NO_TABLE if without else WAITING)
        if refused and not without and not waiting:
            reason = str(refused[0].reason or TARGET_PROBLEM)
        listing = "; ".join(f"{t.deployment}: {t.message}" for t in [*without, *waiting, *refused])
        table = (False, reason, listing)
    else:
        table = (True, TABLE_LIVE, f"tables for every target: {st.live_table}")
    setc(cond.TABLE_READY, *table)

    stale = [t for t in targets if t.state == TargetState.STALE]
    refresh = _stale_refresh(p)
    if stale:
        setc(
            cond.STALE,
            True,
            SERVER_CHANGED,
            "; ".join(f"{t.deployment}: {t.message}" for t in stale),
        )
    elif refresh:
        setc(
            cond.STALE,
            True,
            st.refresh_reason or REFRESH_REQUESTED,
            f"refresh requested at {st.refresh_requested_at} for: {', '.join(refresh)}"
            + _after_failure(p, refresh),
        )
    else:
        setc(cond.STALE, False, CURRENT, "every table in use matches its server")

    mode = p.spec.rollout.mode
    rolling = [t.deployment for t in targets if t.state == TargetState.ROLLING]
    blocked = [t for t in targets if t.state == TargetState.ROLLING and t.reason]
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
    if mode == RolloutMode.DISABLED:
        setc(cond.ROLLED_OUT, False, ROLLOUT_DISABLED, "spec.rollout.mode is Disabled")
    elif rolling:
        setc(cond.ROLLED_OUT, False, roll_reason, roll_message)
    elif held and table[0]:
        setc(cond.ROLLED_OUT, False, ROLLOUT_HELD,
             "; ".join(f"{t.deployment}: {t.message}" for t in held))  # fmt: skip
    elif table[0]:
        setc(cond.ROLLED_OUT, True, ROLLED_OUT, "every target runs its table")
    else:
        setc(cond.ROLLED_OUT, False, NO_TABLE, "no table to roll out to some targets")

    failure = st.last_failure
    if refused:
        first = refused[0]
        setc(
            cond.DEGRADED,
            True,
            str(first.reason or TARGET_PROBLEM),
            "; ".join(f"{t.deployment}: {t.message}" for t in refused),
        )
    elif failure is not None:
        setc(cond.DEGRADED, True, failure.reason, failure.message)
    else:
        setc(cond.DEGRADED, False, AS_EXPECTED, "")

    live = table[0] and (mode == RolloutMode.DISABLED or not rolling)
    if live:
        degraded = f"; degraded: {failure.reason}" if failure is not None else ""
        waits = (
            f"; newer tables wait for the minimum rollout interval ({len(held)})" if held else ""
        )
        setc(cond.READY, True, TABLE_LIVE, f"tables live{degraded}{waits}")
    elif p.spec.suspend and not table[0]:
        setc(cond.READY, False, SUSPENDED, "spec.suspend is true")
    elif run is not None:
        why = run.waiting.reason if run.waiting is not None else PROFILING
        setc(cond.READY, False, why, table[2])
    elif refused:
        setc(cond.READY, False, str(refused[0].reason or TARGET_PROBLEM), table[2])
    elif failure is not None and not table[0]:
        setc(cond.READY, False, failure.reason, failure.message)
    elif not table[0]:
        setc(cond.READY, False, table[1], table[2])
    else:
        setc(cond.READY, False, roll_reason, roll_message)
    st.conditions = cond.with_kstatus(st.conditions, now, gen)
    st.observed_generation = gen
    p.metrics.status(p.ref, st)

"""Part of the rollout step: the pace (policies/pace.py). Targets whose template would get
a new table this pass roll only while fewer than the limit are mid-rollout; the others
keep what they run and wait in line with reason RolloutQueued, saying how many roll and
the limit."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sps_operator.api.reasons import ROLLOUT_QUEUED
from sps_operator.api.status import TableRef, TargetState, TargetStatus
from sps_operator.controller.passes.state import Target
from sps_operator.controller.policies import clocks
from sps_operator.controller.policies import conditions as cond
from sps_operator.controller.policies.ownership import recorded_owner
from sps_operator.controller.policies.pace import (
    Limit,
    Waiting,
    concurrency_limit,
    mid_rollout,
    take_turns,
)
from sps_operator.controller.rollout.holders import hold_tables
from sps_operator.controller.rollout.state import RolloutPass

# Named in a queued target's message; the count says the rest.
MAX_NAMED = 3
# A safety net: the watch events of the rolling Deployments and their pods wake the
# profile as their rollouts progress.
RECHECK_SECONDS = 30.0
# Ahead of every wait: the target whose replica a BorrowReplica run keeps lent for its
# rollout (the slot is kept for it; it is given back when that rollout does not happen).
FIRST = datetime.min.replace(tzinfo=UTC)


@dataclass
class Candidate:
    """A target whose template would get `table` now (not a rollback)."""

    target: Target
    ts: TargetStatus
    previous: TargetStatus | None
    table: TableRef


def rolling_now(p: RolloutPass) -> list[str]:
    """This profile's targets mid-rollout as the pass starts (policies/pace.mid_rollout),
    in name order; with those the last pass patched that the cache may not show yet."""
    before = {t.deployment: t for t in p.status.targets}
    out = []
    for t in p.targets:
        last = before.get(t.name)
        patched = (
            last is not None
            and last.state == TargetState.ROLLING
            and last.reason != ROLLOUT_QUEUED
            and bool(last.hash)
            and last.hash != t.running_hash
            and p.recent(last.rolled_at)
        )
        observed = (
            bool(t.running_hash)
            and recorded_owner(t.deployment) == p.ref.name
            and mid_rollout(t.deployment, p.snapshot.pods, str(t.running_hash))
        )
        if patched or observed:
            out.append(t.name)
    return sorted(out)


def limit_for(p: RolloutPass) -> Limit:
    return concurrency_limit(
        p.spec.rollout.max_concurrent, len(p.targets), p.settings.max_concurrent_rollouts
    )


def take_turns_now(
    p: RolloutPass, candidates: list[Candidate], rolling: list[str], rolled_back: list[str]
) -> list[Candidate]:
    """The candidates that roll now; the others are marked queued (status, hold)."""
    limit = limit_for(p)
    busy = set(rolling) | set(rolled_back)
    # One already mid-rollout takes no new slot: switching it to a newer table adds no
    # restart beside the one under way.
    admitted = [c for c in candidates if c.target.name in busy]
    waiting = [c for c in candidates if c.target.name not in busy]
    lent = p.status.rollout_borrow.deployment if p.status.rollout_borrow else None
    turns = take_turns(
        [Waiting(c.target.name, FIRST if c.target.name == lent else _since(p, c)) for c in waiting],
        len(busy),
        limit.count,
    )
    by_name = {c.target.name: c for c in waiting}
    admitted += [by_name[name] for name in turns.admitted]
    in_line = [by_name[name] for name in turns.queued]
    now_rolling = sorted(busy | set(turns.admitted))
    for place, c in enumerate(in_line, start=1):
        _queue(p, c, place, len(in_line), now_rolling, limit)
    if in_line:
        p.wake_within(RECHECK_SECONDS)
    return admitted


def _since(p: RolloutPass, c: Candidate) -> datetime:
    queued = c.previous is not None and c.previous.reason == ROLLOUT_QUEUED
    since = clocks.trusted(c.previous.queued_since if c.previous and queued else None, p.now)
    return since or p.now


def _queue(
    p: RolloutPass, c: Candidate, place: int, waiting: int, rolling: list[str], limit: Limit
) -> None:
    """The target keeps what it runs; status says it waits, behind whom, and why."""
    target, ts = c.target, c.ts
    ts.state, ts.reason, ts.rolled_out = TargetState.ROLLING, ROLLOUT_QUEUED, False
    ts.table = target.running_config_map if target.running_hash else None
    ts.hash = target.running_hash or None
    ts.next_table, ts.held_until = c.table.config_map, None
    ts.queued_since = cond.rfc3339(_since(p, c))
    named = ", ".join(rolling[:MAX_NAMED]) + (
        f" and {len(rolling) - MAX_NAMED} more" if len(rolling) > MAX_NAMED else ""
    )
    ts.message = (
        f"table {c.table.config_map} waits for its turn ({place} of {waiting} in line, the "
        f"longest waiting first): {len(rolling)} of this profile's targets are mid-rollout "
        f"({named or 'none'}) and {limit.describe()}; "
        + (
            f"table {ts.table} runs meanwhile"
            if ts.table
            else "the server runs without a table of this profile meanwhile"
        )
    )
    hold_tables(p, target, None)  # what it mounts stays held

"""Checks a table and its measurements must pass before the table may go onto a server
(pure, no I/O).

`self_check` looks at the table over its WHOLE domain, not only at its probes: SGLang's
lookups are a floor step (diagonal) and clamped-linear interpolation (additive), so the
extreme values are at the probes and a bound there is a bound everywhere. `doubtful_cells`
looks at the measured cells: a GPU does not get faster when it is given more tokens, so a
step time that falls clearly (beyond the rounds' own confidence) as the batch grows says
the measurement went wrong (a noisy neighbour, clocks, a lying Job), not the hardware.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from sps_operator.api.limits import MAX_STEP_SECONDS, MIN_STEP_SECONDS
from sps_operator.tables.formats import (
    SpsAdditiveCostTable,
    SpsTable,
    is_uninitialized_sps_table,
    load_sps_table_text,
)

MAX_PROBES = 4096
# Step time may fall by this much (or by three combined confidence half-widths, if more)
# from one batch to a larger one before the measurement is called doubtful.
MONOTONE_TOLERANCE = 0.10


def _step_range_problem(what: str, seconds: float) -> str | None:
    if not MIN_STEP_SECONDS <= seconds <= MAX_STEP_SECONDS:
        return (
            f"{what} is {seconds * 1e3:.6g} ms per step, outside the plausible "
            f"{MIN_STEP_SECONDS * 1e3:g}–{MAX_STEP_SECONDS * 1e3:g} ms"
        )
    return None


def self_check(table: SpsTable) -> list[str]:
    """What is wrong with `table` (empty when nothing): it must serialise, load under
    SGLang's rules to the same table, not be SGLang's "uninitialized" (verify-all) form,
    and predict a plausible, positive step time everywhere the planner may look."""
    try:
        text = table.to_json()
        reloaded = load_sps_table_text(text)
    except ValueError as exc:
        return [f"the table does not load under SGLang's rules: {exc}"]
    if reloaded != table:
        return ["the table changes when written and read back"]
    if is_uninitialized_sps_table(table):
        return [
            "the table has a single probe, which SGLang treats as uninitialized "
            "(verify-all); a sweep needs at least two batch sizes"
        ]
    return step_range_problems(table)


def step_range_problems(table: SpsTable) -> list[str]:
    """Where `table` predicts a step time outside a decode step's physical range
    (`limits.MIN_STEP_SECONDS`–`MAX_STEP_SECONDS`), over its whole domain; the profiler's
    fit refuses such a table too."""
    problems: list[str] = []
    if isinstance(table, SpsAdditiveCostTable):
        if max(len(table.bs_probes), len(table.m_probes)) > MAX_PROBES:
            return [f"the table has more than {MAX_PROBES} probes"]
        # T(bs, M) = bias + alpha(bs) + theta(M); interpolation never leaves the range of
        # the probe values, so these two sums bound T over the whole domain.
        low = table.bias_seconds + min(table.alpha_seconds) + min(table.theta_seconds)
        high = table.bias_seconds + max(table.alpha_seconds) + max(table.theta_seconds)
        for what, seconds in (("the fastest predicted step", low), ("the slowest", high)):
            problem = _step_range_problem(what, seconds)
            if problem:
                problems.append(problem)
        return problems
    if len(table.sample_batch_tokens) > MAX_PROBES:
        return [f"the table has more than {MAX_PROBES} probes"]
    for tokens, sps in zip(table.sample_batch_tokens, table.sample_steps_per_sec, strict=True):
        problem = _step_range_problem(f"batch_tokens={tokens}", 1.0 / sps if sps > 0 else 0.0)
        if problem:
            problems.append(problem)
    return problems


def _half_width(round_: Mapping[str, Any], seconds: float) -> float:
    """Relative half-width of a round's confidence interval (0 when it reports none)."""
    low, high = round_.get("ci_low"), round_.get("ci_high")
    if low is not None and high is not None and seconds > 0:
        return max(float(high) - float(low), 0.0) / 2 / seconds
    se = round_.get("step_time_se")
    return 1.96 * float(se) / seconds if se and seconds > 0 else 0.0


def doubtful_cells(rounds: Sequence[Mapping[str, Any]]) -> list[str]:
    """Cells whose step time falls as the batch grows, beyond noise: within each group of
    rounds at one (batch size per rank, fraction) — diagonal rounds form one group along
    batch_tokens — the median step time must not drop from one batch_tokens to a larger
    one by more than the tolerance."""
    groups: dict[Any, dict[int, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for round_ in rounds:
        seconds = 1.0 / float(round_["steps_per_sec"])
        frac = round_.get("frac")
        key = "diagonal" if frac is None else int(round_["batch_size_per_rank"])
        groups[key][int(round_["batch_tokens"])].append((seconds, _half_width(round_, seconds)))
    problems: list[str] = []
    for key, by_tokens in groups.items():
        cells = [
            (m, statistics.median(s for s, _ in v), max(h for _, h in v))
            for m, v in sorted(by_tokens.items())
        ]
        slowest = cells[0]
        for cell in cells[1:]:
            m, seconds, half = cell
            tolerance = max(MONOTONE_TOLERANCE, 3 * (half + slowest[2]))
            if seconds < slowest[1] * (1 - tolerance):
                where = "diagonal" if key == "diagonal" else f"bs={key}"
                problems.append(
                    f"{where}: a step of {m} tokens took {seconds * 1e3:.4g} ms, "
                    f"{1 - seconds / slowest[1]:.0%} less than {slowest[0]} tokens "
                    f"({slowest[1] * 1e3:.4g} ms); more tokens cannot be that much faster"
                )
            if seconds > slowest[1]:
                slowest = cell
    return problems

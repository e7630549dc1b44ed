"""When a round may stop: the stopping rule met, its budgets spent, the clocks settled (the
warm-up), and what a round stopped early is measured again for. Pure: the statistics come
from `steady`, the round's records from `rounds`."""

from __future__ import annotations

import math
from collections.abc import Sequence

from sps_operator.profiler.rounds import RoundGoal, RoundOutcome, StoppingRule
from sps_operator.profiler.steady import SteadyStats, clocks_settled


def round_finished(
    goal: RoundGoal,
    rule: StoppingRule,
    stats: SteadyStats | None,
    times: Sequence[float],
    step_budget: int,
    history: Sequence[float] = (),
    effective_budget: float = math.inf,
) -> bool:
    """May the round stop now, given its steady steps so far (`stats` is None before
    `rule.min_steps` of them)?

    * measure: the stopping rule holds, or the step budget is spent, or a window that does
      not drift holds `effective_budget` effective steps (`WindowEstimate.ess`: a drifting
      one measures on, as below the step budget it always has);
    * settle: the clocks have settled (`clocks_settled`) over the earlier warm-up rounds'
      steady steps (`history`) and this round's, read as one series, or the budget is spent
      over them all;
    * probe: `rule.min_steps` pinned steady steps exist. A probe's records are checked for
      the pin (every row: budget, verify tokens, tier) and its step time is thrown away, so
      running it on to a CI — up to the step budget on a noisy GPU — was GPU time bought
      for nothing.
    """
    if goal == "settle":
        series = [*history, *times]
        return (
            clocks_settled(series, z=rule.z, tolerance_rel=rule.ci_rel_width / 2)
            or len(series) >= step_budget
        )
    if stats is None:
        return False
    if goal == "probe":
        return True
    return (
        stats.done
        or stats.num_steps >= step_budget
        or stopped_on_effective_steps(rule, stats, times, step_budget, effective_budget)
    )


def stopped_on_effective_steps(
    rule: StoppingRule,
    stats: SteadyStats,
    times: Sequence[float],
    step_budget: int,
    effective_budget: float,
) -> bool:
    """Does the round stop only because its window, which does not drift, holds
    `effective_budget` effective steps (its CI not met, its step budget not spent)? Not
    while its last steps read slower than the ones before (`steady.tail_rise`): a clock cap
    setting in at its end, which a round run on shows (`level_rise`) and one stopped there
    would average in (RTX PRO 6000, 10 % noise, throttling: a bs-4 round stopped at 170
    steps as a cap set in, a 16.9 % max grid error)."""
    return (
        not stats.done
        and stats.num_steps < step_budget
        and not stats.window.drifting
        and stats.window.ess >= effective_budget
        and rule.tail_rise(times) is None
    )


def drift_after_an_early_stop(outcome: RoundOutcome) -> float | None:
    """For a round that `stopped_on_effective_steps`: how far (relative) the records read at
    its end show a cap that set in as it stopped, or None. Its window did not drift and its
    last steps read level when it stopped; the few steps after that now read slower
    (`tail_rise`, at a rise's threshold), or make the window drift (the KV line no longer
    explains them: RTX PRO 6000, 10 % noise, throttling, rounds at bs 4 and 40 kept with a
    13-16 % drift and a 17-20 % max grid error). Measured again like a rise."""
    if outcome.tail_rise is not None:
        return outcome.tail_rise
    window = outcome.stats.window
    return abs(window.drift_rel) if window.drifting else None

"""How one round is driven (`RoundPlan`): its prompts' and requests' length, its stopping
rule, and its goal (measure, settle the clocks, or probe the pin)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sps_operator.profiler.rounds import RoundGoal, StoppingRule
from sps_operator.profiler.steady import Ar1Prior
from sps_operator.profiler.sweep import RoundSettings, round_max_new_tokens


@dataclass(frozen=True)
class RoundPlan:
    """How one round is driven: its prompts and requests' length, when it stops."""

    rule: StoppingRule
    max_new_tokens: int
    step_budget: int
    # "settle" (the warm-up): keep the load running until the clocks have settled;
    # "probe" (the pre-flight): stop once the pin is seen on enough steps.
    goal: RoundGoal = "measure"
    # A measuring round also stops at this many effective steps (`round_finished`).
    effective_budget: float = math.inf


def round_plan(
    settings: RoundSettings,
    min_steps: int | None = None,
    expected_steps: int | None = None,
    goal: RoundGoal = "measure",
    ar1_prior: Ar1Prior | None = None,
) -> RoundPlan:
    """A measuring round; prompts centre `expected_steps` steady steps on `--context-len`;
    `ar1_prior`: the step correlation the run's rounds have shown so far."""
    rule = StoppingRule(
        ci_rel_width=settings.ci_rel_width,
        min_steps=min_steps or settings.min_steps,
        prompt_len=settings.prompt_len_for(expected_steps),
        reference_context=settings.context_len,
        ar1_prior=ar1_prior,
    )
    return RoundPlan(
        rule,
        round_max_new_tokens(settings),
        settings.step_budget,
        goal,
        settings.effective_budget,
    )


def warmup_plan(settings: RoundSettings) -> RoundPlan:
    """The first cell's own round, kept going until the clocks have settled (then on as
    that cell's measuring round): its requests are the cell's, so the steps it measures
    sit at the context the table describes, however long the clocks took."""
    return round_plan(settings, goal="settle")

"""How one round is driven (`RoundPlan`): its prompts' and requests' length, its stopping
rule, and its goal (measure, settle the clocks, or probe the pin)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sps_operator.profiler.rounds import RoundGoal, StoppingRule
from sps_operator.profiler.steady import MIN_SETTLE_SECONDS, Ar1Prior
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
    return RoundPlan(rule, round_max_new_tokens(settings), settings.step_budget, goal)


# The shortest decode step the warm-up's first round is sized for (a small model at bs 1 on
# a fast GPU; the simulator's presets: >= 4.6 ms): its requests hold enough tokens for
# `MIN_SETTLE_SECONDS` of such steps, so the settling test can judge the clocks on the
# first round alone. A cell's usual requests (8 + 2 + 240 + 4 tokens: 2.7 s on an H100 at
# bs 1) end before that, and the round was always thrown away.
WARMUP_STEP_SECONDS = 0.004


def warmup_steps(settings: RoundSettings) -> int:
    """Steady steps a warm-up round's requests hold: the cell's usual budget, or enough for
    the settling test's `MIN_SETTLE_SECONDS` on a fast GPU, whichever is more."""
    return max(settings.step_budget, math.ceil(MIN_SETTLE_SECONDS / WARMUP_STEP_SECONDS))


def warmup_plan(
    settings: RoundSettings, requests: int = 1, token_capacity: float = math.inf
) -> RoundPlan:
    """The first cell's own round, kept going until the clocks have settled (then on as
    that cell's measuring round): its requests are the cell's, so the steps it measures
    sit at the context the table describes, however long the clocks took.

    Its requests are longer than a cell round's (`warmup_steps`): the round ends at a poll
    once the clocks settled and it measured its cell, not when its requests run out, so a
    GPU faster than 3 s per request settles in one round instead of paying a second. They
    stay within the server's KV cache (`requests` of them, `token_capacity` tokens), and
    never shorter than a cell round's (which `server.validate_sweep` checked)."""
    plan = round_plan(settings, goal="settle")
    tokens = plan.max_new_tokens + warmup_steps(settings) - settings.step_budget
    if math.isfinite(token_capacity):
        fits = int(token_capacity // max(1, requests)) - plan.rule.prompt_len
        tokens = max(plan.max_new_tokens, min(tokens, fits))
    return replace(plan, max_new_tokens=tokens)

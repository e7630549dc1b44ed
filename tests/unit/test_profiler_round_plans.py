"""Round planning (`profiler.round_plans`): how long the warm-up's requests are."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from sps_operator.profiler.round_plans import round_plan, warmup_plan
from sps_operator.profiler.rounds import round_finished
from sps_operator.profiler.steady import MIN_SETTLE_SECONDS
from sps_operator.profiler.sweep import ROUND_WARMUP_STEPS, STEP_SLACK, RoundSettings

H100_BS1_STEP_SECONDS = 0.0106  # the simulator's H100 preset at bs 1


def _steady_steps(max_new_tokens: int) -> int:
    """Steady steps a round's requests hold before they end by themselves."""
    return max_new_tokens - ROUND_WARMUP_STEPS - 2 - STEP_SLACK


def test_the_first_warm_up_round_can_settle_by_itself_on_a_fast_gpu() -> None:
    # A cell round's requests (8 + 2 + 240 + 4 tokens) end after 2.7 s of H100 bs-1 steps,
    # under the settling test's 3 s: the first warm-up round was always thrown away.
    settings = RoundSettings()
    plan = warmup_plan(settings)
    steps = _steady_steps(plan.max_new_tokens)
    assert steps * H100_BS1_STEP_SECONDS > MIN_SETTLE_SECONDS
    rng = random.Random(7)
    quiet = [H100_BS1_STEP_SECONDS * rng.lognormvariate(0, 0.03) for _ in range(steps)]
    assert round_finished("settle", plan.rule, None, quiet, plan.step_budget)
    # The round still measures its cell like a cell round: same prompts, same stopping rule.
    cell = round_plan(settings)
    assert plan.goal == "settle"
    assert (plan.rule, plan.step_budget) == (cell.rule, cell.step_budget)


def test_the_warm_up_requests_stay_within_the_kv_cache() -> None:
    settings = RoundSettings()
    cell = round_plan(settings)
    prompt = cell.rule.prompt_len
    roomy = warmup_plan(settings, requests=4, token_capacity=1e9)
    assert roomy.max_new_tokens == warmup_plan(settings).max_new_tokens
    tight = warmup_plan(settings, requests=4, token_capacity=4 * (prompt + 400))
    assert tight.max_new_tokens == 400
    # Never shorter than a cell round's requests (`validate_sweep` checked those fit).
    full = warmup_plan(settings, requests=4, token_capacity=4 * (prompt + 10))
    assert full.max_new_tokens == cell.max_new_tokens


@given(
    max_steady=st.integers(1, 5000),
    requests=st.integers(1, 512),
    capacity=st.floats(1.0, 1e8),
)
def test_the_warm_up_is_never_shorter_than_a_cell_round_nor_over_the_cache_it_gained(
    max_steady: int, requests: int, capacity: float
) -> None:
    settings = RoundSettings(max_steady_steps=max_steady)
    cell = round_plan(settings)
    plan = warmup_plan(settings, requests=requests, token_capacity=capacity)
    assert plan.max_new_tokens >= cell.max_new_tokens
    if plan.max_new_tokens > cell.max_new_tokens:
        assert requests * (cell.rule.prompt_len + plan.max_new_tokens) <= capacity

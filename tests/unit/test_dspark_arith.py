"""The DSpark server's arithmetic, pinned to the contract's worked examples (§4.2, §10)."""

from __future__ import annotations

from sps_operator.dspark_arith import (
    compact_tiers,
    default_decode_capture_bs,
    forced_budget,
    pinned_verify_tokens,
    round_up,
    runner_capture_bs,
    verify_tokens_for_budget,
)

K = 8
GAMMA = K - 1
CAPTURE_TO_16 = [*range(1, 9), 10, 12, 14, 16]


def test_contract_example_k8_pins_land_on_tiers() -> None:
    tiers = compact_tiers(runner_capture_bs(CAPTURE_TO_16, None), K)
    assert tiers == [8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128]
    assert pinned_verify_tokens(0.25, 16, GAMMA) == 44
    assert round_up(tiers, 44) == 48
    assert pinned_verify_tokens(0.5, 16, GAMMA) == 72
    assert round_up(tiers, 72) == 80
    assert pinned_verify_tokens(1.0, 16, GAMMA) == 128  # capped at bs*K
    assert round_up(tiers, 129) is None


def test_budget_rounds_in_the_servers_order() -> None:
    assert forced_budget(0.3, 6, 15) == 27
    assert int(0.3 * 6 * (16 - 1)) == 26  # the reference profiler's order gives one less
    assert pinned_verify_tokens(0.3, 6, 15) == 6 + 27
    assert forced_budget(-0.5, 6, 15) == 0
    assert verify_tokens_for_budget(16, 200, K) == 16 * K


def test_runner_list_adds_the_pool_only_when_the_capture_goes_beyond_it() -> None:
    assert runner_capture_bs([1, 2, 4, 8, 64], 48) == [1, 2, 4, 8, 48]
    assert runner_capture_bs([1, 2, 4], 48) == [1, 2, 4]
    assert runner_capture_bs([4, 2, 2], None) == [2, 4]
    assert runner_capture_bs([], 48) == []
    assert compact_tiers(runner_capture_bs([1, 2, 64], 48), K) == [8, 16, 48 * K]


def test_default_capture_list_ends_at_max_bs() -> None:
    default = default_decode_capture_bs(256)
    assert default[:9] == [1, 2, 3, 4, 5, 6, 7, 8, 10] and default[-1] == 256 and 72 in default
    assert default_decode_capture_bs(12) == [*range(1, 9), 10, 12]
    assert default_decode_capture_bs(300)[-3:] == [272, 288, 300]

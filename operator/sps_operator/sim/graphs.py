"""CUDA-graph capture lists and compact-mode tiers, in SGLang's own arithmetic (pure)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence


def default_decode_capture_bs(max_bs: int) -> list[int]:
    """The server-args decode list when speculative decoding is on and none was given."""
    candidates = (
        list(range(1, 9))
        + list(range(10, 33, 2))
        + list(range(40, 65, 4))
        + list(range(72, 257, 8))
        + list(range(272, max_bs + 1, 16))
    )
    out = [b for b in candidates if b <= max_bs]
    if max_bs not in out:
        out.append(max_bs)
    return sorted(set(out))


def runner_capture_bs(server_args_bs: Sequence[int], pool: int) -> list[int]:
    """What the decode graph runner really captures: batch sizes up to the request pool."""
    if not server_args_bs:
        return []
    out = {b for b in server_args_bs if b <= pool}
    if max(server_args_bs) > pool:
        out.add(pool)
    return sorted(out)


def compact_tiers(runner_bs: Sequence[int], verify_num_draft_tokens: int) -> list[int]:
    return sorted({b * verify_num_draft_tokens for b in runner_bs})


def round_up(grid: Sequence[int], value: int) -> int | None:
    """Smallest grid point >= value (SGLang's ``round_up_grid``), None above the grid."""
    index = bisect.bisect_left(grid, value)
    return grid[index] if index < len(grid) else None


def forced_budget(frac: float, bs: int, gamma: int) -> int:
    """The pinned budget in the server's order of operations: ``int(frac * (bs*gamma))``."""
    return max(0, int(float(frac) * (bs * gamma)))


def verify_tokens_for_budget(bs: int, budget: int, verify_num_draft_tokens: int) -> int:
    """M = min(bs + budget, bs*K): anchor floor of one token per request plus the budget."""
    return min(bs + budget, bs * verify_num_draft_tokens)

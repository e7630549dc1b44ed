"""The DSpark server's own arithmetic, shared by the simulator and the profiler (pure).

capture list -> runner batch sizes -> compact-mode tiers; round-up onto a grid; the pinned
budget ``int(frac * (bs*gamma))`` and the verify token count M it schedules (contract §4).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence


def default_decode_capture_bs(max_bs: int) -> list[int]:
    """The server-args decode list when speculative decoding is on and none was given (§4.1)."""
    candidates = [
        *range(1, 9),
        *range(10, 33, 2),
        *range(40, 65, 4),
        *range(72, 257, 8),
        *range(272, max_bs + 1, 16),
    ]
    return sorted({b for b in candidates if b <= max_bs} | {max_bs})


def runner_capture_bs(server_args_bs: Sequence[int], pool: int | None) -> list[int]:
    """What the decode graph runner really captures: batch sizes up to the request pool.

    The pool itself is added when the capture list goes beyond it; no pool keeps the list.
    """
    if not server_args_bs:
        return []
    out = {b for b in server_args_bs if pool is None or b <= pool}
    if pool is not None and max(server_args_bs) > pool:
        out.add(pool)
    return sorted(out)


def compact_tiers(runner_bs: Sequence[int], verify_num_draft_tokens: int) -> list[int]:
    """Compact-mode graph tiers (token counts): one per runner batch size, ``bs*K``."""
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


def pinned_verify_tokens(frac: float, bs: int, gamma: int) -> int:
    """M the server schedules for a pin ``frac`` at batch size ``bs`` (K = gamma + 1)."""
    return verify_tokens_for_budget(bs, forced_budget(frac, bs, gamma), gamma + 1)

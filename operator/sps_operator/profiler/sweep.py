"""The sweep: which (repeat, bs, frac) cells to measure, and the settings of a round (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from sps_operator.api import limits
from sps_operator.tables.quality import ROUND_CI_LEVEL_Z

# Defaults shared with SGLang's dspark_sps_profiler, so its users feel at home.
DEFAULT_OUT = "dspark_sps.json"
DEFAULT_MAX_BATCH_SIZE = 256
DEFAULT_TEMPERATURE = 1.0
DEFAULT_ROUND_TIMEOUT_SECONDS = 300.0
ROUND_WARMUP_STEPS = 8
STEP_TIME_FLOOR_SECONDS = 0.02
PROFILE_SEED = 42
RANDOM_TOKEN_LOW = 1000
RANDOM_TOKEN_HIGH_MARGIN = 1000
MATCH_FRACTION_WARN = 0.9
MATCH_FRACTION_ERROR = 0.5
REQUIRED_SIMULATE_ACC_LEN = 1.0

# Our stopping rule: stop when the median step time's confidence interval is narrow enough.
DEFAULT_CI_REL_WIDTH = 0.02
DEFAULT_CI_LEVEL_Z = ROUND_CI_LEVEL_Z
# Never judge a median from fewer steady steps than this, whatever the CI says.
MIN_STEADY_STEPS_FLOOR = 48
# A round that has not met the CI after this many steady steps stops anyway (and says so):
# with the warm-up steps and the prefill, under half of the reference's 572-step request, so a
# round never costs more GPU time than half of a reference round, however noisy the GPU.
DEFAULT_MAX_STEADY_STEPS = 240
# A round that has not met the CI stops once its window holds this many effective
# (independent) steps: past that, where noise is light on correlation, more steps of one
# round buy less than the fit's average over the sweep's rounds already gives; where the
# steps are strongly correlated the step cap above ends the round first.
DEFAULT_MAX_EFFECTIVE_STEPS = 110.0
# Steps a request may run past the step budget before it ends on its own (the reference
# allows 64: steps the GPU runs for nothing when a poll comes late).
STEP_SLACK = 4
DEFAULT_POLL_INTERVAL_SECONDS = 0.25
# The KV context per request a table describes: step time grows with it (attention reads
# every request's KV cache). Shared with the API (spec.table.sweep.contextLen).
DEFAULT_CONTEXT_LEN = limits.DEFAULT_CONTEXT_LEN
# Steady steps a round is expected to take at low noise: prompts are sized so that such a
# window is centred on the context the table describes.
EXPECTED_STEADY_STEPS = 96


@dataclass(frozen=True)
class RoundSettings:
    """How one round is driven and when it stops."""

    # None: sized so the round's steady window is centred on `context_len`.
    input_len: int | None = None
    context_len: int = DEFAULT_CONTEXT_LEN
    temperature: float = DEFAULT_TEMPERATURE
    ci_rel_width: float = DEFAULT_CI_REL_WIDTH
    # The reference's floors, applied only when the user gives them.
    min_steady_steps: int | None = None
    min_steady_seconds: float | None = None
    max_steady_steps: int = DEFAULT_MAX_STEADY_STEPS
    # None: no cap on effective steps (only `max_steady_steps`).
    max_effective_steps: float | None = DEFAULT_MAX_EFFECTIVE_STEPS
    round_timeout_seconds: float = DEFAULT_ROUND_TIMEOUT_SECONDS
    ramp_token_slack: int = 0
    poll_interval_seconds: float = DEFAULT_POLL_INTERVAL_SECONDS

    def __post_init__(self) -> None:
        if self.input_len is not None and self.input_len < 1:
            raise ValueError(f"--input-len must be >= 1, got {self.input_len}.")
        if self.context_len < 1:
            raise ValueError(f"--context-len must be >= 1, got {self.context_len}.")
        if self.max_steady_steps < 1:
            raise ValueError(f"--max-steady-steps must be >= 1, got {self.max_steady_steps}.")
        if self.max_effective_steps is not None and not self.max_effective_steps > 0:
            raise ValueError(f"--max-effective-steps must be > 0, got {self.max_effective_steps}.")
        if not 0 < self.ci_rel_width < 1:
            raise ValueError(f"--ci-rel-width must be in (0, 1), got {self.ci_rel_width}.")
        if self.min_steady_steps is not None and self.min_steady_steps < 1:
            raise ValueError(f"--min-steady-steps must be >= 1, got {self.min_steady_steps}.")
        if self.min_steady_seconds is not None and self.min_steady_seconds < 0:
            raise ValueError(f"--min-steady-seconds must be >= 0, got {self.min_steady_seconds}.")
        if self.round_timeout_seconds <= 0:
            raise ValueError(f"--round-timeout must be > 0, got {self.round_timeout_seconds}.")
        if self.ramp_token_slack < 0:
            raise ValueError(f"--ramp-token-slack must be >= 0, got {self.ramp_token_slack}.")
        if self.poll_interval_seconds <= 0:
            raise ValueError(f"--poll-interval must be > 0, got {self.poll_interval_seconds}.")

    @property
    def min_steps(self) -> int:
        """Fewest steady steps a round may be judged on."""
        return max(MIN_STEADY_STEPS_FLOOR, self.min_steady_steps or 0)

    @property
    def prompt_len(self) -> int:
        """Prompt tokens per request for a round of the expected length."""
        return self.prompt_len_for(None)

    def prompt_len_for(self, expected_steps: int | None) -> int:
        """Prompt tokens per request: `--input-len`, or sized so a round of `expected_steps`
        steady steps (default `EXPECTED_STEADY_STEPS`) is centred on `context_len`."""
        if self.input_len is not None:
            return self.input_len
        steps = min(expected_steps or EXPECTED_STEADY_STEPS, self.step_budget)
        return max(1, self.context_len - (ROUND_WARMUP_STEPS + 2 + steps // 2))

    @property
    def step_budget(self) -> int:
        """Most steady steps a round may run (the request lifetime is sized from it)."""
        by_seconds = (
            math.ceil(self.min_steady_seconds / STEP_TIME_FLOOR_SECONDS)
            if self.min_steady_seconds
            else 0
        )
        return max(self.max_steady_steps, self.min_steps, by_seconds)

    @property
    def effective_budget(self) -> float:
        """Most effective steps a round's window may hold before it stops
        (`stopping.round_finished`); unbounded when the cap is off."""
        return math.inf if self.max_effective_steps is None else self.max_effective_steps

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_request_count_sweep(max_num_reqs: int) -> list[int]:
    """The tapered per-rank batch-size sweep of the reference profiler (same values)."""
    if max_num_reqs < 1:
        raise ValueError(f"--max-batch-size must be >= 1, got {max_num_reqs}.")
    return limits.tapered_sweep(max_num_reqs)


def round_max_new_tokens(settings: RoundSettings) -> int:
    """Request lifetime in tokens: 1 token per step at SGLANG_SIMULATE_ACC_LEN=1.0."""
    return ROUND_WARMUP_STEPS + 2 + settings.step_budget + STEP_SLACK + settings.ramp_token_slack


def validate_fracs(fracs: Sequence[float] | None) -> list[float] | None:
    if fracs is None:
        return None
    if not fracs:
        raise ValueError("--fracs needs at least one value in (0, 1].")
    for frac in fracs:
        if not (isinstance(frac, int | float) and 0.0 < frac <= 1.0):
            raise ValueError(
                f"--fracs values must be in (0, 1], got {frac}. The pin runs frac x the full "
                "verify budget, so frac <= 1.0 keeps M inside the captured graphs."
            )
    return sorted(set(float(f) for f in fracs))


def validate_batch_sizes(batch_sizes: Sequence[int]) -> list[int]:
    if not batch_sizes:
        raise ValueError("--batch-size needs at least one value.")
    for bs in batch_sizes:
        if bs < 1:
            raise ValueError(f"--batch-size values must be >= 1, got {bs}.")
    return sorted(set(int(b) for b in batch_sizes))


@dataclass(frozen=True)
class SweepCell:
    """One round to measure: `bs` requests per DP rank, pinned at `frac` (None = diagonal)."""

    repeat: int
    bs: int
    frac: float | None

    @property
    def key(self) -> tuple[int, int, float | None]:
        return (self.repeat, self.bs, self.frac)


def build_cells(
    batch_sizes: Sequence[int], fracs: Sequence[float] | None, repeats: int
) -> list[SweepCell]:
    """Cells in the reference's loop order: repeat, then bs, then frac."""
    frac_sweep: list[float | None] = list(fracs) if fracs else [None]
    return [
        SweepCell(repeat=r, bs=bs, frac=f)
        for r in range(max(1, repeats))
        for bs in batch_sizes
        for f in frac_sweep
    ]


def cell_key_of_round(round_: dict[str, Any]) -> tuple[int, int, float | None]:
    frac = round_.get("frac")
    return (
        int(round_.get("repeat", 0)),
        int(round_["batch_size_per_rank"]),
        float(frac) if frac is not None else None,
    )


# What a round is for: settling the clocks, probing the pin, measuring a cell, or measuring
# the warm-up's cell again on warm clocks after the warm-up ended on a live clock ramp (the
# anchor of the ramp model, `tables.clockramp`), or measuring a cell again whose round read
# far slower than its neighbours (`profiler.cross_round`).
RoundKind = Literal["warm-up", "pre-flight", "cell", "anchor", "recheck"]
Job = tuple[RoundKind, SweepCell]


def build_jobs(todo: Sequence[SweepCell], *, warmup: bool, probe: SweepCell | None) -> list[Job]:
    """The rounds of a run, in order: the pin probe (it checks the pin and nothing else, so
    it may run on cold clocks, and a failure costs no measurement), the warm-up — on the
    first cell, so once the clocks have settled it goes on as that cell's round (see
    `after_warmup_round`) — then the cells."""
    jobs: list[Job] = []
    if not todo:
        return jobs
    if probe is not None:
        jobs.append(("pre-flight", probe))
    if warmup:
        jobs.append(("warm-up", todo[0]))
    return jobs + [("cell", cell) for cell in todo]


def after_warmup_round(
    jobs: Sequence[Job], index: int, *, settled: bool, probed: bool = False
) -> list[Job]:
    """The jobs after the warm-up round at `index` has ended.

    The warm-up runs the first cell's own round (its prompts, its request length), so the
    load it puts on the GPU while the clocks ramp up is not thrown away:

    * not settled when its requests ran out: another warm-up round of the same cell follows
      (the settling test reads all of them as one series);
    * settled (or out of warm-up steps): the round went on as the cell's measuring round,
      so the cell's own round is dropped. Its steps from before the settling point are in
      that measurement: what is left of a ramp there is within a few tolerances of the
      settled value, and the round's drift check trims a stretch that still falls;
    * `probed`: the clocks are still ramping but the ramp is evident and modelled
      (`tables.clockramp`): the sweep starts now, and the warm-up's cell moves to the end
      as the anchor, measured on warm clocks with the warm-up's own prompts.
    """
    kind, cell = jobs[index]
    if kind != "warm-up":
        raise ValueError(f"job {index} is a {kind} round, not the warm-up")
    head, tail = list(jobs[: index + 1]), list(jobs[index + 1 :])
    if probed:
        if ("cell", cell) in tail:
            tail.remove(("cell", cell))
        return [*head, *tail, ("anchor", cell)]
    if not settled:
        return [*head, ("warm-up", cell), *tail]
    if ("cell", cell) in tail:
        tail.remove(("cell", cell))
    return head + tail

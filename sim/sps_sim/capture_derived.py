"""The table a capture-derived server builds at start-up (upstream PR #35413), simulated (pure).

With ``SGLANG_DSPARK_ENABLE_CAPTURE_DERIVED_SPS=1``, a compact-mode server that has no table
(or a flat one) times the CUDA graphs it has just captured and installs an additive table
from the timings; ``/server_info`` still reports no table path. What the PR does
(``dspark_sps.py`` ``build_capture_derived_sps_table``, ``dspark_planner.py``
``install_capture_derived_sps_table``), and what this module does the same way with the
simulator's cost model in place of the GPU:

* two ladders: every captured verify tier ``t`` (total verify tokens, the target forward)
  and every captured draft batch size ``b`` (the draft forward), each subsampled to at most
  ``MAX_PROBES`` shapes, always keeping the widest;
* each shape replayed ``WARMUP`` + ``REPS`` times; the probe is the median of the ``REPS``
  and its spread (here half their range);
* per axis: keep shapes >= 1 with a positive time, pool neighbours whose difference the
  spread cannot resolve, then pool adjacent violators until the curve never falls;
* refuse (keep verify-all) with fewer than ``MIN_DERIVED_PROBES`` verify probes or a verify
  curve flatter than ``MIN_DERIVED_DYNAMIC_RANGE`` (max/min); an unmeasurable draft ladder
  becomes ``alpha = [0]`` at ``bs = 1``;
* the table is ``bias = 1e-9`` (host work no graph covers is not measured), ``alpha`` over
  the draft ladder, ``theta`` over the verify tiers; the planner then trims only for a
  predicted gain of at least ``MIN_PREDICTED_GAIN`` over verify-all.

In the cost model a step is ``T(bs, tokens)``; a replay of verify tier ``t`` has
``t / K`` request slots and a draft replay of ``b`` requests costs ``per_request · b``, so
``verify(t) = T(t/K, t) − per_request · t/K`` at capture-time contexts (one KV token per
slot). The derived table therefore differs from the truth the way the PR's does: ``theta``
is interpolated between tiers where a step really pays the next tier, the bs × tokens
interaction is priced at the tier's slot count, and the KV reads of real contexts are
missing.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from sps_operator.tables.formats import SpsAdditiveCostTable
from sps_sim.costmodel import CostPreset

MIN_DERIVED_PROBES = 2
MIN_DERIVED_DYNAMIC_RANGE = 1.5
DERIVED_BIAS_SECONDS = 1e-9
MAX_PROBES = 40
WARMUP = 2
REPS = 5
MIN_PREDICTED_GAIN = 0.05
# Graphs are captured with dummy sequences (SGLang fills seq_lens with 1).
CAPTURE_CONTEXT_TOKENS_PER_SLOT = 1


@dataclass(frozen=True)
class Probe:
    shape: int
    seconds: float
    spread: float


@dataclass(frozen=True)
class Derivation:
    """What start-up measured and, if the gates passed, the table it installs."""

    table: SpsAdditiveCostTable | None
    verify_probes: tuple[Probe, ...]
    draft_probes: tuple[Probe, ...]
    measure_seconds: float

    def log_line(self) -> str:
        """The PR's INFO line when a table is installed (or its WARNING when none is)."""
        if self.table is None:
            return (
                "DSpark SPS table is uninitialized (flat) and could not be derived from the "
                f"captured verify graphs ({len(self.verify_probes)} usable probes): the "
                "verify budget degenerates to verify-all (zero scheduling gain). Pass a "
                "profiled --speculative-dspark-sps-table-path."
            )
        t = self.table
        verify = ", ".join(
            f"{m}: {s * 1000.0:.2f}" for m, s in zip(t.m_probes, t.theta_seconds, strict=True)
        )
        draft = ", ".join(
            f"{b}: {s * 1000.0:.2f}" for b, s in zip(t.bs_probes, t.alpha_seconds, strict=True)
        )
        return (
            f"DSpark SPS table derived from {len(t.m_probes)} verify tiers and "
            f"{len(t.bs_probes)} draft batch sizes in {self.measure_seconds:.2f} s; the verify "
            f"budget is now scheduled. Verify cost (tokens: ms) {verify}. Draft cost "
            f"(requests: ms) {draft}. Unset SGLANG_DSPARK_ENABLE_CAPTURE_DERIVED_SPS to "
            "restore verify-all."
        )


SKIPPED_NO_GRAPHS = (
    "DSpark capture-derived SPS table skipped: decode CUDA graphs are disabled, so replay "
    "time does not describe a verify step. The verify budget stays at verify-all."
)


def subsample(shapes: Sequence[int], max_probes: int = MAX_PROBES) -> list[int]:
    """At most ``max_probes`` shapes spread evenly over the ladder, the widest always in."""
    ordered = sorted(set(shapes))
    if len(ordered) <= max_probes:
        return ordered
    last = len(ordered) - 1
    picks = {round(i * last / (max_probes - 1)) for i in range(max_probes)}
    return [ordered[i] for i in sorted(picks)]


def monotone_non_decreasing(values: Sequence[float]) -> list[float]:
    """Pool adjacent violators until the sequence never falls (weighted means of blocks)."""
    blocks: list[tuple[float, int]] = []  # (mean, count)
    for value in values:
        mean, count = float(value), 1
        while blocks and blocks[-1][0] > mean:
            prev_mean, prev_count = blocks.pop()
            total = prev_count + count
            mean = (prev_mean * prev_count + mean * count) / total
            count = total
        blocks.append((mean, count))
    return [mean for mean, count in blocks for _ in range(count)]


def pool_within_resolution(seconds: Sequence[float], spreads: Sequence[float]) -> list[float]:
    """Flatten each run of neighbours that stays within the spread of the run's first one."""
    pooled = [float(s) for s in seconds]
    n = len(pooled)
    start = 0
    for i in range(1, n + 1):
        resolvable = i < n and abs(pooled[i] - pooled[start]) > max(spreads[i], spreads[start])
        if i == n or resolvable:
            if i - start > 1:
                mean = sum(pooled[start:i]) / (i - start)
                pooled[start:i] = [mean] * (i - start)
            start = i
    return pooled


def clean_cost_axis(probes: Sequence[Probe]) -> tuple[list[int], list[float]] | None:
    """(shapes, seconds) of one axis, unresolvable steps pooled, never falling; None if empty."""
    unique: dict[int, tuple[float, float]] = {}
    for probe in probes:
        if probe.shape >= 1 and probe.seconds > 0.0:
            unique[probe.shape] = (probe.seconds, abs(probe.spread))
    if not unique:
        return None
    shapes = sorted(unique)
    resolved = pool_within_resolution(
        [unique[s][0] for s in shapes], [unique[s][1] for s in shapes]
    )
    return shapes, monotone_non_decreasing(resolved)


def build_capture_derived_table(
    verify_probes: Sequence[Probe], draft_probes: Sequence[Probe]
) -> SpsAdditiveCostTable | None:
    """The additive table of the two ladders, or None when the gates refuse it."""
    verify_axis = clean_cost_axis(verify_probes)
    if verify_axis is None:
        return None
    m_probes, theta = verify_axis
    if len(m_probes) < MIN_DERIVED_PROBES:
        return None
    if max(theta) / min(theta) < MIN_DERIVED_DYNAMIC_RANGE:
        return None
    draft_axis = clean_cost_axis(draft_probes)
    bs_probes, alpha = draft_axis if draft_axis is not None else ([1], [0.0])
    return SpsAdditiveCostTable(DERIVED_BIAS_SECONDS, bs_probes, alpha, m_probes, theta)


def _replay(base_seconds: float, shape: int, noise_cv: float, rng: random.Random) -> Probe:
    sigma = math.sqrt(math.log1p(noise_cv * noise_cv)) if noise_cv > 0 else 0.0
    samples = [base_seconds * math.exp(rng.gauss(0.0, sigma)) for _ in range(REPS)]
    return Probe(shape, statistics.median(samples), (max(samples) - min(samples)) / 2)


def derive(
    preset: CostPreset,
    *,
    tiers: Sequence[int],
    draft_batch_sizes: Sequence[int],
    verify_num_draft_tokens: int,
    seed: int,
) -> Derivation:
    """Time the captured ladders in the cost model and build the table as the PR does."""
    rng = random.Random(seed * 7919 + 35413)  # its own stream: the engine's noise is unchanged
    k = verify_num_draft_tokens
    verify: list[Probe] = []
    draft: list[Probe] = []
    spent = 0.0
    for tier in subsample(tiers):
        slots = max(1, tier // k)
        full = preset.decode_seconds_at_context(
            slots, tier, slots * CAPTURE_CONTEXT_TOKENS_PER_SLOT
        )
        base = full - preset.per_request_s * slots
        verify.append(_replay(base, tier, preset.noise_cv, rng))
        spent += (WARMUP + REPS) * base
    for bs in subsample(draft_batch_sizes):
        base = preset.per_request_s * bs
        draft.append(_replay(base, bs, preset.noise_cv, rng))
        spent += (WARMUP + REPS) * base
    table = build_capture_derived_table(verify, draft)
    return Derivation(table, tuple(verify), tuple(draft), spent)

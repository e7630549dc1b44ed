"""Bounds that the SpsProfile API and the profiler CLI share (one source for both).

The CRD (its OpenAPI bounds and CEL rules), the pydantic models and `sps-profiler run`
all read these numbers, so a sweep the API admits is a sweep the profiler accepts, and
`tests/unit/test_api_limits.py` feeds every boundary to both to keep it so.

Kept free of imports: the profiler, the operator and the docs generator may all use it.
"""

from __future__ import annotations

# --- the sweep ----------------------------------------------------------------------------
# Requests per DP rank. 4096 is above any CUDA-graph capture SGLang ships.
BATCH_SIZE_MIN = 1
BATCH_SIZE_MAX = 4096
# Entries of an explicit `batchSizes` / `--batch-size` list.
BATCH_SIZES_MAX_COUNT = 64
# SGLang treats a diagonal table with <= 1 probe as uninitialized (it serves verify-all),
# so a profile must be able to measure at least two distinct batch sizes. The API enforces
# this; `sps-profiler run` may still measure a single cell (debugging, `--resume`), and the
# table fit refuses a one-probe table.
MIN_PROBES = 2
# `maxBatchSize`: the tapered sweep up to 1 is [1], a single probe.
MAX_BATCH_SIZE_MIN = MIN_PROBES
MAX_BATCH_SIZE_MAX = BATCH_SIZE_MAX
# The profiler's default top of the tapered sweep when neither list nor maximum is given.
DEFAULT_MAX_BATCH_SIZE = 256

# Forced verify-budget fractions (Additive): in (FRAC_MIN, FRAC_MAX].
FRAC_MIN_EXCLUSIVE = 0.0
FRAC_MAX = 1.0
FRACS_MAX_COUNT = 32
# What the operator sweeps for an Additive table when `fracs` is not given.
DEFAULT_ADDITIVE_FRAC_COUNT = 4

REPEATS_MIN = 1
REPEATS_MAX = 16

INPUT_LEN_MIN = 1
INPUT_LEN_MAX = 65536
# The KV context per request a table describes (step time grows with it): the profiler
# measures every round out to it. 300 is where SGLang's profiler's median step sits at its
# defaults (a 16-token prompt plus half of its 572-token requests).
CONTEXT_LEN_MIN = 1
CONTEXT_LEN_MAX = 65536
DEFAULT_CONTEXT_LEN = 300

# The stopping rule: relative width of the median step time's confidence interval.
# Below 0.1 % a round never stops on the CI (it runs into its step cap); above 50 % the
# median is not measured at all.
CI_REL_WIDTH_MIN = 0.001
CI_REL_WIDTH_MAX = 0.5

# Random prompt ids are drawn from [1000, vocab - 1000): the vocabulary must exceed 2000.
VOCAB_SIZE_MIN = 2001
VOCAB_SIZE_MAX = 10_000_000

MIN_STEADY_STEPS_MIN = 1
MIN_STEADY_STEPS_MAX = 100_000
MIN_STEADY_SECONDS_MIN = 0.0
MIN_STEADY_SECONDS_MAX = 3600.0

ROUND_TIMEOUT_SECONDS_MIN = 1.0
ROUND_TIMEOUT_SECONDS_MAX = 7200.0

# Cells of one sweep: batch sizes x fracs (1 for a diagonal sweep) x repeats. Each measured
# round is about 0.7-1 KB of JSON (714 bytes at dp=1, more per DP rank); an Additive run also
# measures its diagonal phase (batch sizes x repeats), so a run publishes at most twice this
# many rounds: <= ~512 KB uncompressed, half of the 1 MiB an API object may hold, leaving room
# for the table, manifest and metadata (an 18 x 8 x 10 sweep, 1440 cells, overflowed it). The
# fit sees at most this many distinct cells (its cost grows ~n^3: 800 cells took 86 s).
MAX_SWEEP_CELLS = 256

# The tapered sweep of `--max-batch-size M` (SGLang's reference profiler): these values up
# to M, then every 64 from 256 up to M, then M itself if it is not already in.
TAPERED_SWEEP_BELOW_256 = (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224)
TAPERED_SWEEP_STEP_FROM_256 = 64


def tapered_sweep(max_batch_size: int) -> list[int]:
    """The batch sizes `--max-batch-size M` measures (M >= 1): what the profiler runs and
    what the operator expects a run to cover."""
    m = max_batch_size
    sweep = [v for v in TAPERED_SWEEP_BELOW_256 if v <= m]
    sweep += range(256, m + 1, TAPERED_SWEEP_STEP_FROM_256)
    return sweep if sweep[-1] == m else [*sweep, m]


def tapered_sweep_size(max_batch_size: int) -> int:
    """How many batch sizes `--max-batch-size M` measures (the CRD's CEL computes the same)."""
    return len(tapered_sweep(max_batch_size))


def sweep_cells(batch_sizes: int, fracs: int, repeats: int) -> int:
    """Cells of a sweep from its counts (fracs: 1 for a diagonal sweep)."""
    return batch_sizes * max(fracs, 1) * repeats


# --- one decode step (plausibility: the profiler's rounds and fit, the operator's check of a
# Job's result, a table's self-check) --------------------------------------------------------
# Upper: SGLang records `step_cpu_ms` only when the gap is in (0, 1000] ms (contract §11.7).
MAX_STEP_SECONDS = 1.0
# Lower: 0.1 ms. `step_cpu_ms` is the wall time between two decode steps' observes, so a step
# holds at least (a) one forward of the target plus DSpark's draft and verify, each a chain
# of >= ~8 kernels per layer, and even inside a CUDA graph a kernel costs >= ~1 µs: >= 100
# kernels for the smallest real LLM (12+ layers) is >= 100 µs on its own; (b) every weight
# read from HBM once: 1 GB for a 0.5 B-parameter bf16 model is 125 µs at B200's 8 TB/s; (c)
# a pass of SGLang's Python scheduler loop (batch, sample, process results). Real decode
# steps take >= ~1 ms on the smallest models and 5-100 ms on served ones (the simulator's
# presets: >= 4.6 ms). A server writing seconds where SGLang writes milliseconds reports
# 0.005-0.1 "ms" for such steps: below this bound, never a table.
MIN_STEP_SECONDS = 1e-4

# --- names and text -----------------------------------------------------------------------
# metadata.name of an SpsProfile. Derived names must stay valid: a profiling Job is
# `<name>-<10 hex>-p2` (<= 54), its pods add `-xxxxx` (<= 60), and the Job controller puts
# the Job name into a label value (<= 63).
MAX_PROFILE_NAME = 40

# Status text that comes from a profiling Job (the user's image) or from exceptions.
MAX_PROGRESS_LENGTH = 256
MAX_MESSAGE_LENGTH = 4096
MAX_CONDITION_MESSAGE_LENGTH = 32768
# Lines of a list in status that reports on a server (what changed, what is not
# fingerprinted): how many, and how long each.
MAX_REPORT_LINES = 16
MAX_REPORT_LINE_LENGTH = 256

# refresh.minIntervalSeconds: at most 30 days between scheduled runs / rollouts.
MAX_REFRESH_INTERVAL_SECONDS = 30 * 24 * 3600

# --- what the operator parses of a tenant's Deployment, per pass ---------------------------
# A server's command line: SGLang's own launch lines run to ~100 words; a line of thousands
# of flags is not a server the operator can read, and reading an unknown flag costs a scan
# of the known ones (110,000 unknown flags in a 1.4 MB target took 2.5 CPU s per pass).
MAX_SERVER_ARGS = 2048
MAX_SERVER_ARGS_CHARS = 128 * 1024
MAX_SERVER_ENV = 1024
# The Deployment's pod template as JSON: real templates are a few KiB to a few tens of KiB.
MAX_TARGET_TEMPLATE_BYTES = 512 * 1024

"""Which SGLang the simulator plays: the start-up rules that differ between builds (pure).

A table is only useful if the server it is rolled onto starts with it, and servers in the
field disagree on what they do without one. Each flavor is one build's behaviour, read
from its source (docs/compatibility.md lists them with the commits):

* ``upstream`` (sgl-project/sglang main; EanWang211123/sglang ``52afe87a``): a compact
  server without ``--speculative-dspark-sps-table-path`` starts with the flat table
  (verify-all) and its verify-all shortcut ignores the profiler's budget pin.
* ``require-path`` (fzyzcjy/sglang, ``dspark_components/dspark_scheduler.py``
  ``build_sps_cost_table`` at ``ce21bd9e``): a non-static server refuses to start without a
  table path; the literal ``const`` opts into the flat table. Its loader
  (``dspark_sps_table.py``) knows only the diagonal format.
* ``diagonal-only``: flat start as upstream, but the fork's diagonal-only loader, so an
  additive table fails start-up with msgspec's ``Object missing required field``.
* ``capture-derived`` (upstream PR #35413, open): with
  ``SGLANG_DSPARK_ENABLE_CAPTURE_DERIVED_SPS=1`` a compact server with no (or a flat) table
  derives an additive table from its captured CUDA graphs (`sps_sim.capture_derived`).

The DSpark + LoRA rule (upstream #34337, 2026-08-21: ``server_args.py``
``_check_lora_speculative_compatibility`` at 15a43983, later ``arg_groups/lora_hook.py``)
applies to every flavor. (Releases up to v0.5.17 refuse LoRA with any speculative
algorithm but NGRAM; not modelled.)
"""

from __future__ import annotations

from collections.abc import Mapping

UPSTREAM = "upstream"
REQUIRE_PATH = "require-path"
DIAGONAL_ONLY = "diagonal-only"
CAPTURE_DERIVED = "capture-derived"
FLAVORS = (UPSTREAM, REQUIRE_PATH, DIAGONAL_ONLY, CAPTURE_DERIVED)
FLAVOR_ENV = "SPS_SIM_SGLANG_FLAVOR"

# The fork's sentinel: `--speculative-dspark-sps-table-path const` (or `=const`).
CONST_TABLE_PATH = "const"
CAPTURE_DERIVED_ENV = "SGLANG_DSPARK_ENABLE_CAPTURE_DERIVED_SPS"

# fzyzcjy/sglang dspark_scheduler.py build_sps_cost_table, verbatim: the operator matches it.
REQUIRE_PATH_MESSAGE = (
    "DSpark ragged-verify scheduler is enabled (mode != static) but "
    "--speculative-dspark-sps-table-path was not supplied. Build a "
    "hardware-aware SPS cost table offline against a plain (non-speculative) "
    "server with `python -m sglang.benchmark.dspark_sps_profiler` and pass "
    "its JSON path (see docs/advanced_features/dspark_sps_table.md). To "
    "deliberately run with a flat constant-SPS table instead "
    "(verify-all-up-to-gamma, zero throughput gain), pass "
    "--speculative-dspark-sps-table-path=const."
)


def lora_refusal(mode: str) -> str:
    """Upstream's start-up error for DSpark + LoRA outside static mode (the mode as set)."""
    return (
        "LoRA with EAGLE/NEXTN/EAGLE3 speculative decoding does not support "
        f"SGLANG_RAGGED_VERIFY_MODE={mode!r}: the per-request verify lengths it schedules "
        "break the uniform-width LoRA segment layout."
    )


def requires_table_path(flavor: str) -> bool:
    return flavor == REQUIRE_PATH


def loader_is_diagonal_only(flavor: str) -> bool:
    return flavor in (REQUIRE_PATH, DIAGONAL_ONLY)


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """SGLang's ``EnvBool`` (``environ.py``): true for 1/true/yes/y, any case."""
    return env.get(name, "").lower() in ("1", "true", "yes", "y")


def capture_derivation_requested(flavor: str, env: Mapping[str, str]) -> bool:
    """Only a build with PR #35413 reads the switch; upstream main ignores it."""
    return flavor == CAPTURE_DERIVED and env_flag(env, CAPTURE_DERIVED_ENV)

"""Which SGLang build a server is, and what it refuses (pure): docs/compatibility.md.

Builds disagree on what a compact server does without a table, on which table formats
they load, and on which flag combinations they refuse at start-up. The operator reads what
it can from the pod spec (the table flag, the environment, the image's release) and from
what a profiling clone said when it would not start; it never puts a table onto a server
that would then fail, and says why in a condition:

* `--speculative-dspark-sps-table-path const` is the fzyzcjy/sglang fork's flat table: the
  fork refuses to start a compact server without a path, and its loader reads only the
  diagonal format. The clone keeps `const` where it would otherwise start compact without
  a table; Inject replaces `const` with the table's path; an Additive profile is refused.
* A server whose profiling clone refused the phase-2 additive seed with the diagonal-only
  loader's message (msgspec's ``Object missing required field `sample_batch_tokens```) is
  recorded (status.diagonalOnlyServers) and refused the same way; so is a server seen
  with `const`, which its injected table path no longer shows.
* `SGLANG_DSPARK_ENABLE_CAPTURE_DERIVED_SPS` on a compact server without a table (upstream
  PR #35413, in no release yet): the server derives a table from its CUDA graphs at start;
  reported, and the profiled table replaces it (an injected path wins).
* DSpark + LoRA: upstream refuses LoRA outside static mode (#34337, after v0.5.17);
  releases up to v0.5.17 refuse LoRA with DSpark in any mode.
* A PD-disaggregated server (`--disaggregation-mode prefill|decode`) is refused: a decode
  server takes requests only with the KV its prefill peer sends, so a clone alone cannot
  run the profiler's batches, and it replays the full-width verify graph whatever the
  budget; a prefill server never decodes.
* DeepSeek-V4.1-Flash (an Engram model) with a table in compact or cap-accept mode dies in
  CUDA-graph capture on every rank (sglang #39173, open): refused outside static mode, and
  for Additive (phase 2's clone is compact with a seed table). A clone that dies so is
  recognised by its last words.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from sps_operator.api import labels as L
from sps_operator.api import limits
from sps_operator.api.fingerprint import Position, ServerVersion
from sps_operator.api.reasons import (
    DIAGONAL_ONLY_SERVER,
    ENGRAM_COMPACT_TABLE,
    LORA_NEEDS_STATIC_MODE,
    LORA_UNSUPPORTED,
    PD_DISAGGREGATED_SERVER,
    SERVER_REFUSED_TO_START,
)
from sps_operator.api.spec import TableKind
from sps_operator.controller.policies.placement import PodInfo
from sps_operator.controller.sglang.serverconfig import (
    CAPTURE_DERIVED_ENV,
    CONST_TABLE_PATH,
    TABLE_PATH_FLAG,
    ServerConfig,
)

# What a server without a table of the operator's runs (status.targets[].tableSource).
SOURCE_CONST = "const"
SOURCE_CAPTURE_DERIVED = "capture-derived"

# Start-up refusals as SGLang words them (the simulator plays them verbatim).
ADDITIVE_REFUSED = "Object missing required field `sample_batch_tokens`"
PATH_REQUIRED = "--speculative-dspark-sps-table-path was not supplied"
LORA_REFUSED = (
    "LoRA with EAGLE/NEXTN/EAGLE3 speculative decoding does not support",
    "Currently LoRA is only compatible with NGRAM speculative decoding",
)
ENGRAM_CAPTURE_FAILED = "engram target-verify expects one equal block per request"
# Engram models, by the model path's words (sglang #39173: DeepSeek-V4.1-Flash).
ENGRAM_MODELS = re.compile(r"deepseek[-_]?v4\.?1[-_]?flash", re.IGNORECASE)
# The last release that refuses LoRA with any speculative algorithm but NGRAM.
LAST_RELEASE_WITHOUT_DSPARK_LORA = (0, 5, 17)
MAX_EVIDENCE = 600


def _env_true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "y")


def _may_carry_unreleased(version: ServerVersion) -> bool:
    """Whether a build may carry a change that is in no release yet (PR #35413): not a
    plain release; anything else may."""
    return not (version.known and version.position == Position.EXACT)


def table_source(config: ServerConfig) -> str | None:
    """What the server runs while it has no table of the operator's: the fork's `const`
    flat table, a capture-derived one, or (None) a table path of its own or the flat start."""
    if config.table_path == CONST_TABLE_PATH:
        return SOURCE_CONST
    if (
        config.table_path is None
        and _env_true(config.value(CAPTURE_DERIVED_ENV))
        and config.verify_mode == "compact"
        and _may_carry_unreleased(config.version)
    ):
        return SOURCE_CAPTURE_DERIVED
    return None


def diagonal_only_evidence(config: ServerConfig, learned: Collection[str]) -> str | None:
    """Why the server's loader is known to read only diagonal tables; None when not."""
    if config.table_path == CONST_TABLE_PATH:
        return (
            f"it is started with {TABLE_PATH_FLAG} const, the fzyzcjy/sglang fork's flat "
            "table, and that fork's loader reads only the diagonal format"
        )
    if config.fingerprint() in learned:
        return (
            "this same server was seen started with const (the fzyzcjy/sglang fork) before "
            "its table replaced it, or its profiling clone refused an additive table at "
            f"start-up ({ADDITIVE_REFUSED}): status.diagonalOnlyServers"
        )
    return None


def remembered(learned: Sequence[str], config: ServerConfig) -> list[str]:
    """status.diagonalOnlyServers with this server in it (newest last, bounded): a server
    once known diagonal-only stays so after Inject replaced its `const`, and until it
    changes (another fingerprint)."""
    server = config.fingerprint()
    if server in learned:
        return list(learned)
    return [*learned[-(limits.MAX_REPORT_LINES - 1) :], server]


def refusal(kind: str, config: ServerConfig, learned: Collection[str]) -> tuple[str, str] | None:
    """(reason, message) when the operator must not profile this server for a table of
    `kind`, or put one onto it; None when it may."""
    mode = config.verify_mode
    if config.lora:
        version = config.version
        if (
            version.release is not None
            and version.position == Position.EXACT
            and version.release <= LAST_RELEASE_WITHOUT_DSPARK_LORA
        ):
            return LORA_UNSUPPORTED, (
                f"the server runs LoRA with DSpark, which SGLang {version.text} refuses at "
                "start-up (up to v0.5.17 LoRA works only with NGRAM speculative decoding): "
                "the server cannot run, so no table is measured or put onto it. Use a later "
                "SGLang in static mode, or run without LoRA"
            )
        if mode != "static":
            return LORA_NEEDS_STATIC_MODE, (
                f"the server runs LoRA with DSpark in SGLANG_RAGGED_VERIFY_MODE={mode!r}, which "
                "SGLang refuses at start-up (only static mode takes LoRA, #34337); the operator "
                "puts no table onto a server that would then fail. Run it in static mode "
                "(which reads no table) or without LoRA"
            )
        if kind == TableKind.ADDITIVE:
            return LORA_NEEDS_STATIC_MODE, (
                "the server runs LoRA with DSpark (static mode only): an Additive table's "
                "second phase runs a compact-mode clone, which SGLang refuses with LoRA. Set "
                "table.kind: Diagonal"
            )
    disaggregation = (config.value("disaggregation_mode") or "null").strip()
    if disaggregation != "null":
        return PD_DISAGGREGATED_SERVER, (
            f"the server runs --disaggregation-mode {disaggregation}: "
            + (
                "a decode server takes requests only with the KV cache its prefill peer "
                "sends, so a profiling clone of it alone cannot run the profiler's batches, "
                "and it replays the full-width verify graph whatever the budget (no DP tier "
                "gathering), so a clone without the mode would measure another server"
                if disaggregation == "decode"
                else "a prefill server runs no decode steps, so an SPS table does nothing there"
            )
            + ". No table the operator can measure fits it, so none is measured or put onto "
            "it: narrow spec.selector to servers without --disaggregation-mode"
        )
    model = config.value("model_path") or ""
    if ENGRAM_MODELS.search(model) and (mode != "static" or kind == TableKind.ADDITIVE):
        where = (
            f"in SGLANG_RAGGED_VERIFY_MODE={mode!r}"
            if mode != "static"
            else "in phase 2 of an Additive run (a compact clone with a seed table)"
        )
        return ENGRAM_COMPACT_TABLE, (
            f"{model} is an Engram model: {where} a profiled table makes its CUDA-graph "
            f"capture die on every rank ({ENGRAM_CAPTURE_FAILED}; sglang #39173), so no table "
            "is measured or put onto it. Run it in static mode with table.kind Diagonal"
        )
    if kind == TableKind.ADDITIVE:
        evidence = diagonal_only_evidence(config, learned)
        if evidence is not None:
            return DIAGONAL_ONLY_SERVER, (
                f"this server's table loader reads only diagonal tables: {evidence}. An "
                "additive table would stop it from starting, so none is measured or rolled. "
                "Set table.kind: Diagonal"
            )
    return None


# --------------------------------------------------------------------------- the clone


def start_refusal(message: str) -> tuple[str, str] | None:
    """A start-up refusal recognised in a server's last words (its termination message):
    (reason, what it means); None for anything else (a crash may be transient)."""
    if ADDITIVE_REFUSED in message:
        return (
            DIAGONAL_ONLY_SERVER,
            "the server's loader refused the additive table (diagonal only)",
        )
    if PATH_REQUIRED in message:
        return SERVER_REFUSED_TO_START, (
            "the server refuses to start in compact mode without a table path (the "
            f"fzyzcjy/sglang fork): start it with {TABLE_PATH_FLAG}=const"
        )
    if ENGRAM_CAPTURE_FAILED in message:
        return ENGRAM_COMPACT_TABLE, (
            "the server's CUDA-graph capture died with the table (an Engram model, sglang "
            "#39173): use table.kind Diagonal in static mode"
        )
    if any(words in message for words in LORA_REFUSED):
        return LORA_NEEDS_STATIC_MODE, "the server refuses LoRA in this mode"
    return None


def clone_refusal(pods: Sequence[PodInfo], run: str, container: str) -> tuple[str, str, str] | None:
    """(reason, meaning, the server's words) when the run's profiling clone refused to
    start in a way that will not change on a retry; None otherwise."""
    for pod in pods:
        if pod.deleting or pod.labels.get(L.LABEL_RUN) != run:
            continue
        for name, message in pod.exits:
            if name != container:
                continue
            found = start_refusal(message)
            if found is not None:
                words = message.strip()[-MAX_EVIDENCE:]
                return found[0], found[1], words
    return None

"""What a DSpark server's step cost depends on: the one declared list (pure, no I/O).

A table is measured for one server and must never serve another. The fingerprint under
which it is stored is a hash of the inputs below, as the server gets them. Each entry says
where the operator reads it (the container's args, its environment, its image), under
which spellings, what `/server_info` calls it (the profiler records those), since which
SGLang release it changes a step's cost and until which it is read at all, and why. The
operator's parser (`controller/sglang/serverconfig.py`), the profiler's record of the server
(`profiler/server_info.py`), docs/fingerprint.md (`fingerprint_doc`, checked by a test) and
`sps-operator fingerprint` all come from this list.

Read against SGLang's sources: upstream main 15a43983 (2026-08-22), releases v0.5.16 (the
first with DSpark) and v0.5.17. Releases after v0.5.17 are not out yet: an input that
upstream added or removed after v0.5.17 has `since`/`until` "0.5.18", the first release
that can carry the change.

Entries with `fingerprinted=False` are read and known not to change a step's cost (the
table path the operator injects, observability, budget and acceptance knobs, options of
other speculative algorithms): listing them keeps them out of the report of cost-looking
inputs that are not fingerprinted.

Which SGLang a server runs decides which version-bound entries count (`matters`): a plain
release tag (`lmsysorg/sglang:v0.5.17`, variants such as `-cu129` included) is that
release; a dev or rc build is on its way to a release; a post release or a local build
(`0.5.17+g1a2b3c`) may carry anything merged since; anything else is unknown, and an
unknown version counts every entry (a needless reprofile, never a wrong table).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

# The fingerprint's own version: a table stored under another one is compared with the
# function of its version (controller/sglang/fingerprint_v1.py keeps the previous one).
FINGERPRINT_VERSION = 2
FINGERPRINT_PREFIX = f"v{FINGERPRINT_VERSION}-"


# SGLang's environ.py copies every `SGL_X` variable over `SGLANG_X` when it is imported.
SGL_PREFIX = "SGL_"
SGLANG_PREFIX = "SGLANG_"


def sglang_name(name: str) -> str:
    """The variable SGLang reads `name` as: `SGL_X` is copied over `SGLANG_X` at start."""
    if name.startswith(SGL_PREFIX):
        return SGLANG_PREFIX + name[len(SGL_PREFIX) :]
    return name


def sgl_twin(name: str) -> str:
    """The `SGL_` spelling SGLang copies over `name` (`name` itself for another one)."""
    if name.startswith(SGLANG_PREFIX):
        return SGL_PREFIX + name[len(SGLANG_PREFIX) :]
    return name


class Where(StrEnum):
    ARGS = "args"
    ENV = "env"
    IMAGE = "image"


class Kind(StrEnum):
    VALUE = "value"  # --flag VALUE or --flag=VALUE
    SWITCH = "switch"  # --flag (argparse store_true)
    LIST = "list"  # --flag V1 V2 ... (nargs + or *)
    BOOL = "bool"  # SGLang EnvBool: 1/true/yes/y or 0/false/no/n, anything else = default
    TEXT = "text"  # an env value taken as written


@dataclass(frozen=True)
class CostInput:
    name: str  # the key in the fingerprint: a ServerArgs field, a variable, "image"
    where: Where
    why: str
    spellings: tuple[str, ...] = ()  # flags: canonical first, then SGLang's aliases
    kind: Kind = Kind.VALUE
    since: str | None = None  # first SGLang release where it changes a step's cost
    until: str | None = None  # first release where nothing reads it any more
    # SGLang's default (normalised): an input set to it is the server without it. Every env
    # switch has one; a flag only when added after version 2's first list (an earlier flag
    # written at its default stays counted, so no existing table goes stale).
    default: str | None = None
    # env: older names SGLang copies over this one at start (`_print_deprecated_env`); its
    # `SGL_` spelling (`sgl_spelling`) is copied last and wins over all of them.
    old_names: tuple[str, ...] = ()
    fingerprinted: bool = True  # False: read, known not to change a step's cost
    server_info: bool = True  # flags: /server_info reports the field (every ServerArgs does)

    @property
    def sgl_spelling(self) -> str | None:
        """The `SGL_` spelling of an `SGLANG_` variable (SGLang copies `SGL_X` over
        `SGLANG_X` at start, so it wins); None for a flag or the image."""
        if self.where != Where.ENV or not self.name.startswith(SGLANG_PREFIX):
            return None
        return sgl_twin(self.name)

    def env_spellings(self) -> tuple[str, ...]:
        """The variables SGLang reads as this one, the winner first: `SGL_X`, then the
        deprecated old names, then `SGLANG_X` itself."""
        sgl = self.sgl_spelling
        return (*([sgl] if sgl else []), *reversed(self.old_names), self.name)

    @property
    def label(self) -> str:
        """How a user sees it: the canonical flag, the variable, or "image"."""
        if self.where == Where.ARGS:
            return self.spellings[0]
        return self.name


def _flag(name: str, why: str, *aliases: str, **kw: object) -> CostInput:
    canonical = "--" + name.replace("_", "-")
    return CostInput(name, Where.ARGS, why, (canonical, *aliases), **kw)  # type: ignore[arg-type]


def _switch(name: str, why: str, *aliases: str, **kw: object) -> CostInput:
    return _flag(name, why, *aliases, kind=Kind.SWITCH, **kw)


def _env(name: str, why: str, **kw: object) -> CostInput:
    return CostInput(name, Where.ENV, why, (name,), **kw)  # type: ignore[arg-type]


def _bool_env(name: str, default: bool, why: str, **kw: object) -> CostInput:
    return _env(name, why, kind=Kind.BOOL, default="true" if default else "false", **kw)


_DRAFT = "the draft forward's kernels (per-request draft cost α)"
_PARALLEL = "how the model is split over GPUs: every step's compute and communication"
_GRAPHS = "which decode CUDA graphs are captured: the verify tiers a step replays"
_LORA = "LoRA kernels run in every step (DSpark + LoRA needs static mode, see compatibility)"
_NOT_DSPARK = "an option of another speculative algorithm; DSpark does not read it"
_BUDGET = "changes which budget the planner picks, not what a step of a given size costs"
_OBSERVE = "observability or profiling (the profiling clone sets its own); small overhead only"
_COLLECTIVE = "the all-reduce / all-gather implementation: communication in every step"
_PER_POD = "per pod of a multi-node group (its rank, the leader's address), not a cost"

COST_INPUTS: tuple[CostInput, ...] = (
    CostInput(
        "image", Where.IMAGE, "the server's code: kernels, planner, loader", server_info=False
    ),
    # ---- the model and the draft
    _flag("model_path", "the target model: every step's compute", "--model"),
    _flag("revision", "another revision of the target model's weights"),
    _flag("speculative_algorithm", "DSPARK or not (the operator serves DSpark only)"),
    _flag("speculative_draft_model_path", "the draft model", "--speculative-draft-model"),
    _flag("speculative_draft_model_revision", "another revision of the draft's weights"),
    _flag("speculative_draft_model_quantization", _DRAFT),
    _flag("speculative_dspark_block_size", "the draft width K: verify tokens per request"),
    _flag("speculative_num_draft_tokens", "verify tokens per request (K + 1 for DSpark)"),
    _flag("dtype", "the weights' data type"),
    _flag("quantization", "the weights' quantization kernels"),
    _flag("kv_cache_dtype", "KV bytes read by every verify step"),
    _flag("speculative_draft_kv_cache_dtype", _DRAFT),
    # ---- parallelism
    _flag("tp_size", _PARALLEL, "--tensor-parallel-size"),
    _flag("dp_size", _PARALLEL, "--data-parallel-size"),
    _flag("ep_size", _PARALLEL, "--expert-parallel-size", "--ep"),
    _flag("attn_cp_size", _PARALLEL, "--attention-context-parallel-size"),
    _flag("moe_dp_size", _PARALLEL, "--moe-data-parallel-size"),
    _flag("moe_dense_tp_size", _PARALLEL),
    _switch("enable_dp_attention", _PARALLEL + " (and DP's per-step synchronisation)"),
    _switch("enable_dp_lm_head", "vocab-parallel LM head over bs·K verify tokens"),
    # Added after version 2's first list: written at SGLang's default, each is the server
    # without it (so the upgrade reprofiles only servers that set one).
    _flag(
        "pp_size",
        _PARALLEL + " (pp > 1 also turns off DSpark's DP tier gathering)",
        "--pipeline-parallel-size",
        default="1",
    ),
    _flag("nnodes", _PARALLEL + " (a multi-node group: collectives cross nodes)", default="1"),
    _flag(
        "disaggregation_mode",
        "PD disaggregation: a decode server pins the full-width verify graph "
        "(no DP tier gathering); see compatibility",
        default="null",
    ),
    _switch("disable_custom_all_reduce", _COLLECTIVE),
    _switch("enable_nccl_nvls", _COLLECTIVE),
    _switch("enable_symm_mem", _COLLECTIVE),
    _switch("enable_eplb", "expert rebalancing: which GPU runs which experts, and its pauses"),
    # ---- attention, MoE, kernels
    _flag("attention_backend", "the verify forward's attention kernels"),
    _flag("decode_attention_backend", "the verify forward's attention kernels"),
    _flag("speculative_draft_attention_backend", _DRAFT),
    _flag(
        "speculative_attention_mode",
        "target verify and draft extend use prefill or decode attention",
    ),
    _flag(
        "prefill_attention_backend",
        "target verify runs on the prefill attention backend by default "
        "(speculative_attention_mode=prefill)",
    ),
    _flag("triton_attention_num_kv_splits", "the Triton decode kernel's split"),
    _flag("page_size", "KV page granularity: attention kernels and the verify window's KV writes"),
    _flag("moe_a2a_backend", "the MoE all-to-all: communication per MoE layer per step"),
    _flag("moe_runner_backend", "the MoE GEMM kernels"),
    _flag("speculative_moe_runner_backend", _DRAFT),
    _flag("speculative_moe_a2a_backend", _DRAFT),
    _switch("enable_w4a4_mxfp4_megamoe", "MegaMoE: the target's fused W4A4 MXFP4 MoE kernels"),
    _switch("speculative_enable_w4a4_mxfp4_megamoe", _DRAFT),
    _flag("speculative_dsa_topk_backend", _DRAFT),
    _switch("enable_torch_compile", "compiled kernels in the captured graphs"),
    _flag("torch_compile_max_bs", "up to which batch size the graphs are compiled"),
    _switch("enable_deterministic_inference", "deterministic kernels are slower"),
    # ---- scheduling
    _switch(
        "disable_overlap_schedule",
        "the scheduler's CPU work on every step's critical path; the budget computed synchronously",
    ),
    _switch("enable_two_batch_overlap", "overlaps two micro-batches in a step"),
    _switch("enable_single_batch_overlap", "overlaps communication within a step"),
    _switch("enable_mixed_chunk", "prefill chunks mixed into decode steps"),
    _flag("num_continuous_decode_steps", "decode steps per scheduler iteration"),
    _switch(
        "speculative_skip_dp_mlp_sync", "no DP tier gather: compact replays the full-width graph"
    ),
    _switch(
        "speculative_dspark_align_verify_tokens_to_graph_tier",
        "compact: padding slots "
        "become real verify tokens (more attention and KV work in the same graph)",
    ),
    _switch("speculative_adaptive", "adjusts the speculative steps at run time"),
    _flag("speculative_adaptive_config", "adjusts the speculative steps at run time"),
    _flag("speculative_draft_window_size", _DRAFT),
    # ---- CUDA graphs and the request pool
    _flag("cuda_graph_max_bs_decode", _GRAPHS, "--cuda-graph-max-bs"),
    _flag("cuda_graph_bs_decode", _GRAPHS, "--cuda-graph-bs", kind=Kind.LIST),
    _flag("cuda_graph_backend_decode", _GRAPHS),
    _flag("cuda_graph_config", _GRAPHS),
    _switch("disable_decode_cuda_graph", "every step runs eagerly"),
    _switch("disable_cuda_graph", "every step runs eagerly (deprecated spelling)"),
    _switch("disable_cuda_graph_padding", "steps that need padding run eagerly"),
    _flag("max_running_requests", "the request pool: the captured batch sizes and tiers"),
    _flag("max_total_tokens", "the KV pool: the request pool when max_running_requests is unset"),
    _flag(
        "mem_fraction_static", "the KV pool: the request pool when max_running_requests is unset"
    ),
    # ---- LoRA
    _switch("enable_lora", _LORA),
    _flag("lora_paths", _LORA, kind=Kind.LIST),
    _flag("lora_target_modules", _LORA, kind=Kind.LIST),
    _flag("max_loras_per_batch", _LORA),
    _flag("max_lora_rank", _LORA),
    _flag("lora_backend", _LORA),
    # ---- environment (SGLang never reports it: read from the pod spec only)
    _env(
        "SGLANG_RAGGED_VERIFY_MODE",
        "static, compact or cap-accept: which graph a step replays",
        kind=Kind.TEXT,
        default="static",
    ),
    _bool_env(
        "SGLANG_DSPARK_FOLDED_PROPOSAL",
        True,
        "off: the draft's Markov proposal and "
        "sampling run eagerly after the draft graph (~4 ms/step reported)",
        since="0.5.18",
    ),
    _bool_env(
        "SGLANG_DSPARK_STACKED_CTX_KV",
        True,
        "one stacked KV-projection GEMM for every draft layer, or one per layer, every step",
        since="0.5.18",
    ),
    _bool_env(
        "SGLANG_DSPARK_EMBED_IN_GRAPH",
        True,
        "off: an eager embedding kernel per step outside the draft graph",
        since="0.5.18",
    ),
    _bool_env(
        "SGLANG_SCHEDULER_SKIP_ALL_GATHER",
        False,
        "under DP attention: no per-step all-gather, but compact replays the full-width graph",
    ),
    _bool_env(
        "SGLANG_PREP_IN_CUDA_GRAPH",
        True,
        "DeepSeek-V4 attention metadata built in the "
        "graph or eagerly every step; deleted upstream (#34926)",
        until="0.5.18",
    ),
    _bool_env("SGLANG_DSPARK_FAST_KERNEL", True, _DRAFT),
    _bool_env("SGLANG_DSPARK_FP32_LM_HEAD", False, _DRAFT),
    _bool_env("SGLANG_DSPARK_FAST_SAMPLING", True, _DRAFT),
    _env("SGLANG_DSPARK_FOLDED_SAMPLING", _DRAFT, kind=Kind.TEXT, since="0.5.17"),
    _bool_env("SGLANG_DSPARK_OPT_MARKOV_W2_BF16", True, _DRAFT),
    _bool_env("SGLANG_DSPARK_OPT_MARKOV_W2_TP_SHARD", True, _DRAFT),
    _bool_env("SGLANG_DSPARK_ENABLE_MULTI_STREAM", True, _DRAFT),
    _bool_env(
        "SGLANG_NCCL_ALL_GATHER_IN_OVERLAP_SCHEDULER_SYNC_BATCH",
        False,
        "under DP attention: which group the per-step synchronisation uses",
    ),
    _bool_env("SGLANG_ENABLE_OVERLAP_PLAN_STREAM", False, "the planner on its own stream"),
    _bool_env(
        "SGLANG_DSPARK_OPT_FUSED_GREEDY_MARKOV",
        False,
        "the draft's greedy Markov sampling fused into the captured draft graph",
    ),
    _env(
        "SGLANG_SPEC_TP_SYNC",
        "which speculative decisions rank 0 broadcasts to its TP group every step",
        kind=Kind.TEXT,
        default="all",
    ),
    _bool_env(
        "SGLANG_ENABLE_METADATA_GLUE_GRAPH",
        False,
        "the per-replay attention-metadata prep captured in a CUDA graph (host cost per step)",
    ),
    _bool_env("SGLANG_OPT_FUSED_KDA_VERIFY", False, "fused KDA kernels in the verify forward"),
    _bool_env(
        "SGLANG_TEST_RAGGED_VERIFY_FORCE_UNIFORM_CAPTURE",
        False,
        "compact: verify graphs captured uniform, so a step replays another graph",
    ),
    # Its default changed between releases (False, then True): any value written counts.
    _env(
        "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2",
        _COLLECTIVE + " (default differs by release)",
        kind=Kind.BOOL,
        old_names=("SGLANG_USE_JIT_ALL_REDUCE",),
    ),
    # ---- read, not a step cost
    _flag(
        "speculative_dspark_sps_table_path",
        "the table itself (the operator injects it)",
        fingerprinted=False,
    ),
    _flag("speculative_dspark_confidence_sts_path", _BUDGET, fingerprinted=False),
    _flag("speculative_accept_threshold_single", _BUDGET, fingerprinted=False),
    _flag("speculative_accept_threshold_acc", _BUDGET, fingerprinted=False),
    _flag("speculative_num_steps", "forced to 1 for DSpark", fingerprinted=False),
    _flag("speculative_eagle_topk", "forced to 1 for DSpark", fingerprinted=False),
    _flag("speculative_draft_load_format", "how weights are loaded", fingerprinted=False),
    _flag("speculative_token_map", _NOT_DSPARK, fingerprinted=False),
    _flag("speculative_dflash_block_size", _NOT_DSPARK, fingerprinted=False),
    _flag("speculative_dflash_draft_window_size", _NOT_DSPARK, fingerprinted=False),
    _flag("speculative_ngram_min_bfs_breadth", _NOT_DSPARK, fingerprinted=False),
    _flag("speculative_ngram_max_bfs_breadth", _NOT_DSPARK, fingerprinted=False),
    _flag("speculative_ngram_match_type", _NOT_DSPARK, fingerprinted=False),
    _flag("speculative_ngram_max_trie_depth", _NOT_DSPARK, fingerprinted=False),
    _flag("speculative_ngram_capacity", _NOT_DSPARK, fingerprinted=False),
    _flag("speculative_ngram_external_corpus_path", _NOT_DSPARK, fingerprinted=False),
    _flag("speculative_ngram_external_corpus_max_tokens", _NOT_DSPARK, fingerprinted=False),
    _flag("speculative_ngram_external_sam_budget", _NOT_DSPARK, fingerprinted=False),
    _flag("cuda_graph_max_bs_prefill", "prefill graphs only", fingerprinted=False),
    _flag("cuda_graph_bs_prefill", "prefill graphs only", kind=Kind.LIST, fingerprinted=False),
    _flag("cuda_graph_backend_prefill", "prefill graphs only", fingerprinted=False),
    _flag("cuda_graph_tc_compiler", "prefill graphs only", fingerprinted=False),
    _flag("node_rank", _PER_POD, fingerprinted=False),
    _flag("dist_init_addr", _PER_POD, "--nccl-init-addr", fingerprinted=False),
    _env("SGLANG_DSPARK_ENABLE_SPS_RECORD", _OBSERVE, kind=Kind.TEXT, fingerprinted=False),
    _env("SGLANG_DSPARK_DEBUG_DUMP", _OBSERVE, kind=Kind.TEXT, fingerprinted=False),
    _env("SGLANG_DSPARK_LOG_SPS_PRED_INTERVAL", _OBSERVE, kind=Kind.TEXT, fingerprinted=False),
    _env(
        "SGLANG_DSPARK_DEBUG_CONFIDENCE_PREFIX_SCHEDULER",
        _OBSERVE,
        kind=Kind.TEXT,
        fingerprinted=False,
    ),
    _env("SGLANG_DSPARK_DEBUG_CONFIDENCE_METRICS", _OBSERVE, kind=Kind.TEXT, fingerprinted=False),
    _env("SGLANG_DSPARK_STS_COLLECT_PATH", _OBSERVE, kind=Kind.TEXT, fingerprinted=False),
    _env("SGLANG_DSPARK_BLOCK_ACCEPT_ESTIMATE_PATH", _BUDGET, kind=Kind.TEXT, fingerprinted=False),
    _env(
        "SGLANG_DSPARK_BLOCK_ACCEPT_ONLINE_INTERVAL", _BUDGET, kind=Kind.TEXT, fingerprinted=False
    ),
    _env("SGLANG_DSPARK_CONFIDENCE_RELAY_LAG_STEPS", _BUDGET, kind=Kind.TEXT, fingerprinted=False),
    _env(
        "SGLANG_DSPARK_ENABLE_CAPTURE_DERIVED_SPS",
        "which table a server without one uses "
        "(PR #35413); reported as the server's table source, and an injected table wins",
        kind=Kind.TEXT,
        fingerprinted=False,
    ),
)

BY_NAME: dict[str, CostInput] = {entry.name: entry for entry in COST_INPUTS}
# Every spelling of every flag the list knows -> its entry.
FLAG_SPELLINGS: dict[str, CostInput] = {
    spelling: entry
    for entry in COST_INPUTS
    if entry.where == Where.ARGS
    for spelling in entry.spellings
}
ENV_INPUTS: tuple[CostInput, ...] = tuple(e for e in COST_INPUTS if e.where == Where.ENV)

# What looks like a cost input: a flag or variable of one of these families that the list
# does not know is reported as "not fingerprinted".
COST_LOOKING_FLAGS = ("--speculative-", "--cuda-graph-", "--attention-", "--moe-", "--prefill-")
COST_LOOKING_ENV = ("SGLANG_DSPARK_",)
# Every variable name the list knows, under each spelling SGLang reads it by.
ENV_SPELLINGS: dict[str, CostInput] = {
    spelling: entry for entry in ENV_INPUTS for spelling in entry.env_spellings()
}

# The /server_info fields the profiler records as the server's cost-relevant arguments.
SERVER_INFO_FIELDS: tuple[str, ...] = tuple(
    e.name for e in COST_INPUTS if e.where == Where.ARGS and e.fingerprinted and e.server_info
)


def cost_looking_flag(flag: str) -> bool:
    return flag.startswith(COST_LOOKING_FLAGS)


def cost_looking_env(name: str) -> bool:
    return sglang_name(name).startswith(COST_LOOKING_ENV)


def normalised(entry: CostInput, value: str) -> str:
    """The value as SGLang reads it (an EnvBool's spelling does not matter)."""
    if entry.kind != Kind.BOOL:
        return value
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "y"):
        return "true"
    if lowered in ("false", "0", "no", "n"):
        return "false"
    # SGLang warns and uses the default; where that differs by release, the text counts.
    return str(entry.default) if entry.default is not None else lowered


# --------------------------------------------------------------------------- versions

Release = tuple[int, int, int]


class Position(StrEnum):
    EXACT = "exact"  # the release itself
    BEFORE = "before"  # a dev or rc build on its way to the release
    AFTER = "after"  # a post release or a local build on top of it


@dataclass(frozen=True)
class ServerVersion:
    """Which SGLang a server runs, as far as the operator can tell."""

    release: Release | None  # None: unknown
    position: Position = Position.EXACT
    text: str = ""  # the version as found
    source: str = "unknown"  # where from, in words

    @property
    def known(self) -> bool:
        return self.release is not None

    def describe(self) -> str:
        if self.release is None:
            return f"unknown ({self.source}): every version-bound input counts"
        return f"{self.text} ({self.source})"


_VERSION = re.compile(
    r"^v?(?P<release>[0-9]+\.[0-9]+\.[0-9]+)"
    r"(?P<pre>\.?(dev|rc|a|b)[0-9]*)?(?P<post>\.post[0-9]+)?(?P<local>\+[A-Za-z0-9.]+)?$"
)
# A release tag of SGLang's image may carry a build variant: v0.5.17-cu129, -cu126-amd64.
_IMAGE_VARIANT = re.compile(r"^(?P<version>[^-]+)(-(?P<variant>[A-Za-z0-9_.-]+))?$")
_MOVING_WORDS = ("dev", "nightly", "latest", "main", "master", "edge")


def parse_release(text: str) -> Release:
    major, minor, patch = (int(x) for x in text.split("."))
    return major, minor, patch


def parse_version(text: str, source: str) -> ServerVersion:
    """A version as SGLang's package reports it (`sglang.__version__`) or a user states it;
    unknown for anything else (and for `0.0.0.dev0`, a build without git metadata)."""
    match = _VERSION.match(text.strip())
    if match is None or match["release"] == "0.0.0":
        return ServerVersion(None, text=text, source=f"{source} {text!r} names no SGLang release")
    release = parse_release(match["release"])
    if match["post"] or match["local"]:
        position = Position.AFTER
    elif match["pre"]:
        position = Position.BEFORE
    else:
        position = Position.EXACT
    return ServerVersion(release, position, text.strip().removeprefix("v"), source)


def image_parts(image: str) -> tuple[str, str | None, str | None]:
    """(repository, tag, digest) of an image reference."""
    rest, _, digest = image.partition("@")
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        return rest[:colon], rest[colon + 1 :], digest or None
    return rest, None, digest or None


def version_from_image(image: str) -> ServerVersion:
    """The release an image's tag names: only for SGLang's own repository name (`sglang`,
    on any registry: mirrors keep it), and only a release tag (a build variant suffix is
    fine). A moving tag, another repository, or no tag: unknown."""
    repository, tag, _ = image_parts(image)
    where = f"image {image}"
    if repository.rsplit("/", 1)[-1] != "sglang":
        return ServerVersion(None, source=f"{where}: not SGLang's image repository (sglang)")
    if not tag:
        return ServerVersion(None, source=f"{where}: no tag")
    match = _IMAGE_VARIANT.match(tag)
    variant = (match["variant"] or "") if match else ""
    if match is None or any(word in variant.lower() for word in _MOVING_WORDS):
        return ServerVersion(None, source=f"{where}: tag {tag!r} names no release")
    version = parse_version(match["version"], f"image tag {tag}")
    if not version.known:
        return ServerVersion(None, source=f"{where}: tag {tag!r} names no release")
    return version


def moving_tag(image: str) -> bool:
    """The image reference is one that moves by design (no tag, `latest`, `dev`,
    `nightly`, `main`) and has no digest: the code behind it changes under the same
    reference. (Any tag can be moved; these are the ones that are.)"""
    _, tag, digest = image_parts(image)
    if digest:
        return False
    return tag is None or any(word in tag.lower() for word in _MOVING_WORDS)


def server_version(image: str, stated: str | None) -> ServerVersion:
    """The best evidence: what the profile states (spec.server.sglangVersion), else the
    image tag. `unknown` stated distrusts the tag (a fork tagged like a release)."""
    if stated:
        if stated.strip().lower() == "unknown":
            return ServerVersion(None, source="spec.server.sglangVersion says unknown")
        return parse_version(stated, "spec.server.sglangVersion")
    return version_from_image(image)


def matters(entry: CostInput, version: ServerVersion) -> bool:
    """Whether `entry` can change the cost of a step on a server of `version`; an unknown
    version, or one that may or may not carry the change, counts it."""
    if entry.since is None and entry.until is None:
        return True
    if version.release is None:
        return True
    v = version.release
    since = parse_release(entry.since) if entry.since else None
    until = parse_release(entry.until) if entry.until else None
    if version.position == Position.EXACT:
        return (since is None or v >= since) and (until is None or v < until)
    if version.position == Position.BEFORE:
        # After the release before `v`, before `v`: whatever is first released in `v`
        # may be in it or not.
        return not ((since is not None and since > v) or (until is not None and until < v))
    return until is None or until > v  # a later commit on top of `v` may carry anything


def why_not_counted(entry: CostInput, version: ServerVersion) -> str:
    if not entry.fingerprinted:
        return f"not a step cost: {entry.why}"
    bound = []
    if entry.since:
        bound.append(f"since {entry.since}")
    if entry.until:
        bound.append(f"before {entry.until}")
    return f"SGLang reads it only {' and '.join(bound)}; this server is {version.describe()}"


# --------------------------------------------------------------------------- the doc

DOC_BEGIN = "<!-- BEGIN fingerprint inputs (generated by sps_operator.api.fingerprint) -->"
DOC_END = "<!-- END fingerprint inputs -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def fingerprint_doc(entries: Iterable[CostInput] = COST_INPUTS) -> str:
    """The declared list as the Markdown tables of docs/fingerprint.md."""
    counted = [e for e in entries if e.fingerprinted]
    ignored = [e for e in COST_INPUTS if not e.fingerprinted]
    lines = [
        DOC_BEGIN,
        "",
        "| input | where | spellings (flags) or default (env) | matters | why |",
        "|---|---|---|---|---|",
    ]
    for e in counted:
        spellings = ", ".join(f"`{s}`" for s in e.spellings) if e.where == Where.ARGS else ""
        if e.where == Where.ENV:
            spellings = f"default {e.default}" if e.default is not None else ""
            if e.old_names:
                spellings += (
                    ("; " if spellings else "")
                    + "old name "
                    + ", ".join(f"`{n}`" for n in e.old_names)
                )
        elif e.default is not None:
            spellings += f"; default {e.default}"
        if e.kind in (Kind.SWITCH, Kind.LIST):
            spellings += f" ({e.kind})"
        bound = []
        if e.since:
            bound.append(f"since {e.since}")
        if e.until:
            bound.append(f"before {e.until}")
        lines.append(
            f"| `{e.name}` | {e.where} | {_cell(spellings)} | {' '.join(bound) or 'always'} "
            f"| {_cell(e.why)} |"
        )
    lines += [
        "",
        "Read but not fingerprinted (known not to change a step's cost):",
        "",
        "| input | where | why |",
        "|---|---|---|",
    ]
    lines += [f"| `{e.label}` | {e.where} | {_cell(e.why)} |" for e in ignored]
    lines += ["", DOC_END]
    return "\n".join(lines)

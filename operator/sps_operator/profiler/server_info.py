"""What the server says about itself: validation of `/server_info` and the sweep (pure).

Every pre-flight check of SGLang's profiler, plus: a decode CUDA-graph backend of
`disabled` counts as disabled, and the sweep is checked against the capture list, the
running-request cap and the KV capacity before any load is sent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sps_operator.api.fingerprint import SERVER_INFO_FIELDS
from sps_operator.api.hashing import content_hash
from sps_operator.api.resolved import resolved_report
from sps_operator.dspark_arith import compact_tiers, default_decode_capture_bs, runner_capture_bs
from sps_operator.profiler.sweep import REQUIRED_SIMULATE_ACC_LEN
from sps_operator.profiler.untrusted import json_int, shown

logger = logging.getLogger(__name__)

INFO_RECORD_PAYLOAD_KEY = "dspark_info_record"
REQUIRED_COMPONENTS = frozenset({"core", "step_cpu_time"})
DIAGONAL_MODES = ("static",)
OFFDIAGONAL_MODES = ("compact",)
# Words a message may quote from /server_info (anything else it describes: untrusted.shown).
KNOWN_MODES = ("static", "compact", "cap-accept")
SPECULATIVE_ALGORITHMS = ("DSPARK", "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "LOOKAHEAD")
ENABLE_HINT = (
    "SGLANG_DSPARK_ENABLE_SPS_RECORD=1 (or SGLANG_DSPARK_DEBUG_DUMP=core,step_cpu_time) and "
    "SGLANG_SIMULATE_ACC_LEN=1.0"
)
# Server arguments the measured cost depends on: recorded in the manifest and fingerprinted.
# The operator's declared list (`api/fingerprint.py`) names them; `version` is the build. The
# decode capture list is recorded resolved (`capture_bs`), since no /server_info field holds
# it whole (there is no `cuda_graph_max_bs` field: that flag is an alias).
COST_RELEVANT_ARGS = (*SERVER_INFO_FIELDS, "version")


class ServerCheckError(ValueError):
    """The server cannot produce a valid table as configured; the message says what to do."""


@dataclass(frozen=True)
class ServerContext:
    base_url: str
    tp_size: int
    dp_size: int
    dp_attention: bool
    mode: str
    gamma: int
    verify_num_draft_tokens: int
    simulate_acc_len: float
    capture_bs: tuple[int, ...]
    max_running_per_dp: int | None
    token_capacity: float
    table_path: str | None
    tokenizer_path: str | None
    vocab_size: int | None
    cost_args: dict[str, Any] = field(default_factory=dict)
    # What the server says it resolved (api/resolved.py): kept beside the table so that a
    # serving server's report can be compared with it; not part of `fingerprint`.
    resolved: dict[str, Any] = field(default_factory=dict)

    @property
    def cuda_graph_max_bs(self) -> int | None:
        return max(self.capture_bs) if self.capture_bs else None

    @property
    def tiers(self) -> list[int]:
        """Compact-mode graph tiers (token counts), approximating the runner's filter."""
        runner_bs = runner_capture_bs(self.capture_bs, self.max_running_per_dp)
        return compact_tiers(runner_bs, self.verify_num_draft_tokens)

    @property
    def fingerprint(self) -> str:
        return fingerprint_of(self.cost_args)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["capture_bs"] = list(self.capture_bs)
        data["tiers"] = self.tiers
        data["fingerprint"] = self.fingerprint
        return data


def fingerprint_of(cost_args: Mapping[str, Any]) -> str:
    canonical = json.dumps(dict(cost_args), sort_keys=True, separators=(",", ":"), default=str)
    return content_hash(canonical)


def _decode_config(state: Mapping[str, Any]) -> Mapping[str, Any] | None:
    config = state.get("cuda_graph_config")
    if not isinstance(config, Mapping):
        return None
    decode = config.get("decode")
    return decode if isinstance(decode, Mapping) else None


# No DSpark server verifies more tokens per request than this in one step.
MAX_VERIFY_TOKENS = 1024
# Larger capture lists than this are no SGLang server's (and would make huge tier lists).
MAX_CAPTURE_BS = 65_536


def resolve_capture_bs(state: Mapping[str, Any]) -> list[int]:
    """The decode capture list: `decode.bs`, else the default list up to `decode.max_bs`."""
    decode = _decode_config(state)
    if decode is None:
        return []
    bs = decode.get("bs")
    if isinstance(bs, list) and bs:
        values = [json_int(b) for b in bs]
        if any(v is None or not 1 <= v <= MAX_CAPTURE_BS for v in values):
            raise ServerCheckError(
                f"/server_info cuda_graph_config.decode.bs must list batch sizes in "
                f"[1, {MAX_CAPTURE_BS}], got {', '.join(shown(b) for b in bs[:8])}; is this an "
                "SGLang DSpark server?"
            )
        return sorted({v for v in values if v is not None})
    max_bs = decode.get("max_bs")
    if max_bs is not None:
        value = json_int(max_bs)
        if value is None or not 1 <= value <= MAX_CAPTURE_BS:
            raise ServerCheckError(
                f"/server_info cuda_graph_config.decode.max_bs must be an integer in "
                f"[1, {MAX_CAPTURE_BS}], got {shown(max_bs)}; is this an SGLang DSpark server?"
            )
        return default_decode_capture_bs(value)
    return []


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _server_states(info: Any, base_url: str) -> list[Mapping[str, Any]]:
    """The server as a whole: a DSpark server with CUDA graphs; its DP ranks' states."""
    if not isinstance(info, Mapping):
        raise ServerCheckError(
            f"{base_url}/server_info did not return a JSON object (got "
            f"{type(info).__name__}); is this an SGLang server?"
        )
    algorithm = info.get("speculative_algorithm")
    if algorithm != "DSPARK":
        raise ServerCheckError(
            f"Profile against a DSpark server: {base_url} reports speculative_algorithm="
            f"{shown(algorithm, SPECULATIVE_ALGORITHMS)}. Relaunch with --speculative-algorithm "
            "DSPARK."
        )
    if info.get("disable_cuda_graph"):
        raise ServerCheckError(
            "The server runs with --disable-cuda-graph; a table measured without CUDA graphs "
            "is uselessly slow. Relaunch with CUDA graphs enabled."
        )
    states = info.get("internal_states")
    if (
        not isinstance(states, list)
        or not states
        or not all(isinstance(s, Mapping) for s in states)
    ):
        raise ServerCheckError(f"{base_url}/server_info returned no internal_states.")
    decode = _decode_config(states[0]) or _decode_config(info)
    if decode is not None and str(decode.get("backend", "")).lower() == "disabled":
        raise ServerCheckError(
            "The server's decode CUDA-graph backend is 'disabled' (--cuda-graph-backend-decode "
            "disabled / --disable-decode-cuda-graph); relaunch with decode CUDA graphs enabled."
        )
    return states


def _rank_payload(rank: int, state: Mapping[str, Any], offdiagonal: bool) -> Mapping[str, Any]:
    """One DP rank's DSpark record, checked for a profiling run of this kind."""
    allowed = OFFDIAGONAL_MODES if offdiagonal else DIAGONAL_MODES
    payload = state.get(INFO_RECORD_PAYLOAD_KEY)
    if not isinstance(payload, Mapping):
        raise ServerCheckError(
            f"DP rank {rank} reports no {INFO_RECORD_PAYLOAD_KEY}; launch the server with "
            f"{ENABLE_HINT}."
        )
    mode = payload.get("mode")
    if offdiagonal and mode == "cap-accept":
        # The reference accepts it, but cap-accept verifies at full width whatever the
        # budget: every M would be labelled with the full-width cost.
        raise ServerCheckError(
            f"DP rank {rank} runs SGLANG_RAGGED_VERIFY_MODE=cap-accept, whose forward is full "
            "width whatever the pinned budget, so an off-diagonal sweep would record the "
            "full-width cost under every M. Relaunch with SGLANG_RAGGED_VERIFY_MODE=compact."
        )
    if mode not in allowed:
        want = (
            "SGLANG_RAGGED_VERIFY_MODE=compact for an off-diagonal (--fracs) sweep"
            if offdiagonal
            else "SGLANG_RAGGED_VERIFY_MODE=static for a diagonal sweep (or pass --fracs)"
        )
        raise ServerCheckError(
            f"{INFO_RECORD_PAYLOAD_KEY}.mode must be one of {allowed}, got "
            f"{shown(mode, KNOWN_MODES)} on DP rank {rank}; relaunch with {want}."
        )
    components = payload.get("components") or []
    if not isinstance(components, list) or not all(isinstance(c, str) for c in components):
        raise ServerCheckError(
            f"DP rank {rank} {INFO_RECORD_PAYLOAD_KEY}.components must be a list of names, "
            f"got {shown(components)}; is this an SGLang DSpark server?"
        )
    missing = sorted(REQUIRED_COMPONENTS - set(components))
    if missing:
        raise ServerCheckError(
            f"DP rank {rank} {INFO_RECORD_PAYLOAD_KEY} is missing component(s) {missing}; "
            f"launch with {ENABLE_HINT}."
        )
    if payload.get("simulate_acc_len") != REQUIRED_SIMULATE_ACC_LEN:
        raise ServerCheckError(
            f"DP rank {rank} reports simulate_acc_len="
            f"{shown(payload.get('simulate_acc_len'))}, "
            f"but profiling requires exactly SGLANG_SIMULATE_ACC_LEN="
            f"{REQUIRED_SIMULATE_ACC_LEN} (every step then commits exactly one token per "
            "request, so the batch stays put)."
        )
    return payload


def _verify_shape(payloads: Sequence[Mapping[str, Any]]) -> tuple[int, int, str]:
    """(verify_num_draft_tokens, gamma, mode), the same on every DP rank."""
    ks = {json_int(p.get("verify_num_draft_tokens")) for p in payloads}
    if len(ks) != 1 or None in ks:
        raise ServerCheckError(
            f"DP ranks disagree on verify_num_draft_tokens: {sorted(map(str, ks))}."
        )
    k = ks.pop()
    assert k is not None
    if not 2 <= k <= MAX_VERIFY_TOKENS:
        raise ServerCheckError(
            f"verify_num_draft_tokens={k}; DSpark verifies between 2 and {MAX_VERIFY_TOKENS}."
        )
    gamma = json_int(payloads[0].get("gamma"))
    if gamma is None:
        gamma = k - 1
    elif gamma != k - 1:
        raise ServerCheckError(
            f"{INFO_RECORD_PAYLOAD_KEY} reports gamma={gamma} with verify_num_draft_tokens={k}; "
            "DSpark verifies gamma + 1 tokens per request, so the record is inconsistent."
        )
    modes = {str(p.get("mode")) for p in payloads}
    if len(modes) != 1:
        raise ServerCheckError(f"DP ranks disagree on the ragged verify mode: {sorted(modes)}.")
    return k, gamma, modes.pop()


def server_context_from_info(
    info: Any,
    *,
    base_url: str,
    offdiagonal: bool,
    vocab_size: int | None = None,
    tokenizer_path: str | None = None,
) -> ServerContext:
    """Validate a `/server_info` response for profiling and extract what the sweep needs."""
    states = _server_states(info, base_url)
    state0 = states[0]
    payloads = [_rank_payload(rank, state, offdiagonal) for rank, state in enumerate(states)]
    k, gamma, mode = _verify_shape(payloads)
    dp_size = json_int(state0.get("dp_size")) or json_int(info.get("dp_size")) or 1
    if dp_size != len(states):
        raise ServerCheckError(
            f"/server_info reports dp_size={dp_size} but {len(states)} internal_states; "
            "cannot align DP ranks."
        )
    max_running = json_int(state0.get("effective_max_running_requests_per_dp"))
    if max_running is not None and max_running <= 0:
        max_running = None
    if max_running is None:
        logger.warning(
            "Server did not report effective_max_running_requests_per_dp; the sweep is not "
            "checked against the running-request cap."
        )
    capacity = 0.0
    for state in states:
        usage = state.get("memory_usage")
        cap = usage.get("token_capacity") if isinstance(usage, Mapping) else None
        capacity += float(cap) if isinstance(cap, int | float) and cap > 0 else 1e9
    vocab = vocab_size
    if vocab is None:
        vocab = json_int(info.get("vocab_size")) or json_int(state0.get("vocab_size"))
    cost_args = {key: info.get(key, state0.get(key)) for key in COST_RELEVANT_ARGS}
    capture = resolve_capture_bs(state0) or resolve_capture_bs(info)
    cost_args.update(
        {
            "mode": mode,
            "verify_num_draft_tokens": k,
            "capture_bs": capture,
            "max_running_per_dp": max_running,
        }
    )
    table_path = info.get(
        "speculative_dspark_sps_table_path", state0.get("speculative_dspark_sps_table_path")
    )
    return ServerContext(
        base_url=base_url,
        tp_size=json_int(info.get("tp_size")) or 1,
        dp_size=dp_size,
        dp_attention=bool(info.get("enable_dp_attention", state0.get("enable_dp_attention"))),
        mode=str(payloads[0].get("mode")),
        gamma=gamma,
        verify_num_draft_tokens=k,
        simulate_acc_len=REQUIRED_SIMULATE_ACC_LEN,
        capture_bs=tuple(capture),
        max_running_per_dp=max_running,
        token_capacity=capacity,
        table_path=str(table_path) if table_path else None,
        tokenizer_path=tokenizer_path or _str_or_none(info.get("tokenizer_path")),
        vocab_size=vocab,
        cost_args=cost_args,
        resolved=resolved_report(info),
    )


def validate_sweep(
    context: ServerContext,
    batch_sizes: Sequence[int],
    *,
    input_len: int,
    max_new_tokens: int,
) -> list[str]:
    """Raise if the sweep leaves the captured graphs or the server's caps; return warnings."""
    if context.cuda_graph_max_bs is None:
        raise ServerCheckError(
            "Could not resolve the server's decode CUDA-graph capture list from /server_info "
            "(cuda_graph_config.decode.bs / max_bs), so the sweep cannot be confirmed to stay "
            "inside captured graphs; steps outside them run eager and poison the table."
        )
    top = max(batch_sizes)
    if top > context.cuda_graph_max_bs:
        raise ServerCheckError(
            f"The sweep reaches {top} running requests per DP rank but the server captured "
            f"decode CUDA graphs only up to bs={context.cuda_graph_max_bs}; relaunch with a "
            "larger --cuda-graph-max-bs-decode or lower --max-batch-size / --batch-size."
        )
    if context.max_running_per_dp is not None and top > context.max_running_per_dp:
        raise ServerCheckError(
            f"The sweep reaches {top} requests per DP rank but the server runs at most "
            f"{context.max_running_per_dp} per rank (--max-running-requests); that batch "
            "would never form. Lower --max-batch-size / --batch-size or relaunch with a larger "
            "--max-running-requests."
        )
    need = top * context.dp_size * (input_len + max_new_tokens)
    if need > context.token_capacity:
        raise ServerCheckError(
            f"bs={top} per rank needs {need} KV tokens ({top}x{context.dp_size} requests x "
            f"({input_len}+{max_new_tokens})) but the server holds {int(context.token_capacity)}; "
            "lower the batch size, --input-len or the step budget."
        )
    warnings = []
    captured = set(context.capture_bs)
    padded = [b for b in batch_sizes if b not in captured]
    if padded:
        warnings.append(
            f"batch sizes {padded} are not in the decode capture list; their steps replay the "
            "next captured graph (padded), which the table then attributes to the smaller bs."
        )
    return warnings

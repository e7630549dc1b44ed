"""The fingerprint of sps-operator before issue 20 (version 1), frozen (pure).

Kept for one release so an upgrade does not reprofile every server: a table stored under
a version-1 fingerprint stays valid for a server whose version-1 fingerprint, computed
here, is still the same (the server did not change). The observe step then re-keys the
table to the current fingerprint (`observe.adopt_v1_tables`). Do not change this
module: a changed byte changes every version-1 value. Delete it, and the adoption, in the
release after the one that introduced version 2 (docs/fingerprint.md, Upgrading).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sps_operator.api.hashing import content_hash

_COST_FLAGS: dict[str, str] = {
    "--model-path": "model",
    "--model": "model",
    "--speculative-draft-model-path": "draft_model",
    "--tp": "tp",
    "--tp-size": "tp",
    "--tensor-parallel-size": "tp",
    "--dp": "dp",
    "--dp-size": "dp",
    "--data-parallel-size": "dp",
    "--speculative-dspark-block-size": "draft_width",
    "--speculative-num-draft-tokens": "num_draft_tokens",
    "--cuda-graph-max-bs": "cuda_graph_max_bs",
    "--cuda-graph-max-bs-decode": "cuda_graph_max_bs",
    "--cuda-graph-bs": "cuda_graph_bs",
    "--cuda-graph-bs-decode": "cuda_graph_bs",
    "--cuda-graph-config": "cuda_graph_config",
    "--cuda-graph-backend-decode": "cuda_graph_backend",
    "--max-running-requests": "max_running_requests",
    "--dtype": "dtype",
    "--quantization": "quantization",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--attention-backend": "attention_backend",
    "--speculative-algorithm": "speculative_algorithm",
}
_COST_SWITCHES: dict[str, str] = {
    "--enable-dp-attention": "dp_attention",
    "--disable-cuda-graph": "disable_cuda_graph",
    "--disable-decode-cuda-graph": "disable_cuda_graph",
    "--enable-dp-lm-head": "dp_lm_head",
    "--disable-overlap-schedule": "disable_overlap",
}
ENV = ("SGLANG_RAGGED_VERIFY_MODE", "SGLANG_PREP_IN_CUDA_GRAPH")
_TABLE_PATH_FLAG = "--speculative-dspark-sps-table-path"


def flags_v1(argv: Sequence[str]) -> dict[str, str]:
    """Version 1's reading of a server's flags (one value per flag, the last one wins)."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        name, inline = (token.split("=", 1) if token.startswith("--") and "=" in token
                        else (token, None))  # fmt: skip
        takes_value = name in _COST_FLAGS or name in ("--port", _TABLE_PATH_FLAG)
        value = inline
        if takes_value and value is None and i + 1 < len(argv):
            value = argv[i + 1]
            i += 1
        i += 1
        if name in _COST_SWITCHES:
            flags[_COST_SWITCHES[name]] = "true"
        elif name in _COST_FLAGS and value is not None:
            flags[_COST_FLAGS[name]] = value
    return flags


def describe_v1(image: str, argv: Sequence[str], env: Mapping[str, str]) -> dict[str, Any]:
    """What version 1 hashed: image, flags and the two env vars (as written)."""
    return {
        "image": image,
        "flags": flags_v1(argv),
        "env": dict(sorted((k, v) for k, v in env.items() if k in ENV)),
    }


def table_fingerprint_v1(server_fingerprint: str, table_spec: Mapping[str, Any]) -> str:
    canonical = {"server": server_fingerprint, "table": table_spec}
    return content_hash(json.dumps(canonical, sort_keys=True, separators=(",", ":")))

"""What an SGLang server's step cost depends on, parsed from its container (pure).

Only an allowlist of flags and env vars enters the fingerprint: what the operator
injects itself (the table path) or what does not change the cost (host, port, log
level) must not make a table stale.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

TABLE_PATH_FLAG = "--speculative-dspark-sps-table-path"
DEFAULT_PORT = 30000
VERIFY_MODE_ENV = "SGLANG_RAGGED_VERIFY_MODE"

# flag -> canonical name. Aliases map to one name so `--tp 2` and `--tp-size 2` agree.
COST_FLAGS: dict[str, str] = {
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
# Boolean switches (no value) that change the cost.
COST_SWITCHES: dict[str, str] = {
    "--enable-dp-attention": "dp_attention",
    "--disable-cuda-graph": "disable_cuda_graph",
    "--disable-decode-cuda-graph": "disable_cuda_graph",
    "--enable-dp-lm-head": "dp_lm_head",
    "--disable-overlap-schedule": "disable_overlap",
}
COST_ENV = (VERIFY_MODE_ENV, "SGLANG_PREP_IN_CUDA_GRAPH")


@dataclass(frozen=True)
class ServerConfig:
    """The cost-relevant configuration of one SGLang server container."""

    image: str
    flags: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    port: int = DEFAULT_PORT
    table_path: str | None = None

    def fingerprint(self) -> str:
        canonical = {"image": self.image, "flags": self.flags, "env": self.env}
        return sha16(json.dumps(canonical, sort_keys=True, separators=(",", ":")))

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def sha16(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def split_flag(token: str) -> tuple[str, str | None]:
    if token.startswith("--") and "=" in token:
        name, value = token.split("=", 1)
        return name, value
    return token, None


def parse_server_args(tokens: Sequence[str]) -> tuple[dict[str, str], int, str | None]:
    """Cost flags, port and table path from a server's command line (command + args)."""
    flags: dict[str, str] = {}
    port = DEFAULT_PORT
    table_path: str | None = None
    i = 0
    while i < len(tokens):
        name, inline = split_flag(tokens[i])
        takes_value = name in COST_FLAGS or name in ("--port", TABLE_PATH_FLAG)
        value = inline
        if takes_value and value is None and i + 1 < len(tokens):
            value = tokens[i + 1]
            i += 1
        i += 1
        if name in COST_SWITCHES:
            flags[COST_SWITCHES[name]] = "true"
        elif name in COST_FLAGS and value is not None:
            flags[COST_FLAGS[name]] = value
        elif name == "--port" and value is not None:
            if value.isdigit():
                port = int(value)
        elif name == TABLE_PATH_FLAG:
            table_path = value
    return flags, port, table_path


def find_server_container(
    pod_spec: Mapping[str, Any], name: str | None
) -> Mapping[str, Any] | None:
    containers: Sequence[Mapping[str, Any]] = pod_spec.get("containers") or []
    if name is None:
        return containers[0] if containers else None
    for container in containers:
        if container.get("name") == name:
            return container
    return None


def server_config(container: Mapping[str, Any]) -> ServerConfig:
    tokens = [str(t) for t in (container.get("command") or [])] + [
        str(t) for t in (container.get("args") or [])
    ]
    flags, port, table_path = parse_server_args(tokens)
    env = {
        str(e["name"]): str(e.get("value", ""))
        for e in container.get("env") or []
        if e.get("name") in COST_ENV and "valueFrom" not in e
    }
    return ServerConfig(
        image=str(container.get("image", "")),
        flags=flags,
        env=env,
        port=port,
        table_path=table_path,
    )


def table_fingerprint(server: ServerConfig, table_spec: Mapping[str, Any]) -> str:
    """The key a table is stored under: the server's cost inputs plus the table kind and
    sweep (changing either makes a new table necessary)."""
    canonical = {
        "server": server.fingerprint(),
        "table": table_spec,
    }
    return sha16(json.dumps(canonical, sort_keys=True, separators=(",", ":")))

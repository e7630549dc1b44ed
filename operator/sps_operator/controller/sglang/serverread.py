"""One server container, read as the operator reads it (pure).

`observe` (every pass) and `sps-operator fingerprint` (offline, from files) both read
through here, so the command answers with the operator's reading: the container's
environment resolved from its ConfigMaps, its command line parsed, what its cost depends
on, and the keys a profile's table for it is stored under.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sps_operator.api import limits
from sps_operator.api.spec import TableSpec
from sps_operator.controller.sglang.podenv import ConfigMapEnv, resolve_env
from sps_operator.controller.sglang.serverconfig import (
    ServerCommand,
    ServerConfig,
    legacy_table_fingerprint,
    parse_server,
    server_config,
    table_fingerprint,
)


def read_server(
    container: Mapping[str, Any],
    namespace: str | None,
    config_maps: Mapping[str, ConfigMapEnv | None],
    sglang_version: str | None,
) -> tuple[ServerCommand, ServerConfig]:
    """The container's server command and what its cost depends on; ServerProblem when it
    is no server the operator understands. `config_maps` as for `podenv.resolve_env`;
    `sglang_version` is the one the profile states (spec.server.sglangVersion), if any."""
    command = parse_server(container, resolve_env(container, namespace, config_maps))
    return command, server_config(container, command, sglang_version)


def table_keys(config: ServerConfig, table: TableSpec) -> tuple[str, str]:
    """The fingerprints a table of kind and sweep `table` for this server is stored under:
    the current one and version 1's (status.targets[].fingerprint; docs/fingerprint.md)."""
    spec = table.to_k8s()
    return table_fingerprint(config, spec), legacy_table_fingerprint(config, spec)


# On a pod template the caches keep only as a stub (`kube/projections.py`), and on each of
# its containers whose message differs: why the operator does not read it.
SIZE_PROBLEM = "spsSizeProblem"


def target_size_problem(
    pod_spec: Mapping[str, Any], container: Mapping[str, Any] | None
) -> str | None:
    """Why the operator does not read this target at all (too large to parse within a
    pass: the limit it exceeds), or None. Checked before anything parses it. A template
    the caches kept as a stub says it itself (the same message, measured on the whole)."""
    server = container or {}
    stubbed = pod_spec.get(SIZE_PROBLEM)
    if isinstance(stubbed, str):
        own = server.get(SIZE_PROBLEM)
        return own if isinstance(own, str) else stubbed
    words = [*(server.get("command") or []), *(server.get("args") or [])]
    if len(words) > limits.MAX_SERVER_ARGS:
        return (
            f"the server's command line has {len(words)} words; the operator reads at most "
            f"{limits.MAX_SERVER_ARGS}"
        )
    chars = sum(len(str(w)) for w in words)
    if chars > limits.MAX_SERVER_ARGS_CHARS:
        return (
            f"the server's command line has {chars} characters; the operator reads at most "
            f"{limits.MAX_SERVER_ARGS_CHARS}"
        )
    env = server.get("env") or []
    if len(env) > limits.MAX_SERVER_ENV:
        return (
            f"the server container has {len(env)} environment variables; the operator reads "
            f"at most {limits.MAX_SERVER_ENV}"
        )
    try:
        size = len(json.dumps(pod_spec, separators=(",", ":"), default=str))
    except (TypeError, ValueError, RecursionError):
        return "the Deployment's pod template cannot be read as JSON"
    if size > limits.MAX_TARGET_TEMPLATE_BYTES:
        return (
            f"the Deployment's pod template is {size} bytes as JSON; the operator reads at "
            f"most {limits.MAX_TARGET_TEMPLATE_BYTES}"
        )
    return None

"""What an SGLang server container runs, and what its step cost depends on (pure).

`parse_server` recognises an SGLang DSpark server from its container, or refuses with a
`ServerProblem` that says what to change: a table is only ever measured for, and put
onto, a server the operator understands. It accepts the exec form (`command`/`args`) and
a `sh -c` script that is one plain command line (no variables, pipes, `;`, redirections
or substitutions; a leading `exec` and `VAR=value` assignments are fine). Anything else
in a script cannot be read safely and is refused.

Only an allowlist of flags and env vars enters the fingerprint: what the operator injects
itself (the table path) or what does not change the cost (host, port, log level) must not
make a table stale. Their values are what the server really gets: `$(VAR)` references are
expanded from the container's environment as the kubelet does, with ConfigMap keys
resolved (`podenv`). A cost input the operator cannot read (a Secret, a per-pod field) is
refused with `HiddenCostInput`, naming the reference: a change there would go unseen.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sps_operator.api.hashing import content_hash
from sps_operator.controller.podenv import ContainerEnv, Expansion, escape, expand, resolve_env

TABLE_PATH_FLAG = "--speculative-dspark-sps-table-path"
ALGORITHM_FLAG = "--speculative-algorithm"
DEFAULT_PORT = 30000
VERIFY_MODE_ENV = "SGLANG_RAGGED_VERIFY_MODE"
SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
MAX_SCRIPT_CHARS = 16 * 1024

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
    ALGORITHM_FLAG: "speculative_algorithm",
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

# Flags whose values the operator must read: the fingerprint's, the port it probes, the
# table path it checks.
READ_FLAGS = frozenset({*COST_FLAGS, *COST_SWITCHES, "--port", TABLE_PATH_FLAG})

# Problem reasons (CamelCase: they become condition reasons).
NOT_SGLANG = "NotAnSglangServer"
NOT_DSPARK = "NotADsparkServer"
SHELL_SCRIPT = "UnreadableShellScript"
HIDDEN_COST_INPUT = "HiddenCostInput"


class ServerProblem(ValueError):
    """The container is not a server the operator may profile or give a table."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ServerCommand:
    """An SGLang server's command line, as the operator understood it.

    `launcher`, `args` and `env` are in the kubelet's form: given to a container with the
    same environment (the profiling clone), they make the same command line (`$` escaped,
    a value the operator cannot read kept as its `$(VAR)` reference). `argv` is what the
    server gets, the values the operator reads."""

    launcher: tuple[str, ...]  # ("python3", "-m", "sglang.launch_server") or ("sglang", "serve")
    args: tuple[str, ...]  # the server's flags
    env: Mapping[str, str] = field(default_factory=dict)  # `VAR=value` before a script's command
    shell: bool = False  # came from a `sh -c` script (Inject cannot add a flag to it)
    argv: tuple[str, ...] = ()  # the server's flags as it gets them
    cost_env: Mapping[str, str] = field(default_factory=dict)  # the COST_ENV it gets
    sources: Mapping[str, str] = field(default_factory=dict)  # cost input -> where from
    unread: tuple[str, ...] = ()  # what may set a cost input unseen (an envFrom Secret)


@dataclass(frozen=True)
class ServerConfig:
    """The cost-relevant configuration of one SGLang server container."""

    image: str
    flags: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    port: int = DEFAULT_PORT
    table_path: str | None = None
    # Not fingerprinted: where a value came from when it was not written literally (a
    # ConfigMap key), and what could set a cost input without the operator seeing it.
    sources: dict[str, str] = field(default_factory=dict)
    unread: tuple[str, ...] = ()

    def fingerprint(self) -> str:
        canonical = {"image": self.image, "flags": self.flags, "env": self.env}
        return content_hash(json.dumps(canonical, sort_keys=True, separators=(",", ":")))

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def split_flag(token: str) -> tuple[str, str | None]:
    if token.startswith("--") and "=" in token:
        name, value = token.split("=", 1)
        return name, value
    return token, None


def without_flag(tokens: Sequence[str], flag: str) -> list[str]:
    """`tokens` without `flag` and its value (`--flag v` or `--flag=v`)."""
    out: list[str] = []
    skip = False
    for token in tokens:
        if skip:
            skip = False
            continue
        name, inline = split_flag(token)
        if name == flag:
            skip = inline is None
            continue
        out.append(token)
    return out


def parse_server_args(tokens: Sequence[str]) -> tuple[dict[str, str], int, str | None]:
    """Cost flags, port and table path from a server's flags."""
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
            if value.isdigit() and 0 < int(value) < 65536:
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


# --------------------------------------------------------------------------- the command line

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Outside quotes, these make a script more than one plain command line.
_SHELL_SPECIAL = frozenset("$`;&|<>(){}*?[]~#\n")


def _first_shell_feature(script: str) -> str | None:
    """The first character that the shell would interpret (expansion, another command,
    redirection, glob), honouring quotes and backslash escapes; None for a plain line."""
    quote: str | None = None
    escaped = False
    for char in script:
        if escaped:
            escaped = False
        elif quote == "'":
            quote = None if char == "'" else quote
        elif char == "\\":
            escaped = True
        elif quote == '"':
            if char in "$`":
                return char
            quote = None if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char in _SHELL_SPECIAL:
            return char
    return None


def _shell_script(tokens: Sequence[str]) -> int | None:
    """Where the script of `sh -c SCRIPT ...` is, or None when the command is not a shell."""
    if not tokens or posixpath.basename(tokens[0]) not in SHELLS:
        return None
    for i, token in enumerate(tokens[1:], start=1):
        if token.startswith("-") and not token.startswith("--") and "c" in token[1:]:
            if i + 1 >= len(tokens):
                break
            return i + 1
        if not token.startswith("-"):
            break
    raise ServerProblem(
        SHELL_SCRIPT,
        f"the server runs {tokens[0]} without a -c script; start SGLang in command/args",
    )


def _script_tokens(script: str) -> tuple[list[str], dict[str, str]]:
    """One plain command line of a script, and its leading `VAR=value` assignments."""
    advice = (
        "put the launcher and its flags in the container's command/args (exec form), or use "
        "rollout.mode AnnotateOnly with the table flag written in your script"
    )
    if len(script) > MAX_SCRIPT_CHARS:
        raise ServerProblem(SHELL_SCRIPT, f"the server's shell script is too long; {advice}")
    body = script.strip().replace("\\\n", " ")
    feature = _first_shell_feature(body)
    if feature:
        raise ServerProblem(
            SHELL_SCRIPT,
            f"the server's shell script uses {feature!r} (variables, several "
            f"commands, pipes, redirections or globs), so its command cannot be read "
            f"safely; {advice}",
        )
    try:
        words = shlex.split(body, posix=True)
    except ValueError as exc:
        raise ServerProblem(SHELL_SCRIPT, f"the server's shell script: {exc}; {advice}") from None
    env: dict[str, str] = {}
    while words and _ASSIGNMENT.match(words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    if words and words[0] == "exec":
        words.pop(0)
    return words, env


def _launcher_length(tokens: Sequence[str]) -> int:
    """How many leading tokens start SGLang's server (0: not SGLang's launcher)."""
    if not tokens:
        return 0
    first = posixpath.basename(tokens[0])
    if first == "sglang" and len(tokens) > 1 and tokens[1] == "serve":
        return 2
    if not _PYTHON.match(first):
        return 0
    i = 1
    while i < len(tokens) and tokens[i].startswith("-") and tokens[i] != "-m":
        i += 2 if tokens[i] in ("-X", "-W") else 1
    if i + 1 < len(tokens) and tokens[i] == "-m" and tokens[i + 1] == "sglang.launch_server":
        return i + 2
    return 0


def parse_server(container: Mapping[str, Any], env: ContainerEnv | None = None) -> ServerCommand:
    """The SGLang DSpark server in `container`, or ServerProblem saying what to change.
    `env` is the container's environment (`podenv.resolve_env`); without it, only literal
    values are known."""
    env = env if env is not None else resolve_env(container, None, {})
    words = [
        expand(str(t), env.lookup)
        for t in [*(container.get("command") or []), *(container.get("args") or [])]
    ]
    tokens = [w.seen for w in words]
    script = _shell_script(tokens)
    script_env: dict[str, str] = {}
    if script is not None:
        if words[script].hidden:
            ref = words[script].hidden[0]
            raise ServerProblem(
                SHELL_SCRIPT,
                f"the server's shell script uses $({ref.name}), {ref.value.source}, so what "
                "it runs cannot be read; put the launcher and its flags in the container's "
                "command/args (exec form)",
            )
        tokens, script_env = _script_tokens(tokens[script])
        words = [Expansion(t, escape(t)) for t in tokens]
    n = _launcher_length(tokens)
    if n == 0:
        shown = shlex.join(tokens[:4]) + (" ..." if len(tokens) > 4 else "")
        raise ServerProblem(
            NOT_SGLANG,
            f"container {container.get('name')!r} does not start SGLang's server (it runs "
            f"{shown or 'the image entrypoint'!r}); the launcher must be visible in "
            "command/args: python3 -m sglang.launch_server ... or sglang serve ...",
        )
    arg_words = words[n:]
    hidden = _hidden_cost_input(arg_words)
    if hidden:
        raise ServerProblem(HIDDEN_COST_INPUT, hidden)
    argv = tuple(w.seen for w in arg_words)
    flags, _, _ = parse_server_args(argv)
    if flags.get("speculative_algorithm", "").upper() != "DSPARK":
        raise ServerProblem(
            NOT_DSPARK,
            f"container {container.get('name')!r} does not run DSpark speculative decoding "
            f"({ALGORITHM_FLAG} is {flags.get('speculative_algorithm', 'unset')!r}); SPS "
            f"tables are only for servers started with {ALGORITHM_FLAG} DSPARK",
        )
    cost_env, env_sources, unread = _cost_env(env, script_env)
    return ServerCommand(
        launcher=tuple(w.kubelet_form for w in words[:n]),
        args=tuple(w.kubelet_form for w in arg_words),
        env={k: escape(v) for k, v in script_env.items()},
        shell=script is not None,
        argv=argv,
        cost_env=cost_env,
        sources={**_flag_sources(arg_words), **env_sources},
        unread=tuple(unread),
    )


def _hidden_cost_input(words: Sequence[Expansion]) -> str | None:
    """Why a value the operator must read (a cost flag's, the port, the table path) or a
    flag itself comes from something it cannot read; None when none does. A hidden value
    of another flag (`--api-key $(KEY)` from a Secret) is fine."""
    advice = (
        "a change there would not make the table stale, so a table measured for one value "
        "could serve another. Write the value in args or env, or take it from a ConfigMap "
        "key (the operator reads ConfigMaps, never Secrets)"
    )
    waiting: str | None = None  # a flag that the next word may be the value of
    for word in words:
        ref = word.hidden[0] if word.hidden else None
        if word.seen.startswith("-"):
            flag, inline = split_flag(word.seen)
            if ref is not None and word.hidden_before(len(flag)):
                return (
                    f"the flag {_shown(flag)!r} takes its name from $({ref.name}), "
                    f"{ref.value.source}: it could be any flag; {advice}"
                )
            if ref is not None and flag in READ_FLAGS:
                return f"{flag} takes its value from $({ref.name}), {ref.value.source}: {advice}"
            waiting = None if inline is not None or flag in COST_SWITCHES else flag
            continue
        if ref is not None and waiting is None:
            return (
                f"the argument {_shown(word.seen)!r} comes from $({ref.name}), "
                f"{ref.value.source}, where a flag would be: it could be any flag; {advice}"
            )
        if ref is not None and waiting in READ_FLAGS:
            return f"{waiting} takes its value from $({ref.name}), {ref.value.source}: {advice}"
        waiting = None
    return None


def _shown(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _flag_sources(words: Sequence[Expansion]) -> dict[str, str]:
    """Cost flag -> where its value came from, for values not written literally."""
    sources: dict[str, str] = {}
    for i, word in enumerate(words):
        flag, inline = split_flag(word.seen)
        value = word if inline is not None else (words[i + 1] if i + 1 < len(words) else None)
        if flag in COST_FLAGS and value is not None and value.sources:
            sources[COST_FLAGS[flag]] = "; ".join(value.sources)
    return sources


def _cost_env(
    env: ContainerEnv, script_env: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """The cost env vars the server gets, where those not written literally came from, and
    what could set one unseen. A script's `VAR=value` is set last, so it wins."""
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    unread: list[str] = []
    for name in COST_ENV:
        if name in script_env:
            values[name] = script_env[name]
            continue
        found = env.lookup(name)
        if found is None:
            continue
        if found.value is None:
            if found.definite:
                raise ServerProblem(
                    HIDDEN_COST_INPUT,
                    f"the server's environment variable {name} comes from {found.source}: "
                    "a change there would not make the table stale; set it in env, or from "
                    "a ConfigMap key (the operator reads ConfigMaps, never Secrets)",
                )
            unread.append(f"{name} may be set by {found.source}")
            continue
        values[name] = found.value
        if found.source != "literal":
            sources[name] = found.source
    return values, sources, unread


def server_config(container: Mapping[str, Any], command: ServerCommand) -> ServerConfig:
    flags, port, table_path = parse_server_args(command.argv)
    return ServerConfig(
        image=str(container.get("image", "")),
        flags=flags,
        env=dict(sorted(command.cost_env.items())),
        port=port,
        table_path=table_path,
        sources=dict(command.sources),
        unread=command.unread,
    )


def table_fingerprint(server: ServerConfig, table_spec: Mapping[str, Any]) -> str:
    """The key a table is stored under: the server's cost inputs plus the table kind and
    sweep (changing either makes a new table necessary)."""
    canonical = {"server": server.fingerprint(), "table": table_spec}
    return content_hash(json.dumps(canonical, sort_keys=True, separators=(",", ":")))

"""What an SGLang server container runs, and what its step cost depends on (pure).

`parse_server` recognises an SGLang DSpark server from its container, or refuses with a
`ServerProblem` that says what to change: a table is only ever measured for, and put
onto, a server the operator understands. It accepts the exec form (`command`/`args`) and
a `sh -c` script that is one plain command line (no variables, pipes, `;`, redirections
or substitutions; a leading `exec` and `VAR=value` assignments are fine). Anything else
in a script cannot be read safely and is refused.

What enters the fingerprint is the declared list `api/fingerprint.py`: each input read
where SGLang reads it, under every spelling SGLang accepts (aliases, and the abbreviations
its argparse parser allows: a unique prefix of a known flag is that flag), list flags
with all their values. What the operator injects itself (the table path) or what does
not change the cost (host, port, log level) never makes a table stale. Values are what
the server really gets: `$(VAR)` references are expanded from the container's
environment as the kubelet does, with ConfigMap keys resolved (`podenv`). A cost input
the operator cannot read (a Secret, a per-pod field, a `--config` file) is refused,
naming it: a change there would go unseen. A flag or variable that looks like a cost
input but is not in the list is reported as not fingerprinted (`ServerConfig.unfingerprinted`).
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sps_operator.api import fingerprint as F
from sps_operator.api.fingerprint import CostInput, Kind, ServerVersion, Where
from sps_operator.api.hashing import content_hash
from sps_operator.api.reasons import (
    AMBIGUOUS_FLAG,
    CONFIG_FILE_FLAGS,
    HIDDEN_COST_INPUT,
    NOT_A_DSPARK_SERVER,
    NOT_AN_SGLANG_SERVER,
    TARGET_TOO_LARGE,
    UNREADABLE_SHELL_SCRIPT,
)
from sps_operator.controller.sglang import fingerprint_v1
from sps_operator.controller.sglang.flags import split_flag
from sps_operator.controller.sglang.podenv import (
    EXPANDED_TOO_LONG,
    ContainerEnv,
    Expansion,
    escape,
    expand_words,
    resolve_env,
)

TABLE_PATH_FLAG = "--speculative-dspark-sps-table-path"
ALGORITHM_FLAG = "--speculative-algorithm"
PORT_FLAG = "--port"
CONFIG_FLAG = "--config"
DEFAULT_PORT = 30000
VERIFY_MODE_ENV = "SGLANG_RAGGED_VERIFY_MODE"
CAPTURE_DERIVED_ENV = "SGLANG_DSPARK_ENABLE_CAPTURE_DERIVED_SPS"
# The fzyzcjy fork's sentinel for its flat table: `--speculative-dspark-sps-table-path const`.
CONST_TABLE_PATH = "const"
SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
MAX_SCRIPT_CHARS = 16 * 1024
# Bounds of what a config keeps for status and the table's metadata.
MAX_VALUE_CHARS = 256
MAX_REPORTED = 16

# Flags the operator knows besides the list's: `--host` only so an abbreviation of it is
# not read as another flag. Checked against SGLang 15a43983's parser: no flag of SGLang
# that this list lacks is a prefix of one it has, so resolving a unique prefix among
# these resolves it as argparse does (or where argparse finds it ambiguous, the server
# refuses to start anyway).
_OTHER_FLAGS = {PORT_FLAG: Kind.VALUE, "--host": Kind.VALUE, CONFIG_FLAG: Kind.VALUE}
KNOWN_FLAGS: dict[str, Kind] = {
    **{flag: entry.kind for flag, entry in F.FLAG_SPELLINGS.items()},
    **_OTHER_FLAGS,
}
# Every spelling of every fingerprinted variable (`SGL_X`, old names, `SGLANG_X`).
FINGERPRINTED_ENV = tuple(s for e in F.ENV_INPUTS if e.fingerprinted for s in e.env_spellings())


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
    flags: tuple[FlagRead, ...] = ()  # what the operator read of `argv`
    envs: tuple[InputRead, ...] = ()  # the list's variables the server gets
    legacy_env: Mapping[str, str] = field(default_factory=dict)  # as fingerprint v1 read it
    unfingerprinted: tuple[str, ...] = ()  # cost-looking inputs the list lacks, unreadable ones

    @property
    def table_path(self) -> str | None:
        return next((f.value_text for f in reversed(self.flags) if f.flag == TABLE_PATH_FLAG), None)


@dataclass(frozen=True)
class FlagRead:
    """One flag of the command line, resolved to the flag SGLang reads."""

    flag: str  # the flag SGLang's parser resolves it to (an entry's canonical spelling)
    written: str  # as written: an alias or an abbreviation
    value: str | tuple[str, ...]  # "true" for a switch, a tuple for a list flag
    sources: tuple[str, ...] = ()  # where `$(VAR)`s in its value came from

    @property
    def value_text(self) -> str:
        return " ".join(self.value) if isinstance(self.value, tuple) else self.value

    @property
    def where(self) -> str:
        how = self.written
        if self.written != self.flag:
            alias = self.written in F.FLAG_SPELLINGS
            how += f" ({'alias' if alias else 'abbreviation'} of {self.flag})"
        return "args " + how + (f", {'; '.join(self.sources)}" if self.sources else "")


@dataclass(frozen=True)
class InputRead:
    """One input of the declared list as the server gets it (for users: `sps-operator
    fingerprint`, the table's metadata, why a server changed)."""

    name: str  # the list's name
    label: str  # how a user sees it: a flag, a variable, "image"
    value: str  # as written (a list flag's values space-separated)
    where: str  # args (and how it was spelled), env (literal or from which ConfigMap), image
    counted: bool = True  # in the fingerprint
    note: str = ""  # why not counted

    def to_dict(self) -> dict[str, Any]:
        out = {"input": self.label, "value": cut_value(self.value), "where": cut_value(self.where)}
        if not self.counted:
            out["notCounted"] = self.note
        return out


def cut_value(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class ServerConfig:
    """The cost-relevant configuration of one SGLang server container."""

    image: str
    # The fingerprinted inputs that count for this server's version: name -> value
    # (normalised as SGLang reads it; a list flag's values as a list).
    inputs: dict[str, Any] = field(default_factory=dict)
    read: tuple[InputRead, ...] = ()  # every input of the list that was set, counted or not
    version: ServerVersion = field(default_factory=lambda: ServerVersion(None))
    port: int = DEFAULT_PORT
    table_path: str | None = None
    unfingerprinted: tuple[str, ...] = ()
    legacy: dict[str, Any] = field(default_factory=dict)  # what fingerprint version 1 hashed

    def fingerprint(self) -> str:
        canonical = json.dumps(self.inputs, sort_keys=True, separators=(",", ":"))
        return F.FINGERPRINT_PREFIX + content_hash(canonical)

    def legacy_fingerprint(self) -> str:
        canonical = json.dumps(self.legacy, sort_keys=True, separators=(",", ":"))
        return content_hash(canonical)

    def value(self, name: str) -> str | None:
        """The value the server gets for an input of the list (as written; None: unset)."""
        return next((r.value for r in self.read if r.name == name), None)

    @property
    def verify_mode(self) -> str:
        return (self.value(VERIFY_MODE_ENV) or "static").strip()

    @property
    def lora(self) -> bool:
        """DSpark + LoRA: `--enable-lora`, or `--lora-paths` (which turns it on)."""
        return any(r.name in ("enable_lora", "lora_paths") for r in self.read)

    def describe(self) -> dict[str, Any]:
        """What the table's metadata keeps of the server (bounded): enough for a later
        pass to say what changed."""
        return {
            "fingerprint": self.fingerprint(),
            "fingerprintVersion": F.FINGERPRINT_VERSION,
            "sglangVersion": self.version.describe(),
            "inputs": {r.label: cut_value(r.value) for r in self.read if r.counted},
            "notCounted": {r.label: cut_value(r.value) for r in self.read if not r.counted},
            "notFingerprinted": list(self.unfingerprinted),
            "port": self.port,
            "tablePath": self.table_path,
            "v1": self.legacy,
        }


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


# --------------------------------------------------------------------------- flags

_NEGATIVE_NUMBER = re.compile(r"^-[0-9]+(\.[0-9]*)?$")


def _flag_like(text: str) -> bool:
    """argparse takes a word starting with '-' for an option (a negative number is not)."""
    return text.startswith("-") and len(text) > 1 and not _NEGATIVE_NUMBER.match(text)


def resolve_flag(written: str) -> str | None:
    """The flag SGLang's parser reads `written` as: itself, or the one known flag it is a
    prefix of (argparse's allow_abbrev); None for a flag the operator does not know.
    ServerProblem for a prefix of several (argparse refuses it too)."""
    if written in KNOWN_FLAGS or not written.startswith("--") or len(written) < 3:
        return _canonical(written) if written in KNOWN_FLAGS else None
    matches = sorted({f for f in KNOWN_FLAGS if f.startswith(written)})
    entries = {F.FLAG_SPELLINGS[f].name if f in F.FLAG_SPELLINGS else f for f in matches}
    if not matches:
        return None
    if len(entries) > 1:
        raise ServerProblem(
            AMBIGUOUS_FLAG,
            f"the flag {_shown(written)!r} is an abbreviation of several flags "
            f"({', '.join(matches[:6])}); SGLang refuses it too: write the flag in full",
        )
    return _canonical(matches[0])


def _canonical(flag: str) -> str:
    entry = F.FLAG_SPELLINGS.get(flag)
    return entry.spellings[0] if entry is not None else flag


def _walk_flags(words: Sequence[Expansion]) -> list[tuple[Expansion, str | None, list[Expansion]]]:
    """The command line as argparse groups it: (flag word, the flag it resolves to or None,
    its value words). Words before the first flag come as (word, None, []) with a word
    that is not flag-like."""
    out: list[tuple[Expansion, str | None, list[Expansion]]] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not _flag_like(word.seen):
            out.append((word, None, []))
            continue
        written, inline = split_flag(word.seen)
        flag = resolve_flag(written)
        kind = KNOWN_FLAGS.get(flag or "")
        values: list[Expansion] = []
        if inline is None and kind != Kind.SWITCH:
            # A value flag takes one word; a list flag (and one the operator does not know,
            # whose arity it cannot tell) every word up to the next flag.
            while i < len(words) and not _flag_like(words[i].seen):
                values.append(words[i])
                i += 1
                if kind == Kind.VALUE:
                    break
        out.append((word, flag, values))
    return out


def read_flags(words: Sequence[Expansion]) -> tuple[list[FlagRead], list[str]]:
    """The flags the operator knows, as the server reads them (the last one of a flag
    wins), and the cost-looking flags it does not know (as written, once each)."""
    read: list[FlagRead] = []
    unknown: list[str] = []
    for word, flag, values in _walk_flags(words):
        if not _flag_like(word.seen):
            continue
        written, inline = split_flag(word.seen)
        if flag is None:
            if F.cost_looking_flag(written) and written not in unknown:
                unknown.append(written)
            continue
        if flag == CONFIG_FLAG:
            raise ServerProblem(
                CONFIG_FILE_FLAGS,
                f"the server reads flags from a file ({written} "
                f"{_shown(inline or ' '.join(v.seen for v in values))}), which the operator "
                "cannot see: a cost flag in it would change without making the table stale. "
                "Write the flags in the container's args",
            )
        kind = KNOWN_FLAGS[flag]
        sources = tuple(s for v in values for s in v.sources) + (
            word.sources if inline is not None else ()
        )
        value: str | tuple[str, ...]
        if kind == Kind.SWITCH:
            value = "true"
        elif kind == Kind.LIST:
            value = (inline,) if inline is not None else tuple(v.seen for v in values)
            if not value:
                continue  # `--lora-paths` with no value sets nothing
        elif inline is not None:
            value = inline
        elif values:
            value = values[0].seen
        else:
            continue  # no value: SGLang refuses it ("expected one argument")
        read = [r for r in read if r.flag != flag] + [FlagRead(flag, written, value, sources)]
    return read, unknown


def _reads_value(flag: str | None) -> bool:
    """Whether the operator must know this flag's value: a fingerprinted one, the port it
    probes, the table path it checks."""
    if flag in (PORT_FLAG, TABLE_PATH_FLAG):
        return True
    entry = F.FLAG_SPELLINGS.get(flag or "")
    return entry is not None and entry.fingerprinted


def _port(flags: Sequence[FlagRead]) -> int:
    value = next((f.value_text for f in flags if f.flag == PORT_FLAG), None)
    if value is not None and value.isdigit() and 0 < int(value) < 65536:
        return int(value)
    return DEFAULT_PORT


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
        UNREADABLE_SHELL_SCRIPT,
        f"the server runs {tokens[0]} without a -c script; start SGLang in command/args",
    )


def _script_tokens(script: str) -> tuple[list[str], dict[str, str]]:
    """One plain command line of a script, and its leading `VAR=value` assignments."""
    advice = (
        "put the launcher and its flags in the container's command/args (exec form), or use "
        "rollout.mode AnnotateOnly with the table flag written in your script"
    )
    if len(script) > MAX_SCRIPT_CHARS:
        raise ServerProblem(
            UNREADABLE_SHELL_SCRIPT, f"the server's shell script is too long; {advice}"
        )
    body = script.strip().replace("\\\n", " ")
    feature = _first_shell_feature(body)
    if feature:
        raise ServerProblem(
            UNREADABLE_SHELL_SCRIPT,
            f"the server's shell script uses {feature!r} (variables, several "
            f"commands, pipes, redirections or globs), so its command cannot be read "
            f"safely; {advice}",
        )
    try:
        words = shlex.split(body, posix=True)
    except ValueError as exc:
        raise ServerProblem(
            UNREADABLE_SHELL_SCRIPT, f"the server's shell script: {exc}; {advice}"
        ) from None
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
    argv = [*(container.get("command") or []), *(container.get("args") or [])]
    words = expand_words(argv, env.lookup)
    if words is None:
        raise ServerProblem(TARGET_TOO_LARGE, EXPANDED_TOO_LONG)
    tokens = [w.seen for w in words]
    script = _shell_script(tokens)
    script_env: dict[str, str] = {}
    if script is not None:
        if words[script].hidden:
            ref = words[script].hidden[0]
            raise ServerProblem(
                UNREADABLE_SHELL_SCRIPT,
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
            NOT_AN_SGLANG_SERVER,
            f"container {container.get('name')!r} does not start SGLang's server (it runs "
            f"{shown or 'the image entrypoint'!r}); the launcher must be visible in "
            "command/args: python3 -m sglang.launch_server ... or sglang serve ...",
        )
    arg_words = words[n:]
    hidden = _hidden_cost_input(arg_words)
    if hidden:
        raise ServerProblem(HIDDEN_COST_INPUT, hidden)
    flags, unknown = read_flags(arg_words)
    algorithm = next((f.value_text for f in flags if f.flag == ALGORITHM_FLAG), "")
    if algorithm.upper() != "DSPARK":
        raise ServerProblem(
            NOT_A_DSPARK_SERVER,
            f"container {container.get('name')!r} does not run DSpark speculative decoding "
            f"({ALGORITHM_FLAG} is {algorithm or 'unset'!r}); SPS tables are only for "
            f"servers started with {ALGORITHM_FLAG} DSPARK",
        )
    envs, env_notes, legacy_env = _read_env(env, script_env)
    return ServerCommand(
        launcher=tuple(w.kubelet_form for w in words[:n]),
        args=tuple(w.kubelet_form for w in arg_words),
        env={k: escape(v) for k, v in script_env.items()},
        shell=script is not None,
        argv=tuple(w.seen for w in arg_words),
        flags=tuple(flags),
        envs=tuple(envs),
        legacy_env=legacy_env,
        unfingerprinted=tuple(
            f"{flag} (args): looks like a cost input, not in the fingerprint" for flag in unknown
        )
        + tuple(env_notes),
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
    for word, flag, values in _walk_flags(words):
        ref = word.hidden[0] if word.hidden else None
        if not _flag_like(word.seen):
            if ref is not None:
                return (
                    f"the argument {_shown(word.seen)!r} comes from $({ref.name}), "
                    f"{ref.value.source}, where a flag would be: it could be any flag; {advice}"
                )
            continue
        written, inline = split_flag(word.seen)
        if ref is not None and word.hidden_before(len(written)):
            return (
                f"the flag {_shown(written)!r} takes its name from $({ref.name}), "
                f"{ref.value.source}: it could be any flag; {advice}"
            )
        if not _reads_value(flag):
            continue
        hidden = ([word] if inline is not None and ref is not None else []) + [
            v for v in values if v.hidden
        ]
        if hidden:
            ref = hidden[0].hidden[0]
            return f"{flag} takes its value from $({ref.name}), {ref.value.source}: {advice}"
    return None


def _shown(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _read_env(
    env: ContainerEnv, script_env: Mapping[str, str]
) -> tuple[list[InputRead], list[str], dict[str, str]]:
    """The list's variables the server gets, what could set a fingerprinted one unseen or
    looks like a cost input but is not in the list, and what fingerprint version 1 read.
    A script's `VAR=value` is set last, so it wins; of a variable's spellings, the one
    SGLang copies last wins (`SGL_X` over any other, `CostInput.env_spellings`)."""
    read: list[InputRead] = []
    notes: list[str] = []
    legacy: dict[str, str] = {}
    for entry in F.ENV_INPUTS:
        won: InputRead | None = None
        for spelling in entry.env_spellings():
            try:
                got = _env_value(entry, spelling, env, script_env)
            except ServerProblem:
                if won is None:
                    raise
                continue  # a spelling SGLang overwrites: what it holds does not matter
            if spelling in fingerprint_v1.ENV and got is not None:
                legacy[spelling] = got.value
            won = won or got
        if won is not None:
            read.append(won)
    for source in env.opaque_sources():
        notes.append(
            f"{source} (envFrom): may set fingerprinted variables the operator cannot read"
        )
    for name in sorted((env.names() | set(script_env)) - set(F.ENV_SPELLINGS)):
        if F.cost_looking_env(name):
            notes.append(f"{name} (env): looks like a cost input, not in the fingerprint")
    return read, notes, legacy


def _env_value(
    entry: CostInput, spelling: str, env: ContainerEnv, script_env: Mapping[str, str]
) -> InputRead | None:
    """`spelling` of `entry` as the server gets it; None when unset (or maybe set by an
    envFrom the operator cannot read); ServerProblem when a fingerprinted one is set from
    what the operator cannot read."""
    name = entry.name
    alias = "" if spelling == name else f" {spelling}, which SGLang copies over {name}"
    if spelling in script_env:
        return InputRead(name, name, script_env[spelling], f"env{alias} (the shell script)")
    found = env.lookup(spelling)
    if found is None:
        return None
    if found.value is None:
        if entry.fingerprinted and found.definite:
            raise ServerProblem(
                HIDDEN_COST_INPUT,
                f"the server's environment variable {spelling} comes from {found.source}: "
                "a change there would not make the table stale; set it in env, or from "
                "a ConfigMap key (the operator reads ConfigMaps, never Secrets)",
            )
        return None
    where = "env" + alias if found.source == "literal" else f"env{alias} ({found.source})"
    return InputRead(name, name, found.value, where)


def server_config(
    container: Mapping[str, Any], command: ServerCommand, sglang_version: str | None = None
) -> ServerConfig:
    """The server's fingerprint inputs. `sglang_version` is what the profile states
    (spec.server.sglangVersion); without it, the image tag tells (or nothing does)."""
    image = str(container.get("image", ""))
    version = F.server_version(image, sglang_version)
    read: list[InputRead] = [InputRead("image", "image", image, "image")]
    for flag in command.flags:
        entry = F.FLAG_SPELLINGS.get(flag.flag)
        if entry is not None:
            read.append(InputRead(entry.name, entry.label, flag.value_text, flag.where))
    read += command.envs
    inputs: dict[str, Any] = {}
    marked: list[InputRead] = []
    for item in read:
        entry = F.BY_NAME[item.name]
        counted = entry.fingerprinted and F.matters(entry, version)
        if counted:
            value = _normalised_value(entry, command, item.value)
            if value is None:
                counted = False
                item = InputRead(item.name, item.label, item.value, item.where, False,
                                 f"SGLang's default ({entry.default})")  # fmt: skip
            else:
                inputs[entry.name] = value
        if not counted and item.counted:
            item = InputRead(item.name, item.label, item.value, item.where, False,
                             F.why_not_counted(entry, version))  # fmt: skip
        marked.append(item)
    unfingerprinted = list(command.unfingerprinted)
    if F.moving_tag(image):
        unfingerprinted.append(
            f"image {image}: a tag that moves, so the code behind it may change unseen; pin "
            "a digest or a release tag, or the table stays after the image changed"
        )
    return ServerConfig(
        image=image,
        inputs=inputs,
        read=tuple(marked),
        version=version,
        port=_port(command.flags),
        table_path=command.table_path,
        unfingerprinted=tuple(cut_value(u) for u in unfingerprinted[:MAX_REPORTED]),
        legacy=fingerprint_v1.describe_v1(image, command.argv, command.legacy_env),
    )


def _normalised_value(entry: CostInput, command: ServerCommand, written: str) -> Any:
    """The value as SGLang reads it; None when it is SGLang's default (an env var set to
    its default is the server without it)."""
    if entry.where == Where.ENV:
        value = F.normalised(entry, written)
        return None if entry.default is not None and value == entry.default else value
    if entry.default is not None and written.strip() == entry.default:
        return None
    if entry.kind == Kind.LIST:
        flag = next(f for f in command.flags if F.FLAG_SPELLINGS.get(f.flag) is entry)
        return list(flag.value) if isinstance(flag.value, tuple) else [flag.value]
    return written


def table_fingerprint(server: ServerConfig, table_spec: Mapping[str, Any]) -> str:
    """The key a table is stored under: the server's cost inputs plus the table kind and
    sweep (changing either makes a new table necessary)."""
    canonical = {"server": server.fingerprint(), "table": table_spec}
    return F.FINGERPRINT_PREFIX + content_hash(
        json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    )


def legacy_table_fingerprint(server: ServerConfig, table_spec: Mapping[str, Any]) -> str:
    """The key version 1 stored the table under (fingerprint_v1, kept for the upgrade)."""
    return fingerprint_v1.table_fingerprint_v1(server.legacy_fingerprint(), table_spec)

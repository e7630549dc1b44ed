"""A container's environment as the kubelet builds it, and `$(VAR)` in command/args (pure).

The fingerprint must see what the server really runs. A model or a cost flag is often not
written in the args but chosen through the environment: `--model-path $(MODEL)` with
`MODEL` from a ConfigMap key (`env[].valueFrom`) or from `envFrom`. The kubelet expands
`$(VAR)` in command, args and env values from the container's environment, by rules of its
own (not the shell's): `$$` is a literal `$`, a reference to an undefined variable stays
as written, and nothing is expanded twice. `expand` follows those rules exactly
(Kubernetes `third_party/forked/golang/expansion`, which the property tests restate).

What the operator can read it resolves: literal values, ConfigMap keys (bounded; see
`ConfigMapEnv`), the pod's namespace. What it cannot read is a `Hidden` value, with the
reason in words: a Secret (the operator is given no right to read Secrets, and must not
be: it would hold every tenant's credentials), a field that differs per pod or in the
profiling clone (`fieldRef`, `resourceFieldRef`), a ConfigMap that is missing or too
large. `serverconfig.parse_server` refuses a server whose cost input is hidden; a hidden
value anywhere else (an `--api-key $(KEY)` from a Secret) is fine and is passed on as the
reference to the clone, which has the same environment.

The kubelet also defines service-link variables (`<SVC>_SERVICE_HOST`, ...); they are not
resolved here (a reference to one stays as written), and no cost input is named like them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sps_operator.api import limits

OPERATOR, OPENER, CLOSER = "$", "(", ")"
# What the operator keeps of a ConfigMap the servers read env from: a model path or a flag
# value is short; a ConfigMap is up to 1 MiB and anyone in the namespace may create one.
MAX_VALUE_CHARS = 1024
MAX_KEYS = 256
# An env value longer than this once expanded is one the operator does not know, and the
# words of a "where from" are cut at MAX_SOURCE_CHARS: `$(A)$(A)` in B, `$(B)$(B)` in C
# ... doubles at every variable, and 40 of them (a few hundred bytes of env) once grew
# a value and its source without bound (memory and CPU exponential in the env's length).
MAX_EXPANDED_CHARS = 16 * MAX_VALUE_CHARS
MAX_SOURCE_CHARS = 512


@dataclass(frozen=True)
class EnvValue:
    """A variable's value as the container gets it, or None when the operator cannot know
    it; `source` says where it comes from (or why it is unknown), in words for a user."""

    value: str | None
    source: str
    # False: a Secret named by envFrom may (or may not) define it; nothing names it.
    definite: bool = True

    @property
    def hidden(self) -> bool:
        return self.value is None


Lookup = Callable[[str], EnvValue | None]  # None: the variable is not defined


@dataclass(frozen=True)
class HiddenRef:
    """A `$(NAME)` in a string whose value the operator cannot know."""

    name: str
    value: EnvValue
    start: int  # where its `$(NAME)` stands in `Expansion.seen`
    end: int


@dataclass(frozen=True)
class Expansion:
    """A string after the kubelet's expansion."""

    seen: str  # what the container gets; a hidden value is shown as its `$(NAME)`
    kubelet_form: str  # given to the kubelet in the same environment, it expands to `seen`
    hidden: tuple[HiddenRef, ...] = ()
    sources: tuple[str, ...] = ()  # where the known references' values came from
    too_long: bool = False  # expanding stopped at `max_chars` (seen is cut there)

    def hidden_before(self, position: int) -> bool:
        return any(ref.start < position for ref in self.hidden)


def escape(text: str) -> str:
    """`text` as a literal for the kubelet: every `$` doubled."""
    return text.replace(OPERATOR, OPERATOR * 2)


def expand(text: str, lookup: Lookup, max_chars: int | None = None) -> Expansion:
    """`text` with `$(VAR)` references expanded as the kubelet expands command, args and
    env values: `$$` is `$`; `$(NAME)` is NAME's value, or stays as written when NAME is not
    defined; the name is everything up to the first `)`; a `$` before anything else, an
    unclosed `$(` and a trailing `$` are literal; values are not expanded again. A known
    value that would take the result past `max_chars` stops it (`too_long`)."""
    seen: list[str] = []
    exec_form: list[str] = []
    hidden: list[HiddenRef] = []
    sources: list[str] = []
    length = 0

    def literal(chunk: str) -> None:
        nonlocal length
        seen.append(chunk)
        exec_form.append(escape(chunk))
        length += len(chunk)

    checkpoint = cursor = 0
    while cursor < len(text):
        if text[cursor] != OPERATOR or cursor + 1 >= len(text):
            cursor += 1
            continue
        literal(text[checkpoint:cursor])
        after = text[cursor + 1]
        closer = text.find(CLOSER, cursor + 2) if after == OPENER else -1
        if after == OPERATOR:  # an escaped operator
            literal(OPERATOR)
            cursor += 2
        elif closer < 0:  # not a reference: the operator and the next character as they are
            literal(OPERATOR + after)
            cursor += 2
        else:
            name = text[cursor + 2 : closer]
            reference = text[cursor : closer + 1]
            value = lookup(name)
            if value is None:
                literal(reference)  # undefined: stays as written
            elif value.hidden:
                hidden.append(HiddenRef(name, value, length, length + len(reference)))
                seen.append(reference)
                exec_form.append(reference)  # the clone's same environment resolves it
                length += len(reference)
            elif max_chars is not None and length + len(str(value.value)) > max_chars:
                return Expansion("".join(seen), "".join(exec_form), tuple(hidden), (), True)
            else:
                literal(str(value.value))
                sources.append(f"$({name}): {value.source}")
            cursor = closer + 1
        checkpoint = cursor
    literal(text[checkpoint:])
    return Expansion("".join(seen), "".join(exec_form), tuple(hidden), tuple(sources))


EXPANDED_TOO_LONG = (
    f"the server's command line is longer than {limits.MAX_SERVER_ARGS_CHARS} characters "
    "once its $(VAR)s are expanded; the operator reads at most that"
)


def expand_words(
    words: Iterable[Any], lookup: Lookup, max_chars: int = limits.MAX_SERVER_ARGS_CHARS
) -> list[Expansion] | None:
    """Each of `words` expanded (`expand`), None when together they expand to more than
    `max_chars` characters (their values can repeat a long one many times)."""
    out: list[Expansion] = []
    for word in words:
        expansion = expand(str(word), lookup, max(max_chars, 0))
        if expansion.too_long:
            return None
        max_chars -= len(expansion.seen)
        out.append(expansion)
    return out


# --------------------------------------------------------------------------- ConfigMaps


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    """The entries of a list field that are objects (the API server validates them; a
    malformed one is skipped rather than trusted)."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


@dataclass(frozen=True)
class ConfigMapEnv:
    """What the operator keeps of a ConfigMap a server reads env from (bounded): the `data`
    values it may resolve, the keys whose values are too long to keep, and whether it kept
    every key (envFrom needs them all to know what it does not define)."""

    values: Mapping[str, str] = field(default_factory=dict)
    too_long: frozenset[str] = frozenset()
    complete: bool = True

    @classmethod
    def of(cls, config_map: Mapping[str, Any] | None) -> ConfigMapEnv | None:
        """The projection of a ConfigMap object; None for a missing one."""
        if config_map is None:
            return None
        data = config_map.get("data") or {}
        values: dict[str, str] = {}
        too_long: set[str] = set()
        for key in sorted(data)[:MAX_KEYS]:
            value = data[key]
            if isinstance(value, str) and len(value) <= MAX_VALUE_CHARS:
                values[str(key)] = value
            else:
                too_long.add(str(key))
        return cls(values, frozenset(too_long), len(data) <= MAX_KEYS)


def env_config_maps(pod_spec: Mapping[str, Any]) -> set[str]:
    """Every ConfigMap the containers of a pod spec read env from (keys or envFrom)."""
    names: set[str] = set()
    containers = _mappings(pod_spec.get("initContainers")) + _mappings(pod_spec.get("containers"))
    for container in containers:
        for entry in _mappings(container.get("env")):
            ref = _mapping(_mapping(entry.get("valueFrom")).get("configMapKeyRef"))
            if ref.get("name"):
                names.add(str(ref["name"]))
        for source in _mappings(container.get("envFrom")):
            ref = _mapping(source.get("configMapRef"))
            if ref.get("name"):
                names.add(str(ref["name"]))
    return names


# --------------------------------------------------------------------------- the environment

_SKIP = EnvValue("", "an optional reference to something missing: the variable is not set")


@dataclass(frozen=True)
class _EnvFrom:
    kind: str  # ConfigMap or Secret
    name: str
    prefix: str
    optional: bool
    data: ConfigMapEnv | None  # a ConfigMap's, None when missing (or a Secret)
    read: bool = True  # False: a ConfigMap the operator was not given (as opaque as a Secret)

    def lookup(self, name: str) -> EnvValue | None:
        """What this source gives `name` (None: it does not define it)."""
        if not name.startswith(self.prefix):
            return None
        key = name[len(self.prefix) :]
        where = f"{self.kind} {self.name!r} (envFrom" + (
            f", prefix {self.prefix!r})" if self.prefix else ")"
        )
        if self.kind != "ConfigMap":
            return EnvValue(None, f"{where}, which the operator may not read", definite=False)
        if not self.read:
            return EnvValue(None, f"{where}, not read", definite=False)
        if self.data is None:
            if self.optional:
                return None
            return EnvValue(None, f"{where}, which does not exist (the pods cannot start)")
        if key in self.data.values:
            return EnvValue(self.data.values[key], f"{where} key {key!r}")
        if key in self.data.too_long:
            return EnvValue(None, f"{where} key {key!r}, longer than {MAX_VALUE_CHARS} characters")
        if not self.data.complete:
            return EnvValue(None, f"{where}, which has more than {MAX_KEYS} keys", definite=False)
        return None


@dataclass(frozen=True)
class ContainerEnv:
    """A container's environment as the kubelet builds it: `env` entries (in order, each
    expanded against those before it and envFrom) over `envFrom` sources (a later one
    over an earlier one)."""

    explicit: Mapping[str, EnvValue] = field(default_factory=dict)
    env_from: tuple[_EnvFrom, ...] = ()

    def lookup(self, name: str) -> EnvValue | None:
        if name in self.explicit:
            return self.explicit[name]
        return _from_sources(self.env_from, name)

    def names(self) -> set[str]:
        """Every variable the operator can see defined (explicit entries, and the keys of
        envFrom ConfigMaps it read); what a Secret defines is not among them."""
        found = set(self.explicit)
        for source in self.env_from:
            if source.kind == "ConfigMap" and source.read and source.data is not None:
                keys = [*source.data.values, *source.data.too_long]
                found |= {source.prefix + key for key in keys}
        return found

    def opaque_sources(self) -> list[str]:
        """The envFrom sources whose variables the operator cannot list (Secrets)."""
        return [
            f"{s.kind} {s.name!r}" for s in self.env_from if s.kind != "ConfigMap" or not s.read
        ]


def _from_sources(sources: Iterable[_EnvFrom], name: str) -> EnvValue | None:
    for source in reversed(tuple(sources)):
        found = source.lookup(name)
        if found is not None:
            return found
    return None


def resolve_env(
    container: Mapping[str, Any],
    namespace: str | None,
    config_maps: Mapping[str, ConfigMapEnv | None],
) -> ContainerEnv:
    """The environment of `container` in a pod of `namespace`, with the ConfigMaps it
    reads (by name; None: missing; a name not in `config_maps` is treated as unread)."""
    sources: list[_EnvFrom] = []
    for entry in _mappings(container.get("envFrom")):
        prefix = str(entry.get("prefix") or "")
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = entry.get(key)
            if isinstance(ref, Mapping):
                name = str(ref.get("name") or "")
                data = config_maps.get(name) if kind == "ConfigMap" else None
                read = kind != "ConfigMap" or name in config_maps
                sources.append(_EnvFrom(kind, name, prefix, bool(ref.get("optional")), data, read))
    explicit: dict[str, EnvValue] = {}

    def current(name: str) -> EnvValue | None:
        return explicit[name] if name in explicit else _from_sources(sources, name)

    for entry in _mappings(container.get("env")):
        if not entry.get("name"):
            continue
        name = str(entry["name"])
        literal = entry.get("value")
        if literal:
            expanded = expand(str(literal), current, MAX_EXPANDED_CHARS)
            if expanded.too_long:
                why = f"its value is longer than {MAX_EXPANDED_CHARS} characters once expanded"
                explicit[name] = EnvValue(None, why)
            elif expanded.hidden:
                ref = expanded.hidden[0]
                why = f"its value uses $({ref.name}), {ref.value.source}"[:MAX_SOURCE_CHARS]
                explicit[name] = EnvValue(None, why, ref.value.definite)
            else:
                source = "; ".join(expanded.sources)[:MAX_SOURCE_CHARS] or "literal"
                explicit[name] = EnvValue(expanded.seen, source)
        elif isinstance(entry.get("valueFrom"), Mapping):
            resolved = _value_from(entry["valueFrom"], namespace, config_maps)
            if resolved is not _SKIP:
                explicit[name] = resolved
        else:
            explicit[name] = EnvValue("", "literal")
    return ContainerEnv(explicit, tuple(sources))


def _value_from(
    value_from: Mapping[str, Any],
    namespace: str | None,
    config_maps: Mapping[str, ConfigMapEnv | None],
) -> EnvValue:
    if isinstance(value_from.get("configMapKeyRef"), Mapping):
        ref = value_from["configMapKeyRef"]
        name, key = str(ref.get("name") or ""), str(ref.get("key") or "")
        optional = bool(ref.get("optional"))
        where = f"ConfigMap {name!r} key {key!r}"
        if name not in config_maps:
            return EnvValue(None, f"{where}, not read")
        data = config_maps[name]
        if data is None:
            return _SKIP if optional else EnvValue(None, f"{where}: the ConfigMap does not exist")
        if key in data.values:
            return EnvValue(data.values[key], where)
        if key in data.too_long:
            return EnvValue(None, f"{where}, longer than {MAX_VALUE_CHARS} characters")
        if data.complete:
            return _SKIP if optional else EnvValue(None, f"{where}: the ConfigMap has no such key")
        return EnvValue(None, f"{where}, in a ConfigMap of more than {MAX_KEYS} keys")
    if isinstance(value_from.get("secretKeyRef"), Mapping):
        ref = value_from["secretKeyRef"]
        where = f"Secret {ref.get('name')!r} key {ref.get('key')!r}"
        return EnvValue(None, f"{where}, which the operator may not read")
    if isinstance(value_from.get("fieldRef"), Mapping):
        path = str(value_from["fieldRef"].get("fieldPath") or "")
        if path == "metadata.namespace" and namespace is not None:
            return EnvValue(namespace, "the pod's namespace")
        return EnvValue(None, f"the pod's field {path}, not the same in the profiling clone")
    if isinstance(value_from.get("resourceFieldRef"), Mapping):
        resource = value_from["resourceFieldRef"].get("resource")
        return EnvValue(None, f"the container's resource {resource}")
    kinds = ", ".join(sorted(str(k) for k in value_from)) or "nothing"
    return EnvValue(None, f"valueFrom {kinds}, which the operator does not read")

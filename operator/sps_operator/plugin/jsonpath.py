"""kubectl's JSONPath templates (`-o jsonpath=...`) for `kubectl sps get` (pure, no I/O).

The subset kubectl users write (k8s.io/client-go/util/jsonpath): text with `{...}`
actions; in an action, `.field`, `['key']`, `[n]`, `[-n]`, `[a:b]`, `[*]`, `.*`, `..field`
(recursive), filters `[?(@.a.b == "x")]` (==, !=, <, <=, >, >=, or the path alone: it
exists), `@`, string literals (`{"\\n"}`), and `{range ...}...{end}`. As in `kubectl get`,
a missing key prints nothing, several results are joined by a space, and objects and
lists print as JSON. The template is user input: anything else is a PluginError that
names where it stops.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable, Iterator
from typing import Any

from sps_operator.plugin.view import PluginError

MAX_TEMPLATE = 4096

_STEP = re.compile(
    r"""\.\.(?P<recursive>[A-Za-z0-9_-]+|\*)"""  # ..name
    r"""|\.(?P<field>[A-Za-z0-9_-]+|\*)"""  # .name, .*
    r"""|\[\?\((?P<filter>[^)]*)\)\]"""  # [?(...)]
    r"""|\[(?P<quoted>'[^']*'|"[^"]*")\]"""  # ['key']
    r"""|\[(?P<index>-?\d+|\*|-?\d*:-?\d*)\]"""  # [n], [*], [a:b]
)
_COMPARE = re.compile(
    r"""^\s*@(?P<path>(\.[A-Za-z0-9_-]+|\['[^']*'\])*)\s*"""
    r"""(?:(?P<op>==|!=|<=|>=|<|>)\s*(?P<value>'[^']*'|"[^"]*"|-?\d+(\.\d+)?|true|false))?\s*$"""
)


def _error(template: str, message: str) -> PluginError:
    return PluginError(f"jsonpath {template!r}: {message}")


def _children(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return list(node.values())
    if isinstance(node, list):
        return list(node)
    return []


def _descend(node: Any) -> Iterator[Any]:
    yield node
    for child in _children(node):
        yield from _descend(child)


def _literal(text: str) -> Any:
    if text[0] in "'\"":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    return float(text) if "." in text else int(text)


def _matches(item: Any, expression: str, template: str) -> bool:
    match = _COMPARE.match(expression)
    if match is None:
        raise _error(template, f"unsupported filter {expression!r}")
    found = evaluate(match.group("path") or "", [item], template)
    if match.group("op") is None:
        return bool(found)
    want = _literal(match.group("value"))
    for value in found:
        op = match.group("op")
        if op == "==" and value == want:
            return True
        if op == "!=" and value != want:
            return True
        if op in _ORDER and _ordered(value, want) and _ORDER[op](value, want):
            return True
    return False


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}  # fmt: skip


def _ordered(a: Any, b: Any) -> bool:
    numbers = (int, float)
    plain = not isinstance(a, bool) and not isinstance(b, bool)
    return plain and (
        (isinstance(a, numbers) and isinstance(b, numbers))
        or (isinstance(a, str) and isinstance(b, str))
    )


def _index(nodes: list[Any], spec: str) -> list[Any]:
    out: list[Any] = []
    for node in nodes:
        if not isinstance(node, list):
            continue
        if spec == "*":
            out += node
        elif ":" in spec:
            start, _, stop = spec.partition(":")
            out += node[int(start) if start else None : int(stop) if stop else None]
        else:
            i = int(spec)
            if -len(node) <= i < len(node):
                out.append(node[i])
    return out


def evaluate(path: str, nodes: list[Any], template: str) -> list[Any]:
    """The values `path` (`.a[0].b`, without braces) selects from each of `nodes`."""
    position = 0
    path = path.strip()
    if path.startswith("@") or path.startswith("$"):
        path = path[1:]
    while position < len(path):
        step = _STEP.match(path, position)
        if step is None:
            raise _error(template, f"cannot read {path[position:]!r}")
        position = step.end()
        if step.group("recursive") is not None:
            name = step.group("recursive")
            everything = [n for node in nodes for n in _descend(node)]
            if name == "*":
                nodes = everything
            else:
                nodes = [n[name] for n in everything if isinstance(n, dict) and name in n]
        elif step.group("field") is not None:
            name = step.group("field")
            if name == "*":
                nodes = [c for node in nodes for c in _children(node)]
            else:
                nodes = [n[name] for n in nodes if isinstance(n, dict) and name in n]
        elif step.group("quoted") is not None:
            key = step.group("quoted")[1:-1]
            nodes = [n[key] for n in nodes if isinstance(n, dict) and key in n]
        elif step.group("index") is not None:
            nodes = _index(nodes, step.group("index"))
        else:
            expression = step.group("filter")
            items = [c for node in nodes for c in (node if isinstance(node, list) else [node])]
            nodes = [item for item in items if _matches(item, expression, template)]
    return nodes


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else str(value)


_ESCAPES = {"\\n": "\n", "\\t": "\t", "\\r": "\r", '\\"': '"', "\\\\": "\\"}


def _tokens(template: str) -> list[tuple[str, str]]:
    """("text", ...) and ("action", ...) in order; `{` inside a quoted literal is text."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(template):
        start = template.find("{", i)
        if start < 0:
            out.append(("text", template[i:]))
            break
        if start > i:
            out.append(("text", template[i:start]))
        j, quote = start + 1, ""
        while j < len(template) and (quote or template[j] != "}"):
            if quote and template[j] == "\\":
                j += 1
            elif template[j] in "'\"":
                quote = "" if quote == template[j] else (quote or template[j])
            j += 1
        if j >= len(template):
            raise _error(template, "an action `{` is not closed")
        out.append(("action", template[start + 1 : j].strip()))
        i = j + 1
    return out


def render(template: str, data: Any) -> str:
    """The template filled from `data`, as `kubectl get -o jsonpath=...` prints it."""
    if len(template) > MAX_TEMPLATE:
        raise _error(template[:40] + "...", f"longer than {MAX_TEMPLATE} characters")
    tokens = _tokens(template)
    return _run(tokens, 0, [data], template, top=True)[0]


def _run(
    tokens: list[tuple[str, str]], position: int, current: list[Any], template: str, top: bool
) -> tuple[str, int]:
    parts: list[str] = []
    while position < len(tokens):
        kind, body = tokens[position]
        position += 1
        if kind == "text":
            parts.append(body)
            continue
        if body == "end":
            if top:
                raise _error(template, "{end} without {range}")
            return "".join(parts), position
        if body.startswith("range ") or body == "range":
            items = evaluate(body[len("range") :], current, template)
            items = [i for item in items for i in (item if isinstance(item, list) else [item])]
            end = position
            for item in items:
                text, end = _run(tokens, position, [item], template, top=False)
                parts.append(text)
            if not items:  # find the matching {end} without output
                _, end = _run(tokens, position, [], template, top=False)
            position = end
            continue
        if len(body) >= 2 and body[0] == body[-1] and body[0] in "'\"":
            parts.append(re.sub(r"\\.", lambda m: _ESCAPES.get(m.group(0), m.group(0)), body[1:-1]))
            continue
        parts.append(" ".join(_format(v) for v in evaluate(body, current, template)))
    if not top:
        raise _error(template, "{range} without {end}")
    return "".join(parts), position

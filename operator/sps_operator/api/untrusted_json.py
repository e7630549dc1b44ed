"""The one parser of JSON a tenant (or a profiling Job) can write: bounded in size, depth
and number range, and it never raises (pure).

Every JSON value the operator reads from an object someone else can write goes through
`read_json`: the borrow record on a Deployment, the pool claim on a Lease, a table
ConfigMap's `meta.json` (the rollout's stored metadata and the server description the
change report compares with), a profiling Job's result. It returns the value or an
`Unreadable` that says why, never an exception: 4,000 bytes of nested brackets in a
borrow record once raised RecursionError out of a pass, and the pass's error path, which
read the record again, raised a second time (issue 33).

The bounds are checked before anything recursive runs: the text's size, then its nesting
depth by one linear scan (strings skipped), then `json.loads` with hooks that refuse
NaN/Infinity, integers of more than `MAX_INT_DIGITS` digits or beyond `max_abs_int`, and
floats that overflow to infinity. Kept free of project imports: the operator, the
profiler and the plugin may all use it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, TypeGuard

# Python's own int-string limit: a longer integer is refused by name, not by a ValueError.
MAX_INT_DIGITS = 4300
# Kubernetes' integers are int64; nothing the operator writes is larger.
MAX_ABS_INT = 2**63 - 1
# Deep enough for everything the operator and the profiler write (a manifest's fit
# quality nests < 8), far below what recursion in json.loads or pydantic would hit.
DEFAULT_MAX_DEPTH = 32

# A JSON string (escapes honoured) or one bracket: strings are skipped by the depth scan.
# An unterminated string runs to the end of the text (the closing quote is optional): a
# match that had to fail would rescan the rest of the text from every later quote, and
# `"` followed by 128 Ki of `\"` then took minutes (quadratic). json.loads refuses it.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)


@dataclass(frozen=True)
class Unreadable:
    """Not a value the operator reads: why (a phrase that follows the object's name)."""

    why: str


class _Refused(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def readable(value: Any) -> TypeGuard[Any]:
    """`value` came out of `read_json` as a value (not `Unreadable`)."""
    return not isinstance(value, Unreadable)


def nesting_depth(text: str, limit: int) -> int:
    """How deeply arrays and objects nest in `text`, counted up to `limit + 1` (linear, no
    recursion; brackets inside strings do not count)."""
    depth = deepest = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif token in "]}":
            depth = max(depth - 1, 0)
    return deepest


def read_json(
    text: Any,
    *,
    max_bytes: int,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_abs_int: int = MAX_ABS_INT,
    non_finite: bool = False,
) -> Any:
    """The JSON value `text` holds, or `Unreadable` (why). Never raises. `non_finite`
    keeps NaN and ±Infinity as floats, for a caller that checks every number by name (a
    profiling Job's rounds: the refusal then names the field)."""
    try:
        return _read(text, max_bytes, max_depth, max_abs_int, non_finite)
    except _Refused as exc:
        return Unreadable(exc.why)
    except (ValueError, RecursionError, MemoryError, TypeError) as exc:
        # json.JSONDecodeError is a ValueError; the others cannot happen within the bounds
        # above, and are caught so that a bug here is an unreadable value, not a failed pass.
        message = getattr(exc, "msg", None) or type(exc).__name__
        return Unreadable(f"is not JSON: {message}")


def _read(text: Any, max_bytes: int, max_depth: int, max_abs_int: int, non_finite: bool) -> Any:
    if not isinstance(text, str):
        raise _Refused(f"is not text (a {type(text).__name__})")
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise _Refused(f"is larger than {max_bytes} bytes")
    if nesting_depth(text, max_depth) > max_depth:
        raise _Refused(f"nests arrays and objects more than {max_depth} deep")

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise _Refused(f"is not JSON it reads: a number has more than {MAX_INT_DIGITS} digits")
        value = int(digits)
        if abs(value) > max_abs_int:
            raise _Refused(f"holds an integer out of range (beyond ±{max_abs_int})")
        return value

    def number(digits: str) -> float:
        value = float(digits)
        if not math.isfinite(value) and not non_finite:
            raise _Refused("holds a number too large to be finite")
        return value

    def constant(name: str) -> Any:
        if non_finite:
            return float(name)
        raise _Refused(f"holds {name}, not a finite number (JSON has no {name})")

    return json.loads(text, parse_int=integer, parse_float=number, parse_constant=constant)


def read_json_object(text: Any, *, max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """`read_json`, and the value must be an object (a dict); else `Unreadable`."""
    value = read_json(text, max_bytes=max_bytes, max_depth=max_depth)
    if readable(value) and not isinstance(value, dict):
        return Unreadable(f"is not a JSON object (a {type(value).__name__})")
    return value

"""Numbers read from a server's JSON, which is untrusted input, and how a message may
show a value it sent (pure).

JSON gives integers as ints, but a foreign or broken server may send strings, booleans,
floats, Infinity or NaN; Python's `int()` would turn some into exceptions of the wrong kind
(OverflowError, ValueError) and accept others silently (`int(1.7)`, `int("12")`). These
return None for anything that is not what SGLang sends, and the caller refuses with its own
error and message.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any


def json_int(value: Any) -> int | None:
    """An integer as JSON carries it (an int, or an integral finite float), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


# The largest integer a float holds exactly: a JSON integer past it would be read as a
# neighbouring value (and past ~1.8e308 float() raises), so it is refused, not rounded.
MAX_EXACT_INT = 2**53


def json_number(value: Any) -> float | None:
    """A finite number (int or float, not bool) exactly as JSON carried it, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) > MAX_EXACT_INT:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def shown(value: Any, known: Collection[str] = ()) -> str:
    """A value from a server's answer as a message may show it: a number, a boolean, null,
    or one of the `known` words; anything else only by its type and size. Messages reach
    the profile's status and the pod's log, and the server may be one the profile's author
    cannot otherwise read (an External URL): its text is never quoted."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if json_number(value) is not None:
        return repr(value)
    if isinstance(value, str):
        return repr(value) if value in known else f"a text of {len(value)} characters"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    return f"a {type(value).__name__}"

"""Numbers read from a server's JSON, which is untrusted input (pure).

JSON gives integers as ints, but a foreign or broken server may send strings, booleans,
floats, Infinity or NaN; Python's `int()` would turn some into exceptions of the wrong kind
(OverflowError, ValueError) and accept others silently (`int(1.7)`, `int("12")`). These
return None for anything that is not what SGLang sends, and the caller refuses with its own
error and message.
"""

from __future__ import annotations

import math
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


def json_number(value: Any) -> float | None:
    """A finite number (int or float, not bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None

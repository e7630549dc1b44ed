"""What changed between the server a table was measured for and the one running now (pure).

The table's metadata keeps the server's `describe()`; `server_changes` compares it with a
`ServerConfig` read today, in the words of `sps-operator fingerprint` (status.currentRun
.changes, the Stale condition, `kubectl sps explain`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sps_operator.controller.sglang.serverconfig import ServerConfig, cut_value

MAX_CHANGES = 12


def _shown_value(value: Any, ignored: Any = None) -> str:
    if value is not None:
        return cut_value(str(value), 80)
    return "unset" if ignored is None else f"{cut_value(str(ignored), 80)} (not counted)"


def server_changes(before: Mapping[str, Any] | None, after: ServerConfig) -> list[str]:
    """What differs between the server a table was measured for (its `describe()` in the
    table's metadata) and `after`, in the words of `sps-operator fingerprint`: one line
    per input, at most MAX_CHANGES and a count of the rest. A table of fingerprint
    version 1 is compared on what version 1 read."""
    if not isinstance(before, Mapping):
        return []
    if isinstance(before.get("inputs"), Mapping):
        old = {str(k): v for k, v in before["inputs"].items()}
        new = {r.label: r.value for r in after.read if r.counted}
        ignored = before.get("notCounted")
        old_ignored = (
            {str(k): v for k, v in ignored.items()} if isinstance(ignored, Mapping) else {}
        )
        new_ignored = {r.label: r.value for r in after.read if not r.counted}
    else:  # version 1: {image, flags, env}
        old = {"image": before.get("image"), **(before.get("flags") or {}),
               **(before.get("env") or {})}  # fmt: skip
        new = {"image": after.image, **after.legacy["flags"], **after.legacy["env"]}
        old_ignored, new_ignored = {}, {}
    lines = []
    for key in sorted(set(old) | set(new), key=lambda k: (k != "image", k)):
        if str(old.get(key)) != str(new.get(key)) or (key in old) != (key in new):
            was = _shown_value(old.get(key), old_ignored.get(key))
            lines.append(f"{key}: {was} -> {_shown_value(new.get(key), new_ignored.get(key))}")
    if len(lines) > MAX_CHANGES:
        lines = [*lines[:MAX_CHANGES], f"and {len(lines) - MAX_CHANGES} more"]
    return lines

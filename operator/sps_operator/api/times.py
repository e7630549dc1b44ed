"""RFC 3339 times as Kubernetes objects and the operator's status write them (pure).

One reading for every part (the controller's clocks, the plugin's ages); what a time
without a UTC offset means is the caller's to decide.
"""

from __future__ import annotations

from datetime import datetime


def parse_rfc3339(stamp: str | None) -> datetime | None:
    """The time `stamp` says; None when absent or unreadable. Naive when it names no offset."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None

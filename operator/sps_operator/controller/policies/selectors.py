"""Label selectors (pure): a metav1.LabelSelector dict matched in memory (the caches hold
every object; no LIST by selector)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def matches_selector(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector match (matchLabels and matchExpressions); an empty selector
    matches nothing (the API refuses one)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and (not present or labels[key] not in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return bool(selector.get("matchLabels") or selector.get("matchExpressions"))

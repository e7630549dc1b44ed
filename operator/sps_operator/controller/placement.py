"""The GPU product a Deployment runs on, from the pod→node and node→labels indexes (pure).

A label that flaps (GPU feature discovery does that on some nodes) or a rollout that
briefly spans two GPU products must not make the table flap: a product counts only
after it has been observed, alone, for the debounce period.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sps_operator.controller.selectors import matches_selector


@dataclass(frozen=True)
class PodInfo:
    """What the pod index keeps per pod."""

    name: str
    labels: Mapping[str, str]
    node: str | None
    deleting: bool = False
    phase: str | None = None


@dataclass(frozen=True)
class Placement:
    products: frozenset[str]
    pods: int  # pods on nodes counted
    unlabelled: int  # pods on nodes without the GPU label

    @property
    def product(self) -> str | None:
        return next(iter(self.products)) if len(self.products) == 1 else None

    @property
    def mixed(self) -> bool:
        return len(self.products) > 1


def placement(
    pod_selector: Mapping[str, Any],
    pods: Iterable[PodInfo],
    node_labels: Mapping[str, Mapping[str, str]],
    gpu_label: str,
) -> Placement:
    products: set[str] = set()
    counted = unlabelled = 0
    for pod in pods:
        if pod.deleting or not pod.node or pod.phase in ("Succeeded", "Failed"):
            continue
        if not matches_selector(pod_selector, pod.labels):
            continue
        counted += 1
        product = (node_labels.get(pod.node) or {}).get(gpu_label)
        if product:
            products.add(product)
        else:
            unlabelled += 1
    return Placement(frozenset(products), counted, unlabelled)


@dataclass
class Debouncer:
    """Per-key stable value: a value counts once it has been observed for `period`."""

    period: timedelta
    _seen: dict[str, tuple[str | None, datetime]] = field(default_factory=dict)

    def observe(self, key: str, value: str | None, now: datetime) -> str | None:
        previous = self._seen.get(key)
        if previous is None or previous[0] != value:
            self._seen[key] = (value, now)
            return value if self.period <= timedelta(0) else None
        if now - previous[1] >= self.period:
            return value
        return None

    def forget(self, keep: Sequence[str], prefix: str = "") -> None:
        """Drop the keys under `prefix` that are not in `keep` (gone Deployments)."""
        kept = set(keep)
        for key in list(self._seen):
            if key.startswith(prefix) and key not in kept:
                del self._seen[key]

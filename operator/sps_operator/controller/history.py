"""Which table ConfigMaps to keep (pure): the live ones plus the newest up to the limit,
per GPU product."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PublishedTable:
    name: str
    gpu_product: str
    created: str  # RFC 3339; sorts chronologically


def tables_to_delete(
    tables: Sequence[PublishedTable], live: Iterable[str], limit: int
) -> list[str]:
    """Names to delete: beyond `limit` per GPU product, oldest first, never a live one."""
    live_set = set(live)
    by_gpu: dict[str, list[PublishedTable]] = defaultdict(list)
    for table in tables:
        by_gpu[table.gpu_product].append(table)
    doomed: list[str] = []
    for group in by_gpu.values():
        ordered = sorted(group, key=lambda t: (t.created, t.name), reverse=True)
        kept = [t for t in ordered if t.name in live_set]
        for table in ordered:
            if table.name in live_set:
                continue
            if len(kept) < limit:
                kept.append(table)
            else:
                doomed.append(table.name)
    return sorted(doomed)

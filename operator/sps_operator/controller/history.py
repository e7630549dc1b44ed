"""Which table ConfigMaps to keep (pure): the live ones plus the newest up to the limit,
per GPU product."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sps_operator.api import labels as L
from sps_operator.controller.state import Pass


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


def trim_history(p: Pass) -> None:
    """Delete this profile's table ConfigMaps beyond spec.historyLimit per GPU product;
    never one a target runs or may roll back to, nor the rejected one."""
    st = p.status
    published = [
        PublishedTable(
            name=name,
            gpu_product=(cm["metadata"].get("labels") or {}).get(L.LABEL_GPU, ""),
            created=cm["metadata"].get("creationTimestamp", ""),
        )
        for name, cm in p.snapshot.config_maps.items()
        if (cm["metadata"].get("labels") or {}).get(L.LABEL_COMPONENT) == L.COMPONENT_TABLE
    ]
    keep = {t.config_map for t in st.tables} | {t.table for t in st.targets if t.table}
    keep |= {t.previous for t in st.tables if t.previous}  # the rollback targets
    keep |= {t.running_config_map for t in p.targets if t.running_config_map}
    if st.rejected_table is not None:
        keep.add(st.rejected_table.config_map)
    for name in tables_to_delete(published, keep, p.spec.history_limit):
        p.kube.delete("ConfigMap", p.namespace, name)
    # Forget tables whose ConfigMap is gone (deleted by hand): they cannot be reused. A
    # table published in this pass, or a moment ago, may not be in the snapshot yet.
    existing = set(p.snapshot.config_maps) | set(p.created)
    st.tables = [t for t in st.tables if t.config_map in existing or p.recent(t.profiled_at)]

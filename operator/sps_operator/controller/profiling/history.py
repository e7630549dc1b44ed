"""Which table ConfigMaps to keep (pure), and the trim step.

The policy (spec.historyLimit): per GPU product, across fingerprints, the newest tables up
to the limit stay. Never deleted, and counted within that limit: what a target runs or is
being given, the table it would roll back to, the table of each fingerprint a target has
now (a GPU move back is served without profiling), the rejected table kept for
inspection, and whatever any Deployment of the namespace mounts (selected or not: its
next pod could not start without it). A table whose ConfigMap is gone is forgotten."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sps_operator.api import labels as L
from sps_operator.controller.profiling.state import ProfilingPass


@dataclass(frozen=True)
class PublishedTable:
    name: str
    gpu_product: str
    created: str  # RFC 3339; sorts chronologically


def tables_to_delete(
    tables: Sequence[PublishedTable], keep: Iterable[str], limit: int
) -> list[str]:
    """Names to delete: beyond `limit` per GPU product, oldest first, never one of `keep`
    (which count within the limit)."""
    keep_set = set(keep)
    by_gpu: dict[str, list[PublishedTable]] = defaultdict(list)
    for table in tables:
        by_gpu[table.gpu_product].append(table)
    doomed: list[str] = []
    for group in by_gpu.values():
        ordered = sorted(group, key=lambda t: (t.created, t.name), reverse=True)
        kept = [t for t in ordered if t.name in keep_set]
        for table in ordered:
            if table.name in keep_set:
                continue
            if len(kept) < limit:
                kept.append(table)
            else:
                doomed.append(table.name)
    return sorted(doomed)


def tables_to_keep(p: ProfilingPass) -> set[str]:
    """The tables no trim may delete (see the module's docstring)."""
    st = p.status
    live = {t.table for t in st.targets if t.table}
    live |= {t.running_config_map for t in p.targets if t.running_config_map}
    keep = set(live)
    keep |= {t.previous for t in st.tables if t.previous and t.config_map in live}
    current = {t.fingerprint for t in p.targets if t.fingerprint}
    keep |= {t.config_map for t in st.tables if t.fingerprint in current}
    if st.rejected_table is not None:
        keep.add(st.rejected_table.config_map)
    return keep | set(p.snapshot.mounted)


def trim_history(p: ProfilingPass) -> None:
    """Delete this profile's table ConfigMaps beyond spec.historyLimit per GPU product."""
    st = p.status
    tables = {
        name: cm
        for name, cm in p.snapshot.config_maps.items()
        if (cm["metadata"].get("labels") or {}).get(L.LABEL_COMPONENT) == L.COMPONENT_TABLE
    }
    published = [
        PublishedTable(
            name=name,
            gpu_product=(cm["metadata"].get("labels") or {}).get(L.LABEL_GPU, ""),
            created=cm["metadata"].get("creationTimestamp", ""),
        )
        for name, cm in tables.items()
    ]
    doomed = tables_to_delete(published, tables_to_keep(p), p.spec.history_limit)
    for name in doomed:
        p.delete_own("ConfigMap", tables[name])
    # Forget tables whose ConfigMap is gone (deleted here or by hand): they cannot be
    # reused. One published in this pass, or a moment ago, may not be in the snapshot yet.
    existing = set(p.snapshot.config_maps) | set(p.created)
    st.tables = [
        t
        for t in st.tables
        if t.config_map not in doomed and (t.config_map in existing or p.recent(t.profiled_at))
    ]

"""What an operator of fingerprint version 1 (0.1.0) reads in `status.tables`, kept beside
what this one reads, so a rollback to 0.1.0 (or its replica still running during a rolling
upgrade) does not profile again a server whose table this operator only re-keyed (pure).

0.1.0 finds a server's table by the pair (GPU product, fingerprint version 1) in
`status.tables` (its `triggers.table_for`), and rolls it only when the ConfigMap's
fingerprint label is that same value. A table an upgrade re-keyed (`adoptedFrom`, docs/
fingerprint.md) keeps its version-1 label, so an entry under its version-1 key, the
*twin*, is all 0.1.0 needs to find it: without it, 0.1.0 sees no table for the server,
measures it again (`ServerChanged`) and restarts it onto the new table. A table this
operator measured is labelled with its version-2 fingerprint, which 0.1.0 never accepts;
it gets no twin (0.1.0 measures that server again, as it must).

The twin is written with the status (`with_v1_twins`) and taken out when status is read
(`without_v1_twins`, in the status model and in `kubectl sps`), so nothing else here ever
sees it. 0.1.0 rewrites status with the fields it knows, dropping `adoptedFrom`: reading
the twin back restores it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# The fields of a status.tables entry that 0.1.0 knows; a twin carries only these.
V1_TABLE_FIELDS = (
    "gpuProduct",
    "fingerprint",
    "kind",
    "configMap",
    "hash",
    "quality",
    "profiledAt",
    "run",
    "refreshCount",
    "previous",
)


def is_v1(fingerprint: str) -> bool:
    """A version-1 fingerprint: 16 hex digits, no version prefix."""
    return len(fingerprint) == 16 and all(c in "0123456789abcdef" for c in fingerprint)


def _table_key(entry: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(entry.get(k)) for k in ("gpuProduct", "configMap", "hash"))


def _twin(entry: Mapping[str, Any]) -> dict[str, Any] | None:
    adopted = entry.get("adoptedFrom")
    if not isinstance(adopted, str) or not is_v1(adopted):
        return None
    twin = {k: entry[k] for k in V1_TABLE_FIELDS if entry.get(k) is not None}
    twin["fingerprint"] = adopted
    return twin


def with_v1_twins(tables: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`tables` (wire form, this operator's entries), then a version-1 twin of each table
    an upgrade re-keyed, in order: every reader that takes the first entry for a
    ConfigMap still gets this operator's."""
    entries = [dict(t) for t in tables]
    return entries + [twin for t in entries if (twin := _twin(t)) is not None]


def without_v1_twins(tables: Sequence[Any]) -> list[Any]:
    """`tables` as read (wire form) without the twins: a version-1 entry for the same
    ConfigMap, GPU product and hash as an entry of another fingerprint. That entry gets
    `adoptedFrom` back when 0.1.0 dropped it (the twin's key is the label the ConfigMap
    keeps). A version-1 entry alone is a table stored by 0.1.0: kept, for adoption."""
    entries = [dict(t) if isinstance(t, Mapping) else t for t in tables]
    by_table: dict[tuple[str, ...], list[dict[str, Any]]] = {}  # linear in the entries
    for e in entries:
        if isinstance(e, dict) and not is_v1(str(e.get("fingerprint") or "")):
            by_table.setdefault(_table_key(e), []).append(e)
    kept: list[Any] = []
    for entry in entries:
        fingerprint = entry.get("fingerprint") if isinstance(entry, dict) else None
        if not (isinstance(fingerprint, str) and is_v1(fingerprint)):
            kept.append(entry)
            continue
        same = by_table.get(_table_key(entry), [])
        # The entry it was written beside, or one that lost `adoptedFrom` to 0.1.0.
        owner = next((e for e in same if e.get("adoptedFrom") == fingerprint), None) or next(
            (e for e in same if not e.get("adoptedFrom")), None
        )
        if owner is not None and not owner.get("adoptedFrom"):
            owner["adoptedFrom"] = fingerprint
        elif not same:
            kept.append(entry)
        # else: a twin of an entry re-keyed from another version-1 key: dropped
    return kept

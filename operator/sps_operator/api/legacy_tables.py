"""What an operator of fingerprint version 1 (0.1.0) reads in `status.tables`, kept beside
what this one reads, so a rollback to 0.1.0 (or its replica still running during a rolling
upgrade) neither profiles again nor restarts a server whose table this operator re-keyed
or measured (pure).

0.1.0 (18c8f3b) finds a server's table by the pair (GPU product, fingerprint version 1)
in `status.tables` (`triggers.table_for`: the first such entry; none, and it measures the
server again), and rolls it only when the ConfigMap is the profile's and labelled with
that GPU product, that fingerprint and the table's hash, and its bytes hash to it
(`rollout.eligible_table`); in Inject mode it leaves the template alone only while the
template mounts that very ConfigMap (`rollout.inject_serves`). So what it needs is the
same ConfigMap, labelled with the version-1 key, and an entry under that key, the *twin*.

`adoptedFrom` names that key: the one a table was stored under before an upgrade re-keyed
it (its ConfigMap kept that label), or, for a table this operator measured, its server's
version-1 fingerprint, which the ConfigMap is labelled with instead of the current one
when that key stands for the measured server alone (`v1_key`). A twin is written only
while no target with that version-1 key is another server by the current fingerprint
(`with_v1_twins`): 0.1.0's key has fewer inputs, and a twin must never give a table to a
server it was not measured for.

The twin is written with the status (`with_v1_twins`) and taken out when status is read
(`without_v1_twins`, in the status model and in `kubectl sps`), so nothing else here ever
sees it. 0.1.0 rewrites status with the fields it knows, dropping `adoptedFrom`: reading
the twin back restores it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
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


# Version-1 key -> the current fingerprints of the targets that have it now.
V1Servers = Mapping[str, frozenset[str]]


def v1_servers(targets: Iterable[tuple[str, str]]) -> dict[str, frozenset[str]]:
    """What each version-1 key stands for now: from each target's (current fingerprint,
    version-1 fingerprint), the current fingerprints of the targets with that key
    (targets not read, with an empty fingerprint, left out)."""
    out: dict[str, set[str]] = {}
    for fingerprint, legacy in targets:
        if fingerprint and is_v1(legacy):
            out.setdefault(legacy, set()).add(fingerprint)
    return {k: frozenset(v) for k, v in out.items()}


def _one_server(servers: V1Servers, legacy: str, fingerprint: str) -> bool:
    """No target with version-1 key `legacy` is another server than `fingerprint`."""
    return servers.get(legacy, frozenset()) <= {fingerprint}


def v1_key(fingerprint: str, legacy: str, servers: V1Servers) -> str | None:
    """The version-1 key a table measured for the server of `fingerprint` (version 1:
    `legacy`) is labelled with and listed under for 0.1.0: `legacy`, when every target
    with that key is this server; else None (0.1.0 would take the key for the others too,
    so the table keeps its current fingerprint and 0.1.0 measures that server again)."""
    return legacy if is_v1(legacy) and _one_server(servers, legacy, fingerprint) else None


def with_v1_twins(
    tables: Sequence[Mapping[str, Any]], servers: V1Servers | None = None
) -> list[dict[str, Any]]:
    """`tables` (wire form, this operator's entries), then a version-1 twin of each entry
    with `adoptedFrom`, in order: every reader that takes the first entry for a ConfigMap
    still gets this operator's. With `servers` (the pass's targets, `v1_servers`), no twin
    for a key a target of another current fingerprint has; and none for a (GPU product,
    key) two entries claim (0.1.0 would take the first, not necessarily its server's)."""
    entries = [dict(t) for t in tables]
    twins = [
        twin
        for t in entries
        if (twin := _twin(t)) is not None
        and (servers is None or _one_server(servers, twin["fingerprint"], str(t["fingerprint"])))
    ]
    claims = Counter((str(t.get("gpuProduct")), t["fingerprint"]) for t in twins)
    return entries + [t for t in twins if claims[(str(t.get("gpuProduct")), t["fingerprint"])] == 1]


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

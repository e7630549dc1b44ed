"""AnnotateOnly: whether something besides the operator writes the stable ConfigMap
(pure).

The operator writes the live table into the stable ConfigMap; a second writer (kube-
controller-manager publishing kube-root-ca.crt, a GitOps tool syncing the object from Git,
a person) that puts other data back would be reverted at every pass, and revert again: a
fight with no end, paid from the operator's shared API budget (issue 33: 50 reverts, 50
applies). The operator stops writing at the first revert it sees and says who writes.

`managedFields` is read only to NAME the other writer in the message; the decision rests
on what the operator itself wrote: its hash annotation on the object, and bytes that no
longer hash to it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sps_operator.api import labels as L
from sps_operator.api.hashing import content_hash
from sps_operator.constants import FIELD_MANAGER
from sps_operator.tables.formats import build_uninitialized_sps_table

# SGLang's own "no table" (build_uninitialized_sps_table): what AnnotateOnly writes first.
PLACEHOLDER_JSON = build_uninitialized_sps_table(max_batch_tokens=1).to_json()
PLACEHOLDER_HASH = content_hash(PLACEHOLDER_JSON)

# Label and annotation prefixes (exactly these domains, not subdomains such as
# app.kubernetes.io) that the cluster's own components put on their objects.
SYSTEM_PREFIXES = ("kubernetes.io/", "k8s.io/")


def system_object(obj: Mapping[str, Any]) -> str | None:
    """A label or annotation key that marks `obj` as the cluster's own (None: none)."""
    meta = obj.get("metadata") or {}
    for key in [*(meta.get("labels") or {}), *(meta.get("annotations") or {})]:
        if str(key).startswith(SYSTEM_PREFIXES):  # not app.kubernetes.io/: everyone's
            return str(key)
    return None


def other_data_writers(obj: Mapping[str, Any]) -> list[str]:
    """Field managers other than the operator that own keys of `data` (latest first)."""
    entries = []
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if not isinstance(entry, Mapping) or entry.get("manager") == FIELD_MANAGER:
            continue
        fields = entry.get("fieldsV1") or {}
        if isinstance(fields, Mapping) and ("f:data" in fields or "f:binaryData" in fields):
            entries.append((str(entry.get("time") or ""), str(entry.get("manager") or "?")))
    return [name[:128] for _, name in sorted(entries, reverse=True)]


def reverted_by(
    stable: Mapping[str, Any] | None, filename: str, written: Collection[str]
) -> str | None:
    """Why the stable ConfigMap is contested (who else writes it), or None. Contested:
    the operator wrote a table there (its hash annotation is on it; a publisher that
    replaces `data` keeps annotations), its bytes hash to none of the tables the operator
    may have written (`written`: the hashes in status and the placeholder's; the
    annotation's value is a claim anyone can edit), and another field manager owns its
    data. A ConfigMap someone else created and the operator has not written yet is taken
    over, not contested."""
    if stable is None:
        return None
    meta = stable.get("metadata") or {}
    if not (meta.get("annotations") or {}).get(L.ANNOTATION_TABLE_HASH):
        return None
    text = (stable.get("data") or {}).get(filename)
    if isinstance(text, str) and content_hash(text) in written:
        return None
    writers = other_data_writers(stable)
    if not writers:
        return None
    return ", ".join(writers[:3])


# ----------------------------------------------------------------------------- write-backs
# Something the operator writes that another writer keeps undoing (a table's holder
# reference stripped, a stable ConfigMap replaced without the operator's annotation, or
# deleted) is written back with a capped exponential backoff, per object: each write of
# the same content within QUIET_SECONDS of the operator's previous one waits twice as long
# as the one before, at most MAX_REWRITE_SECONDS. Writing the same content again is itself
# the sign: the operator never needs to unless something undid its write. Kept in memory,
# not in status: it is the operator's own count of its own writes, which no tenant can
# edit, and an operator restart forgets it, which costs one write per contested object.

REWRITE_SECONDS = 60.0
MAX_REWRITE_SECONDS = 3600.0
QUIET_SECONDS = 2 * MAX_REWRITE_SECONDS
MAX_CONTESTS = 10_000  # objects remembered at once (each a few hundred bytes)


@dataclass(frozen=True)
class Rewrite:
    """The operator's writes of one content into one object, each within QUIET_SECONDS of
    the one before."""

    what: str  # the content written (a hash, "hold"), compared only
    count: int
    at: datetime  # the last one


def again(last: Rewrite | None, what: str, now: datetime) -> bool:
    """A write of `what` now repeats `last` (the same content, not long after)."""
    if last is None or last.what != what:
        return False
    return 0 <= (now - last.at).total_seconds() < QUIET_SECONDS  # (a clock gone back: fresh)


def rewrite_wait(last: Rewrite | None, what: str, now: datetime) -> float:
    """Seconds before `what` may be written again (0: now)."""
    if last is None or not again(last, what, now):
        return 0.0
    delay = min(REWRITE_SECONDS * 2 ** min(last.count - 1, 32), MAX_REWRITE_SECONDS)
    return max(delay - (now - last.at).total_seconds(), 0.0)


def after_write(last: Rewrite | None, what: str, now: datetime) -> Rewrite:
    """The record once `what` was written at `now`."""
    count = last.count + 1 if last is not None and again(last, what, now) else 1
    return Rewrite(what, count, now)

"""The publish step of profiling: judge the finished run's measurement and publish its table.

A table becomes an immutable ConfigMap named by its content hash (and the profile's UID)
and enters `status.tables` for its (GPU product, fingerprint) only when `acceptance.judge`
accepts it. A refused table is kept for inspection (`status.rejectedTable`) when it can be
written at all, and never rolled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sps_operator.api import labels as L
from sps_operator.api.hashing import content_hash
from sps_operator.api.legacy_tables import is_v1, v1_key, v1_servers
from sps_operator.api.reasons import (
    NAME_TAKEN,
    TABLE_MODIFIED,
    TABLE_PUBLISHED,
    TABLE_UNCHANGED,
)
from sps_operator.api.result import MAX_MANIFEST_BYTES
from sps_operator.api.status import TableRef
from sps_operator.controller.kube import names, table_objects
from sps_operator.controller.kube.table_objects import table_text
from sps_operator.controller.passes.state import Target
from sps_operator.controller.policies import conditions as cond
from sps_operator.controller.policies.acceptance import api_quality
from sps_operator.controller.policies.triggers import table_for
from sps_operator.controller.process.bounded import judge_bounded
from sps_operator.controller.profiling.outcome import (
    RETRYABLE,
    NameTaken,
    create_owned,
    delete_rbac,
    end_run,
    fail_run,
)
from sps_operator.controller.profiling.state import ProfilingPass
from sps_operator.tables.formats import SpsTable, load_sps_table_text


def load_table(cm: Mapping[str, Any] | None, recorded_hash: str) -> SpsTable | None:
    """The table in `cm` if its bytes are the ones the operator published (`recorded_hash`,
    from status); a modified ConfigMap is no table to compare a new one with."""
    text = table_text(cm)
    if text is None or content_hash(text) != recorded_hash:
        return None
    try:
        return load_sps_table_text(text)
    except ValueError:
        return None


def _bounded_manifest(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    text = json.dumps(manifest, default=str)
    return manifest if len(text) <= MAX_MANIFEST_BYTES else {"omitted": "manifest too large"}


def _replace_if_modified(
    p: ProfilingPass, cm: Mapping[str, Any], digest: str
) -> Mapping[str, Any] | None:
    """`create_owned` adopted an existing ConfigMap of this table's name: if its bytes are
    not this table's (someone replaced it under the name), delete exactly that object and
    publish the table again. It is immutable, so it cannot be corrected in place. Returns
    the ConfigMap that holds the table now (None: gone since)."""
    name = cm["metadata"]["name"]
    if p.created.get(name) is cm:
        return cm  # created just now: its bytes are the table's
    existing = p.kube.get("ConfigMap", p.namespace, name)
    if existing is None or content_hash(table_text(existing) or "") == digest:
        return existing
    p.delete_own("ConfigMap", existing)
    p.event(
        "Warning",
        TABLE_MODIFIED,
        f"table ConfigMap {name} held other bytes than the table of hash {digest}; replaced",
    )
    if p.kube.create(dict(cm)) is None:
        raise NameTaken(f"ConfigMap {name} was recreated by someone else while being replaced")
    p.created[name] = dict(cm)
    return cm


def _measured_v1(p: ProfilingPass, target: Target | None, fingerprint: str) -> tuple[str, str]:
    """(the measured server's version-1 key, or "" when the run's target is another server
    now; the key the new table's ConfigMap is labelled with, or "" for none). Labelled so
    that 0.1.0, rolled back to, keeps the server on it (api/legacy_tables.py), only when
    every target with that key is that server now."""
    if target is None or target.fingerprint != fingerprint:
        return "", ""
    servers = v1_servers((t.fingerprint, t.legacy_fingerprint) for t in p.targets)
    return target.legacy_fingerprint, v1_key(fingerprint, target.legacy_fingerprint, servers) or ""


def _labelled_v1(cm: Mapping[str, Any] | None, legacy: str) -> str | None:
    """`adoptedFrom` of the table: the version-1 key its ConfigMap carries, the one it was
    created with or, for one created before (an identical table measured again), its own
    label, when that is the measured server's version-1 key."""
    labels = ((cm or {}).get("metadata") or {}).get("labels") or {}
    label = labels.get(L.LABEL_FINGERPRINT)
    return label if isinstance(label, str) and is_v1(label) and label == legacy else None


def publish_table(
    p: ProfilingPass, rounds: Sequence[Mapping[str, Any]], manifest: Mapping[str, Any]
) -> None:
    st = p.status
    run = st.current_run
    assert run is not None
    live = table_for(st.tables, run.gpu_product, run.fingerprint)
    live_table = load_table(p.config_map(live.config_map), live.hash) if live else None
    verdict = judge_bounded(
        rounds, p.spec, kind=p.spec.table.kind, live=live_table, limits=p.settings
    )
    if verdict.fit is None or verdict.table_json is None or verdict.table_hash is None:
        fail_run(p, str(verdict.reason), verdict.message, retryable=verdict.reason in RETRYABLE)
        return
    digest = verdict.table_hash
    cm_name = names.table_config_map(
        p.ref.name, p.ref.uid, run.gpu_product, run.fingerprint, digest
    )
    quality = api_quality(verdict.fit)
    target = p.target(run.target)
    meta = {
        "gpuProduct": run.gpu_product,
        "fingerprint": run.fingerprint,
        "run": run.name,
        "trigger": run.trigger,
        "target": run.target,
        "server": target.config.describe() if target and target.config else None,
        "kind": p.spec.table.kind,
        "quality": verdict.fit.quality.to_dict(),
        "profiledAt": cond.rfc3339(p.now),
        "manifest": _bounded_manifest(manifest),
    }
    # Labelled with the version-1 key where that is this server's alone (0.1.0 reads it);
    # meta.json keeps the current fingerprint either way.
    legacy, stored_v1 = _measured_v1(p, target, run.fingerprint)
    cm = table_objects.table_config_map(
        p.ref,
        cm_name,
        verdict.table_json,
        digest,
        run.gpu_product,
        stored_v1 or run.fingerprint,
        meta,
        rounds,
    )
    try:
        create_owned(p, cm)
        held = _replace_if_modified(p, cm, digest)
    except NameTaken as exc:
        fail_run(p, NAME_TAKEN, str(exc), retryable=False)
        return
    ref = TableRef(
        gpu_product=run.gpu_product,
        fingerprint=run.fingerprint,
        kind=p.spec.table.kind,
        config_map=cm_name,
        hash=digest,
        quality=quality,
        profiled_at=cond.rfc3339(p.now),
        run=run.name,
        trigger=run.trigger,
        refresh_count=run.refresh_count,
        adopted_from=_labelled_v1(held, legacy),
    )
    if not verdict.accepted:
        if live is None or live.hash != digest:
            st.rejected_table = ref.model_copy(update={"message": verdict.message})
        fail_run(p, str(verdict.reason), verdict.message, retryable=verdict.reason in RETRYABLE)
        return
    unchanged = live is not None and live.hash == digest
    if live is not None:
        # An identical re-measurement keeps the chain: it never becomes its own previous.
        ref.previous = live.previous if unchanged else live.config_map
        ref.previous_hash = live.previous_hash if unchanged else live.hash
    st.tables = [t for t in st.tables if t is not live] + [ref]
    if st.last_failure is not None and st.last_failure.trigger_key == run.trigger_key:
        st.last_failure = None
    delete_rbac(p, run.name)
    end_run(p, "succeeded", ref)
    # The finished run's Job and result stay for inspection until the next run starts.
    if unchanged:
        p.event(
            "Normal", TABLE_UNCHANGED, f"re-measured table {cm_name} is identical to the live one"
        )
    else:
        rms = f"{quality.rms_ms} ms" if quality.rms_ms is not None else "n/a"
        p.event("Normal", TABLE_PUBLISHED, f"table {cm_name} for {run.gpu_product} (RMS {rms})")

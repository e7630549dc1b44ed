"""Pure builders of the ConfigMaps a table is kept in (no API calls).

Each published table gets an immutable ConfigMap named by its content hash, with its
provenance; with rollout.mode AnnotateOnly, the stable ConfigMap the Deployment in Git
mounts carries the table that runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sps_operator.api import labels as L
from sps_operator.api.result import MAX_CONFIGMAP_BYTES, encode_rounds, object_size
from sps_operator.controller.kube import names
from sps_operator.controller.kube.builders import ProfileRef, object_meta


def table_text(cm: Mapping[str, Any] | None) -> str | None:
    """The table a table ConfigMap holds, as text (None: none there)."""
    value = ((cm or {}).get("data") or {}).get(L.TABLE_KEY)
    return value if isinstance(value, str) else None


def table_config_map(
    profile: ProfileRef,
    name: str,
    table_json: str,
    table_hash: str,
    gpu_product: str,
    fingerprint: str,
    meta: Mapping[str, Any],
    rounds: Sequence[Mapping[str, Any]] = (),
    component: str = L.COMPONENT_TABLE,
) -> dict[str, Any]:
    """An immutable ConfigMap per table, named by content hash, with its provenance: the
    validated rounds it was fitted from (gzipped in binaryData when large), dropped with
    a note in meta.json when even that would not fit in a ConfigMap."""
    labels = {
        L.LABEL_GPU: names.label_value(gpu_product),
        L.LABEL_FINGERPRINT: fingerprint,
        L.LABEL_TABLE_HASH: table_hash,
    }
    data: dict[str, str | None] = {L.TABLE_KEY: table_json}
    binary: dict[str, str | None] = {}
    meta = dict(meta)
    if rounds:
        rounds_data, binary = encode_rounds(rounds)
        data.update(rounds_data)
        if object_size(data, binary) > MAX_CONFIGMAP_BYTES // 2:
            data, binary = {L.TABLE_KEY: table_json}, {}
            meta["roundsOmitted"] = f"{len(rounds)} rounds did not fit in the ConfigMap"
    data[L.META_KEY] = json.dumps(meta, sort_keys=True, indent=1, default=str)
    cm: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(
            profile, name, component, labels, annotations={L.ANNOTATION_GPU: gpu_product}
        ),
        "immutable": True,
        "data": {k: v for k, v in data.items() if v is not None},
    }
    packed = {k: v for k, v in binary.items() if v is not None}
    if packed:
        cm["binaryData"] = packed
    return cm


def stable_table_apply(
    profile: ProfileRef,
    name: str,
    table_json: str,
    table_hash: str,
    filename: str,
    placeholder: bool,
) -> dict[str, Any]:
    """AnnotateOnly: the stable ConfigMap the Deployment in Git mounts (SSA: data, the
    hash and the placeholder mark). No ownerReference: it must outlive the profile, the
    Deployments keep mounting it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": profile.namespace,
            "labels": {L.LABEL_MANAGED_BY: L.MANAGED_BY, L.LABEL_COMPONENT: L.COMPONENT_STABLE},
            "annotations": {
                L.ANNOTATION_TABLE_HASH: table_hash,
                L.ANNOTATION_PLACEHOLDER: "true" if placeholder else "false",
            },
        },
        "data": {filename: table_json},
    }

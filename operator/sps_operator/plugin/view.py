"""Pure views of SpsProfile objects and tables for `kubectl sps` (no I/O).

Inputs are the plain dicts the Kubernetes API returns (camelCase status, as the
API models write it); outputs are plain data (for -o json|yaml) or text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sps_operator.api import labels as L
from sps_operator.api import reasons as R
from sps_operator.api.legacy_tables import without_v1_twins
from sps_operator.api.result import clean_text
from sps_operator.api.times import parse_rfc3339
from sps_operator.api.untrusted_json import read_json_object, readable
from sps_operator.api.validation import NONEMPTY_LABEL_VALUE_PATTERN, full_match
from sps_operator.constants import LABEL_PREFIX
from sps_operator.tables.formats import SpsAdditiveCostTable, SpsCostTable, SpsTable

ANNOTATION_EXPORTED_FROM = f"{LABEL_PREFIX}/exported-from"


class PluginError(Exception):
    """A user-facing error: printed as one line, exit code 1."""


# --------------------------------------------------------------------------- time


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 time; one without an offset is read as UTC (what Kubernetes writes)."""
    parsed = parse_rfc3339(value)
    return parsed if parsed is None or parsed.tzinfo else parsed.replace(tzinfo=UTC)


# kubectl's age ladder past 2 minutes: (unit, its seconds, the smaller unit and its seconds,
# below how many units the smaller one shows too, below how many the unit alone shows).
_AGE_LADDER = (
    ("m", 60, "s", 1, 10, 180),
    ("h", 3600, "m", 60, 8, 48),
    ("d", 86400, "h", 3600, 8, 730),
)


def human_duration(seconds: float) -> str:
    """kubectl's age format: 45s, 3m20s, 95m, 5h12m, 30h, 3d4h, 120d, 3y."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    for unit, size, smaller, smaller_size, both_below, alone_below in _AGE_LADDER:
        whole, rest = divmod(s, size)
        if whole < both_below and rest // smaller_size:
            return f"{whole}{unit}{rest // smaller_size}{smaller}"
        if whole < alone_below:
            return f"{whole}{unit}"
    return f"{s // 86400 // 365}y"


def age(timestamp: str | None, now: datetime) -> str:
    when = parse_time(timestamp)
    return "<unknown>" if when is None else human_duration((now - when).total_seconds())


# --------------------------------------------------------------------------- profiles


def conditions_by_type(profile: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    status = profile.get("status") or {}
    return {c.get("type", ""): c for c in status.get("conditions") or []}


def profile_state(profile: Mapping[str, Any]) -> str:
    """One word (or two) a user reads in `kubectl sps get`: what the profile is doing."""
    status = profile.get("status") or {}
    conds = conditions_by_type(profile)
    if (profile.get("spec") or {}).get("suspend"):
        return R.SUSPENDED
    run = status.get("currentRun")
    if run:
        waiting = run.get("waiting") or {}
        if waiting.get("reason"):
            return str(waiting["reason"])  # WaitingForGPUs, QueuedInKueue, LocalQueueMissing, …
        return f"Profiling/{run.get('phase', '?')}"
    ready = conds.get(R.READY)
    if ready and ready.get("status") == "True":
        stale = conds.get(R.STALE)
        return R.STALE if stale and stale.get("status") == "True" else R.READY
    if ready and ready.get("status") == "False" and ready.get("reason"):
        return str(ready["reason"])
    if status.get("lastFailure"):
        return "Failed"
    return "Pending"


def table_for_gpu(profile: Mapping[str, Any], gpu: str | None) -> dict[str, Any]:
    """The status.tables entry for `gpu`, or the live one when `gpu` is None."""
    status = profile.get("status") or {}
    tables: list[dict[str, Any]] = without_v1_twins(status.get("tables") or [])
    name = (profile.get("metadata") or {}).get("name", "?")
    if gpu is not None:
        for entry in tables:
            if entry.get("gpuProduct") == gpu:
                return entry
        known = ", ".join(sorted({str(t.get("gpuProduct")) for t in tables})) or "none"
        raise PluginError(f"profile {name} has no table for GPU {gpu!r} (tables for: {known})")
    live = status.get("liveTable")
    for entry in tables:
        if live and entry.get("configMap") == live:
            return entry
    if len(tables) == 1:
        return tables[0]
    if not tables:
        raise PluginError(
            f"profile {name} has no table yet (state {profile_state(profile)}); "
            f"see `kubectl sps explain {name}`"
        )
    gpus = ", ".join(sorted(str(t.get("gpuProduct")) for t in tables))
    raise PluginError(f"profile {name} has tables for several GPUs ({gpus}); pick one with --gpu")


def run_progress(run: Mapping[str, Any], now: datetime) -> str:
    """The PROGRESS column: how long a run has waited for its GPUs, else the profiler's
    progress, and whether it runs on a borrowed replica."""
    if not run:
        return "-"
    waiting = run.get("waiting") or {}
    if waiting.get("reason"):
        return f"waiting {age(waiting.get('since'), now)}"
    progress = str(run.get("progress") or "starting")
    borrow = run.get("borrow") or {}
    if borrow.get("deployment"):
        progress += f" (borrowed 1 of {borrow.get('replicas', '?')} from {borrow['deployment']})"
    return progress


def get_row(profile: Mapping[str, Any], now: datetime) -> dict[str, str]:
    meta = profile.get("metadata") or {}
    spec = profile.get("spec") or {}
    status = profile.get("status") or {}
    run = status.get("currentRun") or {}
    row = {
        "namespace": str(meta.get("namespace", "")),
        "name": str(meta.get("name", "")),
        "kind": str((spec.get("table") or {}).get("kind", "Diagonal")),
        "gpu": str(status.get("gpuProduct") or "<none>"),
        "table": str(status.get("liveTable") or _server_table(status)),
        "state": profile_state(profile),
        "progress": run_progress(run, now),
        "age": age(meta.get("creationTimestamp"), now),
    }
    targets = status.get("targets") or []
    ready = conditions_by_type(profile).get(R.READY) or {}
    row["targets"] = f"{sum(1 for t in targets if t.get('state') == 'Live')}/{len(targets)}"
    kinds = sorted({str(t.get("kind") or "Deployment") for t in targets})
    row["workloads"] = ",".join(kinds) or "-"
    row["reason"] = str(ready.get("reason") or "-")
    row["run"] = str(run.get("name") or "-")
    row["lastFailure"] = str((status.get("lastFailure") or {}).get("reason") or "-")
    row["gpuSeconds"] = _table_gpu_seconds(status)
    row["errorBound"] = _table_error_bound(status)
    waiting = run.get("waiting") or {}
    position = waiting.get("queuePosition")
    row["queue"] = f"#{position}" if type(position) is int and position >= 1 else "-"
    if waiting.get("reason"):
        # Not a column (too long): -o json/yaml carry why and since when.
        row["waitingSince"] = str(waiting.get("since") or "")
        row["waitingMessage"] = str(waiting.get("message") or "")
    return row


def _live_table_entry(status: Mapping[str, Any]) -> Mapping[str, Any]:
    """The live table's status.tables[] entry ({} when there is none)."""
    live = status.get("liveTable")
    for entry in without_v1_twins(status.get("tables") or []):
        if live and isinstance(entry, Mapping) and entry.get("configMap") == live:
            return entry
    return {}


def _table_gpu_seconds(status: Mapping[str, Any]) -> str:
    """GPU seconds the live table's run took ("-": no live table, or not recorded)."""
    seconds = _live_table_entry(status).get("gpuSeconds")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool):
        return f"{seconds:.0f}"
    return "-"


def _table_error_bound(status: Mapping[str, Any]) -> str:
    """The live table's predicted error bound (quality.errorBoundRel, what
    gates.maxErrorBound checks) in percent ("-": no live table, or not recorded)."""
    quality = _live_table_entry(status).get("quality")
    bound = quality.get("errorBoundRel") if isinstance(quality, Mapping) else None
    if isinstance(bound, int | float) and not isinstance(bound, bool) and math.isfinite(bound):
        return f"{bound:.1%}"
    return "-"


def _server_table(status: Mapping[str, Any]) -> str:
    """The TABLE column without a live table: what the servers run meanwhile, when it is
    not the flat start (the fork's const table, a capture-derived one)."""
    sources = sorted({str(t["tableSource"]) for t in status.get("targets") or []
                      if t.get("tableSource")})  # fmt: skip
    return f"<{','.join(sources)}>" if sources else "<none>"


def render_columns(
    headers: Sequence[str], rows: Sequence[Sequence[str]], layout: Sequence[Sequence[str]] = ()
) -> str:
    """kubectl-style columns: upper-case headers, left-aligned, three spaces apart.

    `layout` rows only widen the columns (so lines printed one by one line up)."""
    widths = [len(h) for h in headers]
    for row in [*rows, *layout]:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = []
    for row in [list(headers), *rows]:
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines)


# `-o wide` adds: live targets of all, their kinds, Ready's reason, the current run, the
# last failure, the GPU seconds the live table took, its predicted error bound, the run's
# position in its Kueue ClusterQueue.
WIDE_COLUMNS = {"targets": "TARGETS", "workloads": "WORKLOADS", "reason": "REASON", "run": "RUN",
                "lastFailure": "LAST FAILURE", "gpuSeconds": "GPU-SECONDS",
                "errorBound": "ERROR-BOUND", "queue": "QUEUE"}  # fmt: skip


def render_get(
    rows: Sequence[Mapping[str, str]],
    all_namespaces: bool,
    layout: Sequence[Mapping[str, str]] = (),
    wide: bool = False,
) -> str:
    if not rows:
        return "No SpsProfiles found."
    keys = ["name", "kind", "gpu", "table", "state", "progress", "age"]
    if wide:
        keys[-1:-1] = list(WIDE_COLUMNS)
    if all_namespaces:
        keys.insert(0, "namespace")
    return render_columns(
        [WIDE_COLUMNS.get(k, k.upper()) for k in keys],
        [[r[k] for k in keys] for r in rows],
        [[r.get(k, "") for k in keys] for r in layout],
    )


def watch_key(row: Mapping[str, str]) -> tuple[str, ...]:
    """What `get -w` prints a new line for: a change of state, progress, GPU or table (not
    the wait's clock ticking)."""
    progress = "waiting" if row.get("waitingSince") is not None else row["progress"]
    return (row["state"], progress, row["gpu"], row["table"])


def watch_layout(rows: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """Rows that size the columns of a watch for the values a run goes through."""
    pad = {
        "namespace": "",
        "name": "",
        "kind": "Additive",
        "gpu": "NVIDIA-H100-80GB-HBM3",  # a long GPU product name in common use
        "table": max((f"{r['name']}-table-0123456789" for r in rows), key=len, default=""),
        "state": "Profiling/OffDiagonal",
        "progress": "00/00 rounds",
        "age": "00m00s",
        "targets": "0/0",
        "reason": R.WAITING_FOR_GPUS,
        "run": max((f"{r['name']}-0123456789" for r in rows), key=len, default=""),
        "lastFailure": R.FIT_QUALITY_GATE_FAILED,
        "errorBound": "100.0%",
    }
    return [*(dict(r) for r in rows), pad]


# --------------------------------------------------------------------------- versions


def image_tag(image: str) -> str | None:
    """The tag of an image reference (`repo[:port]/path:tag[@digest]`), None without one."""
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


MAX_POD_FIELD = 512  # characters of an operator pod's image (or name) shown


def operator_pod_version(pod: Mapping[str, Any]) -> dict[str, str]:
    """Which version an operator pod runs: the tag of its container's image (the chart
    keeps the tag in a digest-pinned reference), else the pod's app.kubernetes.io/version
    label (the chart sets it to the same tag)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    container = next(
        (c for c in containers if c.get("name") == L.OPERATOR_CONTAINER),
        containers[0] if containers else {},
    )
    image = str(container.get("image") or "")
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    status: dict[str, Any] = next(
        (c for c in statuses if c.get("name") == container.get("name")), {}
    )
    labels = meta.get("labels") or {}
    version = image_tag(image) or labels.get("app.kubernetes.io/version") or "unknown"
    found = {
        "namespace": meta.get("namespace", ""),
        "pod": meta.get("name", ""),
        "version": version,
        "image": image,
        "imageID": status.get("imageID") or "",
    }
    # Printable text only: the selector finds any namespace's pod with these labels, and
    # an image may hold terminal escape sequences (the API server checks only whitespace).
    return {
        **{k: clean_text(v, MAX_POD_FIELD) for k, v in found.items()},
        "ready": "true" if status.get("ready") else "false",
    }


def render_version(client: str, operators: Sequence[Mapping[str, str]], where: str) -> str:
    lines = [f"Client Version: {client}"]
    if not operators:
        lines.append(f"Operator Version: no operator pod found ({where})")
    for op in operators:
        ready = "" if op["ready"] == "true" else ", not ready"
        lines.append(
            f"Operator Version: {op['version']} ({op['namespace']}/{op['pod']}, "
            f"{op['image']}{ready})"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- tables


def table_kind(table: SpsTable) -> str:
    return "Additive" if isinstance(table, SpsAdditiveCostTable) else "Diagonal"


def table_data(table: SpsTable) -> dict[str, Any]:
    """The table's probes and values, in units a serving engineer reads (ms, steps/s)."""
    if isinstance(table, SpsCostTable):
        return {
            "kind": "Diagonal",
            "maxBatchTokens": table.max_batch_tokens,
            "probes": [
                {"batchTokens": m, "stepsPerSec": sps, "stepMs": 1000.0 / sps if sps else None}
                for m, sps in zip(
                    table.sample_batch_tokens, table.sample_steps_per_sec, strict=True
                )
            ],
        }
    return {
        "kind": "Additive",
        "biasMs": table.bias_seconds * 1000.0,
        "alpha": [
            {"batchSize": bs, "ms": a * 1000.0}
            for bs, a in zip(table.bs_probes, table.alpha_seconds, strict=True)
        ],
        "theta": [
            {"verifyTokens": m, "ms": t * 1000.0}
            for m, t in zip(table.m_probes, table.theta_seconds, strict=True)
        ],
    }


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_table_header(profile_name: str, entry: Mapping[str, Any]) -> str:
    quality = entry.get("quality") or {}
    parts = [
        f"Profile:      {profile_name}",
        f"GPU product:  {entry.get('gpuProduct', '?')}",
        f"Kind:         {entry.get('kind', '?')}",
        f"ConfigMap:    {entry.get('configMap', '?')}",
        f"Hash:         {entry.get('hash', '?')}",
        f"Fingerprint:  {entry.get('fingerprint', '?')}",
        f"Profiled at:  {entry.get('profiledAt') or '?'}  (run {entry.get('run') or '?'})",
        "Fit quality:  RMS {} ms, R² {}, max rel. error {}".format(
            _fmt(quality.get("rmsMs")),
            _fmt(quality.get("r2"), 4),
            "-" if quality.get("maxRelErr") is None else f"{100 * quality['maxRelErr']:.1f} %",
        ),
    ]
    return "\n".join(parts)


def render_table_values(table: SpsTable) -> str:
    if isinstance(table, SpsCostTable):
        rows = [
            [str(m), f"{sps:.2f}", _fmt(1000.0 / sps if sps else None)]
            for m, sps in zip(table.sample_batch_tokens, table.sample_steps_per_sec, strict=True)
        ]
        body = render_columns(["BATCH TOKENS", "STEPS/S", "STEP MS"], rows)
        return f"{body}\nmax_batch_tokens: {table.max_batch_tokens}"
    alpha = render_columns(
        ["BATCH SIZE", "ALPHA MS"],
        [
            [str(bs), _fmt(a * 1000.0)]
            for bs, a in zip(table.bs_probes, table.alpha_seconds, strict=True)
        ],
    )
    theta = render_columns(
        ["VERIFY TOKENS M", "THETA MS"],
        [
            [str(m), _fmt(t * 1000.0)]
            for m, t in zip(table.m_probes, table.theta_seconds, strict=True)
        ],
    )
    return (
        "step_time(bs, M) = bias + alpha(bs) + theta(M),  "
        f"bias = {table.bias_seconds * 1000:.3f} ms"
        f"\n\n{alpha}\n\n{theta}"
    )


def measured_fingerprint(config_map: Mapping[str, Any]) -> str | None:
    """The fingerprint of the server a table was measured for, as its meta.json records
    it (read within the operator's bound, through the bounded parser); None when meta.json
    is unreadable or holds no fingerprint of a label value's form, the form the operator
    writes and the one the `sps.dev/fingerprint` label had to have.

    Not that label: it may hold the server's version-1 key instead, for 0.1.0 after a
    rollback (api/legacy_tables.py), which reads it only on the profile's own table
    ConfigMaps."""
    text = (config_map.get("data") or {}).get(L.META_KEY)
    meta = read_json_object(text, max_bytes=L.MAX_META_BYTES)
    value = meta.get("fingerprint") if readable(meta) else None
    if isinstance(value, str) and full_match(NONEMPTY_LABEL_VALUE_PATTERN, value):
        return value
    return None


def exportable_config_map(
    config_map: Mapping[str, Any], profile_name: str, new_name: str | None = None
) -> dict[str, Any]:
    """The table ConfigMap as a manifest to commit to Git.

    Server-set fields go; so do the operator's ownership marks (ownerReferences, the
    `sps.dev/profile` and managed-by labels) so the operator never trims or adopts the
    pinned copy. Provenance moves to annotations: the fingerprint is the one the table
    was measured for (`measured_fingerprint`); a version-1 key the ConfigMap is labelled
    with for 0.1.0 stays behind, as no one reads it on a copy that is no profile's.
    """
    meta = config_map.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    table_hash = labels.get(L.LABEL_TABLE_HASH, "")
    name = new_name or f"{profile_name}-pinned-{table_hash[:10] or 'table'}"
    provenance = {
        ANNOTATION_EXPORTED_FROM: f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        L.ANNOTATION_TABLE_HASH: table_hash,
        L.LABEL_GPU: (meta.get("annotations") or {}).get(L.LABEL_GPU)
        or labels.get(L.LABEL_GPU, ""),
        L.LABEL_FINGERPRINT: measured_fingerprint(config_map) or "",
    }
    data = dict(config_map.get("data") or {})
    if L.TABLE_KEY not in data:
        raise PluginError(f"ConfigMap {meta.get('name')} has no {L.TABLE_KEY} key")
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/part-of": "sps-operator"},
            "annotations": {k: v for k, v in provenance.items() if v},
        },
        "immutable": True,
        "data": data,
    }
    return out


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False, default=str)

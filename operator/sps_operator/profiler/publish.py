"""Result ConfigMap: what the profiler writes into it and how the operator reads it back.

The operator creates an empty ConfigMap per run; the profiler (in-cluster credentials)
patches these keys:

* `data["status"]`: `running` | `succeeded` | `failed`
* `data["message"]`: what happened / what to do
* `data["progress"]`: `"k/n"` cells done
* `data["manifest.json"]`: the manifest (JSON)
* `data["rounds.jsonl"]`: one line per measured round, or when large
  `binaryData["rounds.jsonl.gz"]` (gzip; the API carries binaryData base64-encoded)

A ConfigMap holds at most 1 MiB; above `MAX_CONFIGMAP_BYTES` the publish fails clearly
(the rounds stay on disk). `build_patch` and `read_result` are pure; `ConfigMapPublisher`
does the I/O.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

STATUS_RUNNING = "running"
STATUS_SUCCEEDED = "succeeded"
STATUS_FAILED = "failed"
STATUSES = (STATUS_RUNNING, STATUS_SUCCEEDED, STATUS_FAILED)
KEY_STATUS = "status"
KEY_MESSAGE = "message"
KEY_PROGRESS = "progress"
KEY_MANIFEST = "manifest.json"
KEY_ROUNDS = "rounds.jsonl"
KEY_ROUNDS_GZ = "rounds.jsonl.gz"
# Inline rounds up to this size; beyond it, gzip them into binaryData.
INLINE_ROUNDS_LIMIT = 256 * 1024
# The API server refuses objects above 1 MiB; keep headroom for metadata.
MAX_CONFIGMAP_BYTES = 1024 * 1024 - 16 * 1024
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class PublishError(RuntimeError):
    """The result cannot be written into (or read from) the ConfigMap."""


@dataclass(frozen=True)
class ProfileResult:
    """What a profiling run published."""

    status: str
    message: str
    progress: str
    manifest: dict[str, Any] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.status in (STATUS_SUCCEEDED, STATUS_FAILED)


def rounds_to_jsonl(rounds: Sequence[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rounds)


def build_patch(
    *,
    status: str,
    message: str = "",
    progress: str | None = None,
    manifest: Mapping[str, Any] | None = None,
    rounds: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A merge patch for the result ConfigMap. Raises PublishError when it cannot fit."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    data: dict[str, str | None] = {KEY_STATUS: status, KEY_MESSAGE: message}
    binary: dict[str, str | None] = {}
    if progress is not None:
        data[KEY_PROGRESS] = progress
    if manifest is not None:
        # The rounds travel once, in rounds.jsonl; keep the manifest small.
        slim = {k: v for k, v in manifest.items() if k != "round_summaries"}
        data[KEY_MANIFEST] = json.dumps(slim, separators=(",", ":"), default=str)
    if rounds is not None:
        text = rounds_to_jsonl(rounds)
        if len(text.encode()) <= INLINE_ROUNDS_LIMIT:
            data[KEY_ROUNDS] = text
            binary[KEY_ROUNDS_GZ] = None  # merge patch: null removes a stale key
        else:
            packed = base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode()
            binary[KEY_ROUNDS_GZ] = packed
            data[KEY_ROUNDS] = None
    size = sum(len(k) + len(v) for k, v in [*data.items(), *binary.items()] if v is not None)
    if size > MAX_CONFIGMAP_BYTES:
        raise PublishError(
            f"The result is {size} bytes, above the ConfigMap limit of {MAX_CONFIGMAP_BYTES} "
            "bytes even compressed; the rounds are kept on disk next to --out. Profile fewer "
            "cells (--batch-size / --fracs / --repeats) per run."
        )
    patch: dict[str, Any] = {"data": data}
    if binary:
        patch["binaryData"] = binary
    return patch


def _parse_jsonl(text: str, source: str) -> list[dict[str, Any]]:
    rounds: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PublishError(f"{source} line {number} is not JSON: {exc.msg}") from exc
        if not isinstance(value, dict):
            raise PublishError(f"{source} line {number} is not a JSON object.")
        rounds.append(value)
    return rounds


def read_result(
    data: Mapping[str, str] | None, binary_data: Mapping[str, str] | None
) -> ProfileResult:
    """Parse a result ConfigMap's `data` and `binaryData` (base64 values, as the API returns).

    `status` is "" when the profiler has not written anything yet. Raises PublishError on
    content the profiler would never write.
    """
    data = data or {}
    binary_data = binary_data or {}
    status = data.get(KEY_STATUS, "")
    if status and status not in STATUSES:
        raise PublishError(f"unknown status {status!r} in the result ConfigMap")
    manifest: dict[str, Any] = {}
    if data.get(KEY_MANIFEST):
        try:
            parsed = json.loads(data[KEY_MANIFEST])
        except json.JSONDecodeError as exc:
            raise PublishError(f"manifest.json is not JSON: {exc.msg}") from exc
        if not isinstance(parsed, dict):
            raise PublishError("manifest.json is not a JSON object")
        manifest = parsed
    rounds: list[dict[str, Any]] = []
    if binary_data.get(KEY_ROUNDS_GZ):
        try:
            raw = gzip.decompress(base64.b64decode(binary_data[KEY_ROUNDS_GZ], validate=True))
        except (binascii.Error, OSError, EOFError) as exc:
            raise PublishError(f"rounds.jsonl.gz is not base64 gzip: {exc}") from exc
        rounds = _parse_jsonl(raw.decode("utf-8"), KEY_ROUNDS_GZ)
    elif data.get(KEY_ROUNDS):
        rounds = _parse_jsonl(data[KEY_ROUNDS], KEY_ROUNDS)
    return ProfileResult(
        status=status,
        message=data.get(KEY_MESSAGE, ""),
        progress=data.get(KEY_PROGRESS, ""),
        manifest=manifest,
        rounds=rounds,
    )


def in_cluster_namespace(path: Path = NAMESPACE_FILE) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


class ConfigMapPublisher:
    """Patches the run's result ConfigMap with in-cluster credentials (kubernetes client)."""

    def __init__(self, name: str, namespace: str | None = None) -> None:
        from kubernetes import client, config

        resolved = namespace or in_cluster_namespace()
        if not resolved:
            raise PublishError(
                "--publish-configmap needs a namespace: pass --publish-namespace or run in a "
                f"pod (no {NAMESPACE_FILE})."
            )
        try:
            config.load_incluster_config()
        except config.ConfigException:
            # Outside a pod (tests, a laptop): fall back to $KUBECONFIG / ~/.kube/config.
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
        self.name = name
        self.namespace = resolved
        self._api = client.CoreV1Api()
        self._warned = False

    def publish(self, **fields: Any) -> None:
        patch = build_patch(**fields)
        self._api.patch_namespaced_config_map(self.name, self.namespace, patch)

    def publish_quietly(self, **fields: Any) -> None:
        """Progress updates must not kill a sweep: log a failure once and go on."""
        try:
            self.publish(**fields)
        except Exception as exc:
            if not self._warned:
                logger.warning("Publishing progress to ConfigMap %s failed: %s", self.name, exc)
                self._warned = True

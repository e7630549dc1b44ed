"""Publishing into the run's result ConfigMap (the profiler's side of `api/result.py`).

The format, its limits and its reader live in `sps_operator.api.result`, shared with the
operator; this module does the I/O with in-cluster credentials.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from sps_operator.api.result import (
    INLINE_ROUNDS_LIMIT,
    KEY_ROUNDS,
    KEY_ROUNDS_GZ,
    ProfileResult,
    build_patch,
    read_result,
)
from sps_operator.api.result import ResultError as PublishError

__all__ = [
    "INLINE_ROUNDS_LIMIT",
    "KEY_ROUNDS",
    "KEY_ROUNDS_GZ",
    "ConfigMapPublisher",
    "ProfileResult",
    "PublishError",
    "build_patch",
    "read_result",
]

logger = logging.getLogger(__name__)
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# (connect, read) seconds of each write to the API server. Unbounded, a write from a
# namespace whose NetworkPolicy drops the profiler's egress waits out TCP's SYN retries
# (about 2 min) per attempt, and the Job sits silent until its deadline; bounded, the
# profiler fails within a minute and the operator says why (api/reasons.NEVER_WROTE_RESULT).
REQUEST_TIMEOUT = (5.0, 30.0)
# A connect that failed sent nothing, so it is tried again, at once, up to twice (behind the
# in-cluster `kubernetes` Service each connect may reach another API server); an answer
# that timed out never is (the patch may have landed; the next publish carries it all).
# The final publish of a run is one call: hours of GPU time depend on it landing.
CONNECT_ATTEMPTS = 3


def publish_deadline() -> float:
    """One write's whole answer, from its first connect to the last byte: every connect
    attempt's timeout and the read's (`kube_rest.send`'s deadline)."""
    connect, read = REQUEST_TIMEOUT
    return CONNECT_ATTEMPTS * connect + read


def in_cluster_namespace(path: Path = NAMESPACE_FILE) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


class ConfigMapPublisher:
    """Patches the run's result ConfigMap with in-cluster credentials (kubernetes client)."""

    def __init__(self, name: str, namespace: str | None = None) -> None:
        from kubernetes import client, config

        from sps_operator.kube_rest import segment

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
        # The bare ApiClient, not CoreV1Api: that one imports and builds a few hundred
        # pydantic models and a validator per method, and parses each answer into them
        # (0.7 CPU-s against 0.25 for a start and twenty writes, in every profiling Job).
        from urllib3.util.retry import Retry

        configuration = client.Configuration.get_default_copy()
        configuration.retries = Retry(
            total=None, connect=CONNECT_ATTEMPTS - 1, read=0, other=0, status=0, redirect=0,
            raise_on_redirect=False,
        )  # fmt: skip
        self._api = client.ApiClient(configuration)
        self._path = f"/api/v1/namespaces/{segment(resolved)}/configmaps/{segment(name)}"
        self._warned = False

    def publish(self, **fields: Any) -> None:
        """One strategic merge patch of the ConfigMap, as the typed CoreV1Api sent it; a
        refusal raises `ApiException` (the answer itself, the patched ConfigMap, is read
        with the one-object cap and dropped)."""
        from sps_operator.kube_rest import STRATEGIC_MERGE_PATCH, send

        send(
            self._api, "PATCH", self._path, body=build_patch(**fields),
            content_type=STRATEGIC_MERGE_PATCH, timeout=REQUEST_TIMEOUT,
            deadline=publish_deadline(),
        )  # fmt: skip

    def publish_quietly(self, **fields: Any) -> None:
        """Progress updates must not kill a sweep: log a failure once and go on."""
        try:
            self.publish(**fields)
        except Exception as exc:
            if not self._warned:
                logger.warning("Publishing progress to ConfigMap %s failed: %s", self.name, exc)
                self._warned = True

"""The Kubernetes calls of `kubectl sps` (thin: fetch and patch, no logic).

Through the bare `ApiClient` and `sps_operator.kube_rest` (shared with the operator and
the profiler's publisher): the typed APIs (`CoreV1Api`, ...) build pydantic models and a
validator per method and parse every answer into them, most of a command's CPU time
(docs/benchmarks.md, "kubectl sps start"). Every answer is read with a size cap; what goes
wrong is a `PluginError` in kubectl's words.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sps_operator import kube_rest
from sps_operator.api import labels as L
from sps_operator.constants import API_GROUP, API_VERSION, PLURAL
from sps_operator.kube_rest import MERGE_PATCH, AnswerRefused, parse_object, segment
from sps_operator.plugin.kubeflags import ConnectionFlags
from sps_operator.plugin.view import PluginError

_PROFILES = f"/apis/{API_GROUP}/{API_VERSION}"
# What a pod's log may run over the limitBytes asked for: the kubelet may send "slightly
# more" (the API's words) to end a line.
LOG_SLACK = 64 * 1024


def without_nulls(obj: dict[str, Any]) -> dict[str, Any]:
    """A JSON object without its null members: what the typed client handed back for a
    built-in kind (its models drop unset fields), so `.get(key, default)` reads the same."""
    return {k: v for k, v in obj.items() if v is not None}


def parse_json(raw: bytes, what: str, *, drop_nulls: bool = False) -> dict[str, Any]:
    """The answer's JSON object; PluginError when it is none."""
    try:
        return parse_object(raw, what, object_hook=without_nulls if drop_nulls else None)
    except AnswerRefused as exc:
        raise PluginError(f"{what}: {exc.reason}") from None


def list_items(answer: dict[str, Any], what: str) -> list[dict[str, Any]]:
    items = answer.get("items") or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise PluginError(f"{what}: the API server answered a list without objects")
    return items


def event_time_key(event: dict[str, Any]) -> str:
    """Sort key of an event: its time as the typed client gave it (a datetime's
    isoformat, `+00:00` for `Z`), so events order exactly as they did through it."""
    text = str(event.get("lastTimestamp") or event.get("eventTime") or "")
    try:
        return datetime.fromisoformat(text).isoformat()
    except ValueError:
        return text


class Cluster:
    """The current kubeconfig context (or an explicit one), as kubectl would use it."""

    def __init__(self, flags: ConnectionFlags | None = None) -> None:
        from kubernetes import client, config

        flags = flags or ConnectionFlags()
        kubeconfig, context = flags.kubeconfig, flags.context
        try:
            config.load_kube_config(config_file=kubeconfig, context=context)
        except Exception as exc:  # kubeconfig missing or malformed: say so in one line
            try:
                config.load_incluster_config()
            except Exception:
                # kubectl --server URL --token T works without a kubeconfig; so does this.
                if not (flags.server and flags.token):
                    raise PluginError(f"cannot load a kubeconfig: {exc}") from None
                client.Configuration.set_default(client.Configuration())
        configuration = client.Configuration.get_default_copy()
        if flags.server:
            configuration.host = flags.server.rstrip("/")
        if flags.token:
            # The key the client's auth settings read (kubeconfig tokens land there too).
            configuration.api_key = {"BearerToken": f"Bearer {flags.token}"}
            # Else the kubeconfig's hook puts its own token back before every request.
            configuration.refresh_api_key_hook = None
            configuration.api_key_prefix = {}
        if flags.certificate_authority:
            configuration.ssl_ca_cert = flags.certificate_authority
        if flags.insecure_skip_tls_verify:
            configuration.verify_ssl = False
        self.request_timeout = flags.request_timeout
        self.api = client.ApiClient(configuration)
        if flags.impersonate:
            self.api.set_default_header("Impersonate-User", flags.impersonate)
        try:
            _, active = config.list_kube_config_contexts(config_file=kubeconfig)
            ctx = (active or {}).get("context") or {}
            if context:
                all_contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
                ctx = next((c["context"] for c in all_contexts if c["name"] == context), ctx)
            self.default_namespace = str(ctx.get("namespace") or "default")
        except Exception:
            self.default_namespace = "default"

    def _send(
        self,
        what: str,
        method: str,
        path: str,
        query: Sequence[tuple[str, str | int]] = (),
        body: dict[str, Any] | None = None,
        content_type: str | None = None,
        *,
        cap: int = kube_rest.OBJECT_CAP,
    ) -> bytes:
        """One request; the answer's body (at most `cap` bytes), or PluginError saying
        what failed (`what` names the object, as kubectl would)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return kube_rest.send(
                self.api, method, path, query=query, body=body, content_type=content_type,
                timeout=self.request_timeout, cap=cap,
            )  # fmt: skip
        except AnswerRefused as exc:
            raise PluginError(f"{what}: {exc.reason}") from None
        except ApiException as exc:  # the answer's status, or the client's own (TLS: 0)
            status, reason = exc.status, exc.reason
        except (OSError, HTTPError) as exc:  # HTTPError: urllib3's, a --request-timeout too
            raise PluginError(f"{what}: cannot reach the API server: {exc}") from None
        if status == 404:
            raise PluginError(f"{what} not found")
        if status == 403:
            raise PluginError(f"forbidden: {what} ({reason})")
        raise PluginError(f"{what}: {status} {reason}")

    def _request(
        self,
        what: str,
        method: str,
        path: str,
        query: Sequence[tuple[str, str | int]] = (),
        body: dict[str, Any] | None = None,
        content_type: str | None = None,
        *,
        builtin: bool = False,
        cap: int = kube_rest.OBJECT_CAP,
    ) -> dict[str, Any]:
        """One request; the answer's JSON object. `builtin`: a built-in kind, read as
        the typed client read it (no null members)."""
        raw = self._send(what, method, path, query, body, content_type, cap=cap)
        return parse_json(raw, what, drop_nulls=builtin)

    def list_profiles(self, namespace: str | None) -> list[dict[str, Any]]:
        if namespace is None:
            what, path = "SpsProfiles", f"{_PROFILES}/{PLURAL}"
        else:
            what = f"SpsProfiles in {namespace}"
            path = f"{_PROFILES}/namespaces/{segment(namespace)}/{PLURAL}"
        items = list_items(self._request(what, "GET", path, cap=kube_rest.LIST_CAP), what)
        return sorted(items, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))

    def _profile_path(self, namespace: str, name: str) -> str:
        return f"{_PROFILES}/namespaces/{segment(namespace)}/{PLURAL}/{segment(name)}"

    def get_profile(self, namespace: str, name: str) -> dict[str, Any]:
        return self._request(
            f"SpsProfile {namespace}/{name}", "GET", self._profile_path(namespace, name)
        )

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{segment(namespace)}/configmaps/{segment(name)}"
        return self._request(f"ConfigMap {namespace}/{name}", "GET", path, builtin=True)

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        path = f"/apis/batch/v1/namespaces/{segment(namespace)}/jobs/{segment(name)}"
        try:
            return self._request(f"Job {namespace}/{name}", "GET", path, builtin=True)
        except PluginError:
            return None

    def list_pods(self, namespace: str | None, selector: str) -> list[dict[str, Any]]:
        """Pods matching `selector` in `namespace` (None: every namespace)."""
        if namespace is None:
            what, path = (
                "pods in all namespaces (pass --operator-namespace to look in one)",
                "/api/v1/pods",
            )
        else:
            what, path = f"pods in {namespace}", f"/api/v1/namespaces/{segment(namespace)}/pods"
        query = [("labelSelector", selector)]
        answer = self._request(what, "GET", path, query, builtin=True, cap=kube_rest.LIST_CAP)
        return list_items(answer, what)

    def pod_log(self, namespace: str, name: str, limit_bytes: int) -> str:
        """The pod's log (its only container, or `pod/container`): the first `limit_bytes`
        at most (what a server logs at start-up is there)."""
        pod, _, container = name.partition("/")
        query: list[tuple[str, str | int]] = []
        if container:
            query.append(("container", container))
        query.append(("limitBytes", limit_bytes))
        path = f"/api/v1/namespaces/{segment(namespace)}/pods/{segment(pod)}/log"
        what = f"log of pod {namespace}/{pod}"
        raw = self._send(what, "GET", path, query, cap=limit_bytes + LOG_SLACK)
        # The limit may cut a character in two; a log is no reason to fail.
        return raw.decode("utf-8", errors="replace")

    def list_events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        what = f"events in {namespace}"
        selector = f"involvedObject.name={name},involvedObject.kind=SpsProfile"
        path = f"/api/v1/namespaces/{segment(namespace)}/events"
        query = [("fieldSelector", selector)]
        answer = self._request(what, "GET", path, query, builtin=True, cap=kube_rest.LIST_CAP)
        return sorted(list_items(answer, what), key=event_time_key)

    def annotate_reprofile(self, namespace: str, name: str, token: str) -> dict[str, Any]:
        """Set the reprofile annotation (metadata only: never the spec)."""
        body = {"metadata": {"annotations": {L.ANNOTATION_REPROFILE: token}}}
        return self._request(
            f"SpsProfile {namespace}/{name}", "PATCH", self._profile_path(namespace, name),
            body=body, content_type=MERGE_PATCH,
        )  # fmt: skip

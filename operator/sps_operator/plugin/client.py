"""The Kubernetes calls of `kubectl sps` (thin: fetch and patch, no logic)."""

from __future__ import annotations

from typing import Any

from sps_operator.api import labels as L
from sps_operator.constants import API_GROUP, API_VERSION, PLURAL
from sps_operator.plugin.kubeflags import ConnectionFlags
from sps_operator.plugin.view import PluginError


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
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        try:
            _, active = config.list_kube_config_contexts(config_file=kubeconfig)
            ctx = (active or {}).get("context") or {}
            if context:
                all_contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
                ctx = next((c["context"] for c in all_contexts if c["name"] == context), ctx)
            self.default_namespace = str(ctx.get("namespace") or "default")
        except Exception:
            self.default_namespace = "default"

    def _call(self, what: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        if self.request_timeout is not None:
            kwargs.setdefault("_request_timeout", self.request_timeout)
        try:
            return func(*args, **kwargs)
        except ApiException as exc:
            if exc.status == 404:
                raise PluginError(f"{what} not found") from None
            if exc.status == 403:
                raise PluginError(f"forbidden: {what} ({exc.reason})") from None
            raise PluginError(f"{what}: {exc.status} {exc.reason}") from None
        except (OSError, HTTPError) as exc:  # HTTPError: urllib3's, a --request-timeout too
            raise PluginError(f"{what}: cannot reach the API server: {exc}") from None

    def list_profiles(self, namespace: str | None) -> list[dict[str, Any]]:
        if namespace is None:
            result = self._call(
                "SpsProfiles",
                self.custom.list_cluster_custom_object,
                API_GROUP,
                API_VERSION,
                PLURAL,
            )
        else:
            result = self._call(
                f"SpsProfiles in {namespace}",
                self.custom.list_namespaced_custom_object,
                API_GROUP,
                API_VERSION,
                namespace,
                PLURAL,
            )
        items = list(result.get("items") or [])
        return sorted(items, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))

    def get_profile(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(
            self._call(
                f"SpsProfile {namespace}/{name}",
                self.custom.get_namespaced_custom_object,
                API_GROUP,
                API_VERSION,
                namespace,
                PLURAL,
                name,
            )
        )

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any]:
        cm = self._call(
            f"ConfigMap {namespace}/{name}", self.core.read_namespaced_config_map, name, namespace
        )
        return dict(self.api.sanitize_for_serialization(cm))

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            job = self._call(
                f"Job {namespace}/{name}", self.batch.read_namespaced_job, name, namespace
            )
        except PluginError:
            return None
        return dict(self.api.sanitize_for_serialization(job))

    def list_pods(self, namespace: str | None, selector: str) -> list[dict[str, Any]]:
        """Pods matching `selector` in `namespace` (None: every namespace)."""
        if namespace is None:
            pods = self._call(
                "pods in all namespaces (pass --operator-namespace to look in one)",
                self.core.list_pod_for_all_namespaces,
                label_selector=selector,
            )
        else:
            pods = self._call(
                f"pods in {namespace}",
                self.core.list_namespaced_pod,
                namespace,
                label_selector=selector,
            )
        return [dict(self.api.sanitize_for_serialization(p)) for p in pods.items]

    def pod_log(self, namespace: str, name: str, limit_bytes: int) -> str:
        """The pod's log (its only container, or `pod/container`): the first `limit_bytes`
        at most (what a server logs at start-up is there)."""
        pod, _, container = name.partition("/")
        kwargs: dict[str, Any] = {"limit_bytes": limit_bytes}
        if container:
            kwargs["container"] = container
        text = self._call(
            f"log of pod {namespace}/{pod}",
            self.core.read_namespaced_pod_log,
            pod,
            namespace,
            **kwargs,
        )
        return str(text)

    def list_events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        events = self._call(
            f"events in {namespace}",
            self.core.list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.name={name},involvedObject.kind=SpsProfile",
        )
        out = [dict(self.api.sanitize_for_serialization(e)) for e in events.items]
        return sorted(out, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))

    def annotate_reprofile(self, namespace: str, name: str, token: str) -> dict[str, Any]:
        """Set the reprofile annotation (metadata only: never the spec)."""
        body = {"metadata": {"annotations": {L.ANNOTATION_REPROFILE: token}}}
        return dict(
            self._call(
                f"SpsProfile {namespace}/{name}",
                self.custom.patch_namespaced_custom_object,
                API_GROUP,
                API_VERSION,
                namespace,
                PLURAL,
                name,
                body,
            )
        )

"""The node agent: registers simulated GPU nodes, keeps them Ready, runs their pods."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from .config import AgentConfig, NodeSpec
from .images import load_rules
from .kubeletapi import KubeletApi
from .lifecycle import watch_action
from .mountpoints import Janitor
from .netns import HostNetwork
from .nodes import LEASE_NAMESPACE, lease_object, node_object, node_status, pod_event
from .podworker import PodWorker

log = logging.getLogger(__name__)
LEASE_RENEW_SECONDS = 10.0
NODE_STATUS_SECONDS = 30.0
WATCH_TIMEOUT_SECONDS = 60
MERGE_PATCH = "application/merge-patch+json"


class NodeAgent:
    """Start with `start()` (returns once the nodes are registered Ready), end with `stop()`."""

    def __init__(self, cfg: AgentConfig) -> None:
        self.config = cfg
        self.state_dir = cfg.state_dir
        self.nodes: dict[str, NodeSpec] = {n.name: n for n in cfg.nodes}
        self.network = HostNetwork(cfg.network)
        self.host_ip = cfg.network.gateway
        self.api_server_host = cfg.api_server_host
        self.api_server_port = cfg.api_server_port
        self.backoff_base = cfg.backoff_base_seconds
        self.backoff_cap = cfg.backoff_cap_seconds
        self.image_rules = load_rules(cfg.image_map)
        self.sim_env: dict[str, str] = {}
        if cfg.sim_time_scale is not None:
            self.sim_env["SPS_SIM_TIME_SCALE"] = f"{cfg.sim_time_scale:g}"
        if cfg.sim_seed is not None:
            self.sim_env["SPS_SIM_SEED"] = str(cfg.sim_seed)
        self.janitor = Janitor()
        self.probe_pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="probe")
        self.event_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="events")
        self._stop = threading.Event()
        self._workers: dict[str, PodWorker] = {}
        self._finished: set[str] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._node_uids: dict[str, str] = {}
        self._ready_since = datetime.now(UTC)
        self._watch: watch.Watch | None = None
        self.kubelet_api: KubeletApi | None = None
        self._started = False
        api_config = client.Configuration()
        config.load_kube_config(config_file=str(cfg.kubeconfig), client_configuration=api_config)
        api_config.connection_pool_maxsize = 32
        self.api_client = client.ApiClient(api_config)
        self.core = client.CoreV1Api(self.api_client)  # for the watch

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "pods").mkdir(exist_ok=True)
        self.network.setup()
        self._started = True
        try:
            self.kubelet_api = KubeletApi(self.host_ip, self.state_dir, self.container_running)
            self.kubelet_api.start()
            for spec in self.nodes.values():
                self._register(spec)
            self._renew_leases()
        except Exception:
            self.stop()
            raise
        for target, name in ((self._heartbeat_loop, "heartbeat"), (self._watch_loop, "watch")):
            t = threading.Thread(target=target, name=f"node-agent {name}", daemon=True)
            t.start()
            self._threads.append(t)
        ready = {
            "pid": os.getpid(),
            "nodes": sorted(self.nodes),
            "gateway": self.host_ip,
            "pod_cidr": self.config.network.cidr,
        }
        (self.state_dir / "ready").write_text(json.dumps(ready) + "\n")
        log.info("node agent ready: nodes %s, pod network %s", sorted(self.nodes), self.host_ip)

    def stop(self, delete_nodes: bool = False) -> None:
        """Kill every pod process, remove the pod network; optionally delete the nodes."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        with self._lock:
            workers = list(self._workers.values())
        for w in workers:
            w.stop()
        for w in workers:
            w.join(timeout=15)
        for t in self._threads:
            t.join(timeout=2)
        self.probe_pool.shutdown(wait=False, cancel_futures=True)
        self.event_pool.shutdown(wait=True, cancel_futures=True)
        if self.kubelet_api is not None:
            self.kubelet_api.stop()
        if self._started:
            self.network.teardown()
        try:
            self.janitor.clean()
        except OSError as exc:
            log.warning("mount point clean-up: %s", exc)
        if delete_nodes:
            for name in self.nodes:
                try:
                    self.request("DELETE", f"/api/v1/nodes/{name}")
                except ApiException as exc:
                    log.warning("delete node %s: %s", name, exc.reason)
        (self.state_dir / "ready").unlink(missing_ok=True)
        self.api_client.close()
        log.info("node agent stopped")

    def wait(self) -> None:
        self._stop.wait()

    # --- API helpers used by pod workers ----------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
        query: list[tuple[str, str]] | None = None,
    ) -> dict[str, Any]:
        """One JSON request with the kubeconfig's credentials (plain dicts, no models)."""
        method, url, headers, payload, post = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )[:5]
        resp = self.api_client.call_api(method, url, headers, payload, post, _request_timeout=30)
        data = resp.read()
        if not 200 <= resp.status < 300:
            raise ApiException(status=resp.status, reason=resp.reason, body=data.decode())
        return json.loads(data) if data else {}

    def read_json(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/namespaces/{namespace}/{plural}/{name}")

    def request_token(
        self,
        namespace: str,
        service_account: str,
        audience: str | None,
        expiration: int,
        pod_name: str,
        pod_uid: str,
    ) -> tuple[str, int]:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [audience] if audience else [],
                "expirationSeconds": expiration,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_name,
                    "uid": pod_uid,
                },
            },
        }
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
        status = self.request("POST", path, body)["status"]
        expires = datetime.strptime(status["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
        lifetime = (expires.replace(tzinfo=UTC) - datetime.now(UTC)).total_seconds()
        return status["token"], int(max(60, min(lifetime, expiration)))

    def patch_pod_status(self, namespace: str, name: str, uid: str, status: dict[str, Any]) -> None:
        """Merge-patch the status; the uid makes it fail on a new pod of the same name."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/status"
        self.request("PATCH", path, {"metadata": {"uid": uid}, "status": status}, MERGE_PATCH)

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> None:
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        try:
            self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    def record_event(
        self,
        pod: dict[str, Any],
        node: str,
        type_: str,
        reason: str,
        message: str,
        container: str | None = None,
    ) -> None:
        """A kubelet-style Event about a pod (`kubectl describe pod`), posted off-thread."""
        if self._stop.is_set():
            return
        event = pod_event(pod, node, type_, reason, message, container, datetime.now(UTC))
        ns = pod["metadata"]["namespace"]

        def post() -> None:
            try:
                self.request("POST", f"/api/v1/namespaces/{ns}/events", event)
            except Exception as exc:  # events are best effort, as in kubelet
                log.debug("event %s: %s", reason, exc)

        with contextlib.suppress(RuntimeError):  # pool already shut down
            self.event_pool.submit(post)

    def container_running(self, namespace: str, pod: str, container: str) -> bool:
        with self._lock:
            workers = list(self._workers.values())
        return any(
            w.namespace == namespace and w.pod_name == pod and container in w.procs for w in workers
        )

    def worker_finished(self, worker: PodWorker) -> None:
        with self._lock:
            self._workers.pop(worker.uid, None)
            self._finished.add(worker.uid)

    # --- nodes and leases -------------------------------------------------------------------

    def _register(self, spec: NodeSpec) -> None:
        body = node_object(spec)
        try:
            uid = self.request("POST", "/api/v1/nodes", body)["metadata"]["uid"]
            log.info("registered node %s (%s x%d)", spec.name, spec.gpu_product, spec.gpus)
        except ApiException as exc:
            if exc.status != 409:
                raise
            patch = {"metadata": {"labels": body["metadata"]["labels"]}}
            node = self.request("PATCH", f"/api/v1/nodes/{spec.name}", patch, MERGE_PATCH)
            uid = node["metadata"]["uid"]
        self._node_uids[spec.name] = uid
        self._post_status(spec)

    def _post_status(self, spec: NodeSpec) -> None:
        port = self.kubelet_api.port if self.kubelet_api else 0
        status = node_status(spec, self.host_ip, datetime.now(UTC), self._ready_since, port)
        self.request("PATCH", f"/api/v1/nodes/{spec.name}/status", {"status": status}, MERGE_PATCH)

    def _renew_leases(self) -> None:
        for name in self.nodes:
            body = lease_object(name, self._node_uids.get(name), datetime.now(UTC))
            leases = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
            try:
                self.request("PATCH", f"{leases}/{name}", body, MERGE_PATCH)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                self.request("POST", leases, body)

    def _heartbeat_loop(self) -> None:
        last_status = time.monotonic()
        while not self._stop.wait(LEASE_RENEW_SECONDS):
            try:
                self._renew_leases()
                if time.monotonic() - last_status >= NODE_STATUS_SECONDS:
                    last_status = time.monotonic()
                    for spec in self.nodes.values():
                        try:
                            self._post_status(spec)
                        except ApiException as exc:
                            if exc.status != 404:
                                raise
                            self._register(spec)  # someone deleted the node: register again
            except Exception as exc:
                log.warning("heartbeat: %s", exc)

    # --- pods -------------------------------------------------------------------------------

    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            try:
                rv = self._relist()
                while not self._stop.is_set():
                    self._watch = watch.Watch()
                    for event in self._watch.stream(
                        self.core.list_pod_for_all_namespaces,
                        field_selector="spec.nodeName!=",
                        resource_version=rv,
                        timeout_seconds=WATCH_TIMEOUT_SECONDS,
                        allow_watch_bookmarks=True,
                    ):
                        raw = event["raw_object"]
                        if event["type"] == "ERROR":
                            code, message = raw.get("code", 500), raw.get("message")
                            raise ApiException(status=code, reason=message)
                        rv = raw["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self._dispatch(event["type"], raw)
                        if self._stop.is_set():
                            break
            except ApiException as exc:
                if exc.status != 410:
                    log.warning("pod watch: %s %s", exc.status, exc.reason)
                    self._stop.wait(1.0)
            except Exception as exc:
                if not self._stop.is_set():
                    log.warning("pod watch: %s", exc)
                    self._stop.wait(1.0)

    def _relist(self) -> str:
        listing = self.request("GET", "/api/v1/pods", query=[("fieldSelector", "spec.nodeName!=")])
        seen = set()
        for pod in listing["items"]:
            seen.add(pod["metadata"]["uid"])
            self._dispatch("SYNC", pod)
        with self._lock:
            missing = [w for uid, w in self._workers.items() if uid not in seen]
        for w in missing:
            w.object_deleted()
        return str(listing["metadata"]["resourceVersion"])

    def _dispatch(self, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            worker = self._workers.get(uid)
            finished = uid in self._finished
        action = watch_action(
            kind, pod, set(self.nodes), worker is not None, finished, self._stop.is_set()
        )
        if action == "gone" and worker is not None:
            worker.object_deleted()
        elif action == "update" and worker is not None:
            worker.update(pod)
        elif action == "delete":
            self._delete_quietly(pod)
        elif action == "start":
            worker = PodWorker(self, pod)
            with self._lock:
                self._workers[uid] = worker
            worker.start()

    def _delete_quietly(self, pod: dict[str, Any]) -> None:
        m = pod["metadata"]
        try:
            self.delete_pod_now(m["namespace"], m["name"], m["uid"])
        except ApiException as exc:
            log.warning("delete pod %s/%s: %s", m["namespace"], m["name"], exc.reason)

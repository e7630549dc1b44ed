"""A real Kubernetes control plane on this machine: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler. It has no nodes of its own: the real-node
test bed (`sps_testbed`) runs it with kubelets beside it.

`ControlPlane(state_dir).start()` brings it up and writes `<state>/kubeconfig`;
`stop()` tears every process group down. The layout of the state directory:

    cluster.json   ports, pids, pod network (what `sps-testbed controlplane down/status` reads)
    kubeconfig     admin (system:masters) kubeconfig, certificates embedded
    env.sh         KUBECONFIG and PATH (kubectl, helm)
    pki/           CA, serving and client certificates, service-account key
    etcd/          etcd data
    logs/          one log per component
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from sps_sim.costmodel import GPU_H100, GPU_H200, GPU_RTX_PRO_6000
from sps_testbed import pki as pki_mod
from sps_testbed import podnet
from sps_testbed.binaries import Binaries, find_binaries
from sps_testbed.processes import free_port, log_tail, spawn, terminate_group

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/12"
KUBERNETES_SERVICE_IP = "10.96.0.1"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "DefaultTolerationSeconds",
    "ResourceQuota",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
)

# What a test or the demo needs running: workloads, garbage collection, service-account
# tokens and the root CA ConfigMap for pods, node health, aggregated RBAC roles.
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "daemonset-controller",
    "job-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "resourcequota-controller",
    "disruption-controller",
    "replicationcontroller-controller",
    "service-cidr-controller",
    # Binds PersistentVolumeClaims to PersistentVolumes (model weights on a claim).
    "persistentvolume-binder-controller",
)

# The order components stop in: the node agent first (it kills pod processes), etcd last.
STOP_ORDER = ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")

DEFAULT_STATE_DIR = Path.home() / ".local" / "state" / "sps-operator" / "dev-cluster"


class ControlPlaneError(RuntimeError):
    """The control plane (or node agent) did not start, with the log that says why."""


@dataclass(frozen=True)
class NodeSpec:
    """A fake GPU node: `NAME=PRODUCT[:GPUS]` on the command line."""

    name: str
    product: str
    gpus: int = 8

    @classmethod
    def parse(cls, text: str) -> NodeSpec:
        name, sep, rest = text.partition("=")
        if not sep or not name or not rest:
            raise ValueError(f"node must be NAME=PRODUCT[:GPUS], got {text!r}")
        product, gpus = rest, 8
        head, colon, tail = rest.rpartition(":")
        if colon:
            if not tail.isdigit() or int(tail) < 0:
                raise ValueError(f"GPU count must be a non-negative integer in {text!r}")
            product, gpus = head, int(tail)
        if not product:
            raise ValueError(f"node must be NAME=PRODUCT[:GPUS], got {text!r}")
        return cls(name=name, product=product, gpus=gpus)

    def arg(self) -> str:
        return f"{self.name}={self.product}:{self.gpus}"


DEFAULT_NODES = (
    NodeSpec("gpu-h100-0", GPU_H100),
    NodeSpec("gpu-h100-1", GPU_H100),
    NodeSpec("gpu-h200-0", GPU_H200),
    NodeSpec("gpu-h200-1", GPU_H200),
)

# The bed the test suite starts (its pytest plugin, `sps-testbed run`): the default nodes
# and a pool of a third product, which the capacity and crash-point tests fill
# (tests/e2e/e2e_pool.py) while the other tests share the H100 and H200 nodes.
TEST_NODES = (
    *DEFAULT_NODES,
    NodeSpec("gpu-rtx6000-0", GPU_RTX_PRO_6000),
    NodeSpec("gpu-rtx6000-1", GPU_RTX_PRO_6000),
)


def default_state_dir() -> Path:
    env = os.environ.get("SPS_DEV_CLUSTER_DIR")
    return Path(env) if env else DEFAULT_STATE_DIR


@dataclass
class ClusterRecord:
    """What `cluster.json` holds: enough to stop, inspect and reconnect to a cluster."""

    state_dir: str
    server: str
    api_server_port: int
    etcd_port: int
    etcd_peer_port: int
    controller_manager_port: int
    scheduler_port: int
    pod_network_index: int
    pod_cidr: str
    gateway: str
    path_dirs: list[str]
    pids: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> ClusterRecord:
        data = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}  # a record from an older build may say more
        return cls(**{k: v for k, v in data.items() if k in known})

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)


def kubeconfig_yaml(server: str, ca: Path, cert: Path, key: Path, user: str) -> str:
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "sps-dev",
                "cluster": {"server": server, "certificate-authority-data": b64(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
            }
        ],
        "contexts": [{"name": "sps-dev", "context": {"cluster": "sps-dev", "user": user}}],
        "current-context": "sps-dev",
    }
    return yaml.safe_dump(config, sort_keys=False)


def _ssl_context(ca: Path | None, client: pki_mod.ClientCert | None) -> ssl.SSLContext:
    if ca is None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    return ctx


def http_get(url: str, context: ssl.SSLContext | None = None, timeout: float = 3.0) -> bytes:
    """GET `url`; raises OSError (incl. URLError/HTTPError) when not 200."""
    with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
        body: bytes = resp.read()
        return body


class ControlPlane:
    """The processes of one local cluster, rooted at `state_dir`."""

    def __init__(
        self,
        state_dir: Path | None = None,
        binaries: Binaries | None = None,
        detached: bool = False,
        apiserver_args: Sequence[str] = (),
    ) -> None:
        self.state_dir = (state_dir or default_state_dir()).resolve()
        self._binaries = binaries
        # More kube-apiserver flags (e.g. an audit log for a benchmark).
        self.apiserver_args = list(apiserver_args)
        # Detached: processes outlive this Python process (`sps-testbed controlplane up`); otherwise
        # they die with it and are stopped at exit (tests).
        self.detached = detached
        self.record: ClusterRecord | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._atexit_registered = False

    # -- paths ---------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def env_file(self) -> Path:
        return self.state_dir / "env.sh"

    @property
    def record_file(self) -> Path:
        return self.state_dir / "cluster.json"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def ca_file(self) -> Path:
        return self.state_dir / "pki" / "ca.crt"

    @property
    def binaries(self) -> Binaries:
        if self._binaries is None:
            self._binaries = find_binaries(build=True)
        return self._binaries

    def _admin(self) -> pki_mod.ClientCert:
        d = self.state_dir / "pki"
        return pki_mod.ClientCert(cert=d / "admin.crt", key=d / "admin.key")

    @property
    def server(self) -> str:
        if self.record is None:
            raise ControlPlaneError("control plane not started")
        return self.record.server

    # -- lifecycle -----------------------------------------------------------
    @classmethod
    def attach(cls, state_dir: Path | None = None) -> ControlPlane:
        """The cluster recorded in `state_dir` (started earlier, maybe by another process)."""
        cp = cls(state_dir, detached=True)
        if not cp.record_file.exists():
            raise ControlPlaneError(f"no dev cluster in {cp.state_dir} (no cluster.json)")
        cp.record = ClusterRecord.load(cp.record_file)
        return cp

    def running_components(self) -> dict[str, bool]:
        if self.record is None:
            return {}
        return {name: podnet.pid_alive(pid) for name, pid in self.record.pids.items()}

    def start(self, timeout: float = 120.0, attempts: int = 3) -> None:
        """Start etcd, the API server, controller-manager and scheduler; wait until ready.

        Ports are picked free just before use; if another cluster grabs one in between,
        the start is retried with fresh ports.
        """
        if self.record_file.exists():
            old = ClusterRecord.load(self.record_file)
            if any(podnet.pid_alive(p) for p in old.pids.values()):
                raise ControlPlaneError(
                    f"a dev cluster is already running in {self.state_dir}; stop it first "
                    "(`sps-testbed controlplane down`)"
                )
        binaries = self.binaries  # build before the clock starts
        for attempt in range(1, attempts + 1):
            try:
                self._start_once(binaries, timeout)
                return
            except ControlPlaneError as err:
                self.stop()
                if "address already in use" not in str(err) or attempt == attempts:
                    raise
            except BaseException:
                # Anything else (a bad certificate write, Ctrl-C): leave nothing running.
                self.stop()
                raise

    def _reset_state_dir(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for name in ("pki", "etcd", "logs", "certs"):
            shutil.rmtree(self.state_dir / name, ignore_errors=True)
        for name in ("cluster.json", "kubeconfig", "env.sh"):
            (self.state_dir / name).unlink(missing_ok=True)

    def _start_once(self, binaries: Binaries, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self._reset_state_dir()
        self.logs_dir.mkdir()
        network = podnet.reserve(os.getpid(), self.state_dir)
        api_port = free_port("0.0.0.0")
        record = ClusterRecord(
            state_dir=str(self.state_dir),
            server=f"https://127.0.0.1:{api_port}",
            api_server_port=api_port,
            etcd_port=free_port(),
            etcd_peer_port=free_port(),
            controller_manager_port=free_port(),
            scheduler_port=free_port(),
            pod_network_index=network.index,
            pod_cidr=network.cidr,
            gateway=network.gateway,
            path_dirs=[str(d) for d in binaries.path_dirs()],
        )
        self.record = record
        record.save(self.record_file)
        if not self.detached and not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True

        p = pki_mod.generate(
            self.state_dir / "pki", ["127.0.0.1", network.gateway, KUBERNETES_SERVICE_IP]
        )
        cm_kubeconfig, sched_kubeconfig = self._write_kubeconfigs(record, p)
        self._write_env_file(record)

        etcd_url = f"http://127.0.0.1:{record.etcd_port}"
        peer_url = f"http://127.0.0.1:{record.etcd_peer_port}"
        self._spawn(
            "etcd",
            self._etcd_argv(binaries, etcd_url, peer_url),
        )
        # The pod-network reservation lives as long as etcd, the last process to stop.
        podnet.transfer(network, record.pids["etcd"], self.state_dir)

        self._spawn(
            "kube-apiserver",
            self._apiserver_argv(binaries, etcd_url, api_port, network.gateway, p),
        )
        admin_ctx = _ssl_context(p.ca_cert, p.admin)
        self._wait("etcd", deadline, lambda: b"true" in http_get(f"{etcd_url}/health"))
        self._wait(
            "kube-apiserver",
            deadline,
            lambda: http_get(f"{record.server}/readyz", admin_ctx) == b"ok",
        )
        # The controller-manager and scheduler exit if they start before the API server
        # has bootstrapped RBAC (they read the extension-apiserver-authentication
        # ConfigMap), so they start once it is ready.
        common = [
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "--profiling=false",
            "--v=1",
        ]
        self._spawn(
            "kube-controller-manager",
            self._controller_manager_argv(binaries, cm_kubeconfig, record, p, common),
        )
        self._spawn(
            "kube-scheduler",
            self._scheduler_argv(binaries, sched_kubeconfig, record, common),
        )

        insecure = _ssl_context(None, None)
        for name, port in (
            ("kube-controller-manager", record.controller_manager_port),
            ("kube-scheduler", record.scheduler_port),
        ):
            self._wait(name, deadline, _healthz_check(port, insecure))
        # Usable means a namespace gets its service account and root CA: pods need both.
        self._wait(
            "kube-controller-manager",
            deadline,
            lambda: bool(
                self.get("/api/v1/namespaces/default/serviceaccounts/default")
                and self.get("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
            ),
        )

    def _write_kubeconfigs(self, record: ClusterRecord, p: pki_mod.Pki) -> tuple[Path, Path]:
        """The admin's kubeconfig, and the controller-manager's and scheduler's (returned)."""
        self.kubeconfig.write_text(
            kubeconfig_yaml(record.server, p.ca_cert, p.admin.cert, p.admin.key, "admin")
        )
        self.kubeconfig.chmod(0o600)
        cm_kubeconfig = self.state_dir / "pki" / "controller-manager.kubeconfig"
        cm_kubeconfig.write_text(
            kubeconfig_yaml(
                record.server,
                p.ca_cert,
                p.controller_manager.cert,
                p.controller_manager.key,
                "system:kube-controller-manager",
            )
        )
        sched_kubeconfig = self.state_dir / "pki" / "scheduler.kubeconfig"
        sched_kubeconfig.write_text(
            kubeconfig_yaml(
                record.server, p.ca_cert, p.scheduler.cert, p.scheduler.key, "system:kube-scheduler"
            )
        )
        return cm_kubeconfig, sched_kubeconfig

    def _apiserver_argv(
        self, binaries: Binaries, etcd_url: str, api_port: int, gateway: str, p: pki_mod.Pki
    ) -> list[str]:
        return [
            str(binaries.kube_apiserver),
            f"--etcd-servers={etcd_url}",
            # 0.0.0.0: pods reach the API server at the gateway of their network.
            "--bind-address=0.0.0.0",
            f"--secure-port={api_port}",
            f"--advertise-address={gateway}",
            f"--cert-dir={self.state_dir / 'certs' / 'apiserver'}",
            f"--tls-cert-file={p.apiserver_cert}",
            f"--tls-private-key-file={p.apiserver_key}",
            f"--client-ca-file={p.ca_cert}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={p.sa_pub}",
            f"--service-account-signing-key-file={p.sa_key}",
            f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--authorization-mode=RBAC",
            f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
            "--allow-privileged=true",
            "--profiling=false",
            "--event-ttl=1h",
            # `kubectl logs` reaches a node agent at its InternalIP (no DNS for node names).
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            # The aggregation layer (kubeadm's settings): an aggregated API server
            # (Kueue's visibility API) trusts the user this client certificate forwards.
            f"--requestheader-client-ca-file={p.front_proxy_ca}",
            f"--requestheader-allowed-names={pki_mod.FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={p.front_proxy_client.cert}",
            f"--proxy-client-key-file={p.front_proxy_client.key}",
            "--v=1",
            *self.apiserver_args,
        ]

    def _controller_manager_argv(
        self,
        binaries: Binaries,
        cm_kubeconfig: Path,
        record: ClusterRecord,
        p: pki_mod.Pki,
        common: list[str],
    ) -> list[str]:
        return [
            str(binaries.kube_controller_manager),
            *self._component_args(
                cm_kubeconfig, record.controller_manager_port, "controller-manager"
            ),
            f"--controllers={','.join(CONTROLLERS)}",
            f"--root-ca-file={p.ca_cert}",
            f"--service-account-private-key-file={p.sa_key}",
            "--use-service-account-credentials=true",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--kube-api-qps=100",
            "--kube-api-burst=200",
            *common,
        ]

    def _component_args(self, kubeconfig: Path, port: int, certs: str) -> list[str]:
        """How the controller-manager and the scheduler reach the API server and serve."""
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--authentication-skip-lookup=true",
            f"--secure-port={port}",
            f"--cert-dir={self.state_dir / 'certs' / certs}",
        ]

    def _etcd_argv(self, binaries: Binaries, etcd_url: str, peer_url: str) -> list[str]:
        return [
            str(binaries.etcd),
            "--name=default",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            # Test data: durability across a power cut is not worth an fsync per write.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def _scheduler_argv(
        self, binaries: Binaries, sched_kubeconfig: Path, record: ClusterRecord, common: list[str]
    ) -> list[str]:
        return [
            str(binaries.kube_scheduler),
            *self._component_args(sched_kubeconfig, record.scheduler_port, "scheduler"),
            *common,
        ]

    def _write_env_file(self, record: ClusterRecord) -> None:
        path = ":".join(record.path_dirs)
        self.env_file.write_text(
            f"export KUBECONFIG={self.kubeconfig}\n"
            + (f"export PATH={path}:$PATH\n" if path else "")
        )

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        assert self.record is not None
        death_signal = None if self.detached else signal.SIGKILL
        proc = spawn(argv, self.logs_dir / f"{name}.log", env=env, parent_death_signal=death_signal)
        self._procs[name] = proc
        self.record.pids[name] = proc.pid
        self.record.save(self.record_file)

    def _wait(self, name: str, deadline: float, ready: Callable[[], bool]) -> None:
        last = ""
        while True:
            proc = self._procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with code {proc.returncode} during start-up; "
                    f"log {self.logs_dir / (name + '.log')}:\n"
                    f"{log_tail(self.logs_dir / (name + '.log'))}"
                )
            try:
                if ready():
                    return
            except (OSError, ssl.SSLError, ValueError) as err:
                last = str(err)
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{name} not ready in time (last error: {last or 'not ready'}); "
                    f"log {self.logs_dir / (name + '.log')}:\n"
                    f"{log_tail(self.logs_dir / (name + '.log'))}"
                )
            time.sleep(0.1)

    def get(self, path: str) -> dict[str, Any] | None:
        """GET an API path as admin; None when it does not exist (404)."""
        ctx = _ssl_context(self.ca_file, self._admin())
        try:
            data = json.loads(http_get(f"{self.server}{path}", ctx))
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise
        return data if isinstance(data, dict) else None

    def ready(self) -> bool:
        """The API server answers /readyz and every recorded process is alive."""
        if self.record is None:
            return False
        if not all(self.running_components().values()):
            return False
        try:
            ctx = _ssl_context(self.ca_file, self._admin())
            return http_get(f"{self.server}/readyz", ctx) == b"ok"
        except (OSError, ssl.SSLError):
            return False

    def stop(self) -> None:
        """Stop every process of this cluster (node agent first, etcd last); idempotent."""
        if self.record is None and self.record_file.exists():
            with contextlib.suppress(OSError, ValueError, TypeError):
                self.record = ClusterRecord.load(self.record_file)
        if self.record is None:
            return
        names = [n for n in STOP_ORDER if n in self.record.pids]
        names += [n for n in self.record.pids if n not in names]
        for name in names:
            pid = self.record.pids[name]
            proc = self._procs.get(name)
            expect = None if proc is not None else name
            terminate_group(pid, expect=expect, grace=10.0)
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=1)
        podnet.release(podnet.PodNetwork.for_index(self.record.pod_network_index), self.state_dir)
        self.record.pids = {}
        with contextlib.suppress(OSError):
            self.record.save(self.record_file)
        self._procs.clear()


def _healthz_check(port: int, context: ssl.SSLContext) -> Callable[[], bool]:
    url = f"https://127.0.0.1:{port}/healthz"
    return lambda: http_get(url, context) == b"ok"

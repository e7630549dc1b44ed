"""Starting, reaching and stopping a real-node test bed from Python.

    bed = RealNodeCluster(state_dir)   # detached=False: dies with this process
    bed.start()                        # builds what is missing, then ~1 min to Ready
    bed.kubectl("get", "nodes")
    bed.stop()

The work happens in a supervisor process (sps_testbed.supervisor) inside the bed's own
network namespace; this side writes the request, waits for `bed.json` to say `ready`,
and talks to the API server at the pod network's gateway, which the host routes into
the bed.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sps_testbed import hostcheck, kueue, lws, registry
from sps_testbed.artifacts import Artifacts, build_artifacts, build_kube_router
from sps_testbed.binaries import BinariesError, find_binaries
from sps_testbed.controlplane import DEFAULT_NODES, NodeSpec, kubeconfig_yaml
from sps_testbed.kueue import KueueSetup
from sps_testbed.lws import LwsSetup
from sps_testbed.node import NodeConfig
from sps_testbed.pki import issue_user
from sps_testbed.plan import BED_FILE, BedRecord, teardown
from sps_testbed.podnet import pid_alive
from sps_testbed.processes import cmdline, log_tail, spawn, terminate_group

DEFAULT_STATE_DIR = Path.home() / ".local" / "state" / "sps-testbed" / "default"


class TestbedError(RuntimeError):
    """The bed did not start (or is not running), with the log lines that say why."""

    __test__ = False  # not a pytest test class


def default_state_dir() -> Path:
    env = os.environ.get("SPS_TESTBED_DIR")
    return Path(env) if env else DEFAULT_STATE_DIR


class RealNodeCluster:
    """One bed rooted at `state_dir` (bed.json, kubeconfig, logs, nodes/<name>/...)."""

    def __init__(
        self,
        state_dir: Path | None = None,
        nodes: Sequence[NodeSpec] = DEFAULT_NODES,
        detached: bool = False,
        apiserver_args: Sequence[str] = (),
        with_network_policies: bool = False,
    ) -> None:
        self.state_dir = (state_dir or default_state_dir()).resolve()
        self.nodes = list(nodes)
        self.detached = detached
        # More kube-apiserver flags (e.g. an audit log for a benchmark).
        self.apiserver_args = list(apiserver_args)
        # kube-router's network policy controller in the bed's namespace (the supervisor's
        # `_start_network_policy_controller`): NetworkPolicy enforced for the first node's pods.
        self.with_network_policies = with_network_policies
        self.artifacts: Artifacts | None = None
        self._cached_tool_dirs: list[Path] | None = None
        self._admin_api: Any = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.build_seconds = 0.0
        self.start_seconds = 0.0

    # -- paths and records -------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def supervisor_log(self) -> Path:
        return self.state_dir / "logs" / "supervisor.log"

    def record(self) -> BedRecord:
        try:
            return BedRecord.load(self.state_dir)
        except (OSError, ValueError) as err:
            raise TestbedError(f"no test bed in {self.state_dir}: {err}") from err

    @classmethod
    def attach(cls, state_dir: Path | None = None) -> RealNodeCluster:
        bed = cls(state_dir, detached=True)
        rec = bed.record()
        bed.nodes = [NodeSpec(n.name, n.product, n.gpus) for n in rec.nodes]
        return bed

    def running(self) -> bool:
        try:
            rec = self.record()
        except TestbedError:
            return False
        return pid_alive(rec.supervisor_pid) and "sps_testbed.supervisor" in cmdline(
            rec.supervisor_pid
        )

    # -- lifecycle ---------------------------------------------------------------------
    def build(self) -> Artifacts:
        t0 = time.monotonic()
        self.artifacts = build_artifacts()
        self.build_seconds = time.monotonic() - t0
        return self.artifacts

    def start(self, timeout: float = 420.0) -> None:
        if os.geteuid() != 0:
            raise TestbedError("the real-node test bed needs root (namespaces, cgroups, mounts)")
        if self.running():
            raise TestbedError(f"a test bed is already running in {self.state_dir}; stop it first")
        room, lines = hostcheck.check(hostcheck.BedsToStart(1, len(self.nodes)))
        if not room:
            raise TestbedError("no room for another bed on this host:\n" + "\n".join(lines))
        if not self.nodes:
            raise ValueError("a test bed needs at least one node")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate node names in {names}")
        artifacts = self.artifacts or self.build()
        t0 = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for stale in (BED_FILE, "kubeconfig"):
            (self.state_dir / stale).unlink(missing_ok=True)
        request = {
            "nodes": [{"name": n.name, "product": n.product, "gpus": n.gpus} for n in self.nodes],
            "artifacts": artifacts.to_json(),
            "apiserver_args": self.apiserver_args,
        }
        if self.with_network_policies:
            request["kube_router"] = str(build_kube_router())
        (self.state_dir / "request.json").write_text(json.dumps(request, indent=2) + "\n")
        env = dict(os.environ)
        # Children (node runners, reaper) import sps_testbed from the same interpreter.
        env["PATH"] = os.pathsep.join(
            [str(Path(sys.executable).parent), "/usr/sbin", "/sbin", env.get("PATH", "")]
        )
        self._proc = spawn(
            [sys.executable, "-m", "sps_testbed.supervisor", f"--state-dir={self.state_dir}"],
            self.supervisor_log,
            env=env,
            parent_death_signal=None if self.detached else signal.SIGTERM,
        )
        if not self.detached:
            atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while True:
            status, error = self._status()
            if status == "ready":
                break
            if status in ("failed", "stopped") or self._proc.poll() is not None:
                self.stop()
                raise TestbedError(self._failure(error))
            if time.monotonic() > deadline:
                self.stop()
                raise TestbedError(self._failure(f"not ready within {timeout:.0f}s"))
            time.sleep(0.25)
        self.start_seconds = time.monotonic() - t0

    def _status(self) -> tuple[str, str]:
        try:
            rec = BedRecord.load(self.state_dir)
        except (OSError, ValueError):
            return "starting", ""
        return rec.status, rec.error

    def _failure(self, error: str) -> str:
        parts = [f"test bed in {self.state_dir} did not start: {error.strip()}"]
        parts.append(f"supervisor log {self.supervisor_log}:\n{log_tail(self.supervisor_log, 30)}")
        for node in self.nodes:
            for log in ("runner", "logs/kubelet", "logs/containerd"):
                path = self.state_dir / "nodes" / node.name / f"{log}.log"
                if path.exists():
                    parts.append(f"{path}:\n{log_tail(path, 15)}")
            break  # one node's logs say enough; the rest are in the state directory
        return "\n\n".join(parts)

    def stop(self, timeout: float = 90.0) -> None:
        """Stop the bed and remove everything it made; idempotent."""
        try:
            rec = BedRecord.load(self.state_dir)
        except (OSError, ValueError):
            return
        ours = self._proc is not None or "sps_testbed.supervisor" in cmdline(rec.supervisor_pid)
        if rec.supervisor_pid and pid_alive(rec.supervisor_pid) and ours:
            terminate_group(rec.supervisor_pid, grace=timeout)
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
        deadline = time.monotonic() + 30
        while rec.reaper_pid and pid_alive(rec.reaper_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        with contextlib.suppress(OSError, ValueError):
            rec = BedRecord.load(self.state_dir)
        # Normally the supervisor and the reaper have done this already.
        teardown(rec)

    # -- using it ------------------------------------------------------------------------
    def registry_env(self) -> dict[str, str]:
        """SPS_TESTBED_REGISTRY (host:port of the bed's registry) and SPS_TESTBED_CA (the CA
        bundle that signed its certificate, alone in its directory)."""
        rec = self.record()
        return {"SPS_TESTBED_REGISTRY": rec.registry, "SPS_TESTBED_CA": rec.registry_ca}

    def chart_reference(self) -> tuple[str, str]:
        """The chart as the bed's registry holds it: (`oci://<registry>/charts/sps-operator`,
        version)."""
        rec = self.record()
        return f"oci://{rec.registry}/{registry.CHART_REPOSITORY}/sps-operator", rec.chart_version

    def chart_args(self) -> list[str]:
        """What `helm install|upgrade RELEASE` takes to install the chart from the bed's
        registry: its reference, `--version` and the registry's CA."""
        chart, version = self.chart_reference()
        return [chart, "--version", version, "--ca-file", self.registry_env()["SPS_TESTBED_CA"]]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        with contextlib.suppress(TestbedError):
            env.update(self.registry_env())
        env["PATH"] = os.pathsep.join([*(str(b) for b in self._tool_dirs()), env.get("PATH", "")])
        return env

    def _tool_dirs(self) -> list[Path]:
        """Where the pinned kubectl and helm are: the build's, or for a bed attached without
        one (`sps-testbed up --with ...` on a running bed) the cached binaries, never
        silently an older kubectl on PATH (which reads a stream of JSON documents as one)."""
        if self.artifacts is not None:
            return list(self.artifacts.controlplane.path_dirs())
        if self._cached_tool_dirs is None:
            self._cached_tool_dirs = []
            with contextlib.suppress(BinariesError, OSError):  # none cached: PATH's, as before
                self._cached_tool_dirs = list(find_binaries(build=False).path_dirs())
        return self._cached_tool_dirs

    def _tool(self, argv: list[str], input: str | None, check: bool, timeout: float) -> str:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            env=self.env(),
            check=False,
            timeout=timeout,
        )
        _record_tool(argv, before)
        if check and proc.returncode != 0:
            raise KubectlError(argv, proc.returncode, proc.stdout, proc.stderr)
        return proc.stdout

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> str:
        """Run kubectl (the pinned build) against the bed; stdout, KubectlError on failure."""
        return self._tool(["kubectl", *args], input, check, timeout)

    def api(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Sequence[tuple[str, str]] = (),
        content_type: str = "application/json",
    ) -> dict[str, Any] | None:
        """One request as admin through one kept ApiClient: the answer's JSON, None for 404.
        For what the harness reads and polls: a kubectl process per read cost the suite
        1,656 processes and 99 CPU-s per run (issue 35); raw JSON, no typed models built.
        A PATCH names its kind in `content_type` (application/merge-patch+json, ...)."""
        if self._admin_api is None:
            self._admin_api = self.api_client()
        request = self._admin_api.param_serialize(
            method, path, query_params=list(query), body=body, auth_settings=["BearerToken"],
            header_params={"Accept": "application/json", "Content-Type": content_type},
        )  # fmt: skip
        resp = self._admin_api.call_api(*request, _request_timeout=60)
        data = resp.read()
        if resp.status == 404:
            return None
        if not 200 <= resp.status <= 299:
            raise TestbedError(f"{method} {path}: {resp.status} {data[:500]!r}")
        return dict(json.loads(data or b"{}"))

    def create_namespace(self, name: str, timeout: float = 60.0) -> str:
        """Create `name` and wait until pods can be created in it (its default SA exists)."""
        self.api("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        deadline = time.monotonic() + timeout
        while not self.api("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default"):
            if time.monotonic() > deadline:
                raise TestbedError(f"namespace {name}: no default service account in time")
            time.sleep(0.2)
        return name

    def delete_namespace(self, name: str) -> None:
        """Delete `name` without waiting; gone already is fine, a failure only logged (the
        caller is a test's cleanup).

        The custom objects left in it lose their finalizers first: the controller that
        would finish them (the test's operator) is usually stopped by then, and a namespace
        one of them holds stayed Terminating for the rest of the run while the
        controller-manager's namespace controller tried it again every second or two (a
        LIST and a delete of every resource kind: ~10 API requests a second for each such
        namespace; 21,000 of the 36,000 requests of a 5-minute share of the bed's tests)."""
        try:
            self.drop_custom_finalizers(name)
        except Exception as exc:  # cleanup: the namespace is deleted all the same
            print(f"dropping the finalizers in namespace {name}: {exc}", file=sys.stderr)
        try:
            self.api("DELETE", f"/api/v1/namespaces/{name}")
        except Exception as exc:  # cleanup: what kubectl check=False did
            print(f"deleting namespace {name}: {exc}", file=sys.stderr)

    def drop_custom_finalizers(self, namespace: str) -> list[str]:
        """Remove the finalizers of every custom object in `namespace` (of every namespaced
        CRD installed); returns the objects changed, as `plural/name`."""
        crds = self.api("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions") or {}
        dropped: list[str] = []
        for crd in crds.get("items") or []:
            spec = crd.get("spec") or {}
            served = [v["name"] for v in spec.get("versions") or [] if v.get("served")]
            if spec.get("scope") != "Namespaced" or not served:
                continue
            plural = spec["names"]["plural"]
            base = f"/apis/{spec['group']}/{served[0]}/namespaces/{namespace}/{plural}"
            for item in (self.api("GET", base) or {}).get("items") or []:
                meta = item.get("metadata") or {}
                if not meta.get("finalizers"):
                    continue
                self.api(
                    "PATCH",
                    f"{base}/{meta['name']}",
                    {"metadata": {"finalizers": None}},
                    content_type="application/merge-patch+json",
                )
                dropped.append(f"{plural}/{meta['name']}")
        return dropped

    def kill_pod_containers(self, namespace: str, pod: str, sig: str = "SIGKILL") -> list[str]:
        """Signal every running container of `pod` through its node's containerd, behind
        the kubelet's back: a crash or an OOM kill as Kubernetes sees one (the kubelet
        restarts the container unless the pod is deleted). Returns the container names."""
        obj = self.api("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
        if obj is None:
            raise TestbedError(f"pod {namespace}/{pod} not found")
        node = str(obj["spec"].get("nodeName") or "")
        if node not in {n.name for n in self.record().nodes}:
            raise TestbedError(f"pod {namespace}/{pod} is on no node of this bed")
        killed = []
        for status in (obj.get("status") or {}).get("containerStatuses") or []:
            runtime, _, container_id = str(status.get("containerID", "")).partition("://")
            if runtime != "containerd" or "running" not in (status.get("state") or {}):
                continue
            self.ctr(node, "task", "kill", "-s", sig, container_id)
            killed.append(str(status["name"]))
        return killed

    def kill_containers_of(
        self, node_name: str, namespace: str, pod: str, sig: str = "SIGKILL"
    ) -> int:
        """Signal every running task of `namespace/pod` on `node_name`, found by the
        kubelet's labels on its containers (the sandbox too), so that it works after the
        pod's API object is gone; returns how many were signalled."""
        # One filter, its selectors joined by a comma (AND): ctr ORs separate filter
        # arguments, and two of them matched every container of the namespace on the node
        # (the replacement pod's too: ci5 saw it killed in its first second).
        ids = self.ctr(
            node_name, "containers", "ls", "-q",
            f'labels."io.kubernetes.pod.name"=={pod},'
            f'labels."io.kubernetes.pod.namespace"=={namespace}',
        ).split()  # fmt: skip
        if not ids:
            return 0
        running = {
            fields[0]
            for fields in (line.split() for line in self.ctr(node_name, "tasks", "ls").splitlines())
            if len(fields) >= 3 and fields[2] == "RUNNING"
        }
        signalled = 0
        for container_id in set(ids) & running:
            with contextlib.suppress(TestbedError):  # it ended meanwhile
                self.ctr(node_name, "task", "kill", "-s", sig, container_id)
                signalled += 1
        return signalled

    def ctr(self, node_name: str, *args: str) -> str:
        """`ctr -n k8s.io ARGS` against `node_name`'s containerd; stdout, TestbedError on
        failure."""
        node = next((n for n in self.record().nodes if n.name == node_name), None)
        if node is None:
            raise TestbedError(f"{node_name!r} is no node of this bed")
        cfg = NodeConfig.load(Path(node.dir) / "node.json")
        argv = [str(Path(cfg.containerd_bin) / "ctr"), "-a", str(cfg.socket), "-n", "k8s.io", *args]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        if proc.returncode != 0:
            raise TestbedError(f"{' '.join(argv)}: {proc.stderr.strip()}")
        return proc.stdout

    def prefetch_images(self, roles: Sequence[str]) -> list[subprocess.Popen[bytes]]:
        """Start pulling the images of `roles` (in that order) on every node, in the
        background, from the bed's registry through each node's registry host configuration,
        as the kubelet would, into the namespace the kubelet uses: a node's first pod of
        those images then starts without the pull (decompressing and unpacking ≈ 640 MB).
        One `ctr images pull` at a time per node; output in the node's
        `logs/prefetch.log`. A pull that fails costs nothing: the kubelet pulls on its own.
        Nothing waits for them; they end with the pull or with the node's containerd."""
        refs = [self.image(role) for role in roles]
        pulls = []
        for node in self.record().nodes:
            cfg = NodeConfig.load(Path(node.dir) / "node.json")
            ctr = [str(Path(cfg.containerd_bin) / "ctr"), "-a", str(cfg.socket), "-n", "k8s.io"]
            hosts = ["--hosts-dir", str(Path(cfg.dir) / "certs.d")]
            script = " && ".join(shlex.join([*ctr, "images", "pull", *hosts, ref]) for ref in refs)
            with (Path(cfg.dir) / "logs" / "prefetch.log").open("ab") as log:
                pulls.append(
                    subprocess.Popen(
                        ["sh", "-c", script],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )
        return pulls

    def registry_log(self) -> Path:
        """The bed registry's log: its access log (every pull) and errors."""
        return self.state_dir / "logs" / "registry.log"

    def user_kubeconfig(self, user: str, groups: Sequence[str], path: Path) -> Path:
        """Write `path`: a kubeconfig for `user` (in `groups`) with a client certificate
        signed by this bed's CA (its key and certificate beside `path`). The user may do
        exactly what RBAC grants that name: a tenant, not the admin, not impersonation."""
        pki_dir = self.state_dir / "cp" / "pki"
        cert = issue_user(pki_dir / "ca.crt", pki_dir / "ca.key", path.parent, user, groups)
        text = kubeconfig_yaml(self.record().server, pki_dir / "ca.crt", cert.cert, cert.key, user)
        path.write_text(text)
        path.chmod(0o600)
        return path

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> str:
        return self._tool(["helm", *args], None, check, timeout)

    def api_client(self) -> Any:
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(self.kubeconfig), client_configuration=configuration
        )
        return client.ApiClient(configuration)

    def image(self, role: str) -> str:
        """The public reference of an image the bed's registry holds (the nodes resolve it
        there): operator, sglang, pause, coredns, kueue, lws."""
        if self.artifacts is None:
            req = json.loads((self.state_dir / "request.json").read_text())
            return str(req["artifacts"]["images"][role]["ref"])
        return self.artifacts.images[role].ref

    def kueue_dir(self) -> Path:
        """Kueue's build: its manager binary, rendered config/ (kueue.yaml) and version."""
        if self.artifacts is None:
            req = json.loads((self.state_dir / "request.json").read_text())
            return Path(req["artifacts"]["kueue_dir"])
        return self.artifacts.kueue_dir

    def install_kueue(self, timeout: float = 300.0) -> KueueSetup:
        """Kueue with the bed's queues (sps_testbed.kueue); idempotent."""
        return kueue.install(self, self.kueue_dir(), self.image("kueue"), self.nodes, timeout)

    def uninstall_kueue(self, timeout: float = 180.0) -> None:
        kueue.uninstall(self, self.kueue_dir(), timeout)

    def lws_dir(self) -> Path:
        """LeaderWorkerSet's build: its manager binary, rendered config/ (lws.yaml), version."""
        if self.artifacts is None:
            req = json.loads((self.state_dir / "request.json").read_text())
            return Path(req["artifacts"]["lws_dir"])
        return self.artifacts.lws_dir

    def install_lws(self, timeout: float = 300.0) -> LwsSetup:
        """LeaderWorkerSet with its webhooks (sps_testbed.lws); idempotent."""
        return lws.install(self, self.lws_dir(), self.image("lws"), timeout)

    def uninstall_lws(self, timeout: float = 180.0) -> None:
        lws.uninstall(self, self.lws_dir(), timeout)

    def logs(self, node: str, component: str = "kubelet") -> Path:
        return self.state_dir / "nodes" / node / "logs" / f"{component}.log"


def _record_tool(argv: list[str], before: resource.struct_rusage) -> None:
    """With SPS_TEST_TOOL_LOG set (a file): one JSON line per kubectl or helm process, its
    CPU-s and the test that ran it, to see which callers cost the suite its CPU
    (`tests/wait-report.py --tools`; docs/dev-cluster.md). The children's rusage delta
    counts only this process, its one child at a time (pytest workers run no threads)."""
    path = os.environ.get("SPS_TEST_TOOL_LOG")
    if not path:
        return
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    verbs = [a for a in argv[1:] if not a.startswith("-")][:2]
    line = {
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0],
        "tool": " ".join([argv[0], *verbs]),
        "cpu": round(cpu, 3),
        "caller": _caller(),
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def _caller() -> str:
    """The two frames below the kubectl/helm wrappers: who asked, and who asked them."""
    wrappers = ("cluster.py", "e2e_cluster.py", "e2e_tenants.py", "pytest_plugin.py")
    frame: Any = sys._getframe(2)
    while frame is not None and (
        frame.f_code.co_name in {"kubectl", "helm", "_tool"}
        and Path(frame.f_code.co_filename).name in wrappers
    ):
        frame = frame.f_back
    names = []
    for _ in range(2):
        if frame is None:
            break
        code = frame.f_code
        names.append(f"{Path(code.co_filename).name}:{frame.f_lineno} {code.co_name}")
        frame = frame.f_back
    return " < ".join(names)


class KubectlError(RuntimeError):
    def __init__(self, args: Sequence[str], code: int, stdout: str, stderr: str) -> None:
        super().__init__(f"{' '.join(args)} failed ({code}): {stderr.strip() or stdout.strip()}")
        self.stdout = stdout
        self.stderr = stderr
        self.code = code

"""One thread per pod: sandbox, volumes, init containers, sidecars, containers, probes,
restarts, status reports and graceful deletion."""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from .envvars import EnvError, expand_all, resolve_env, service_env
from .images import ImageNotMapped, resolve_program
from .lifecycle import (
    ContainerRecord,
    PodView,
    backoff_seconds,
    deleted_phase,
    exit_code_of,
    init_phase_failed,
    pod_status,
    should_restart,
    terminal_phase,
)
from .mountpoints import missing_top
from .netns import NetworkError, Sandbox
from .nodes import rfc3339
from .probes import (
    ProbeKind,
    ProbeTracker,
    container_probes,
    readiness_ok,
    startup_passed,
    wants_kill,
)
from .runtime import (
    BASE_PATH,
    Launch,
    covered_roots,
    find_executable,
    kill_now,
    program_roots,
    run_hook,
    run_probe,
    signal_group,
    start_container,
    venv_bin,
)
from .volumes import EmptyDir, HostPath, VolumeError, VolumeFiles, build_volume, mount_plans

if TYPE_CHECKING:
    from .agent import NodeAgent

log = logging.getLogger(__name__)
TICK = 0.1
RETRY_SECONDS = 2.0
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"  # what the controller-manager publishes per namespace


class _Terminate(Exception):
    """Stop every container of the pod (deletion, deadline, agent shutdown)."""

    def __init__(
        self, grace: float, report: bool, delete: bool = True, reason: str = "", message: str = ""
    ) -> None:
        super().__init__(grace)
        self.grace = grace
        self.report = report  # whether to tell the API (not when the pod is gone)
        self.delete = delete  # delete the object afterwards (it was being deleted)
        self.reason = reason  # a pod-level failure reason, e.g. DeadlineExceeded
        self.message = message


def now_rfc3339() -> str:
    return rfc3339(datetime.now(UTC))


def pod_dir_name(pod: Mapping[str, Any]) -> str:
    m = pod["metadata"]
    return f"{m['namespace']}_{m['name']}_{m['uid']}"


class PodWorker(threading.Thread):
    def __init__(self, agent: NodeAgent, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        super().__init__(name=f"pod {meta['namespace']}/{meta['name']}", daemon=True)
        self.agent = agent
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self._pod = pod
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._gone = False  # the pod object no longer exists
        self._stopping = False  # the agent is shutting down
        self.node = agent.nodes[spec["nodeName"]]
        self.restart_policy: str = spec.get("restartPolicy") or "Always"
        self.host_network = bool(spec.get("hostNetwork"))
        self.inits = [
            ContainerRecord(
                c["name"], c["image"], "sidecar" if c.get("restartPolicy") == "Always" else "init"
            )
            for c in spec.get("initContainers") or []
        ]
        for rec in self.inits:
            rec.reason = "PodInitializing" if rec is not self.inits[0] else "ContainerCreating"
        self.mains = [ContainerRecord(c["name"], c["image"], "main") for c in spec["containers"]]
        if self.inits:
            for rec in self.mains:
                rec.reason = "PodInitializing"
        self.specs: dict[str, dict[str, Any]] = {
            c["name"]: c for c in [*(spec.get("initContainers") or []), *spec["containers"]]
        }
        self.records = {r.name: r for r in [*self.inits, *self.mains]}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.envs: dict[str, dict[str, str]] = {}
        self.trackers: dict[str, dict[ProbeKind, ProbeTracker]] = {}
        self.probe_futures: dict[tuple[str, ProbeKind], Future[tuple[bool, str]]] = {}
        self.retry_at: dict[str, float] = {}  # container -> when to (re)start it
        self.kill_at: dict[str, float] = {}  # container -> when SIGTERM turns into SIGKILL
        self.kill_reason: dict[str, str] = {}
        self.supervised: set[str] = set()  # containers whose exits lead to restarts
        self.terminating = False
        self.terminal: str | None = None
        self.sandbox: Sandbox | None = None
        self.pod_ip: str | None = None
        self.sandbox_ready = False
        self.volume_dirs: dict[str, str] = {}
        self.read_only_volumes: set[str] = set()
        self.token_refresh_at: float | None = None
        self.created_paths: list[str] = []  # host paths created as mount points or workdir
        self.start_time = now_rfc3339()
        self.started_mono = time.monotonic()
        self.status_reason = ""
        self.status_message = ""
        self.dir = agent.state_dir / "pods" / pod_dir_name(pod)
        self._published: dict[str, Any] | None = None
        self._publish_after = 0.0

    # --- called from the watch thread -----------------------------------------------------

    def update(self, pod: dict[str, Any]) -> None:
        with self._lock:
            self._pod = pod
        self._wake.set()

    def object_deleted(self) -> None:
        self._gone = True
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    @property
    def pod(self) -> dict[str, Any]:
        with self._lock:
            return self._pod

    # --- main flow ------------------------------------------------------------------------

    def run(self) -> None:
        log.info("pod %s/%s: starting on %s", self.namespace, self.pod_name, self.node.name)
        try:
            self._publish(force=True)
            self._setup_sandbox()
            if self._run_init_containers():
                self._run_main_containers()
            self._stop_sidecars()
            self._publish(force=True)
            log.info("pod %s/%s: %s", self.namespace, self.pod_name, self.terminal)
        except _Terminate as t:
            log.info("pod %s/%s: stopping (grace %gs)", self.namespace, self.pod_name, t.grace)
            self._terminate(t.grace)
            if t.report:
                self.terminal = "Failed" if t.reason else self.terminal or deleted_phase(self.mains)
                self.status_reason, self.status_message = t.reason, t.message
                self._publish(force=True)
                if t.delete:
                    self._delete_object()
        except Exception as exc:
            log.exception("pod %s/%s: node agent error", self.namespace, self.pod_name)
            self._terminate(0)
            self.terminal = "Failed"
            self.status_reason, self.status_message = "NodeAgentError", repr(exc)[:500]
            self._publish(force=True)
        finally:
            self._teardown()
            self.agent.worker_finished(self)

    def _check_terminate(self) -> None:
        if self._stopping:
            raise _Terminate(1.0, report=False)
        if self._gone:
            raise _Terminate(0.0, report=False)
        meta, spec = self.pod["metadata"], self.pod["spec"]
        if meta.get("deletionTimestamp"):
            grace = meta.get("deletionGracePeriodSeconds")
            if grace is None:
                grace = spec.get("terminationGracePeriodSeconds", 30)
            raise _Terminate(float(grace), report=True)
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and time.monotonic() - self.started_mono >= float(deadline):
            raise _Terminate(
                float(spec.get("terminationGracePeriodSeconds", 30)),
                report=True,
                delete=False,
                reason="DeadlineExceeded",
                message="Pod was active on the node longer than the specified deadline",
            )

    def _wait(self, done: Callable[[], bool]) -> None:
        while True:
            self._check_terminate()
            self._supervise()
            self._publish()
            if done():
                return
            self._wake.wait(TICK)
            self._wake.clear()

    def _sleep(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        self._wait(lambda: time.monotonic() >= until)

    # --- sandbox and volumes --------------------------------------------------------------

    def _setup_sandbox(self) -> None:
        while True:
            try:
                if self.host_network:
                    self.pod_ip = self.agent.host_ip
                elif self.sandbox is None:
                    self.sandbox = self.agent.network.create_sandbox(self.uid)
                    self.pod_ip = self.sandbox.ip
                self.dir.mkdir(parents=True, exist_ok=True)
                self._write_hosts()
                self._write_volumes()
                self.sandbox_ready = True
                return
            except (VolumeError, NetworkError, ApiException) as exc:
                msg = exc.reason if isinstance(exc, ApiException) else str(exc)
                if not any(msg in r.message for r in self.records.values()):
                    self._event("Warning", "FailedMount", f"MountVolume.SetUp failed: {msg}")
                log.warning("pod %s/%s: setup: %s", self.namespace, self.pod_name, msg)
                for rec in self.records.values():
                    if rec.state == "waiting" and rec.reason == "ContainerCreating":
                        rec.message = f"MountVolume.SetUp failed: {msg}"
                self._sleep(RETRY_SECONDS)

    def _write_hosts(self) -> None:
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        if self.pod_ip and not self.host_network:
            lines.append(f"{self.pod_ip}\t{self.pod_name}")
        for alias in self.pod["spec"].get("hostAliases") or []:  # there is no cluster DNS
            lines.append(f"{alias['ip']}\t{' '.join(alias.get('hostnames') or [])}")
        (self.dir / "hosts").write_text("\n".join(lines) + "\n")

    def _lookup(self, kind: str, name: str) -> dict[str, Any] | None:
        try:
            if kind == "configmap":
                return self.agent.read_json("configmaps", self.namespace, name)
            return self.agent.read_json("secrets", self.namespace, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            if kind == "configmap" and name == ROOT_CA_CONFIGMAP:
                # Not published (yet) by the controller-manager: the agent's --ca-file is the
                # same CA, so pods need not wait for it.
                log.warning("%s/%s missing: using --ca-file", self.namespace, name)
                return {"data": {"ca.crt": self.agent.config.ca_pem.decode()}}
            return None

    def _token(self, audience: str | None, expiration: int) -> str:
        spec = self.pod["spec"]
        sa = spec.get("serviceAccountName") or "default"
        token, seconds = self.agent.request_token(
            self.namespace, sa, audience, expiration, self.pod_name, self.uid
        )
        refresh = time.monotonic() + 0.8 * seconds
        self.token_refresh_at = min(self.token_refresh_at or refresh, refresh)
        return token

    def _write_volumes(self, only_tokens: bool = False) -> None:
        root = self.dir / "volumes"
        for volume in self.pod["spec"].get("volumes") or []:
            name = volume["name"]
            sources = (volume.get("projected") or {}).get("sources") or []
            if only_tokens and not any("serviceAccountToken" in s for s in sources):
                continue
            built = build_volume(
                volume,
                self.pod,
                configmaps=lambda n: self._lookup("configmap", n),
                secrets=lambda n: self._lookup("secret", n),
                token=self._token,
            )
            target = root / name
            if isinstance(built, EmptyDir):
                target.mkdir(parents=True, exist_ok=True)
            elif isinstance(built, HostPath):
                path = Path(built.path)
                if built.type in ("DirectoryOrCreate",) and not path.exists():
                    path.mkdir(parents=True)
                if not path.exists():
                    raise VolumeError(f"hostPath {built.path} does not exist")
                self.volume_dirs[name] = str(path)
                continue
            else:
                write_files(target, built)
                self.read_only_volumes.add(name)
            self.volume_dirs[name] = str(target)

    # --- containers -------------------------------------------------------------------------

    def _run_init_containers(self) -> bool:
        for rec in self.inits:
            self.supervised.add(rec.name)
            self._start(rec)
            if rec.kind == "sidecar":
                self._wait(lambda rec=rec: rec.started)  # type: ignore[misc]
                continue
            self._wait(lambda rec=rec: self._init_settled(rec))  # type: ignore[misc]
            self.supervised.discard(rec.name)
            if init_phase_failed(self.restart_policy, [rec]):
                self.terminal = "Failed"
                return False
        return True

    def _init_settled(self, rec: ContainerRecord) -> bool:
        if rec.state != "terminated":
            return False
        return rec.exit_code == 0 or not should_restart("init", self.restart_policy, 1)

    def _run_main_containers(self) -> None:
        for rec in self.mains:
            rec.set_waiting("ContainerCreating")
            self.supervised.add(rec.name)
            self._start(rec)
        self._wait(lambda: terminal_phase(self.restart_policy, self.mains) is not None)
        self.terminal = terminal_phase(self.restart_policy, self.mains)

    def _stop_sidecars(self) -> None:
        """After the main containers: sidecars stop one by one in reverse order (as kubelet)."""
        grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
        deadline = time.monotonic() + grace
        for rec in self.inits:
            self.supervised.discard(rec.name)
            self.retry_at.pop(rec.name, None)
        for rec in reversed(self.inits):
            self._stop_containers([rec.name], deadline)

    def _stop_containers(self, names: list[str], deadline: float) -> None:
        """preStop hooks, then SIGTERM, then SIGKILL at the deadline; returns once all exited."""
        names = [n for n in names if n in self.procs]
        if time.monotonic() >= deadline:
            for name in names:
                kill_now(self.procs[name])
            self._drain(names)
            return
        hooks = []
        for name in names:
            self._event("Normal", "Killing", f"Stopping container {name}", self.records[name])
            pre_stop = (self.specs[name].get("lifecycle") or {}).get("preStop")
            if pre_stop:
                hooks.append(
                    self.agent.probe_pool.submit(
                        run_hook,
                        pre_stop,
                        timeout=deadline - time.monotonic(),
                        pod_ip=self.pod_ip or "127.0.0.1",
                        container=self.specs[name],
                        pid=self.procs[name].pid,
                        env=self.envs.get(name, {}),
                    )
                )
        while any(not h.done() for h in hooks) and time.monotonic() < deadline:
            self._supervise()
            self._publish()
            self._wake.wait(TICK)
            self._wake.clear()
        for name in names:
            if name in self.procs:
                signal_group(self.procs[name], signal.SIGTERM)
                self.kill_at[name] = deadline
        self._drain(names)

    def _drain(self, names: list[str]) -> None:
        """Wait (without reacting to deletion) until these containers have exited."""
        while any(n in self.procs for n in names):
            self._supervise()
            self._publish()
            self._wake.wait(TICK)
            self._wake.clear()

    def _terminate(self, grace: float) -> None:
        """Stop the pod: main containers together, then sidecars in reverse order."""
        self.terminating = True
        self.supervised.clear()
        self.retry_at.clear()
        deadline = time.monotonic() + grace
        self._stop_containers([r.name for r in self.mains], deadline)
        for rec in reversed(self.inits):
            self._stop_containers([rec.name], deadline)

    def _container_env(self, rec: ContainerRecord, spec: Mapping[str, Any]) -> dict[str, str]:
        def data(kind: str) -> Callable[[str], dict[str, str] | None]:
            def get(name: str) -> dict[str, str] | None:
                obj = self._lookup(kind, name)
                if obj is None:
                    return None
                if kind == "secret":
                    raw = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
                    return {k: v.decode(errors="replace") for k, v in raw.items()}
                return dict(obj.get("data") or {})

            return get

        pod = self.pod
        env_pod = dict(pod)
        env_pod["status"] = {
            **(pod.get("status") or {}),
            "podIP": self.pod_ip or "",
            "podIPs": [{"ip": self.pod_ip}] if self.pod_ip else [],
            "hostIP": self.agent.host_ip,
            "hostIPs": [{"ip": self.agent.host_ip}],
        }
        return resolve_env(
            env_pod,
            spec,
            configmaps=data("configmap"),
            secrets=data("secret"),
            service_env=service_env(self.agent.api_server_host, self.agent.api_server_port),
            node_allocatable={"cpu": "64", "memory": "512Gi"},
        )

    def _start(self, rec: ContainerRecord) -> None:
        """Start one container now, or leave it waiting with a reason and retry later."""
        spec = self.specs[rec.name]
        self.retry_at.pop(rec.name, None)
        try:
            env = self._container_env(rec, spec)
            command = expand_all(list(spec.get("command") or []), env)
            args = expand_all(list(spec.get("args") or []), env)
            program = resolve_program(
                self.agent.image_rules,
                rec.image,
                command,
                args,
                gpu_product=self.node.gpu_product,
                sim_env=self.agent.sim_env,
            )
            mounts = mount_plans(spec, self.volume_dirs, self.read_only_volumes)
        except ImageNotMapped as exc:
            if rec.reason not in ("ErrImagePull", "ImagePullBackOff"):
                self._event("Warning", "Failed", f'Failed to pull image "{rec.image}": {exc}', rec)
            reason = "ErrImagePull" if rec.reason != "ErrImagePull" else "ImagePullBackOff"
            rec.set_waiting(reason, str(exc))
            self.retry_at[rec.name] = time.monotonic() + RETRY_SECONDS
            return
        except (EnvError, VolumeError, ApiException) as exc:
            if rec.message != str(exc):
                self._event("Warning", "Failed", f"Error: {exc}", rec)
            rec.set_waiting("CreateContainerConfigError", str(exc))
            self.retry_at[rec.name] = time.monotonic() + RETRY_SECONDS
            return
        full_env = {
            "PATH": f"{venv_bin()}:{BASE_PATH}",
            "HOME": "/root",
            "HOSTNAME": self.pod_name,
            "LANG": "C.UTF-8",
            **program.env,
            **env,
        }
        attempt = rec.restart_count + (1 if rec.ever_ran else 0)
        log_path = self.dir / rec.name / f"{attempt}.log"
        if find_executable(program.argv[0], full_env["PATH"]) is None:
            rec.set_running(now_rfc3339(), "")
            message = f'exec: "{program.argv[0]}": executable file not found in $PATH'
            rec.set_terminated(128, now_rfc3339(), "StartError", message)
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text(message + "\n")
            self._after_exit(rec)
            return
        workdir = spec.get("workingDir") or str(self.dir / "work")
        self.created_paths += self.agent.janitor.record(
            missing_top(p) for p in [*(m.target for m in mounts), workdir]
        )
        launch = Launch(
            argv=program.argv,
            env=full_env,
            workdir=workdir,
            mounts=mounts,
            netns_path=self.sandbox.netns_path if self.sandbox else None,
            hosts_file=None if self.host_network else str(self.dir / "hosts"),
            hostname=None if self.host_network else self.pod_name[:63],
            anchor=str(self.dir),
            keep=covered_roots([m.target for m in mounts], program_roots()),
        )
        proc = start_container(launch, log_path)
        link = self.dir / f"{rec.name}.log"
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        link.symlink_to(f"{rec.name}/{attempt}.log")
        self.procs[rec.name] = proc
        self.envs[rec.name] = full_env
        rec.set_running(now_rfc3339(), f"sps://{self.uid[:8]}-{rec.name}-{attempt}")
        self._event("Normal", "Started", f"Started container {rec.name}", rec)
        started = time.monotonic()
        self.trackers[rec.name] = {
            p.kind: ProbeTracker.start(p, started) for p in container_probes(spec)
        }
        self._update_readiness(rec)
        log.info(
            "pod %s/%s: started %s (pid %d): %s",
            self.namespace,
            self.pod_name,
            rec.name,
            proc.pid,
            " ".join(program.argv)[:300],
        )

    def _update_readiness(self, rec: ContainerRecord) -> None:
        trackers = self.trackers.get(rec.name, {})
        running = rec.state == "running"
        rec.started = running and startup_passed(trackers)
        rec.ready = rec.started and readiness_ok(trackers)

    def _after_exit(self, rec: ContainerRecord) -> None:
        """Restart per policy (with backoff), unless the pod is finishing."""
        if self.terminating or rec.name not in self.supervised:
            return
        if not should_restart(rec.kind, self.restart_policy, rec.exit_code or 0):
            return
        delay = backoff_seconds(rec.restart_count, self.agent.backoff_base, self.agent.backoff_cap)
        if delay > 0:
            self._event(
                "Warning",
                "BackOff",
                f"Back-off restarting failed container {rec.name} in pod {self.pod_name}",
                rec,
            )
            rec.set_waiting(
                "CrashLoopBackOff",
                f"back-off {delay:g}s restarting failed container={rec.name} "
                f"pod={self.pod_name}_{self.namespace}({self.uid})",
            )
        self.retry_at[rec.name] = time.monotonic() + delay

    def _supervise(self) -> None:
        now = time.monotonic()
        for name, proc in list(self.procs.items()):
            rec = self.records[name]
            rc = proc.poll()
            if rc is None:
                if name in self.kill_at and now >= self.kill_at[name]:
                    signal_group(proc, signal.SIGKILL)
                    del self.kill_at[name]
                self._probe(rec, now)
                continue
            signal_group(proc, signal.SIGKILL)  # stragglers of the container's process group
            del self.procs[name]
            self.kill_at.pop(name, None)
            self.trackers.pop(name, None)
            for key in [k for k in self.probe_futures if k[0] == name]:
                self.probe_futures.pop(key).cancel()
            code = exit_code_of(rc)
            rec.set_terminated(code, now_rfc3339(), message=self.kill_reason.pop(name, ""))
            log.info("pod %s/%s: %s exited %d", self.namespace, self.pod_name, name, code)
            self._after_exit(rec)
        for name, when in list(self.retry_at.items()):
            if now >= when and name in self.supervised and not self.terminating:
                self._start(self.records[name])
        if self.token_refresh_at is not None and now >= self.token_refresh_at:
            self.token_refresh_at = None
            try:
                self._write_volumes(only_tokens=True)
            except (VolumeError, ApiException) as exc:
                log.warning("pod %s/%s: token refresh: %s", self.namespace, self.pod_name, exc)
                self.token_refresh_at = now + RETRY_SECONDS

    def _probe(self, rec: ContainerRecord, now: float) -> None:
        trackers = self.trackers.get(rec.name, {})
        for kind, tracker in trackers.items():
            key = (rec.name, kind)
            fut = self.probe_futures.get(key)
            if fut is not None and fut.done():
                del self.probe_futures[key]
                ok, message = fut.result()
                flipped = tracker.record(ok)
                if flipped is False:
                    self._event(
                        "Warning", "Unhealthy", f"{kind.capitalize()} probe failed: {message}", rec
                    )
                if flipped is not None:
                    log.info(
                        "pod %s/%s: %s %s probe -> %s",
                        self.namespace,
                        self.pod_name,
                        rec.name,
                        kind,
                        "success" if ok else f"failure: {message}",
                    )
                if wants_kill(kind, flipped) and rec.name in self.procs:
                    self.kill_reason[rec.name] = f"{kind.capitalize()} probe failed: {message}"
                    self._event(
                        "Normal",
                        "Killing",
                        f"Container {rec.name} failed {kind} probe, will be restarted",
                        rec,
                    )
                    signal_group(self.procs[rec.name], signal.SIGTERM)
                    grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
                    self.kill_at[rec.name] = now + grace
            if tracker.due(now, rec.started) and key not in self.probe_futures:
                tracker.begin(now)
                self.probe_futures[key] = self.agent.probe_pool.submit(
                    run_probe,
                    tracker.spec,
                    pod_ip=self.pod_ip or "127.0.0.1",
                    container=self.specs[rec.name],
                    pid=self.procs[rec.name].pid,
                    env=self.envs.get(rec.name, {}),
                )
        self._update_readiness(rec)

    # --- reporting ------------------------------------------------------------------------

    def _event(
        self, type_: str, reason: str, message: str, rec: ContainerRecord | None = None
    ) -> None:
        if not self._gone:
            self.agent.record_event(
                self.pod, self.node.name, type_, reason, message, rec.name if rec else None
            )

    def _phase(self) -> str:
        if self.terminal:
            return self.terminal
        if any(r.ever_ran for r in self.mains):
            return "Running"
        return "Pending"

    def _publish(self, force: bool = False) -> None:
        if self._gone or self._stopping:
            return
        if not force and time.monotonic() < self._publish_after:
            return
        pod = self.pod
        view = PodView(
            phase=self._phase(),
            pod_ip=self.pod_ip,
            host_ip=self.agent.host_ip,
            start_time=self.start_time,
            sandbox_ready=self.sandbox_ready,
            reason=self.status_reason,
            message=self.status_message,
            readiness_gates=tuple(
                g["conditionType"] for g in pod["spec"].get("readinessGates") or []
            ),
        )
        previous = merge_conditions(
            (pod.get("status") or {}).get("conditions") or [],
            (self._published or {}).get("conditions") or [],
        )
        status = pod_status(view, self.inits, self.mains, previous, now_rfc3339())
        if status == self._published:
            return
        try:
            self.agent.patch_pod_status(self.namespace, self.pod_name, self.uid, status)
            self._published = status
        except ApiException as exc:
            if exc.status in (404, 409, 422):  # gone, or a new pod of the same name
                self._gone = True
                return
            log.warning("pod %s/%s: status patch: %s", self.namespace, self.pod_name, exc.reason)
            self._publish_after = time.monotonic() + 1.0

    def _delete_object(self) -> None:
        with contextlib.suppress(ApiException):
            self.agent.delete_pod_now(self.namespace, self.pod_name, self.uid)

    def _teardown(self) -> None:
        for proc in self.procs.values():
            kill_now(proc)
        self.procs.clear()
        for fut in self.probe_futures.values():
            fut.cancel()
        if self.sandbox is not None:
            self.agent.network.delete_sandbox(self.sandbox)
            self.sandbox = None
        try:
            self.agent.janitor.clean(self.created_paths)
        except OSError as exc:
            log.warning("pod %s/%s: mount point clean-up: %s", self.namespace, self.pod_name, exc)


def merge_conditions(
    observed: list[dict[str, Any]], published: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The pod's conditions as last seen, with our own last report taking precedence."""
    ours = {c["type"]: c for c in published}
    merged = [ours.pop(c["type"], c) for c in observed]
    return merged + list(ours.values())


def write_files(target: Path, volume: VolumeFiles) -> None:
    """Write a volume's files; each file is replaced atomically (readers never see half)."""
    target.mkdir(parents=True, exist_ok=True)
    for rel, (content, mode) in volume.files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.name}.tmp"
        tmp.write_bytes(content)
        os.chmod(tmp, mode)
        os.replace(tmp, path)

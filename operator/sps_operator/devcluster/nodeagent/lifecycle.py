"""Pod lifecycle decisions and the pod status they produce (pure).

The pod worker keeps one `ContainerRecord` per container and asks these functions
whether to restart, how long to back off, which phase the pod is in and what
`status` to report.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

ContainerKind = Literal["init", "sidecar", "main"]
State = Literal["waiting", "running", "terminated"]


@dataclass
class ContainerRecord:
    name: str
    image: str
    kind: ContainerKind
    state: State = "waiting"
    reason: str = "ContainerCreating"  # waiting or terminated reason
    message: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    restart_count: int = 0
    last_terminated: dict[str, Any] | None = None
    ready: bool = False
    started: bool = False
    container_id: str = ""
    ever_ran: bool = False

    def terminated_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "exitCode": self.exit_code if self.exit_code is not None else 0,
            "reason": self.reason,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "containerID": self.container_id,
        }
        if self.signal:
            out["signal"] = self.signal
        if self.message:
            out["message"] = self.message
        return out

    def set_waiting(self, reason: str, message: str = "") -> None:
        if self.state == "terminated":
            self.last_terminated = self.terminated_dict()
        self.state, self.reason, self.message = "waiting", reason, message
        self.ready = self.started = False

    def set_running(self, started_at: str, container_id: str) -> None:
        if self.state == "terminated":
            self.last_terminated = self.terminated_dict()
        if self.ever_ran:
            self.restart_count += 1
        self.state, self.reason, self.message = "running", "", ""
        self.started_at, self.finished_at = started_at, None
        self.exit_code, self.signal = None, None
        self.container_id = container_id
        self.ready = self.started = False
        self.ever_ran = True

    def set_terminated(
        self, exit_code: int, finished_at: str, reason: str | None = None, message: str = ""
    ) -> None:
        self.signal = exit_code - 128 if exit_code > 128 else None
        self.state, self.exit_code, self.finished_at = "terminated", exit_code, finished_at
        self.reason = reason or terminated_reason(exit_code)
        self.message = message
        self.ready = self.started = False


def exit_code_of(returncode: int) -> int:
    """Popen's returncode (negative for a signal) as a container exit code (128+signal)."""
    return 128 - returncode if returncode < 0 else returncode


def terminated_reason(exit_code: int) -> str:
    return "Completed" if exit_code == 0 else "Error"


def should_restart(kind: ContainerKind, restart_policy: str, exit_code: int) -> bool:
    """Whether an exited container runs again (pod not terminating)."""
    if kind == "sidecar":
        return True
    if kind == "init":
        return exit_code != 0 and restart_policy != "Never"
    if restart_policy == "Always":
        return True
    if restart_policy == "OnFailure":
        return exit_code != 0
    return False


def backoff_seconds(restart_count: int, base: float, cap: float) -> float:
    """Delay before the next start: none for the first restart, then doubling to `cap`."""
    if restart_count <= 0:
        return 0.0
    return float(min(cap, base * 2 ** (restart_count - 1)))


def init_phase_failed(restart_policy: str, inits: Iterable[ContainerRecord]) -> bool:
    """A regular init container failed and will not be retried."""
    return restart_policy == "Never" and any(
        r.kind == "init" and r.state == "terminated" and r.exit_code != 0 for r in inits
    )


def terminal_phase(restart_policy: str, mains: Sequence[ContainerRecord]) -> str | None:
    """Succeeded/Failed once every main container has exited for good, else None."""
    if not mains or any(r.state != "terminated" for r in mains):
        return None
    if any(should_restart("main", restart_policy, r.exit_code or 0) for r in mains):
        return None
    return "Succeeded" if all(r.exit_code == 0 for r in mains) else "Failed"


def deleted_phase(mains: Sequence[ContainerRecord]) -> str:
    """Phase of a pod whose containers were all stopped for deletion (kubelet >= 1.27)."""
    ran = [r for r in mains if r.ever_ran]
    return "Succeeded" if ran and all(r.exit_code == 0 for r in ran) else "Failed"


def container_status(rec: ContainerRecord) -> dict[str, Any]:
    state: dict[str, Any]
    if rec.state == "running":
        state = {"running": {"startedAt": rec.started_at}}
    elif rec.state == "terminated":
        state = {"terminated": rec.terminated_dict()}
    else:
        waiting = {"reason": rec.reason}
        if rec.message:
            waiting["message"] = rec.message
        state = {"waiting": waiting}
    out: dict[str, Any] = {
        "name": rec.name,
        "image": rec.image,
        "imageID": rec.image,
        "state": state,
        "lastState": {"terminated": rec.last_terminated} if rec.last_terminated else {},
        "ready": rec.ready,
        "restartCount": rec.restart_count,
        "started": rec.started if rec.state == "running" else False,
    }
    if rec.container_id:
        out["containerID"] = rec.container_id
    return out


def init_done(inits: Sequence[ContainerRecord]) -> bool:
    """Regular init containers completed and sidecars started."""
    return all(
        (r.kind == "init" and r.state == "terminated" and r.exit_code == 0)
        or (r.kind == "sidecar" and r.started)
        or (r.kind == "sidecar" and r.ever_ran and r.state != "running")
        for r in inits
    )


def _condition(
    previous: Mapping[str, Mapping[str, Any]],
    type_: str,
    ok: bool,
    now: str,
    reason: str = "",
    message: str = "",
) -> dict[str, Any]:
    status = "True" if ok else "False"
    prev = previous.get(type_)
    since = prev["lastTransitionTime"] if prev and prev.get("status") == status else now
    out: dict[str, Any] = {
        "type": type_,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": since,
    }
    if reason and not ok:
        out["reason"] = reason
    if message and not ok:
        out["message"] = message
    return out


@dataclass
class PodView:
    """What the status builder needs to know about a pod beyond its containers."""

    phase: str
    pod_ip: str | None
    host_ip: str
    start_time: str
    sandbox_ready: bool
    message: str = ""
    reason: str = ""
    readiness_gates: tuple[str, ...] = ()  # condition types other controllers must set True


def pod_status(
    view: PodView,
    inits: Sequence[ContainerRecord],
    mains: Sequence[ContainerRecord],
    previous_conditions: Sequence[Mapping[str, Any]],
    now: str,
) -> dict[str, Any]:
    """The full pod status the agent reports (conditions keep their transition times;
    condition types the agent does not own are carried over)."""
    prev = {c["type"]: c for c in previous_conditions}
    terminal = view.phase in ("Succeeded", "Failed")
    initialized = init_done(inits)
    not_ready = [r.name for r in (*inits, *mains) if r.kind != "init" and not r.ready]
    containers_ready = initialized and not not_ready and not terminal
    gates_open = [g for g in view.readiness_gates if prev.get(g, {}).get("status") != "True"]
    pod_ready = containers_ready and not gates_open
    if terminal:
        ready_reason, ready_msg = "PodCompleted", ""
    elif containers_ready and gates_open:
        ready_reason = "ReadinessGatesNotReady"
        ready_msg = f"the status of pod readiness gate(s) {', '.join(gates_open)} is not True"
    elif not initialized:
        ready_reason, ready_msg = "ContainersNotInitialized", "containers with incomplete status"
    else:
        ready_reason = "ContainersNotReady"
        ready_msg = f"containers with unready status: [{' '.join(not_ready)}]"
    pending = [r.name for r in inits if r.kind == "init" and r.state != "terminated"]
    own = [
        _condition(prev, "PodReadyToStartContainers", view.sandbox_ready and not terminal, now),
        _condition(
            prev,
            "Initialized",
            initialized or (terminal and view.phase == "Succeeded"),
            now,
            "ContainersNotInitialized",
            f"containers with incomplete status: [{' '.join(pending)}]",
        ),
        _condition(prev, "Ready", pod_ready, now, ready_reason, ready_msg),
        _condition(prev, "ContainersReady", containers_ready, now, ready_reason, ready_msg),
        _condition(prev, "PodScheduled", True, now),
    ]
    owned = {c["type"] for c in own}
    others = [dict(c) for c in previous_conditions if c["type"] not in owned]
    status: dict[str, Any] = {
        "phase": view.phase,
        "conditions": own + others,
        "hostIP": view.host_ip,
        "hostIPs": [{"ip": view.host_ip}],
        "startTime": view.start_time,
        "initContainerStatuses": [container_status(r) for r in inits] or None,
        "containerStatuses": [container_status(r) for r in mains],
        "message": view.message or None,
        "reason": view.reason or None,
    }
    if view.pod_ip:
        status["podIP"] = view.pod_ip
        status["podIPs"] = [{"ip": view.pod_ip}]
    return status


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


WatchAction = Literal["ignore", "start", "update", "gone", "delete"]


def watch_action(
    event: str,
    pod: Mapping[str, Any],
    nodes: set[str],
    has_worker: bool,
    finished: bool,
    stopping: bool,
) -> WatchAction:
    """What a watch event (or a relisted pod, event "SYNC") means for the agent."""
    if pod.get("spec", {}).get("nodeName") not in nodes:
        return "ignore"
    if event == "DELETED":
        return "gone" if has_worker else "ignore"
    if has_worker:
        return "update"
    meta = pod.get("metadata", {})
    deleting = bool(meta.get("deletionTimestamp"))
    if finished or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        # Done here; if it is being deleted gracefully, nothing is left to wait for.
        return "delete" if deleting and meta.get("deletionGracePeriodSeconds", 0) else "ignore"
    if deleting:
        return "delete"  # never started here: nothing to stop
    return "ignore" if stopping else "start"

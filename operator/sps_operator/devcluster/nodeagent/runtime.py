"""Starting container processes inside a pod's namespaces, and running probes against them.

A container is `setpriv --pdeathsig KILL nsenter --net=<pod netns> unshare --mount --uts
--pid --fork --kill-child sh -c SCRIPT sh ARGV...`: its own mount, UTS and PID namespaces
inside the pod's network namespace. The script bind-mounts the volumes at their
`mountPath`s and the pod's /etc/hosts, sets the hostname, then runs the program as a
child of the namespace's init (`sh`), so the program receives SIGTERM even without a
handler, and everything in the PID namespace dies with it - also when the agent itself is
killed. Everything else is the host's file system (there is no image root file system).
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import os
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .mountpoints import MOUNT_LOCK
from .probes import ProbeSpec
from .volumes import MountPlan

NSENTER = shutil.which("nsenter") or "nsenter"
# Pod processes live in their own sessions (so we can signal a container's whole tree);
# a parent-death signal makes sure none outlives an agent that was killed with SIGKILL.
SETPRIV = shutil.which("setpriv")
UNSHARE = shutil.which("unshare") or "unshare"
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def venv_bin() -> str:
    """The directory of this interpreter's entry points (sps-sim, sps-profiler, python)."""
    return str(Path(sys.executable).parent)


@dataclass(frozen=True)
class Launch:
    argv: list[str]  # the program and its arguments, after expansion and image mapping
    env: dict[str, str]
    workdir: str
    mounts: list[MountPlan]
    netns_path: str | None  # None: host network
    hosts_file: str | None
    hostname: str | None
    # The pod's state directory: opened before any mount, so volumes and the hosts file
    # stay reachable (as /proc/self/fd/3/...) even when a mountPath such as /tmp covers it.
    anchor: str | None = None
    # Host directories the program needs (the venv, the interpreter, the package source)
    # that a mountPath covers: bound back over the volume after the mounts (at most 5).
    keep: tuple[str, ...] = ()


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@functools.cache
def program_roots() -> tuple[str, ...]:
    """Where the mapped programs live: the venv, the base interpreter, the package source
    (editable installs), outermost only."""
    import sps_operator

    roots = {
        os.path.realpath(p)
        for p in (sys.prefix, sys.base_prefix, str(Path(sps_operator.__file__).parents[1]))
    }
    return tuple(sorted(r for r in roots if not any(r != o and _inside(r, o) for o in roots)))


def covered_roots(targets: Sequence[str], roots: Sequence[str]) -> tuple[str, ...]:
    """The roots some mount target would hide."""
    real = [os.path.realpath(t) for t in targets]
    return tuple(r for r in roots if any(_inside(r, t) for t in real))[:5]


def anchored(path: str, anchor: str | None) -> str:
    if anchor and (path == anchor or path.startswith(anchor.rstrip("/") + "/")):
        return "/proc/self/fd/3" + path[len(anchor.rstrip("/")) :]
    return path


def mount_order(mounts: list[MountPlan]) -> list[MountPlan]:
    """Parents before children (as container runtimes do), else in the pod's order."""
    return sorted(mounts, key=lambda m: len(Path(m.target).parts))


def mount_script(launch: Launch) -> str:
    q = shlex.quote
    # --no-canonicalize: mount must not turn /proc/self/fd/N back into the path string,
    # which may name something else once the volumes are mounted.
    lines = ["set -e"]
    if launch.anchor:
        lines.append(f"exec 3<{q(launch.anchor)}")
    for fd, root in enumerate(launch.keep, start=4):
        lines.append(f"exec {fd}<{q(root)}")
    # Held while creating and mounting, so the agent never removes a mount point between.
    lines.append(f"exec 9>{q(str(MOUNT_LOCK))}")
    lines.append("if command -v flock >/dev/null; then flock 9; fi")
    for m in mount_order(launch.mounts):
        src, tgt = q(anchored(m.source, launch.anchor)), q(m.target)
        lines.append(
            f"if [ -d {src} ]; then mkdir -p {tgt}; "
            f"else mkdir -p $(dirname {tgt}); [ -e {tgt} ] || : > {tgt}; fi"
        )
        lines.append(f"mount --no-canonicalize --bind {src} {tgt}")
        if m.read_only:
            lines.append(f"mount -o remount,bind,ro {tgt}")
    for fd, root in enumerate(launch.keep, start=4):
        lines.append(f"mkdir -p {q(root)}")
        lines.append(f"mount --no-canonicalize --bind /proc/self/fd/{fd} {q(root)}")
        lines.append(f"exec {fd}<&-")
    if launch.hosts_file:
        hosts = q(anchored(launch.hosts_file, launch.anchor))
        lines.append(f"mount --no-canonicalize --bind {hosts} /etc/hosts")
    workdir = q(anchored(launch.workdir, launch.anchor))
    lines.append(f"mkdir -p {workdir}")
    lines.append(f"cd -P {workdir}")
    lines.append("PWD=$(pwd -P); export PWD")  # not /proc/self/fd/3/...
    lines.append("exec 9>&-")  # releases the lock
    if launch.anchor:
        lines.append("exec 3<&-")
    if launch.hostname:
        lines.append(f"hostname {q(launch.hostname)}")
    lines.append("set +e")
    lines.append('"$@"')  # not exec: sh stays PID 1, so the program gets signals
    lines.append("exit $?")
    return "\n".join(lines)


def container_command(launch: Launch) -> list[str]:
    wrapper = [UNSHARE, "--mount", "--propagation", "private"]
    if launch.hostname:
        wrapper.append("--uts")
    wrapper += ["--pid", "--fork", "--kill-child", "--mount-proc"]
    wrapper += ["sh", "-c", mount_script(launch), "sh", *launch.argv]
    if launch.netns_path:
        wrapper = [NSENTER, f"--net={launch.netns_path}", *wrapper]
    if SETPRIV:
        wrapper = [SETPRIV, "--pdeathsig", "KILL", *wrapper]
    return wrapper


def find_executable(name: str, path: str) -> str | None:
    if "/" in name:
        return name if os.access(name, os.X_OK) else None
    return shutil.which(name, path=path)


def start_container(launch: Launch, log_path: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            container_command(launch),
            env=launch.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: we signal the whole tree
            cwd=str(log_path.parent),
        )


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def kill_now(proc: subprocess.Popen[bytes]) -> None:
    signal_group(proc, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


# --- probes -------------------------------------------------------------------------------


def namespace_init(pid: int) -> int:
    """The container's PID 1 (unshare's child): exec probes join its PID namespace too,
    so /proc (mounted for that namespace) makes sense to them."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return pid
    return int(children[0]) if children else pid


def resolve_port(port: Any, container: Mapping[str, Any]) -> int:
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"named port {port!r} not found in the container's ports")


def run_hook(
    handler: Mapping[str, Any],
    *,
    timeout: float,
    pod_ip: str,
    container: Mapping[str, Any],
    pid: int,
    env: Mapping[str, str],
) -> tuple[bool, str]:
    """A lifecycle hook (`exec`, `httpGet` or `sleep`); (success, message)."""
    if "sleep" in handler:
        time.sleep(max(0.0, min(float(handler["sleep"].get("seconds", 0)), timeout)))
        return True, ""
    spec = ProbeSpec(kind="liveness", action=handler, timeout=max(0.1, timeout))
    return run_probe(spec, pod_ip=pod_ip, container=container, pid=pid, env=env)


def run_probe(
    spec: ProbeSpec,
    *,
    pod_ip: str,
    container: Mapping[str, Any],
    pid: int,
    env: Mapping[str, str],
) -> tuple[bool, str]:
    """Run one probe; (success, message)."""
    action = spec.action
    try:
        if "httpGet" in action:
            hg = action["httpGet"]
            host = hg.get("host") or pod_ip
            port = resolve_port(hg.get("port"), container)
            conn: http.client.HTTPConnection
            if str(hg.get("scheme", "HTTP")).upper() == "HTTPS":
                ctx = ssl._create_unverified_context()  # kubelet does not verify either
                conn = http.client.HTTPSConnection(host, port, timeout=spec.timeout, context=ctx)
            else:
                conn = http.client.HTTPConnection(host, port, timeout=spec.timeout)
            headers = {h["name"]: h["value"] for h in hg.get("httpHeaders") or []}
            headers.setdefault("User-Agent", "kube-probe/1.36")
            try:
                conn.request("GET", hg.get("path") or "/", headers=headers)
                status = conn.getresponse().status
            finally:
                conn.close()
            return 200 <= status < 400, f"HTTP probe failed with statuscode: {status}"
        if "tcpSocket" in action:
            ts = action["tcpSocket"]
            port = resolve_port(ts.get("port"), container)
            with socket.create_connection((ts.get("host") or pod_ip, port), spec.timeout):
                return True, ""
        if "exec" in action:
            cmd = list(action["exec"].get("command") or [])
            target = namespace_init(pid)
            proc = subprocess.run(
                [NSENTER, f"--target={target}", "--net", "--mount", "--uts", "--pid", "--", *cmd],
                env=dict(env),
                capture_output=True,
                timeout=spec.timeout,
                check=False,
            )
            out = (proc.stdout + proc.stderr).decode(errors="replace").strip()
            return proc.returncode == 0, out[-500:]
        return False, f"probe type {sorted(action)} is not supported by the node agent"
    except subprocess.TimeoutExpired:
        return False, f"command timed out after {spec.timeout}s"
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return False, str(exc) or type(exc).__name__

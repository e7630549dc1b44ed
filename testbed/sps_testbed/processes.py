"""Starting and stopping the cluster's processes, each in its own process group.

Every component runs in a new session, so a signal to its process group reaches
whatever it started too. Processes started for a test session also get a
parent-death signal, so a killed pytest does not leave a control plane behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from sps_testbed.podnet import pid_alive

_PR_SET_PDEATHSIG = 1


def _parent_death_signal(sig: int) -> Callable[[], None]:
    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)

    return preexec


def spawn(
    argv: list[str],
    log_path: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    parent_death_signal: int | None = signal.SIGKILL,
) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session with stdout and stderr appended to `log_path`.

    `parent_death_signal` is sent to the child when the process that started it exits
    (None: it outlives its parent). SIGKILL suits the control plane, whose state is
    disposable (on SIGTERM the API server waits for an etcd that is going away too);
    the node agent gets SIGTERM so it can remove its network namespaces.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=(
                None if parent_death_signal is None else _parent_death_signal(parent_death_signal)
            ),
        )


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`."""
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


def _reap(pid: int) -> None:
    # Our own child must be waited for, or it lingers as a zombie that looks alive.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _wait_until(pred: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def terminate_group(pid: int, expect: str | None = None, grace: float = 10.0) -> None:
    """SIGTERM the process group led by `pid`, then SIGKILL what is left after `grace`.

    `expect` guards against a recycled pid (after a reboot, say): the group is only
    signalled when the leader's command line contains it, or the leader is gone.
    """
    if expect is not None and pid_alive(pid) and expect not in cmdline(pid):
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return

    def gone() -> bool:
        _reap(pid)
        return not pid_alive(pid) and not group_alive(pid)

    if not _wait_until(gone, grace):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        _wait_until(gone, 5.0)
    _reap(pid)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` now, for a process to listen on (another may take it
    before that process binds it: callers start the process soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])

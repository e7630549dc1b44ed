"""cgroup v1 (and v2) helpers for the test bed's nodes.

Every node gets a cgroup root below the cgroup the bed was started from (so the
processes of the bed stay inside whatever limits the caller runs under): the kubelet
puts its `kubepods` tree there (cgroupfs driver, `cgroupRoot`), and the node's own
processes (containerd, shims, kubelet, device plugin) join `<root>/system` in the pids
and memory hierarchies. Killing everything in a node's pids tree therefore stops
every process the node ever started, containers included.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")
V1_CONTROLLERS = (
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "pids",
    "blkio",
    "devices",
    "freezer",
    "systemd",
    "unified",
)


def unified() -> bool:
    return (CGROUP_FS / "cgroup.controllers").is_file()


def own_path(controller: str = "memory", pid: str = "self") -> str:
    """The calling process's cgroup path in `controller`'s hierarchy ('/' if none)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        names = controllers.split(",")
        if controller in names or (controller == "systemd" and "name=systemd" in names):
            return path or "/"
        if not controllers and unified():
            return path or "/"
    return "/"


def hierarchies() -> list[Path]:
    if unified():
        return [CGROUP_FS]
    return [CGROUP_FS / c for c in V1_CONTROLLERS if (CGROUP_FS / c).is_dir()]


def create(root: str) -> None:
    """mkdir `root` in every hierarchy; cpusets get their parent's cpus and mems."""
    for h in hierarchies():
        path = h / root.lstrip("/")
        path.mkdir(parents=True, exist_ok=True)
        if h.name == "cpuset":
            _fill_cpuset(h, path)


def _fill_cpuset(hierarchy: Path, path: Path) -> None:
    chain = [path]
    while chain[-1] != hierarchy:
        chain.append(chain[-1].parent)
    for d in reversed(chain[:-1]):
        for name in ("cpuset.cpus", "cpuset.mems"):
            f = d / name
            if f.exists() and not f.read_text().strip():
                f.write_text((d.parent / name).read_text().strip() or "0")


def join(root: str, pid: int, controllers: tuple[str, ...] = ("pids", "memory")) -> None:
    """Move `pid` into `root` in the given hierarchies (created if missing)."""
    for h in hierarchies():
        if not unified() and h.name not in controllers:
            continue
        path = h / root.lstrip("/")
        path.mkdir(parents=True, exist_ok=True)
        (path / "cgroup.procs").write_text(str(pid))


def _pids_hierarchy() -> Path:
    return CGROUP_FS if unified() else CGROUP_FS / "pids"


def members(root: str) -> set[int]:
    """Every process in `root` and below (pids hierarchy)."""
    base = _pids_hierarchy() / root.lstrip("/")
    found: set[int] = set()
    if not base.is_dir():
        return found
    for procs in base.rglob("cgroup.procs"):
        with contextlib.suppress(OSError, ValueError):
            found.update(int(x) for x in procs.read_text().split())
    return found


def kill_all(root: str, timeout: float = 10.0, exclude: set[int] | None = None) -> None:
    """SIGKILL every process in `root` until none is left (or `timeout`)."""
    exclude = exclude or set()
    deadline = time.monotonic() + timeout
    while True:
        pids = members(root) - exclude
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def remove(root: str) -> list[str]:
    """rmdir `root` depth-first in every hierarchy; returns what could not be removed."""
    left: list[str] = []
    for h in hierarchies():
        base = h / root.lstrip("/")
        if not base.is_dir():
            continue
        dirs = sorted(
            (p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        )
        for d in [*dirs, base]:
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError as err:
                left.append(f"{d}: {err.strerror}")
    return left

"""Mount points the agent had to create on the host, and removing them again.

There is no image root file system, so a `mountPath` that does not exist on the host is
created there (in the container's mount namespace, but on the shared file system). Once
no pod uses such a path it is removed again, empty directories and files only, and never
while any process on the machine has something mounted on it: removing a mount point that
another mount namespace uses would silently detach that mount. A host-wide lock keeps the
check and the containers' mkdir+mount steps apart.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

LOCK_DIR = Path("/run/lock") if Path("/run/lock").is_dir() else Path("/tmp")
MOUNT_LOCK = LOCK_DIR / "sps-node-agent-mountpoints.lock"


def missing_top(path: str) -> str | None:
    """The topmost missing component of `path` (real path), or None when it exists."""
    p = Path(path)
    if p.exists() or p.is_symlink():
        return None
    top = p
    while not top.parent.exists():
        top = top.parent
    return os.path.join(os.path.realpath(top.parent), top.name)


_OCTAL = re.compile(r"\\([0-7]{3})")


def mount_points(mountinfo: str) -> set[str]:
    """Mount points (5th field) of a /proc/<pid>/mountinfo text, octal escapes decoded."""
    points = set()
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            points.add(_OCTAL.sub(lambda m: chr(int(m.group(1), 8)), fields[4]))
    return points


def all_mount_points() -> set[str]:
    """Every mount point of every process's mount namespace on this machine."""
    points: set[str] = set()
    seen: set[str] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ns = os.readlink(proc / "ns" / "mnt")
            if ns in seen:
                continue
            points |= mount_points((proc / "mountinfo").read_text())
            seen.add(ns)
        except OSError:
            continue  # gone, or not ours to read
    return points


def remove_unused(top: str, in_use: set[str]) -> bool:
    """Remove `top` bottom-up if it holds only empty directories and empty files and none
    is a mount point; returns whether `top` is gone."""
    if not os.path.lexists(top):
        return True
    if os.path.isfile(top) and not os.path.islink(top):
        if top in in_use or os.path.getsize(top) != 0:
            return False
        os.unlink(top)
        return True
    if not os.path.isdir(top) or os.path.islink(top) or top in in_use:
        return False
    removable = True
    for entry in os.scandir(top):
        removable = remove_unused(entry.path, in_use) and removable
    if removable:
        with contextlib.suppress(OSError):
            os.rmdir(top)
    return not os.path.lexists(top)


@contextlib.contextmanager
def mount_lock() -> Iterator[None]:
    fd = os.open(MOUNT_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class Janitor:
    """Remembers the paths this agent created and removes those no longer used."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._created: set[str] = set()

    def record(self, paths: Iterable[str | None]) -> list[str]:
        created = [p for p in paths if p]
        with self._lock:
            self._created.update(created)
        return created

    def clean(self, paths: Iterable[str] | None = None) -> None:
        with self._lock:
            todo = set(self._created if paths is None else paths) & self._created
        if not todo:
            return
        with mount_lock():
            in_use = all_mount_points()
            gone = {p for p in sorted(todo, reverse=True) if remove_unused(p, in_use)}
        with self._lock:
            self._created -= gone

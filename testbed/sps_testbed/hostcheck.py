"""Before a bed starts: does the host leave room for it, and which beds already run.

Every kubelet, containerd and control-plane component holds inotify instances, counted
per user against `fs.inotify.max_user_instances` (128 on a fresh machine). `make test`'s
two beds held 99 of them; a third bed beside them (a demo left running) failed with
"inotify_init: too many open files" in every kubelet's log. So the check counts what the
user's processes hold now and refuses, with the command to run, when the beds to start do
not fit. Memory too: a node keeps its images and containers in memory (a tmpfs:
sps_testbed.node.in_memory_dirs), so the beds to start need MemAvailable for them. The
decisions are pure functions over numbers read from /proc; `sps-testbed preflight` and
`RealNodeCluster.start` call them.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sps_testbed.podnet import pid_alive

# A bed's need grows with its nodes plus its control plane. Counted on a running six-node
# test bed: 45 instances (5 per kubelet, 1 per containerd; kube-apiserver 6, the controller
# manager, scheduler and kube-proxy 1 each) and 1,381 watches (≈ 230 per kubelet, growing
# with its pods). make test's peak, 16 nodes under 3 control planes, then needs 123 (its
# 12-node peak before needed 99, what its beds were seen to hold).
INSTANCES_PER_NODE = 6
INSTANCES_PER_CONTROL_PLANE = 9
WATCHES_PER_NODE = 512
# kind's known-issues page recommends these for several clusters on one host.
RECOMMENDED_INSTANCES = 512
RECOMMENDED_WATCHES = 524288
RAISE_COMMAND = (
    f"sudo sysctl -w fs.inotify.max_user_instances={RECOMMENDED_INSTANCES} "
    f"fs.inotify.max_user_watches={RECOMMENDED_WATCHES}"
)
# What a bed needs of the host's memory: a node holds ~0.5 GiB in its tmpfs stores once it
# has pulled the operator and SGLang images, plus its kubelet and containerd; a control
# plane's API server, etcd, controller-manager and scheduler ~1 GiB. make test's peak (3
# beds, 16 nodes: ~12.4 GiB by these) took 15.4 GB of the host's available memory, its
# tests' own processes included.
NODE_MEMORY = 600 * 2**20
CONTROL_PLANE_MEMORY = 2**30
# The demo's bed lives in `<demo state>/bed` (sps_testbed.demo.bed_dir).
DEMO_BED_DIR = "bed"
# `sps-testbed run` keeps its bed in a temporary directory with this prefix.
RUN_STATE_PREFIX = "sps-testbed-"


@dataclass(frozen=True)
class InotifyLimits:
    max_user_instances: int
    max_user_watches: int


@dataclass(frozen=True)
class InotifyUse:
    instances: int
    watches: int


@dataclass(frozen=True)
class RunningBed:
    bed_id: int
    pid: int
    state_dir: str


@dataclass(frozen=True)
class BedsToStart:
    """What is about to start: its beds (control planes) and their nodes, all beds together."""

    beds: int
    nodes: int

    @property
    def instances(self) -> int:
        return self.beds * INSTANCES_PER_CONTROL_PLANE + self.nodes * INSTANCES_PER_NODE

    @property
    def watches(self) -> int:
        return self.nodes * WATCHES_PER_NODE

    @property
    def memory(self) -> int:
        return self.beds * CONTROL_PLANE_MEMORY + self.nodes * NODE_MEMORY

    def __str__(self) -> str:
        return f"{self.beds} bed(s) of {self.nodes} node(s)"


def inotify_problems(limits: InotifyLimits, used: InotifyUse, start: BedsToStart) -> list[str]:
    """What keeps `start` from starting beside what runs now ([] when it fits)."""
    problems: list[str] = []
    free = limits.max_user_instances - used.instances
    if free < start.instances:
        problems.append(
            f"fs.inotify.max_user_instances is {limits.max_user_instances} and this user's "
            f"processes hold {used.instances}: {start} need about {start.instances} more"
        )
    free_watches = limits.max_user_watches - used.watches
    if free_watches < start.watches:
        problems.append(
            f"fs.inotify.max_user_watches is {limits.max_user_watches} and this user's "
            f"processes hold {used.watches}: {start} need about {start.watches} more"
        )
    return problems


def memory_problems(available: int, start: BedsToStart) -> list[str]:
    """Whether the host's available memory (MemAvailable, bytes) holds `start` ([] when it
    does)."""
    if available >= start.memory:
        return []
    return [
        f"the host has {available / 2**30:.1f} GiB of memory available: {start} need about "
        f"{start.memory / 2**30:.1f} GiB (each node keeps its images and containers in memory)"
    ]


def raised_limits(limits: InotifyLimits) -> InotifyLimits:
    """The limits `setup-host.sh --nodes` sets: kind's recommendation, never lower."""
    return InotifyLimits(
        max(limits.max_user_instances, RECOMMENDED_INSTANCES),
        max(limits.max_user_watches, RECOMMENDED_WATCHES),
    )


def stop_command(bed: RunningBed) -> str:
    """How to stop a bed left running, from where it keeps its state."""
    state = Path(bed.state_dir)
    if state.name == DEMO_BED_DIR:
        return f"sps-testbed demo down --state-dir {state.parent}"
    command = f"sps-testbed down --state-dir {state}"
    if state.name.startswith(RUN_STATE_PREFIX):
        return f"{command}   (a bed of `sps-testbed run`: another make test?)"
    return command


def preflight_report(
    limits: InotifyLimits,
    used: InotifyUse,
    running: list[RunningBed],
    start: BedsToStart,
    available_memory: int,
) -> tuple[bool, list[str]]:
    """Whether `start` may start, and the lines that say why and what to run."""
    lines = [f"a test bed is running: {b.state_dir}; stop it: {stop_command(b)}" for b in running]
    problems = inotify_problems(limits, used, start)
    short_of_memory = memory_problems(available_memory, start)
    if not problems and not short_of_memory:
        if running and start.beds:
            lines.append(f"the {start} to start fit beside it (inotify limits, memory)")
        return True, lines
    lines += problems + short_of_memory
    if not problems:
        lines.append(
            "stop the beds above, or what else holds the memory" if running else "free memory"
        )
        return False, lines
    if running:
        lines.append("stop the beds above, or raise the limits:")
    else:
        lines.append("raise the limits (bash testbed/recipes/setup-host.sh --nodes does, as root):")
    lines.append(f"  {RAISE_COMMAND}")
    return False, lines


# -- reading the host ---------------------------------------------------------------------
def read_limits(proc: Path = Path("/proc")) -> InotifyLimits:
    base = proc / "sys" / "fs" / "inotify"
    return InotifyLimits(
        int((base / "max_user_instances").read_text()),
        int((base / "max_user_watches").read_text()),
    )


def _real_uid(status: str) -> int:
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return -1


def count_inotify(uid: int, proc: Path = Path("/proc")) -> InotifyUse:
    """The inotify instances and watches the processes of `uid` hold (their fds)."""
    instances = watches = 0
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError):
            if _real_uid((pid_dir / "status").read_text()) != uid:
                continue
            for fd in (pid_dir / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) != "anon_inode:inotify":
                        continue
                    instances += 1
                    info = (pid_dir / "fdinfo" / fd.name).read_text()
                    watches += sum(1 for ln in info.splitlines() if ln.startswith("inotify wd:"))
    return InotifyUse(instances, watches)


def running_beds(reservations: Path | None = None) -> list[RunningBed]:
    """The beds whose id is held by a live process (sps_testbed.netns's reservations)."""
    if reservations is None:
        base = os.environ.get("SPS_TESTBED_RUN_DIR", "/run/sps-testbed")
        reservations = Path(base) / "beds"
    found: list[RunningBed] = []
    paths: Iterable[Path] = sorted(reservations.iterdir()) if reservations.is_dir() else []
    for path in paths:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            data = json.loads(path.read_text())
            pid = int(data.get("pid", 0))
            if pid_alive(pid):
                found.append(RunningBed(int(path.name), pid, str(data.get("state_dir", ""))))
    return found


def raise_limits(proc: Path = Path("/proc")) -> list[str]:
    """Raise the limits to `raised_limits` (root only); what was changed, or what to run."""
    have = read_limits(proc)
    want = raised_limits(have)
    if want == have:
        return []
    if os.geteuid() != 0:
        return [f"not root, the limits stay as they are; run: {RAISE_COMMAND}"]
    base = proc / "sys" / "fs" / "inotify"
    done: list[str] = []
    for name, old, new in (
        ("max_user_instances", have.max_user_instances, want.max_user_instances),
        ("max_user_watches", have.max_user_watches, want.max_user_watches),
    ):
        if new != old:
            (base / name).write_text(f"{new}\n")
            done.append(f"fs.inotify.{name}: {old} -> {new}")
    return done


def read_available_memory(proc: Path = Path("/proc")) -> int:
    """MemAvailable in bytes (what the kernel estimates can be had without swapping)."""
    for line in (proc / "meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no MemAvailable in {proc / 'meminfo'}")


def check(start: BedsToStart) -> tuple[bool, list[str]]:
    """The host as it is now: may `start` start (see preflight_report)."""
    used = count_inotify(os.getuid())
    memory = read_available_memory()
    return preflight_report(read_limits(), used, running_beds(), start, memory)

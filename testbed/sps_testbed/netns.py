"""The bed's own network namespace and its link to the host.

Everything of a bed (control plane, kubelets, containerd, kube-proxy and its iptables
rules, the pod bridge, the pods) lives in `spstb-<id>`, so several beds and the node
agent's clusters run side by side and the host's own tables are never touched. A veth
pair links it to the host: host `spstb-<id>` 169.254.77.(4·id+1)/30, namespace `uplink`
…(4·id+2)/30, and the host routes the bed's pod network (10.244.N.0/24, which holds the
API server's advertised address) through it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sps_testbed.podnet import pid_alive

CLONE_NEWNET = 0x40000000
MAX_BEDS = 60


class NetnsError(RuntimeError):
    pass


def _reservations() -> Path:
    base = os.environ.get("SPS_TESTBED_RUN_DIR", "/run/sps-testbed")
    return Path(base) / "beds"


@dataclass(frozen=True)
class BedNet:
    bed_id: int

    @property
    def name(self) -> str:
        return f"spstb-{self.bed_id}"

    @property
    def path(self) -> Path:
        return Path("/run/netns") / self.name

    @property
    def host_ip(self) -> str:
        return f"169.254.77.{4 * self.bed_id + 1}"

    @property
    def ns_ip(self) -> str:
        return f"169.254.77.{4 * self.bed_id + 2}"


def reserve(state_dir: Path) -> BedNet:
    """An id no live bed holds (O_EXCL file with our pid; stale ones are reused)."""
    d = _reservations()
    d.mkdir(parents=True, exist_ok=True)
    for bed_id in range(1, MAX_BEDS + 1):
        path = d / str(bed_id)
        if path.exists():
            try:
                holder = int(json.loads(path.read_text()).get("pid", 0))
            except (OSError, ValueError):
                holder = 0
            if pid_alive(holder) or Path("/run/netns", f"spstb-{bed_id}").exists():
                continue
            path.unlink(missing_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "state_dir": str(state_dir)}, f)
        return BedNet(bed_id)
    raise NetnsError(f"no free test-bed id (1..{MAX_BEDS}) in {d}")


def release(net: BedNet, state_dir: Path) -> None:
    path = _reservations() / str(net.bed_id)
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("state_dir") == str(state_dir):
            path.unlink()


def ip(*args: str, netns: str | None = None) -> None:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: {proc.stderr.strip()}")


def create(net: BedNet) -> None:
    """The namespace, its loopback and the veth link to the host."""
    ip("netns", "add", net.name)
    ip("link", "set", "lo", "up", netns=net.name)
    ip("link", "add", net.name, "type", "veth", "peer", "name", "uplink", "netns", net.name)
    ip("addr", "add", f"{net.host_ip}/30", "dev", net.name)
    ip("link", "set", net.name, "up")
    ip("addr", "add", f"{net.ns_ip}/30", "dev", "uplink", netns=net.name)
    ip("link", "set", "uplink", "up", netns=net.name)


def delete(net: BedNet) -> None:
    """Remove the namespace (its veth, bridge, iptables rules go with it)."""
    subprocess.run(["ip", "link", "del", net.name], capture_output=True, check=False)
    subprocess.run(["ip", "netns", "del", net.name], capture_output=True, check=False)


def enter(net: BedNet) -> None:
    """Move the calling (single-threaded) process into the bed's namespace."""
    fd = os.open(net.path, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise NetnsError(f"setns {net.path}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def set_sysctl(name: str, value: str) -> None:
    Path("/proc/sys", *name.split(".")).write_text(value)

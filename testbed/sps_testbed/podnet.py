"""Choosing a pod network for one dev cluster.

Several clusters can run on one machine at once (a developer's `dev-cluster up`
next to a pytest session), so each takes its own /24 out of 10.244.0.0/16. The
API server's serving certificate must name the pod-side gateway before anything
starts, which is why the control plane, not the node agent, picks it.

A reservation is a file created with O_EXCL in a shared directory, holding the
pid that owns it; a reservation whose pid is gone is stale and reused.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

POD_SUPERNET = ipaddress.ip_network("10.244.0.0/16")


@dataclass(frozen=True)
class PodNetwork:
    index: int  # third octet: 10.244.<index>.0/24
    cidr: str
    gateway: str

    @classmethod
    def for_index(cls, index: int) -> PodNetwork:
        if not 1 <= index <= 254:
            raise ValueError(f"pod network index must be 1..254, got {index}")
        net = ipaddress.ip_network(f"10.244.{index}.0/24")
        return cls(index=index, cidr=str(net), gateway=str(net.network_address + 1))


def reservations_dir() -> Path:
    base = os.environ.get("SPS_PODNET_DIR")
    if base:
        return Path(base)
    run = Path("/run")
    root = run if os.access(run, os.W_OK) else Path(os.environ.get("TMPDIR", "/tmp"))
    return root / "sps-operator-podnets"


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes (its owner has exited but is not reaped yet).
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def host_networks_in_use() -> set[int]:
    """Third octets of 10.244.x.0/24 already holding an address or a route on this host."""
    used: set[int] = set()
    for cmd in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show"]):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
        except OSError:
            continue
        for word in out.split():
            try:
                net = ipaddress.ip_network(word, strict=False)
            except ValueError:
                continue
            if net.version == 4 and net.subnet_of(POD_SUPERNET) and net.prefixlen >= 24:  # type: ignore[arg-type]
                used.add(int(net.network_address.packed[2]))
    return used


def _holder(path: Path) -> int:
    try:
        return int(json.loads(path.read_text()).get("pid", 0))
    except (OSError, ValueError, AttributeError):
        return 0


def reserve(owner_pid: int, state_dir: Path) -> PodNetwork:
    """Reserve a free /24 for the cluster whose long-lived process is `owner_pid`."""
    directory = reservations_dir()
    directory.mkdir(parents=True, exist_ok=True)
    in_use = host_networks_in_use()
    record = json.dumps({"pid": owner_pid, "state_dir": str(state_dir)})
    for index in range(1, 255):
        if index in in_use:
            continue
        path = directory / str(index)
        if path.exists():
            if pid_alive(_holder(path)):
                continue
            path.unlink(missing_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue  # another cluster took it between our check and create
        with os.fdopen(fd, "w") as f:
            f.write(record)
        return PodNetwork.for_index(index)
    raise RuntimeError(f"no free pod network in {POD_SUPERNET} (reservations in {directory})")


def transfer(network: PodNetwork, owner_pid: int, state_dir: Path) -> None:
    """Hand the reservation to the process that outlives the caller (e.g. etcd)."""
    path = reservations_dir() / str(network.index)
    path.write_text(json.dumps({"pid": owner_pid, "state_dir": str(state_dir)}))


def release(network: PodNetwork, state_dir: Path) -> None:
    path = reservations_dir() / str(network.index)
    try:
        if json.loads(path.read_text()).get("state_dir") == str(state_dir):
            path.unlink()
    except (OSError, ValueError):
        pass

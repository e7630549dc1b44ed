"""The bed's plan (`<state>/bed.json`): what runs where, and what teardown removes.

The supervisor writes it as it goes; `teardown()` is what the supervisor runs on a
normal stop and what the reaper runs when the supervisor dies without one. Both are
idempotent.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sps_testbed import cgroups, netns, podnet

BED_FILE = "bed.json"


@dataclass
class NodeRecord:
    name: str
    product: str
    gpus: int
    node_ip: str
    cgroup_root: str
    dir: str
    pid: int = 0


@dataclass
class BedRecord:
    state_dir: str
    status: str = "starting"  # starting | ready | failed | stopped
    error: str = ""
    supervisor_pid: int = 0
    reaper_pid: int = 0
    bed_id: int = 0
    pod_network_index: int = 0
    pod_cidr: str = ""
    gateway: str = ""
    api_server_port: int = 0
    server: str = ""
    kubeconfig: str = ""
    run_dir: str = ""
    registry: str = ""  # host:port; its CA bundle below, the chart's version pushed there
    registry_ca: str = ""
    chart_version: str = ""
    nodes: list[NodeRecord] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def load(cls, state_dir: Path) -> BedRecord:
        data = json.loads((state_dir / BED_FILE).read_text())
        data["nodes"] = [NodeRecord(**n) for n in data.get("nodes", [])]
        return cls(**data)

    def save(self) -> None:
        path = Path(self.state_dir) / BED_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)


def teardown(record: BedRecord, keep: set[int] | None = None) -> list[str]:
    """Stop whatever the bed left and remove its cgroups, namespace and reservations.

    Returns problems that remain (e.g. a cgroup still busy), for the caller to report.
    """
    keep = (keep or set()) | {os.getpid()}
    problems: list[str] = []
    t0 = time.monotonic()

    def done(what: str) -> None:
        # Seconds since the teardown began, in the record's timings (`teardown:...`).
        record.timings[f"teardown:{what}"] = round(time.monotonic() - t0, 2)

    for pid in record.pids.values():
        if pid in keep or not podnet.pid_alive(pid):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for node in record.nodes:
        cgroups.kill_all(node.cgroup_root, exclude=keep)
        problems += cgroups.remove(node.cgroup_root)
        # The images and containers (hundreds of MB); the logs stay for a look afterwards.
        shutil.rmtree(Path(node.dir) / "containerd", ignore_errors=True)
        done(f"{node.name} removed")
    # The registry's copy of the seed (hard links, but pushes of its own too).
    shutil.rmtree(Path(record.state_dir) / "registry" / "storage", ignore_errors=True)
    done("registry storage removed")
    if record.bed_id:
        net = netns.BedNet(record.bed_id)
        netns.delete(net)
        netns.release(net, Path(record.state_dir))
    if record.pod_network_index:
        podnet.release(
            podnet.PodNetwork.for_index(record.pod_network_index), Path(record.state_dir) / "cp"
        )
    if record.run_dir:
        shutil.rmtree(record.run_dir, ignore_errors=True)
    done("run dir removed")
    return problems

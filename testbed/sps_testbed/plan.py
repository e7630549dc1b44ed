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
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sps_testbed import cgroups, netns, podnet

BED_FILE = "bed.json"
# Beside a bed's state directory (same filesystem: a rename, not a copy): what a stopped bed
# leaves for a background `rm -rf` to delete.
TRASH_DIR = ".sps-testbed-trash"


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


def discard(path: Path, trash: Path) -> Path | None:
    """Take `path` out of the way (into `trash`) now and delete it in the background; the
    path it was moved to.

    A node's containerd root holds every image it pulled, unpacked: tens of thousands of
    files, whose deletion took 50 s for one node on a loaded host, and a bed's stop is on
    the test suite's critical path. The directory is renamed into `trash` at once (a
    TRASH_DIR on the same filesystem), then removed by `rm -rf` at idle priority in a
    session of its own (the caller does not wait). Where the rename cannot be done, it is
    deleted here, as before. None when `path` did not exist.
    """
    if not path.exists():
        return None
    try:
        trash.mkdir(exist_ok=True)
        moved = Path(tempfile.mkdtemp(prefix=f"{path.name}-", dir=trash))
        path.rename(moved / path.name)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return None
    # setsid -f: rm's parent is gone at once (nothing here to reap it); nice and ionice -c3:
    # the deletion only takes what nothing else wants.
    argv = ["setsid", "-f", "nice", "-n", "19", "ionice", "-c", "3", "rm", "-rf", str(moved)]
    try:
        # No pipes: rm would hold them open, and run() would wait for it after all.
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        shutil.rmtree(moved, ignore_errors=True)
    return moved


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
        discard(Path(node.dir) / "containerd", Path(record.state_dir).parent / TRASH_DIR)
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

"""Beds beside the session's: one starts, and a `kill -9` of its supervisor leaves nothing
behind (containers, cgroups, network namespace, reservations); another's `down` leaves no
containerd, shim or container, and waits out no pod's grace period. A node's stores are in
memory, in its own mount namespace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sps_testbed import RealNodeCluster
from sps_testbed.cgroups import hierarchies
from sps_testbed.node import NodeConfig, in_memory_dirs
from waiting import wait_for

# A bed of its own beside the session's: it touches nothing of the session bed's.
pytestmark = pytest.mark.bed_shared


def _processes(needle: str) -> dict[int, str]:
    """Live (non-zombie) processes whose command line contains `needle`."""
    found: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if needle in cmd and state != "Z":
            found[int(proc.name)] = cmd.replace("\x00", " ")
    return found


def _tmpfs_mounts(mounts: str) -> set[Path]:
    """The mount points of the tmpfs file systems in a mount table (/proc/PID/mounts)."""
    fields = (line.split() for line in Path(mounts).read_text().splitlines())
    return {Path(f[1]) for f in fields if len(f) > 2 and f[2] == "tmpfs"}


def _cgroup_dirs(name: str) -> list[Path]:
    return [p for h in hierarchies() for p in h.rglob(name)]


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`sps-testbed --state-dir=STATE ARGS...`."""
    argv = [sys.executable, "-m", "sps_testbed.cli", f"--state-dir={state}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def _solo_bed(state: Path) -> RealNodeCluster:
    """A one-node bed started in `state` with `sps-testbed up`."""
    out = _cli(state, "up", "--node=solo=NVIDIA-H200:2")
    assert out.returncode == 0, out.stdout + out.stderr
    return RealNodeCluster.attach(state)


def test_kill_9_of_the_supervisor_leaves_nothing(
    realnode_cluster: RealNodeCluster, tmp_path: Path
) -> None:
    state = tmp_path / "bed"
    bed = _solo_bed(state)
    rec = bed.record()
    # Both beds run at once, on different ids and pod networks.
    assert rec.bed_id != realnode_cluster.record().bed_id
    assert rec.pod_network_index != realnode_cluster.record().pod_network_index
    bed.kubectl(
        "run",
        "sleeper",
        f"--image={realnode_cluster.image('operator')}",
        "--restart=Never",
        "--command",
        "--",
        "sleep",
        "600",
    )
    wait_for(
        "sleeper running",
        lambda: bed.kubectl("get", "pod", "sleeper", "-o", "jsonpath={.status.phase}") == "Running",
        timeout=60,
    )
    cgroup = f"spstb-{rec.bed_id}-solo"
    assert _cgroup_dirs(cgroup)
    netns = Path("/run/netns") / f"spstb-{rec.bed_id}"
    assert netns.exists()

    os.kill(rec.supervisor_pid, signal.SIGKILL)

    wait_for("the reaper removed the namespace", lambda: not netns.exists(), timeout=60)
    wait_for("the reaper removed the cgroups", lambda: not _cgroup_dirs(cgroup), timeout=60)
    # Processes die asynchronously after SIGKILL; none may stay.
    wait_for("no process of the bed left", lambda: not _processes(str(state)), timeout=30)
    assert not _processes("sleep\x00600"), _processes("sleep\x00600")
    assert not Path(f"/run/sps-testbed/beds/{rec.bed_id}").exists()
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True).stdout
    assert f"spstb-{rec.bed_id}" not in routes


def test_down_leaves_no_containerd_shim_or_container_and_waits_for_no_grace(
    realnode_cluster: RealNodeCluster, tmp_path: Path
) -> None:
    state = tmp_path / "bed"
    bed = _solo_bed(state)
    rec = bed.record()
    # `sleep` as its container's PID 1 ignores SIGTERM: a stop that asked the pod to end
    # would wait out all 300 s of its grace.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "stubborn"},
        "spec": {
            "terminationGracePeriodSeconds": 300,
            "containers": [
                {
                    "name": "sleep",
                    "image": realnode_cluster.image("operator"),
                    "command": ["sleep", "601"],
                }
            ],
        },
    }
    bed.kubectl("apply", "-f", "-", input=json.dumps(pod))
    wait_for(
        "stubborn running",
        lambda: (
            bed.kubectl("get", "pod", "stubborn", "-o", "jsonpath={.status.phase}") == "Running"
        ),
        timeout=60,
    )
    assert _processes(f"{rec.run_dir}/solo/containerd.sock"), "no shim of the node found"
    # The node's stores (its image, its container's layer and bundle, the kubelet's pod
    # directory) are a tmpfs in the node's mount namespace, unseen on the host.
    stores = in_memory_dirs(NodeConfig.load(state / "nodes" / "solo" / "node.json"))
    node_pid = rec.nodes[0].pid
    node_mounts = _tmpfs_mounts(f"/proc/{node_pid}/mounts")
    assert set(stores) <= node_mounts, (stores, node_mounts)
    assert not set(stores) & _tmpfs_mounts("/proc/self/mounts")
    blobs = "io.containerd.content.v1.content/blobs/sha256"
    assert any(Path(f"/proc/{node_pid}/root{stores[0]}/{blobs}").iterdir()), "no image pulled"
    assert not any(stores[0].iterdir()), "the node's images are on the host's disk"

    down = _cli(state, "down")
    assert down.returncode == 0, down.stdout + down.stderr
    # The supervisor finished its own stop ("stopped"): not SIGKILLed after `down`'s 90 s
    # of grace, as it would have been had the stop waited for the pod's 300 s.
    assert bed.record().status == "stopped", bed.record()

    # Right after `down`, not eventually: shims (`-address <run dir>/solo/containerd.sock`),
    # containerd, the node runner and the container are gone, and the node's cgroup was
    # empty before the teardown began.
    assert not _processes(f"{rec.run_dir}/"), _processes(f"{rec.run_dir}/")
    assert not _processes(str(state)), _processes(str(state))
    assert not _processes("sleep\x00601"), _processes("sleep\x00601")
    runner_log = (state / "nodes" / "solo" / "runner.log").read_text()
    assert "stop: cgroup empty (0 left)" in runner_log, runner_log
    # The node's images went to the background deletion, not through the stop.
    assert not (state / "nodes" / "solo" / "containerd").exists()
    assert "teardown:solo removed" in bed.record().timings

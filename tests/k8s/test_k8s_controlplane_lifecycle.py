"""Starting and stopping whole clusters: `dev-cluster up/status/env/down`, and no process
left behind, even when the Python process that started a cluster is killed."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sps_operator.devcluster import podnet
from sps_operator.devcluster.processes import group_alive
from sps_operator.devcluster.pytest_plugin import K8sCluster

pytestmark = [pytest.mark.k8s, pytest.mark.slow]


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sps_operator.cli", "dev-cluster", *args, f"--state-dir={state}"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _pids(state: Path) -> dict[str, int]:
    pids: dict[str, int] = json.loads((state / "cluster.json").read_text())["pids"]
    return pids


def _wait_gone(pids: dict[str, int], timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        left = [n for n, p in pids.items() if podnet.pid_alive(p) or group_alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def test_k8s_controlplane_cli_up_status_env_down(k8s_cluster: K8sCluster, tmp_path: Path) -> None:
    # k8s_cluster: binaries are built (or found) once, by the session fixture.
    state = tmp_path / "cluster"
    up = _cli(state, "up", "--no-node-agent")
    assert up.returncode == 0, up.stderr
    pids = _pids(state)
    try:
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
        assert up.stdout.strip() == f"source {state.resolve() / 'env.sh'}"

        status = _cli(state, "status")
        assert status.returncode == 0, status.stdout
        assert "ready" in status.stdout

        env = _cli(state, "env")
        assert f"export KUBECONFIG={state.resolve() / 'kubeconfig'}" in env.stdout
        # The env script really points kubectl at this cluster.
        script = f"{env.stdout}\nkubectl get namespace kube-system -o name"
        shell = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False
        )
        assert shell.stdout.strip() == "namespace/kube-system", shell.stderr

        again = _cli(state, "up", "--no-node-agent")
        assert again.returncode == 0 and "already running" in again.stderr
        assert _pids(state) == pids
    finally:
        down = _cli(state, "down")
    assert down.returncode == 0, down.stderr
    assert _wait_gone(pids, timeout=5) == []
    assert _cli(state, "status").returncode == 1
    reservation = json.loads((state / "cluster.json").read_text())["pod_network_index"]
    assert not (podnet.reservations_dir() / str(reservation)).exists()


_HOLDER = """
import subprocess, sys, time
from pathlib import Path
from sps_operator.devcluster.controlplane import ControlPlane, NodeSpec, start_node_agent
cp = ControlPlane(Path(sys.argv[1]))
cp.start()
start_node_agent(cp, [NodeSpec("solo", "NVIDIA-H200", 8)])
subprocess.run(
    [str(cp.binaries.kubectl), f"--kubeconfig={cp.kubeconfig}", "run", "sleeper",
     "--image=busybox:1.36", "--restart=Never", "--", "sleep", sys.argv[2]],
    check=True, capture_output=True,
)
print("ready", flush=True)
time.sleep(600)
"""


def _processes_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if token.encode() in argv and podnet.pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def test_k8s_controlplane_dies_with_the_process_that_started_it(
    k8s_cluster: K8sCluster, tmp_path: Path
) -> None:
    """kill -9 of the starting process: no atexit, no cleanup code runs in it, yet the
    control plane, the node agent, its pods and its network all go."""
    state = tmp_path / "cluster"
    token = str(4000 + secrets.randbelow(5000))  # the pod's `sleep` argument, to find it
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(state), token],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.strip() == "ready", holder.stderr.read() if holder.stderr else ""
        pids = _pids(state)
        assert len(pids) == 5 and all(podnet.pid_alive(p) for p in pids.values())
        record = json.loads((state / "cluster.json").read_text())
        bridge = f"spsbr{record['pod_network_index']}"
        deadline = time.monotonic() + 60
        while not _processes_with(token):
            assert time.monotonic() < deadline, "the pod's process never started"
            time.sleep(0.2)
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert _wait_gone(pids) == []
    assert _processes_with(token) == []
    assert not _link_exists(bridge)


def _link_exists(name: str) -> bool:
    proc = subprocess.run(["ip", "link", "show", name], capture_output=True, check=False)
    return proc.returncode == 0


def test_k8s_controlplane_cli_with_node_agent_leaves_nothing_behind(
    k8s_cluster: K8sCluster, tmp_path: Path
) -> None:
    state = tmp_path / "cluster"
    up = _cli(state, "up", "--node", "solo=NVIDIA-H200:2")
    assert up.returncode == 0, up.stderr
    pids = _pids(state)
    bridge = f"spsbr{json.loads((state / 'cluster.json').read_text())['pod_network_index']}"
    try:
        assert "node-agent" in pids
        status = _cli(state, "status")
        assert status.returncode == 0, status.stdout
        assert "node solo" in status.stdout and "Ready" in status.stdout
        assert _link_exists(bridge)
    finally:
        down = _cli(state, "down")
    assert down.returncode == 0, down.stderr
    assert _wait_gone(pids, timeout=5) == []
    assert not _link_exists(bridge)

"""Starting and stopping control planes: `sps-testbed controlplane up/status/env/down`,
and no process left behind, even when the Python process that started one is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sps_testbed import podnet
from sps_testbed.controlplane_fixtures import K8sCluster
from sps_testbed.processes import group_alive

pytestmark = [pytest.mark.k8s, pytest.mark.slow]


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sps_testbed.cli", "controlplane", *args, f"--state-dir={state}"],
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
    up = _cli(state, "up")
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

        again = _cli(state, "up")
        assert again.returncode == 0 and "already running" in again.stderr
        assert _pids(state) == pids
    finally:
        down = _cli(state, "down")
    assert down.returncode == 0, down.stderr
    assert _wait_gone(pids, timeout=5) == []
    assert _cli(state, "status").returncode == 1
    reservation = json.loads((state / "cluster.json").read_text())["pod_network_index"]
    # Released: gone, or already another's. Beds start beside this test (make test's other
    # lanes), and one took the freed index before this line (fresh4).
    holder = _reservation_holder(podnet.reservations_dir() / str(reservation))
    assert holder not in (str(state), str(state.resolve())), holder


def _reservation_holder(path: Path) -> str | None:
    """The state directory a pod-network reservation names; None when there is none."""
    try:
        return str(json.loads(path.read_text())["state_dir"])
    except (OSError, ValueError, KeyError):
        return None


_HOLDER = """
import sys, time
from pathlib import Path
from sps_testbed.controlplane import ControlPlane
cp = ControlPlane(Path(sys.argv[1]))
cp.start()
print("ready", flush=True)
time.sleep(600)
"""


def test_k8s_controlplane_dies_with_the_process_that_started_it(
    k8s_cluster: K8sCluster, tmp_path: Path
) -> None:
    """kill -9 of the starting process: no atexit, no cleanup code runs in it, yet every
    process of the control plane goes."""
    state = tmp_path / "cluster"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(state)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.strip() == "ready", holder.stderr.read() if holder.stderr else ""
        pids = _pids(state)
        assert len(pids) == 4 and all(podnet.pid_alive(p) for p in pids.values())
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert _wait_gone(pids) == []

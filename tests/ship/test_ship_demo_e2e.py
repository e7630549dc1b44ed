"""The README's first command end to end: `sps-testbed demo` (what `make demo` calls), on
real nodes, with the network closed."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sps_sim.costmodel import GPU_H100, GPU_H200
from sps_testbed import RealNodeCluster, TestbedError

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.k8s]


def test_ship_demo_runs_offline_end_to_end_and_tears_down() -> None:
    # A short path: the bed's unix sockets live under it (108-byte limit).
    with tempfile.TemporaryDirectory(prefix="sps-demo-") as tmp:
        state = Path(tmp)
        run_demo(state)


def run_demo(state: Path) -> None:
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    demo = [
        sys.executable, "-m", "sps_testbed.cli", "demo",
        "--state-dir", str(state), "--timeout", "420", "--down-at-end",
    ]  # fmt: skip
    # With the network closed: a network namespace with nothing but loopback (the bed
    # makes its own inside it).
    offline = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *demo]
    proc = subprocess.run(
        offline, capture_output=True, text=True, env=env, timeout=1200, check=False
    )
    out = proc.stdout
    detail = f"{out[-8000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, detail
    # It showed what a user wants to see, in order.
    steps = [
        "Kubernetes with real GPU nodes (kubelet, containerd, runc)",
        "Install the operator with Helm",
        "$ helm install sps-operator oci://",
        "An SGLang Deployment and a profile",
        "Profiling on the H100 pool",
        f"The table for {GPU_H100}",
        "The Deployment, rolled with its table",
        "Move the Deployment to the NVIDIA-H200 pool",
        "The reprofile on the H200 pool",
        f"The table for {GPU_H200}",
        "Look around, then tear down",
    ]
    positions = [out.find(step) for step in steps]
    assert all(p >= 0 for p in positions), [
        s for s, p in zip(steps, positions, strict=True) if p < 0
    ]
    assert positions == sorted(positions)
    assert "STATUS: deployed" in out  # helm install --wait returned
    assert "Profiling/" in out  # the watch showed the run in progress
    assert "--speculative-dspark-sps-table-path" in out  # the rolled Deployment
    assert "sps-operator" in out.split("field managers:")[1][:200]
    # The rolled server said it loaded the table (its /server_info, asked in the pod).
    assert out.count('"loaded": true') == 2, detail
    for gpu in (GPU_H100, GPU_H200):
        png = state / "out" / f"llama-{gpu}.png"
        assert png.read_bytes()[:4] == b"\x89PNG", png
    assert "Plot (measured cells, fit and residuals)" in out
    assert "demo down" in out
    # --down-at-end: nothing is left running.
    try:
        bed = RealNodeCluster.attach(state / "bed")
    except TestbedError:
        return
    assert not bed.running()

"""The README's first command end to end: `sps-operator demo` (what `make demo` calls)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sps_operator.constants import GPU_H100, GPU_H200
from sps_operator.devcluster.controlplane import ControlPlane, ControlPlaneError

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.k8s]


def test_ship_demo_runs_offline_end_to_end_and_tears_down(tmp_path: Path) -> None:
    state = tmp_path / "demo"
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    demo = [
        sys.executable,
        "-m",
        "sps_operator.cli",
        "demo",
        "--state-dir",
        str(state),
        "--timeout",
        "420",
        "--down-at-end",
    ]
    # With the network closed: a network namespace with nothing but loopback.
    offline = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *demo]
    proc = subprocess.run(
        offline, capture_output=True, text=True, env=env, timeout=1500, check=False
    )
    out = proc.stdout
    log = state / "operator.log"
    detail = f"{out[-6000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"
    if log.exists():
        detail += f"\n--- operator log ---\n{log.read_text(errors='replace')[-4000:]}"
    assert proc.returncode == 0, detail
    # It showed what a user wants to see, in order.
    steps = [
        "Local control plane with simulated GPU nodes",
        "Install the Helm chart",
        "Run the operator under the chart's RBAC",
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
    assert "Profiling/" in out  # the watch showed the run in progress
    assert "--speculative-dspark-sps-table-path" in out  # the rolled Deployment
    assert "sps-operator" in out.split("field managers:")[1][:200]
    for gpu in (GPU_H100, GPU_H200):
        png = state / "out" / f"llama-{gpu}.png"
        assert png.read_bytes()[:4] == b"\x89PNG", png
    assert "Plot (measured cells, fit and residuals)" in out
    assert "demo down" in out
    # --down-at-end: nothing is left running.
    try:
        cp = ControlPlane.attach(state / "cluster")
    except ControlPlaneError:
        return
    assert not any(cp.running_components().values())

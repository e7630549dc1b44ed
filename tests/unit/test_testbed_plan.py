"""The bed's teardown (sps_testbed.plan) without a bed: what it does with the nodes' files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from sps_testbed.plan import TRASH_DIR, BedRecord, NodeRecord, teardown
from waiting import wait_for


def _held_rm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An `rm` first on PATH that waits for the returned file to exist before it deletes."""
    real = shutil.which("rm")
    assert real is not None
    gate = tmp_path / "let-rm-go"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    rm = bin_dir / "rm"
    rm.write_text(f'#!/bin/sh\nwhile [ ! -e "{gate}" ]; do sleep 0.05; done\nexec {real} "$@"\n')
    rm.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return gate


def test_teardown_hands_the_nodes_containerd_roots_to_a_background_rm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The deletion of a node's pulled, unpacked images took 50 s inside the bed's stop.
    gate = _held_rm(tmp_path, monkeypatch)
    state = tmp_path / "state"
    node_dir = state / "nodes" / "n1"
    layer = node_dir / "containerd" / "snapshots" / "1" / "fs"
    layer.mkdir(parents=True)
    (layer / "file").write_text("x")
    (node_dir / "logs").mkdir()
    record = BedRecord(
        state_dir=str(state),
        # A cgroup that does not exist: nothing to kill, nothing to remove.
        nodes=[
            NodeRecord("n1", "P", 1, "10.0.0.2", "/sps-testbed-unit-no-such-cgroup", str(node_dir))
        ],
    )

    assert teardown(record) == []  # returns while the held rm has deleted nothing

    assert not (node_dir / "containerd").exists()
    assert (node_dir / "logs").is_dir()  # the logs stay for a look afterwards
    (moved,) = (tmp_path / TRASH_DIR).iterdir()
    assert (moved / "containerd" / "snapshots" / "1" / "fs" / "file").read_text() == "x"
    gate.touch()
    wait_for("the background rm deleted the moved root", lambda: not moved.exists(), timeout=30)
    assert teardown(record) == []  # idempotent: nothing left to move
    assert list((tmp_path / TRASH_DIR).iterdir()) == []

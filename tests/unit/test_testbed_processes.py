"""The bed's process starter (sps_testbed.processes.spawn): the environment its components get."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sps_testbed.processes import GO_GC_PERCENT, spawn

PRINT_GOGC = [sys.executable, "-c", "import os; print(os.environ.get('GOGC'))"]


def _gogc_of(tmp_path: Path, env: dict[str, str] | None) -> str:
    log = tmp_path / f"child-{len(list(tmp_path.iterdir()))}.log"  # spawn appends to a log
    assert spawn(PRINT_GOGC, log, env=env, parent_death_signal=None).wait(30) == 0
    return log.read_text().strip()


def test_every_component_collects_garbage_at_the_beds_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOGC", raising=False)
    assert _gogc_of(tmp_path, None) == GO_GC_PERCENT == "200"
    assert _gogc_of(tmp_path, {"PATH": "/usr/bin"}) == GO_GC_PERCENT


def test_a_gogc_of_the_callers_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOGC", "50")
    assert _gogc_of(tmp_path, None) == "50"
    assert _gogc_of(tmp_path, {"GOGC": "off"}) == "off"

"""The Argo CD health check for SpsProfile in docs/gitops.md, run by a real Lua interpreter."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from lupa import LuaRuntime

ROOT = Path(__file__).resolve().parents[2]
KEY = "resource.customizations.health.sps.dev_SpsProfile"


def health_script() -> str:
    text = (ROOT / "docs" / "gitops.md").read_text()
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        if KEY in block:
            return str(yaml.safe_load(block)["data"][KEY])
    raise AssertionError(f"{KEY} not found in docs/gitops.md")


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """What Argo CD computes: the script runs with the live object as the global `obj`."""
    lua = LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(health_script())
    return str(result["status"]), str(result["message"] or "")


def profile(generation: int = 1, **status: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "llama", "generation": generation}}
    if status:
        obj["status"] = status
    return obj


def cond(type_: str, status: str, reason: str, message: str) -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


@pytest.mark.parametrize(
    ("obj", "expected", "in_message"),
    [
        (profile(), "Progressing", "Waiting for the operator"),
        (
            profile(2, observedGeneration=1, conditions=[cond("Ready", "True", "TableLive", "x")]),
            "Progressing",
            "latest spec",
        ),
        (
            profile(observedGeneration=1, conditions=[cond("Ready", "True", "TableLive", "ok")]),
            "Healthy",
            "ok",
        ),
        (
            profile(
                observedGeneration=1,
                conditions=[
                    cond("Profiling", "True", "Running", "run llama-1 7/19 rounds"),
                    cond("Ready", "False", "Profiling", "no table yet"),
                ],
            ),
            "Progressing",
            "7/19 rounds",
        ),
        (
            profile(
                observedGeneration=1,
                conditions=[
                    cond("Profiling", "False", "Idle", ""),
                    cond("Ready", "False", "ProfilingFailed", "Job failed"),
                ],
            ),
            "Degraded",
            "ProfilingFailed: Job failed",
        ),
    ],
    ids=["no-status", "old-generation", "ready", "profiling", "failed"],
)
def test_argocd_health(obj: dict[str, Any], expected: str, in_message: str) -> None:
    status, message = health(obj)
    assert status == expected
    assert in_message in message

"""The Argo CD health check for SpsProfile in docs/gitops.md, run by a real Lua interpreter,
against every reason the API can produce (generated from sps_operator.api.reasons, so a
new reason cannot be forgotten)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lupa import LuaRuntime

from sps_operator.api import reason_registry as registry
from sps_operator.api import reasons as R

ROOT = Path(__file__).resolve().parents[2]
KEY = "resource.customizations.health.sps.dev_SpsProfile"

# What each kind of reason means to someone watching Argo CD, when Ready=False carries it.
# A new Kind fails every generated case until it is decided here.
READY_FALSE_HEALTH = {
    R.Kind.PROGRESSING: R.Health.PROGRESSING,
    R.Kind.SUSPENDED: R.Health.SUSPENDED,
    R.Kind.PROBLEM: R.Health.DEGRADED,
    R.Kind.FAILURE: R.Health.DEGRADED,
    R.Kind.WAITING: R.Health.DEGRADED,  # the run gave up waiting (while it waits: below)
}
# Reasons that never make Ready False: the True side, triggers (Profiling, Stale) and the
# False sides of the other conditions.
NOT_READY_FALSE = {R.Kind.LIVE, R.Kind.TRIGGER, R.Kind.INFO}


def health_script() -> str:
    text = (ROOT / "docs" / "gitops.md").read_text()
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        if KEY in block:
            return str(yaml.safe_load(block)["data"][KEY])
    raise AssertionError(f"{KEY} not found in docs/gitops.md")


LUA = LuaRuntime(unpack_returned_tuples=True)
SCRIPT = health_script()


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """What Argo CD computes: the script runs with the live object as the global `obj`."""
    LUA.globals().obj = LUA.table_from(obj, recursive=True)
    result = LUA.execute(SCRIPT)
    return str(result["status"]), str(result["message"] or "")


def profile(generation: int = 1, **status: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "llama", "generation": generation}}
    if status:
        obj["status"] = status
    return obj


def cond(type_: str, status: str, reason: str, message: str = "") -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def with_conditions(*conditions: dict[str, str]) -> dict[str, Any]:
    return profile(observedGeneration=1, conditions=list(conditions))


def generated() -> Iterator[Any]:
    """(profile, expected health, text in the message) for every reason, in the contexts the
    operator's report step puts it (controller/passes/report.py)."""
    for reason, meaning in registry.REASONS.items():
        kind = meaning.kind
        if kind in NOT_READY_FALSE:
            if kind == R.Kind.TRIGGER:  # a run started for this reason
                yield pytest.param(
                    with_conditions(
                        cond("Profiling", "True", reason, "run llama-1 (Diagonal) 3/9 rounds"),
                        cond("Ready", "False", "Profiling", "no table yet"),
                    ),
                    R.Health.PROGRESSING, "3/9 rounds", id=f"{reason}-trigger",
                )  # fmt: skip
            continue
        if kind == R.Kind.WAITING:  # the run's Job waits for capacity: progress
            yield pytest.param(
                with_conditions(
                    cond("Profiling", "False", reason, "run llama-1 waiting 300 s: 0/3 nodes"),
                    cond("Ready", "False", reason, "no table yet"),
                    cond("Degraded", "False", "AsExpected"),
                ),
                R.Health.PROGRESSING, "0/3 nodes", id=f"{reason}-while-waiting",
            )  # fmt: skip
        failed = kind in (R.Kind.FAILURE, R.Kind.PROBLEM, R.Kind.WAITING)
        yield pytest.param(
            with_conditions(
                cond("Profiling", "False", "Idle", "no profiling run in progress"),
                cond("Ready", "False", reason, "what happened"),
                cond("Degraded", "True" if failed else "False", reason if failed else "AsExpected"),
            ),
            READY_FALSE_HEALTH[kind], f"{reason}: what happened", id=f"{reason}-ready-false",
        )  # fmt: skip
        if failed:  # a table is live: the failure of a later run does not page
            yield pytest.param(
                with_conditions(
                    cond("Profiling", "False", "Idle"),
                    cond("Ready", "True", "TableLive", f"tables live; degraded: {reason}"),
                    cond("Degraded", "True", reason, "what happened"),
                ),
                R.Health.HEALTHY, f"degraded: {reason}", id=f"{reason}-table-live",
            )  # fmt: skip


@pytest.mark.parametrize(("obj", "expected", "in_message"), list(generated()))
def test_every_reason_has_its_health(obj: dict[str, Any], expected: str, in_message: str) -> None:
    status, message = health(obj)
    assert status == expected, message
    assert in_message in message
    # The operator's own rule (api.reason_registry.health, which sets Reconciling/Stalled) agrees.
    conditions = {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}
    assert registry.health(conditions) == expected


def test_every_kind_of_reason_is_decided() -> None:
    assert set(R.Kind) == set(READY_FALSE_HEALTH) | NOT_READY_FALSE


def test_the_lua_lists_are_the_reason_lists() -> None:
    def lua_set(name: str) -> set[str]:
        match = re.search(rf"local {name} = {{(.*?)}}", SCRIPT)
        assert match, name
        return set(re.findall(r"(\w+) = true", match.group(1)))

    assert lua_set("waiting") == registry.WAITING_REASONS
    assert lua_set("progressing") == registry.PROGRESSING_REASONS
    assert lua_set("suspended") == registry.SUSPENDED_REASONS


def test_the_health_table_in_the_docs_is_the_reason_lists() -> None:
    text = (ROOT / "docs" / "gitops.md").read_text()
    rows = {
        m.group(1): set(re.findall(r"`(\w+)`", m.group(2)))
        for m in re.finditer(r"^\| `(\w+)` \| [^|]* \| ([^|]*) \|$", text, re.M)
    }
    assert rows[R.Health.HEALTHY] == {R.TABLE_LIVE}
    assert rows[R.Health.PROGRESSING] == registry.WAITING_REASONS | registry.PROGRESSING_REASONS
    assert rows[R.Health.SUSPENDED] == registry.SUSPENDED_REASONS


@pytest.mark.parametrize(
    ("obj", "expected", "in_message"),
    [
        (profile(), "Progressing", "Waiting for the operator"),
        (
            profile(2, observedGeneration=1, conditions=[cond("Ready", "True", "TableLive", "x")]),
            "Progressing",
            "latest spec",
        ),
        (with_conditions(cond("Profiling", "False", "Idle")), "Progressing", "Waiting"),
        (with_conditions(cond("Ready", "False", "InvalidSpec", "spec.x")), "Degraded", "spec.x"),
        (
            # A reason nobody knows (a newer operator): a failure until the check learns it.
            with_conditions(cond("Ready", "False", "SomethingNew", "?")),
            "Degraded",
            "SomethingNew",
        ),
    ],
    ids=["no-status", "old-generation", "no-ready", "invalid-spec", "unknown-reason"],
)
def test_argocd_health(obj: dict[str, Any], expected: str, in_message: str) -> None:
    status, message = health(obj)
    assert status == expected
    assert in_message in message

"""The registry of reasons (api/reason_registry.py): every reason the operator can set has,
in one entry, what it means, its health and the advice `kubectl sps explain` gives, and no
advice lives apart from its reason."""

from __future__ import annotations

import ast
import string
from pathlib import Path

import pytest

import sps_operator
from sps_operator.api import reason_registry as registry
from sps_operator.api import reasons as R
from sps_operator.api import reasons_runs, reasons_status, reasons_targets
from sps_operator.api.reasons import Health, Kind

PACKAGE = Path(sps_operator.__path__[0])

# Which kinds each entry module holds (where the status records the reason).
MODULE_KINDS = {
    reasons_status: {Kind.LIVE, Kind.INFO, Kind.PROGRESSING, Kind.SUSPENDED, Kind.TRIGGER},
    reasons_targets: {Kind.PROBLEM},
    reasons_runs: {Kind.WAITING, Kind.FAILURE},
}
ENTRIES = {
    reasons_status: reasons_status.STATUS_REASONS,
    reasons_targets: reasons_targets.TARGET_REASONS,
    reasons_runs: reasons_runs.RUN_REASONS,
}


def advice_texts(reason: R.Reason) -> list[str]:
    found = [reason.advice] if reason.advice else []
    for advice in (reason.target, reason.waiting, reason.failure):
        if advice is not None:
            found += [advice.what, advice.next]
    return found


@pytest.mark.parametrize("reason", sorted(registry.REASONS))
def test_every_reason_has_its_meaning_health_and_advice(reason: str) -> None:
    entry = registry.REASONS[reason]
    assert entry.meaning and len(entry.meaning) <= 100
    assert entry.kind in registry.KIND_HEALTH
    texts = advice_texts(entry)
    assert texts, f"{reason}: no advice for `kubectl sps explain`"
    for text in texts:
        assert text.strip() == text and len(text) > 10, (reason, text)
        named = {field for _, field, _, _ in string.Formatter().parse(text) if field}
        assert named <= set(registry.PLACEHOLDERS), (reason, named)
        assert "{" not in registry.fill(text, name="llama", run="llama-1", gpu="H100")


@pytest.mark.parametrize("reason", sorted(registry.REASONS))
def test_a_reasons_health_is_what_the_health_rule_says(reason: str) -> None:
    """KIND_HEALTH, stated per reason, agrees with the rule Argo CD's Lua and the kstatus
    conditions follow, in the context the reason's kind appears in."""
    kind = registry.REASONS[reason].kind
    expected = registry.KIND_HEALTH[kind]
    if kind == Kind.LIVE:
        conditions = {R.READY: ("True", reason)}
    elif kind == Kind.TRIGGER:  # the run it started
        conditions = {R.READY: ("False", R.NO_TABLE), R.PROFILING: ("True", reason)}
    elif kind == Kind.INFO:  # the False side of another condition
        conditions = {R.READY: ("True", R.TABLE_LIVE), R.DEGRADED: ("False", reason)}
    else:
        conditions = {R.READY: ("False", reason), R.PROFILING: ("False", R.IDLE)}
    assert registry.health(conditions) == expected
    if kind == Kind.WAITING:  # while the run's Job waits, it is progress
        waiting = {R.READY: ("False", R.NO_TABLE), R.PROFILING: ("False", reason)}
        assert registry.health(waiting) == Health.PROGRESSING


def test_advice_sits_where_explain_meets_the_reason() -> None:
    for reason, entry in registry.REASONS.items():
        if entry.target is not None:
            assert entry.kind == Kind.PROBLEM, reason  # status.targets[].reason
        if entry.waiting is not None:
            assert entry.kind == Kind.WAITING, reason  # status.currentRun.waiting.reason
        if entry.failure is not None:  # status.lastFailure.reason (a clone refused: PROBLEM)
            assert entry.kind in (Kind.FAILURE, Kind.WAITING, Kind.PROBLEM), reason
    assert {
        R.FIT_QUALITY_GATE_FAILED,
        R.ERROR_BOUND_GATE_FAILED,
        R.CHANGE_GATE_FAILED,
    } == registry.GATE_FAILURES


def test_each_entry_module_holds_its_kinds_and_no_reason_twice() -> None:
    for module, entries in ENTRIES.items():
        wrong = {r: e.kind for r, e in entries.items() if e.kind not in MODULE_KINDS[module]}
        assert not wrong, (module.__name__, wrong)
    assert sum(len(e) for e in ENTRIES.values()) == len(registry.REASONS)


def test_every_reason_word_has_an_entry() -> None:
    """A word spelled in api/reasons.py is a condition type, an event's reason, or in the
    registry: none is left without its meaning, health and advice."""
    words = {
        value
        for name, value in vars(R).items()
        if name.isupper() and isinstance(value, str) and value[:1].isupper() and " " not in value
    }
    orphans = words - set(registry.REASONS) - set(R.EVENT_REASONS) - set(R.CONDITION_TYPES)
    assert not orphans
    assert R.PROFILING in registry.REASONS and R.FIT_FAILED in words  # the scan reads them


def reason_keyed_tables(path: Path) -> list[str]:
    """Dict literals of `path` keyed by reason constants (`R.X`, or a name api/reasons.py
    defines): a second table of reasons beside the registry."""
    tree = ast.parse(path.read_text())
    constants = {name for name in vars(R) if name.isupper()}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict) or not node.keys:
            continue
        keys = [
            k.attr if isinstance(k, ast.Attribute) else getattr(k, "id", None) for k in node.keys
        ]
        if all(key in constants for key in keys):
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_advice_lives_outside_the_registry(tmp_path: Path) -> None:
    outside = [
        found
        for folder in ("plugin", "controller", "profiler")
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        for found in reason_keyed_tables(path)
    ]
    assert not outside, f"put these in the registry (api/reasons_*.py): {outside}"
    old = tmp_path / "explain_reasons.py"  # what the plugin held before the registry
    old.write_text('TARGET_REASONS = {R.CONFLICT: ("a", "b"), R.NOT_AN_SGLANG_SERVER: ("c", "d")}')
    assert reason_keyed_tables(old)

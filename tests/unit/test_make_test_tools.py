"""`make test` builds what only its tests use before the lanes start.

Built on first use instead, inside the lanes on a fresh machine, kube-router's build ran at
nice 10 beside a bed at nice -5 for 20 minutes and the network-policy bed waiting for it
timed out (2026-12-05)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _rule(makefile: str, target: str) -> tuple[list[str], list[str]]:
    """(prerequisites, recipe lines) of `target`."""
    match = re.search(rf"^{re.escape(target)}:([^\n]*)\n((?:\t[^\n]*\n)*)", makefile, re.M)
    assert match, f"no rule for {target}"
    return match.group(1).split(), [line.strip() for line in match.group(2).splitlines()]


def test_make_test_builds_the_test_only_tools_before_the_lanes() -> None:
    makefile = (ROOT / "Makefile").read_text()
    prerequisites, recipe = _rule(makefile, "test")
    assert "test-tools" in prerequisites
    assert any("tests/run-all.sh" in line for line in recipe)
    _, tools = _rule(makefile, "test-tools")
    assert any("build-kube-router.sh" in line for line in tools)
    assert any("tests/ship/promcheck.py" in line for line in tools)

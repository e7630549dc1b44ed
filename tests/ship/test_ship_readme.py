"""The README's promises: the two commands first, and every relative link resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    ROOT / "SECURITY.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "examples" / "README.md",
    ROOT / "charts" / "sps-operator" / "README.md",
]


def test_the_first_code_block_is_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block is not None
    commands = [line.split("#")[0].strip() for line in block[1].splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:.*\bsetup\b.*\bcontrolplane\b.*\btestbed\b", makefile, re.M)
    assert "sps-testbed demo" in makefile
    assert re.search(r"^test:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    text = doc.read_text()
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+://", target) or target.startswith(("#", "mailto:")):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{doc.name}: broken links {missing}"


def test_the_tested_kubernetes_version_is_the_pinned_one() -> None:
    go_mod = (ROOT / "testbed" / "recipes" / "go.mod").read_text()
    pinned = re.search(r"k8s\.io/kubernetes (v[0-9.]+)", go_mod)
    assert pinned is not None
    assert f"**{pinned[1]}**" in (ROOT / "README.md").read_text()

"""The version agreement `make release` checks before it builds anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sps_release.versions import Sources, disagreements, package_version

ROOT = Path(__file__).resolve().parents[2]


def repo_sources() -> Sources:
    return Sources(
        pyproject=(ROOT / "pyproject.toml").read_text(),
        chart_yaml=(ROOT / "charts/sps-operator/Chart.yaml").read_text(),
        changelog=(ROOT / "CHANGELOG.md").read_text(),
        dockerfile=(ROOT / "Dockerfile").read_text(),
    )


def agreeing(version: str = "1.2.3") -> Sources:
    return Sources(
        pyproject=f'[project]\nname = "sps-operator"\nversion = "{version}"\n',
        chart_yaml=(
            f'version: {version}\nappVersion: "{version}"\nannotations:\n'
            "  artifacthub.io/images: |\n"
            f"    - name: sps-operator\n      image: ghcr.io/sps-dev/sps-operator:{version}\n"
        ),
        changelog=(
            f"# Changelog\n\n## [Unreleased]\n\n## [{version}]\n\n- x\n\n"
            f"[{version}]: https://example.invalid/v{version}\n"
        ),
        dockerfile=f"FROM x\nARG VERSION={version}\n",
    )


def test_the_repository_agrees_with_itself() -> None:
    assert disagreements(repo_sources()) == []


def test_agreeing_sources_and_the_matching_tag_pass() -> None:
    assert disagreements(agreeing(), tag="v1.2.3") == []


@pytest.mark.parametrize(
    ("field", "old", "new", "says"),
    [
        ("chart_yaml", "version: 1.2.3", "version: 1.2.4", "Chart.yaml: version is '1.2.4'"),
        ("chart_yaml", 'appVersion: "1.2.3"', 'appVersion: "1.2"', "appVersion is '1.2'"),
        ("chart_yaml", "operator:1.2.3", "operator:1.2.2", "artifacthub.io/images"),
        ("changelog", "## [1.2.3]", "## [1.2.2]", "no section '## [1.2.3]'"),
        ("changelog", "[1.2.3]: https", "[1.2.2]: https", "no link '[1.2.3]: https"),
        ("dockerfile", "ARG VERSION=1.2.3", "ARG VERSION=1.2.30", "'ARG VERSION=1.2.3'"),
    ],
)
def test_each_disagreement_is_named_with_what_to_fix(
    field: str, old: str, new: str, says: str
) -> None:
    good = agreeing()
    text = getattr(good, field)
    assert old in text
    bad = Sources(**{**good.__dict__, field: text.replace(old, new)})
    (problem,) = disagreements(bad)
    assert says in problem


def test_a_tag_of_another_version_is_refused() -> None:
    (problem,) = disagreements(agreeing(), tag="v1.2.4")
    assert "v1.2.4" in problem and "tag v1.2.3" in problem


@pytest.mark.parametrize("version", ["1.2", "v1.2.3", "01.2.3", "", "1.2.3.4"])
def test_a_version_that_is_not_semver_is_refused(version: str) -> None:
    with pytest.raises(ValueError, match="semantic version"):
        package_version(f'[project]\nversion = "{version}"\n')
    (problem,) = disagreements(agreeing(version) if version else agreeing("x"))
    assert "semantic version" in problem


@given(st.text(max_size=300))
def test_garbage_files_give_findings_never_an_exception(text: str) -> None:
    for field in ("pyproject", "chart_yaml", "changelog", "dockerfile"):
        problems = disagreements(Sources(**{**agreeing().__dict__, field: text}))
        assert all(isinstance(p, str) for p in problems)

"""What `make release` builds cheaply, built for real from a copy of this work tree: the
version check and the clean-tree rule, the sdist and wheel (twice: byte for byte the same),
and the chart packaged with the image pinned. The image index is measured and checked by
`make release-check` (bench/release), not here: it takes minutes."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from ship_helpers import KUBE_VERSION, find_helm, helm

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "cd" * 32
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

pytestmark = pytest.mark.slow


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-commit repository of this work tree's files (tracked and new, not ignored)."""
    dest = tmp_path_factory.mktemp("tree")
    names = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, names.split("\0")):
        src = ROOT / name
        if src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).symlink_to(os.readlink(src))
        elif src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(src.read_bytes())
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    git(dest, *env, "commit", "-q", "-m", "tree", "--date=2026-01-01T00:00:00Z")
    return dest


def release(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree / "release"), "SOURCE_DATE_EPOCH": "1767225600"}
    return subprocess.run(
        [sys.executable, "-m", "sps_release", *args],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


def test_a_clean_tree_is_released_and_a_dirty_one_refused(tree: Path) -> None:
    ok = release(tree, "check")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == f"{VERSION}\n"
    (tree / "stray.txt").write_text("x")
    try:
        refused = release(tree, "check")
        assert refused.returncode == 1
        assert "uncommitted changes" in refused.stderr and "ALLOW_DIRTY=1" in refused.stderr
        assert "stray.txt" in refused.stderr
        allowed = release(tree, "check", "--allow-dirty")
        assert allowed.returncode == 0 and allowed.stdout == f"{VERSION}\n"
        assert "dirty tree" in allowed.stderr
    finally:
        (tree / "stray.txt").unlink()
    wrong_tag = release(tree, "check", "--tag", "v0.0.0-x")
    assert wrong_tag.returncode == 1 and f"tag v{VERSION}" in wrong_tag.stderr


def test_the_sdist_and_wheel_are_complete_and_reproducible(tree: Path, tmp_path: Path) -> None:
    for out in ("a", "b"):
        proc = release(tree, "python-dists", str(tmp_path / out))
        assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == [f"sps_operator-{VERSION}-py3-none-any.whl", f"sps_operator-{VERSION}.tar.gz"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    wheel = zipfile.ZipFile(tmp_path / "a" / names[0])
    files = set(wheel.namelist())
    dist_info = f"sps_operator-{VERSION}.dist-info"
    assert {"sps_operator/__init__.py", "sps_operator/py.typed", f"{dist_info}/METADATA"} <= files
    assert {"sps_operator/cli.py", "sps_operator/plugin/cli.py"} <= files
    entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()
    for script in ("sps-operator", "sps-profiler", "kubectl-sps"):
        assert f"{script} = " in entry_points
    metadata = wheel.read(f"{dist_info}/METADATA").decode()
    assert f"\nVersion: {VERSION}\n" in metadata and "License-Expression: Apache-2.0" in metadata
    with tarfile.open(tmp_path / "a" / names[1]) as sdist:
        members = {m.name for m in sdist.getmembers()}
        assert {m.mtime for m in sdist.getmembers()} == {1767225600}
    top = f"sps_operator-{VERSION}"
    assert {f"{top}/LICENSE", f"{top}/pyproject.toml", f"{top}/README.md"} <= members


def test_the_packaged_chart_pins_the_image_digest(tree: Path, tmp_path: Path) -> None:
    proc = release(tree, "chart", str(tmp_path), "--digest", DIGEST, "--helm", str(find_helm()))
    assert proc.returncode == 0, proc.stderr
    package = tmp_path / f"sps-operator-{VERSION}.tgz"
    assert proc.stdout.strip() == str(package)
    with tarfile.open(package) as tar:
        assert not [m.name for m in tar.getmembers() if m.issym() or m.islnk()]
        chart = yaml.safe_load(tar.extractfile("sps-operator/Chart.yaml").read())  # type: ignore[union-attr]
    assert chart["version"] == chart["appVersion"] == VERSION
    rendered = helm("template", "r", str(package), "--kube-version", KUBE_VERSION).stdout
    (deployment,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/sps-dev/sps-operator:{VERSION}@{DIGEST}"
    bad = release(tree, "chart", str(tmp_path), "--digest", "latest", "--helm", str(find_helm()))
    assert bad.returncode == 1 and "not an image digest" in bad.stderr


def test_the_build_requirements_can_read_the_license_expression() -> None:
    """`license = "Apache-2.0"` (PEP 639) is read by setuptools 77 and later only; an
    older one fails to build the sdist ("project.license must be valid ...")."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(pyproject["project"]["license"], str)
    (setuptools,) = [r for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")]
    minimum = tuple(int(x) for x in setuptools.split(">=")[1].split("."))
    assert minimum >= (77,)

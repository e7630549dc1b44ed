"""The krew archives of `kubectl sps` (release/build-plugin.sh) and their manifest
(sps_release.krew): the manifest names exactly the archives the release builds, with their
sha256; an archive is a pex that runs with a bare python3 (its compiled dependencies in it).
The slow test builds the linux/amd64 archive for real from requirements/plugin.lock.json,
in a network namespace of its own: every file comes from pex's cache, which
`make test-tools` fills (`release/build-plugin.sh --fetch linux_amd64`), so the test
talks to no one and resolves nothing (~5 CPU-s; resolving from PyPI cost ~55)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from sps_release.krew import PLATFORMS, archive_name, render_manifest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = (ROOT / "plugins/krew/sps.yaml").read_text()
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
TAG = f"v{VERSION}"
# The build in a network namespace with only loopback (down): no network at all. Root
# makes one directly; anyone else in a user namespace of their own.
OFFLINE = ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "--net", "--map-root-user"]


def digests() -> dict[str, str]:
    return {
        archive_name(TAG, s, a): hashlib.sha256(f"{s}/{a}".encode()).hexdigest()
        for s, a in PLATFORMS
    }


def test_the_manifest_names_each_archive_the_release_builds_with_its_sha256() -> None:
    manifest = yaml.safe_load(render_manifest(TEMPLATE, TAG, digests()))
    assert manifest["spec"]["version"] == TAG
    found = {}
    for platform in manifest["spec"]["platforms"]:
        labels = platform["selector"]["matchLabels"]
        name = archive_name(TAG, labels["os"], labels["arch"])
        assert platform["uri"].endswith(f"/releases/download/{TAG}/{name}")
        found[name] = platform["sha256"]
        assert platform["bin"] == "kubectl-sps"
    assert found == digests()


def test_a_manifest_naming_an_archive_not_built_or_a_bad_tag_is_refused() -> None:
    partial = dict(list(digests().items())[:3])
    with pytest.raises(ValueError, match="did not build"):
        render_manifest(TEMPLATE, TAG, partial)
    with pytest.raises(ValueError, match="not a release tag"):
        render_manifest(TEMPLATE, "latest", digests())


@pytest.mark.slow
def test_the_linux_amd64_archive_is_a_pex_that_runs_with_a_bare_python(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(dist), str(ROOT)],
        check=True, env=env,
    )  # fmt: skip
    build = ["bash", str(ROOT / "release/build-plugin.sh"), str(dist), VERSION, "linux_amd64"]
    built = subprocess.run(
        [*OFFLINE, *build],
        capture_output=True, text=True, check=False, env={**env, "PYTHON": sys.executable},
    )  # fmt: skip
    assert built.returncode == 0, (
        f"{built.stderr[-3000:]}\nbuilt offline from pex's cache: fill it with "
        "`bash release/build-plugin.sh --fetch linux_amd64` (`make test-tools` runs it)"
    )
    archive = dist / archive_name(TAG, "linux", "amd64")
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["LICENSE", "kubectl-sps"]
        tar.extractall(tmp_path / "x", filter="data")
    exe = tmp_path / "x" / "kubectl-sps"
    with zipfile.ZipFile(exe) as pex:
        names = pex.namelist()
    assert "PEX-INFO" in names  # a pex, not a bare zipapp
    for minor in (11, 12, 13):  # the compiled dependency, for each CPython it supports
        assert any("pydantic_core-" in n and f"-cp3{minor}-" in n for n in names), minor
    # A python3 with nothing installed for it (no venv, no PYTHONPATH) runs it.
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    ran = subprocess.run([str(exe), "--version"], capture_output=True, text=True, env=bare)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == f"kubectl-sps {VERSION}"

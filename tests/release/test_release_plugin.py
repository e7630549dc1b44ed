"""The krew archives of `kubectl sps` (release/build-plugin.sh) and their manifest
(sps_release.krew): the manifest names exactly the archives the release builds, with their
sha256; an archive is a pex that runs with a bare python3 (its compiled dependencies in it).
The slow test builds the linux/amd64 archive for real (pex resolves from PyPI), once per
set of inputs: the archive is kept in ~/.cache/sps-operator/krew-archives under a hash of
everything it is built from (the wheel's contents, build-plugin.sh with its pinned pex, the
lock, LICENSE), so a run on an unchanged tree checks the archive built from exactly these
inputs instead of spending ~55 CPU-s building it again (SPS_PLUGIN_ARCHIVE_REBUILD=1 builds
anyway). What PyPI serves is no input: a file gone from PyPI shows at the next change."""

from __future__ import annotations

import hashlib
import os
import shutil
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
ARCHIVE_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "sps-operator"
    / "krew-archives"
)
KEEP_CACHED = 3  # archives kept (29 MB each): the newest, by use


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


def archive_inputs_key(wheel: Path, platform: str) -> str:
    """A hash of what build-plugin.sh makes `platform`'s archive from. The wheel by its
    members (name and bytes: its zip timestamps change with every build, its contents do
    not), the script (it pins pex), the lock, LICENSE, and the Python that runs pex."""
    digest = hashlib.sha256(f"{platform}\0{sys.version_info[:2]}\0".encode())
    with zipfile.ZipFile(wheel) as whl:
        for info in sorted(whl.infolist(), key=lambda i: i.filename):
            digest.update(info.filename.encode() + b"\0" + whl.read(info) + b"\0")
    for path in ("release/build-plugin.sh", "requirements/plugin.txt", "LICENSE"):
        digest.update(path.encode() + b"\0" + (ROOT / path).read_bytes() + b"\0")
    return digest.hexdigest()


def cached_archive(key: str) -> Path | None:
    path = ARCHIVE_CACHE / f"{key}.tar.gz"
    if os.environ.get("SPS_PLUGIN_ARCHIVE_REBUILD") or not path.is_file():
        return None
    path.touch()  # kept longer: see keep_archive
    return path


def keep_archive(archive: Path, key: str) -> None:
    """Into the cache (whole or not at all: a copy renamed into place), keeping the
    newest KEEP_CACHED."""
    ARCHIVE_CACHE.mkdir(parents=True, exist_ok=True)
    part = ARCHIVE_CACHE / f"{key}.{os.getpid()}.part"
    shutil.copyfile(archive, part)
    os.replace(part, ARCHIVE_CACHE / f"{key}.tar.gz")
    kept = sorted(ARCHIVE_CACHE.glob("*.tar.gz"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in kept[KEEP_CACHED:]:
        old.unlink(missing_ok=True)


def test_the_archive_key_follows_the_wheels_contents_not_its_timestamps(tmp_path: Path) -> None:
    def wheel(
        name: str, members: dict[str, str], when: tuple[int, int, int, int, int, int]
    ) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as whl:
            for member, text in members.items():
                whl.writestr(zipfile.ZipInfo(member, when), text)
        return path

    one = wheel("a.whl", {"m.py": "x = 1"}, (2026, 1, 1, 0, 0, 0))
    again = wheel("b.whl", {"m.py": "x = 1"}, (2026, 6, 1, 0, 0, 0))
    changed = wheel("c.whl", {"m.py": "x = 2"}, (2026, 1, 1, 0, 0, 0))
    key = archive_inputs_key(one, "linux_amd64")
    assert archive_inputs_key(again, "linux_amd64") == key
    assert archive_inputs_key(changed, "linux_amd64") != key
    assert archive_inputs_key(one, "linux_arm64") != key


@pytest.mark.slow
def test_the_linux_amd64_archive_is_a_pex_that_runs_with_a_bare_python(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(dist), str(ROOT)],
        check=True, env=env,
    )  # fmt: skip
    key = archive_inputs_key(dist / f"sps_operator-{VERSION}-py3-none-any.whl", "linux_amd64")
    archive = cached_archive(key)
    if archive is None:
        built = subprocess.run(
            ["bash", str(ROOT / "release/build-plugin.sh"), str(dist), VERSION, "linux_amd64"],
            capture_output=True, text=True, check=False, env={**env, "PYTHON": sys.executable},
        )  # fmt: skip
        assert built.returncode == 0, built.stderr[-3000:]
        archive = dist / archive_name(TAG, "linux", "amd64")
        keep_archive(archive, key)
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

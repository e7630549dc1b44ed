"""The image's dependency lock (requirements/, `make lock`, release/lock.sh): made from
pyproject.toml as it is now, every requirement pinned to one version that satisfies it
with the hashes of its files, and the Dockerfile installing from it with --require-hashes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from sps_release.krew import PLATFORMS
from sps_release.lock import build_requirements, image_requirements, plugin_requirements

ROOT = Path(__file__).resolve().parents[2]
LOCKS = ROOT / "requirements"
PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^ \\]+)")


def pins(text: str) -> dict[str, tuple[str, list[str]]]:
    """{canonical name: (version, [sha256 hashes])} of a pip-compile --generate-hashes file."""
    found: dict[str, tuple[str, list[str]]] = {}
    current = canonicalize_name("")
    for line in text.splitlines():
        match = PIN.match(line)
        if match:
            current = canonicalize_name(match.group(1))
            found[current] = (match.group(2), [])
        for digest in re.findall(r"--hash=sha256:([0-9a-f]{64})", line):
            found[current][1].append(digest)
    return found


def inputs(name: str) -> list[str]:
    return [
        line
        for line in (LOCKS / f"{name}.in").read_text().splitlines()
        if line and not line.startswith("#")
    ]


def test_the_lock_inputs_are_what_pyproject_asks_now() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert inputs("image") == image_requirements(pyproject), "run `make lock`"
    assert inputs("build") == build_requirements(pyproject), "run `make lock`"
    assert inputs("plugin") == plugin_requirements(pyproject), "run `make lock`"


@pytest.mark.parametrize("name", ["image", "build", "plugin"])
def test_every_requirement_is_pinned_once_with_hashes(name: str) -> None:
    locked = pins((LOCKS / f"{name}.txt").read_text())
    for line in inputs(name):
        requirement = Requirement(line)
        key = canonicalize_name(requirement.name)
        assert key in locked, f"{requirement.name} is not in requirements/{name}.txt: make lock"
        version, _ = locked[key]
        assert requirement.specifier.contains(version, prereleases=True), (line, version)
    for pinned, (version, hashes) in locked.items():
        # Every pinned file's hash: --require-hashes refuses a requirement without one.
        assert hashes, f"{pinned}=={version} has no hash"
    # No index or local wheel directory of the machine that locked it.
    text = (LOCKS / f"{name}.txt").read_text()
    assert not re.search(r"^--(find-links|index-url|extra-index-url)", text, re.M)


def test_the_image_lock_holds_the_compiled_dependencies_for_both_architectures() -> None:
    """pydantic-core ships a wheel per CPU: the lock has the hash of each (the arm64 build
    checks the same file), far more than one."""
    version, hashes = pins((LOCKS / "image.txt").read_text())["pydantic-core"]
    assert len(hashes) > 10, version


def test_the_dockerfile_installs_only_the_lock_with_hashes() -> None:
    text = (ROOT / "Dockerfile").read_text()
    joined = text.replace("\\\n", " ")
    installs = [ln for ln in joined.splitlines() if ln.startswith("RUN") and "pip " in ln]
    from_index = [c for ln in installs for c in ln.split("&&") if "-r " in c]
    assert from_index, installs
    for command in from_index:
        assert "--require-hashes" in command and "--no-deps" in command, command
        assert re.search(r"-r (image|build)\.txt", command), command
    assert "COPY requirements/image.txt requirements/build.txt ./" in text
    # The dependencies' stage is built from the lock alone (pyproject.toml comes later).
    deps = text.split(" AS deps")[1].split(" AS build")[0]
    assert not re.search(r"^COPY .*pyproject", deps, re.M)


def test_own_extras_expand_and_a_loop_is_refused() -> None:
    pyproject = """
[project]
dependencies = ["a>=1"]
[project.optional-dependencies]
plot = ["b", "a>=1"]
operator = ["sps-operator[plot]", "c<2"]
"""
    assert image_requirements(pyproject) == ["a>=1", "b", "c<2"]
    looped = pyproject.replace('plot = ["b", "a>=1"]', 'plot = ["sps-operator[operator]"]')
    with pytest.raises(ValueError, match="names itself"):
        image_requirements(looped)
    missing = pyproject.replace("sps-operator[plot]", "sps-operator[gpu]")
    with pytest.raises(ValueError, match=r"an extra pyproject\.toml lacks"):
        image_requirements(missing)


def test_the_plugins_pex_lock_pins_what_plugin_txt_pins_for_every_platform() -> None:
    """requirements/plugin.lock.json (release/build-plugin.sh --lock, from plugin.txt): per
    platform and CPython the krew archives carry, the same versions as plugin.txt, each file
    one whose hash plugin.txt allows, and made by the pex build-plugin.sh pins."""
    lock = json.loads((LOCKS / "plugin.lock.json").read_text())
    allowed = pins((LOCKS / "plugin.txt").read_text())
    script = (ROOT / "release/build-plugin.sh").read_text()
    assert f"PEX={lock['pex_version']}\n" in script, "run `make lock`"
    assert lock["style"] == "strict"
    assert sorted(lock["requirements"]) == sorted(f"{n}=={v}" for n, (v, _) in allowed.items())
    tags = {"linux/amd64": "manylinux2014_x86_64", "linux/arm64": "manylinux2014_aarch64",
            "darwin/amd64": "macosx_10_15_x86_64", "darwin/arm64": "macosx_11_0_arm64"}  # fmt: skip
    wanted = {(f"cp3{m}", f"cp3{m}", tags[f"{s}/{a}"]) for s, a in PLATFORMS for m in (11, 12, 13)}
    resolves = {tuple(r["platform_tag"]): r for r in lock["locked_resolves"]}
    assert set(resolves) == wanted
    for platform, resolve in resolves.items():
        locked = resolve["locked_requirements"]
        assert {canonicalize_name(r["project_name"]) for r in locked} == set(allowed), platform
        for requirement in locked:
            version, hashes = allowed[canonicalize_name(requirement["project_name"])]
            assert requirement["version"] == version, (platform, requirement["project_name"])
            for artifact in requirement["artifacts"]:
                assert artifact["algorithm"] == "sha256"
                assert artifact["hash"] in hashes, (platform, artifact["url"])
                assert artifact["url"].startswith("https://files.pythonhosted.org/"), artifact

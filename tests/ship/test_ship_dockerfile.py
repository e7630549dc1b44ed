"""What can be checked of the Dockerfile without a Docker engine."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from sps_operator.cli import SUBCOMMANDS

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def parse_dockerfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        word, _, rest = full.partition(" ")
        instructions.append((word.upper(), rest.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return instructions


def build_args(instructions: list[tuple[str, str]]) -> dict[str, str]:
    args: dict[str, str] = {}
    for word, rest in instructions:
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args.setdefault(name.strip(), value.strip())
    return args


def substitute(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], m[0]), value)


def stages(instructions: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for item in instructions:
        if item[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(item)
    return out


def project_scripts() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return dict(data["project"]["scripts"])


def dockerignore_patterns() -> list[str]:
    path = ROOT / ".dockerignore"
    lines = path.read_text().splitlines() if path.exists() else []
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def is_in_context(relpath: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes."""
    included = True
    parts = relpath.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.rstrip("/")
        if any(fnmatch.fnmatchcase(p, pat) for p in prefixes):
            included = negate
    return included


@pytest.fixture(scope="module")
def instructions() -> list[tuple[str, str]]:
    return parse_dockerfile(DOCKERFILE.read_text())


def test_parser_joins_continuations_and_drops_comments() -> None:
    parsed = parse_dockerfile("# c\nFROM a AS b\nRUN x \\\n  # inner\n  && y\nUSER 1\n")
    assert parsed == [("FROM", "a AS b"), ("RUN", "x  && y"), ("USER", "1")]


def test_dockerignore_rule_last_match_wins() -> None:
    patterns = ["*", "!operator/", "operator/**/__pycache__"]
    assert is_in_context("operator/sps_operator/cli.py", patterns)
    assert not is_in_context("tests/unit/x.py", patterns)
    assert not is_in_context("operator/sps_operator/__pycache__", patterns)


def stage_name(from_args: str) -> str | None:
    words = from_args.split()
    return words[2] if len(words) == 3 and words[1].upper() == "AS" else None


def test_multi_stage_with_pinned_slim_python_311_base(instructions: list[tuple[str, str]]) -> None:
    args = build_args(instructions)
    froms = [rest for word, rest in instructions if word == "FROM"]
    assert len(froms) >= 2, "build stage and runtime stage"
    # A stage built FROM an earlier stage has that stage's base; every other is an image.
    named: set[str] = set()
    bases = []
    for rest in froms:
        if rest.split()[0] not in named:
            bases.append(substitute(rest.split()[0], args))
        named.add(stage_name(rest) or "")
    assert bases
    for base in bases:
        image, _, digest = base.partition("@")
        name, _, tag = image.rpartition(":")
        assert name.endswith("python"), base
        # Pinned: a full patch version (never a floating 3.11 or latest), or a digest.
        assert re.match(r"^3\.11\.\d+-slim", tag) or digest.startswith("sha256:"), base


def test_runtime_installs_only_wheels_built_in_the_earlier_stages(
    instructions: list[tuple[str, str]],
) -> None:
    *builders, runtime = stages(instructions)
    wheel_stages = {
        stage_name(stage[0][1])
        for stage in builders
        if any(w == "RUN" and "pip wheel" in r for w, r in stage)
    }
    # The dependencies' wheels and the operator's own (stage `build`).
    assert "build" in wheel_stages and len(wheel_stages) >= 2, wheel_stages
    copies = [r for w, r in runtime if w == "COPY"]
    sources = {r.split()[0].removeprefix("--from=") for r in copies if r.startswith("--from=")}
    assert "build" in sources and sources <= wheel_stages, (sources, wheel_stages)
    installs = [r for w, r in runtime if w == "RUN" and "pip install" in r]
    assert installs and all("--no-index" in r for r in installs), installs
    # The runtime stage never copies the source tree: only wheels.
    assert not any("operator/" in r for r in copies)


def test_runtime_copies_installed_files_never_the_wheels_themselves(
    instructions: list[tuple[str, str]],
) -> None:
    """A wheel copied into the runtime stays in its layer under what pip installs from it,
    pulled and unpacked by every node (59 MB): the dependencies arrive installed."""
    *_, runtime = stages(instructions)
    copied = [r.split()[1] for w, r in runtime if w == "COPY" and r.startswith("--from=deps")]
    assert copied == ["/staging"], copied


def test_the_image_carries_no_plot_extra() -> None:
    """Profiling Jobs never plot (`sps-profiler run`); matplotlib, fontTools and Pillow are
    ~95 MB of the image. numpy stays: the fit needs it."""
    lock = (ROOT / "requirements" / "image.txt").read_text()
    pins = {ln.split("==")[0] for ln in lock.splitlines() if "==" in ln and ln[0].isalpha()}
    assert "numpy" in pins
    assert not pins & {"matplotlib", "fonttools", "pillow", "contourpy", "kiwisolver"}, pins


def test_user_is_non_root_and_numeric(instructions: list[tuple[str, str]]) -> None:
    runtime = stages(instructions)[-1]
    users = [r for w, r in runtime if w == "USER"]
    assert users, "the runtime stage must set USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, users[-1]
    assert not gid or (gid.isdigit() and int(gid) != 0)
    # Nothing after USER switches back to root.
    assert [w for w, _ in runtime].index("USER") > max(
        i for i, (w, _) in enumerate(runtime) if w == "RUN"
    )


def test_entry_points_named_exist_in_pyproject(instructions: list[tuple[str, str]]) -> None:
    scripts = project_scripts()
    text = " ".join(r for w, r in instructions if w in ("RUN", "ENTRYPOINT", "CMD"))
    named = set(re.findall(r"\b(sps-[a-z]+|kubectl-sps)\b", text))
    assert {"sps-operator", "sps-profiler", "kubectl-sps"} <= named, named
    assert named <= set(scripts), named - set(scripts)
    # The simulator is its own distribution (sim/), not in the operator's image or wheel.
    assert "sps-sim" not in scripts and "sps-sim" not in named
    entry = json.loads(next(r for w, r in instructions if w == "ENTRYPOINT"))
    cmd = json.loads(next(r for w, r in instructions if w == "CMD"))
    assert entry == ["sps-operator"]
    assert cmd[0] in SUBCOMMANDS


def test_copy_sources_exist_and_are_in_the_build_context(
    instructions: list[tuple[str, str]],
) -> None:
    patterns = dockerignore_patterns()
    checked = 0
    for word, rest in instructions:
        if word != "COPY" or rest.startswith("--from"):
            continue
        *sources, _dest = shlex.split(rest)
        for src in sources:
            path = ROOT / src
            assert path.exists(), f"COPY source {src} is missing"
            assert is_in_context(src.rstrip("/"), patterns), f"{src} is excluded by .dockerignore"
            checked += 1
    assert checked >= 3


def test_oci_labels(instructions: list[tuple[str, str]]) -> None:
    labels = " ".join(r for w, r in stages(instructions)[-1] if w == "LABEL")
    for key in ("title", "description", "version", "source", "licenses", "revision"):
        assert f"org.opencontainers.image.{key}=" in labels, key

"""One version source: `version` in pyproject.toml. Everything else that names a version
must agree with it before a release is built."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass

import yaml

SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$")
IMAGE_REPOSITORY = "ghcr.io/sps-dev/sps-operator"


@dataclass(frozen=True)
class Sources:
    """The texts of the files that carry a version."""

    pyproject: str
    chart_yaml: str
    changelog: str
    dockerfile: str


def package_version(pyproject: str) -> str:
    """`project.version` of pyproject.toml; ValueError says what is wrong."""
    try:
        project = tomllib.loads(pyproject)["project"]
    except (tomllib.TOMLDecodeError, KeyError) as err:
        raise ValueError(f"pyproject.toml has no [project] table: {err}") from err
    version = project.get("version")
    if not isinstance(version, str) or not SEMVER.match(version):
        raise ValueError(
            f"pyproject.toml: project.version {version!r} is not a semantic version (X.Y.Z)"
        )
    return version


def disagreements(sources: Sources, tag: str | None = None) -> list[str]:
    """Every place that disagrees with pyproject's version, each with what to change.

    `tag` is the git tag a release is cut from (CI: the pushed tag), which must be
    `v<version>`. Empty list: they agree.
    """
    try:
        version = package_version(sources.pyproject)
    except ValueError as err:
        return [str(err)]
    problems: list[str] = []
    try:
        chart = yaml.safe_load(sources.chart_yaml)
    except yaml.YAMLError as err:
        return [f"charts/sps-operator/Chart.yaml is not YAML: {err}"]
    if not isinstance(chart, dict):
        return ["charts/sps-operator/Chart.yaml is not a mapping"]
    for key in ("version", "appVersion"):
        if str(chart.get(key)) != version:
            problems.append(
                f"charts/sps-operator/Chart.yaml: {key} is {chart.get(key)!r}; "
                f"set it to {version!r} (pyproject.toml's project.version)"
            )
    annotations = chart.get("annotations") or {}
    images = yaml.safe_load(str(annotations.get("artifacthub.io/images", ""))) or []
    wanted = f"{IMAGE_REPOSITORY}:{version}"
    if not any(isinstance(i, dict) and i.get("image") == wanted for i in images):
        problems.append(
            "charts/sps-operator/Chart.yaml: the annotation artifacthub.io/images must name "
            f"{wanted}"
        )
    headings = re.findall(r"^## \[([^\]]+)\]", sources.changelog, re.M)
    if version not in headings:
        problems.append(
            f"CHANGELOG.md has no section '## [{version}]': move the Unreleased entries "
            f"under it (Keep a Changelog)"
        )
    if not re.search(rf"^\[{re.escape(version)}\]: https://", sources.changelog, re.M):
        problems.append(
            f"CHANGELOG.md has no link '[{version}]: https://...' at the end (the release's page)"
        )
    if not re.search(rf"^ARG VERSION={re.escape(version)}$", sources.dockerfile, re.M):
        problems.append(f"Dockerfile: set 'ARG VERSION={version}' (the image's version label)")
    if tag is not None and tag != f"v{version}":
        problems.append(
            f"the release tag is {tag!r} but pyproject.toml says {version!r}: tag v{version}, "
            "or bump project.version (and the chart and CHANGELOG) to the tag's version"
        )
    return problems

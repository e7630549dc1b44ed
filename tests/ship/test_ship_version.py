"""One version source (pyproject.toml): the package, the chart, the image, the CLI."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from ship_helpers import CHART, ROOT

from sps_operator import __version__
from sps_operator.api.models import SpsProfile
from sps_operator.constants import IMAGE

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
CHART_YAML = yaml.safe_load((CHART / "Chart.yaml").read_text())


def test_everything_carries_the_pyproject_version() -> None:
    assert __version__ == VERSION  # the installed metadata: run `make setup` after a bump
    assert CHART_YAML["version"] == VERSION
    assert CHART_YAML["appVersion"] == VERSION
    assert IMAGE.endswith(f":{VERSION}")
    (image,) = yaml.safe_load(CHART_YAML["annotations"]["artifacthub.io/images"])
    assert image["image"] == f"ghcr.io/sps-dev/sps-operator:{VERSION}"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"ARG VERSION={VERSION}\n" in dockerfile


def test_the_changelog_has_the_version_and_unreleased_changes() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert headings[0] == "Unreleased"
    assert VERSION in headings
    assert f"[{VERSION}]: https://" in text


def test_the_license_is_the_one_pyproject_names() -> None:
    license_text = (ROOT / "LICENSE").read_text()
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == (
        "Apache-2.0"
    )
    assert license_text.lstrip().startswith("Apache License\n")
    assert "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text


def test_command_lines_print_the_version() -> None:
    bin_dir = Path(sys.executable).parent
    out = subprocess.run([bin_dir / "sps-operator", "--version"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    assert out == f"sps-operator {VERSION}\n"
    out = subprocess.run([bin_dir / "kubectl-sps", "version", "--client"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    assert out == f"Client Version: {VERSION}\n"


def test_artifact_hub_annotations_are_well_formed() -> None:
    annotations = CHART_YAML["annotations"]
    assert annotations["artifacthub.io/license"] == "Apache-2.0"
    assert annotations["artifacthub.io/operator"] == "true"
    for key in ("artifacthub.io/links", "artifacthub.io/crds"):
        assert isinstance(yaml.safe_load(annotations[key]), list), key
    # The example profile is one the API accepts.
    (example,) = yaml.safe_load(annotations["artifacthub.io/crdsExamples"])
    SpsProfile.model_validate(example)

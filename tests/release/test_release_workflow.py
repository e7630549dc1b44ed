"""The forge's release workflow cannot run here; what can be checked: it parses, runs on
tags v*, and only calls the Makefile's targets (no build logic of its own)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
# ghcr.io names an owner first: the chart goes under sps-dev, beside the image.
PUBLISH = "make publish REGISTRY=ghcr.io CHART_REPO=oci://ghcr.io/sps-dev/charts"


def workflow() -> dict[Any, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(data, dict)
    return data


def test_it_runs_on_version_tags_only() -> None:
    # YAML 1.1 reads the key `on` as True.
    triggers = workflow()[True]
    assert triggers == {"push": {"tags": ["v*"]}}


def test_it_builds_and_publishes_through_the_makefile_and_nothing_else() -> None:
    (job,) = workflow()["jobs"].values()
    runs = [step["run"] for step in job["steps"] if "run" in step]
    make = [r for r in runs if r.startswith("make ")]
    assert make == ["make release", PUBLISH]
    # The other commands only prepare the runner: no build or push of their own.
    for command in set(runs) - set(make):
        assert not re.search(r"buildah|skopeo|helm|docker|pip |python -m", command), command
    steps = {step.get("run", step.get("uses")): step for step in job["steps"]}
    assert steps["make release"]["env"] == {"RELEASE_TAG": "${{ github.ref_name }}"}
    assert steps[PUBLISH]["env"] == {
        "REGISTRY_USER": "${{ github.actor }}",
        "REGISTRY_PASSWORD": "${{ secrets.GITHUB_TOKEN }}",
        "COSIGN_KEY": "env://COSIGN_PRIVATE_KEY",
        "COSIGN_PRIVATE_KEY": "${{ secrets.COSIGN_PRIVATE_KEY }}",
        "COSIGN_PASSWORD": "${{ secrets.COSIGN_PASSWORD }}",
    }
    assert runs.index("make release") < runs.index(PUBLISH)
    assert workflow()["permissions"] == {"contents": "write", "packages": "write"}


def test_the_targets_it_calls_exist_and_use_the_release_scripts() -> None:
    makefile = (ROOT / "Makefile").read_text()
    for target, script in (("release", "release/release.sh"), ("publish", "release/publish.sh")):
        match = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, re.M)
        assert match, target
        assert script in match.group(1)
        assert (ROOT / script).is_file()
    assert re.search(r"^dist: release$", makefile, re.M)


def test_the_go_version_file_it_names_exists() -> None:
    (job,) = workflow()["jobs"].values()
    (go,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/setup-go")]
    assert (ROOT / go["with"]["go-version-file"]).is_file()


def test_the_go_version_it_sets_up_builds_the_pinned_cosign() -> None:
    """publish builds cosign (release/cosign/go.mod) with the Go the workflow sets up."""
    (job,) = workflow()["jobs"].values()
    (go,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/setup-go")]
    wanted = re.search(r"^go (\S+)$", (ROOT / go["with"]["go-version-file"]).read_text(), re.M)
    needed = re.search(r"^go (\S+)$", (ROOT / "release/cosign/go.mod").read_text(), re.M)
    assert wanted and needed
    have, need = (tuple(map(int, m.group(1).split("."))) for m in (wanted, needed))
    assert have >= need

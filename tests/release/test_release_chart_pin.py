"""The released chart pins the image by the index digest (release/sps_release/chart.py),
and the chart renders `repository:tag@digest` from it."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from ship_helpers import CHART, by_kind, render
from sps_release.chart import pin_image_digest

DIGEST = "sha256:" + "ab" * 32


def test_pinning_sets_image_digest_and_changes_nothing_else() -> None:
    values = (CHART / "values.yaml").read_text()
    pinned = pin_image_digest(values, DIGEST)
    before, after = yaml.safe_load(values), yaml.safe_load(pinned)
    assert before["image"]["digest"] == ""
    assert after["image"]["digest"] == DIGEST
    after["image"]["digest"] = ""
    assert after == before
    # Only one line differs, so every comment users read is kept.
    changed = [
        (a, b) for a, b in zip(values.splitlines(), pinned.splitlines(), strict=True) if a != b
    ]
    assert changed == [('  digest: ""', f'  digest: "{DIGEST}"')]


def test_a_digest_elsewhere_in_values_is_not_the_one_pinned() -> None:
    values = 'other:\n  digest: ""\nimage:\n  repository: r\n  digest: ""\nlast: 1\n'
    pinned = yaml.safe_load(pin_image_digest(values, DIGEST))
    assert pinned["other"]["digest"] == ""
    assert pinned["image"]["digest"] == DIGEST


@pytest.mark.parametrize(
    "values",
    [
        "image:\n  repository: r\n",  # no digest key
        'image:\n  repository: r\nother:\n  digest: ""\n',  # only under another key
        'image:\n  digest: "sha256:' + "0" * 64 + '"\n',  # already pinned
    ],
)
def test_values_without_an_empty_image_digest_are_refused(values: str) -> None:
    with pytest.raises(ValueError, match="digest"):
        pin_image_digest(values, DIGEST)


@given(st.text(max_size=80))
def test_only_a_sha256_digest_is_pinned(digest: str) -> None:
    values = (CHART / "values.yaml").read_text()
    if digest.startswith("sha256:") and len(digest) == 71:
        return
    with pytest.raises(ValueError, match="not an image digest"):
        pin_image_digest(values, digest)


def test_the_chart_renders_the_pinned_digest_and_the_tag_without_it() -> None:
    (pinned,) = by_kind(render(f"image.digest={DIGEST}"), "Deployment")
    (unpinned,) = by_kind(render(), "Deployment")
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    image = pinned["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/sps-dev/sps-operator:{version}@{DIGEST}"
    assert unpinned["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"ghcr.io/sps-dev/sps-operator:{version}"
    )
    # The profiling Jobs run the same pinned image.
    args = pinned["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--profiler-image=ghcr.io/sps-dev/sps-operator:{version}@{DIGEST}" in args

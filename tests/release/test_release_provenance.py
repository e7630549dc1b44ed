"""The SLSA provenance predicate `make release` writes (sps_release.provenance): what it
names, and that the same inputs give the same bytes (no clock in it)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sps_release.provenance import BUILD_TYPE, provenance_predicate

COMMIT = "a" * 40
SHA = "b" * 64


def predicate(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "version": "0.2.0",
        "commit": COMMIT,
        "dirty": False,
        "arches": ["amd64", "arm64"],
        "source_date_epoch": 1767225600,
        "builder_id": "https://example.test/run/1",
        "materials": {"Dockerfile": SHA, "pyproject.toml": "c" * 64},
        "byproducts": {"sps-operator-0.2.0-linux-amd64.spdx.json": "d" * 64},
    }
    return provenance_predicate(**{**args, **overrides})


def test_it_names_the_source_commit_the_platforms_the_inputs_and_the_builder() -> None:
    p = predicate()
    build = p["buildDefinition"]
    assert build["buildType"] == BUILD_TYPE
    source = "git+https://github.com/sps-dev/sps-operator@refs/tags/v0.2.0"
    assert build["externalParameters"]["source"] == {"uri": source, "digest": {"gitCommit": COMMIT}}
    assert build["externalParameters"]["platforms"] == ["linux/amd64", "linux/arm64"]
    assert build["internalParameters"] == {"sourceDateEpoch": 1767225600, "dirtyTree": False}
    assert build["resolvedDependencies"] == [
        {"uri": source, "digest": {"gitCommit": COMMIT}},
        {"name": "Dockerfile", "digest": {"sha256": SHA}},
        {"name": "pyproject.toml", "digest": {"sha256": "c" * 64}},
    ]
    assert p["runDetails"]["builder"] == {"id": "https://example.test/run/1"}
    assert p["runDetails"]["byproducts"] == [
        {"name": "sps-operator-0.2.0-linux-amd64.spdx.json", "digest": {"sha256": "d" * 64}}
    ]
    assert predicate(dirty=True)["buildDefinition"]["internalParameters"]["dirtyTree"] is True


def test_the_same_inputs_give_the_same_bytes() -> None:
    reordered = predicate(materials={"pyproject.toml": "c" * 64, "Dockerfile": SHA})
    assert json.dumps(predicate(), sort_keys=True) == json.dumps(reordered, sort_keys=True)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("commit", "abc123", "full git commit"),
        ("arches", [], "no architectures"),
        ("materials", {"Dockerfile": "xyz"}, "Dockerfile: not a SHA-256"),
        ("byproducts", {"a.tgz": "A" * 64}, "a.tgz: not a SHA-256"),
    ],
)
def test_it_refuses_what_is_not_a_digest(field: str, value: Any, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        predicate(**{field: value})

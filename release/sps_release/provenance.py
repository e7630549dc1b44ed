"""The build provenance `make release` writes and `make publish` attaches to the image index
as a signed in-toto attestation (`cosign attest --type slsaprovenance1`; docs/release.md):
a SLSA v1 provenance predicate. cosign wraps it in the in-toto statement whose subject is
the digest it attests, so the predicate says how, from what, and by what the image was
built, not which image. No wall-clock time in it: the same commit gives the same bytes."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

SOURCE_REPOSITORY = "https://github.com/sps-dev/sps-operator"
# What the build is: `make release` of this repository (release/release.sh).
BUILD_TYPE = f"{SOURCE_REPOSITORY}/blob/main/docs/release.md#make-release"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"

_COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def provenance_predicate(
    *,
    version: str,
    commit: str,
    dirty: bool,
    arches: Sequence[str],
    source_date_epoch: int,
    builder_id: str,
    materials: Mapping[str, str],
    byproducts: Mapping[str, str],
) -> dict[str, Any]:
    """SLSA v1 `buildDefinition` and `runDetails`. materials and byproducts map a file of
    the tree (the Dockerfile, the lock) or of dist/ (the SBOMs, the chart) to its SHA-256."""
    if not _COMMIT.fullmatch(commit):
        raise ValueError(f"not a full git commit id: {commit!r}")
    if not arches:
        raise ValueError("no architectures")
    for name, digest in {**materials, **byproducts}.items():
        if not _SHA256.fullmatch(digest):
            raise ValueError(f"{name}: not a SHA-256 hex digest: {digest!r}")
    source = f"git+{SOURCE_REPOSITORY}@refs/tags/v{version}"
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "source": {"uri": source, "digest": {"gitCommit": commit}},
                "version": version,
                "platforms": [f"linux/{arch}" for arch in arches],
            },
            "internalParameters": {
                "sourceDateEpoch": source_date_epoch,
                # ALLOW_DIRTY=1: built from uncommitted changes, not from the commit alone.
                "dirtyTree": dirty,
            },
            "resolvedDependencies": [
                {"uri": source, "digest": {"gitCommit": commit}},
                *(
                    {"name": name, "digest": {"sha256": materials[name]}}
                    for name in sorted(materials)
                ),
            ],
        },
        "runDetails": {
            "builder": {"id": builder_id},
            "byproducts": [
                {"name": name, "digest": {"sha256": byproducts[name]}}
                for name in sorted(byproducts)
            ],
        },
    }

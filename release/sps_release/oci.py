"""Reading the OCI image index the release writes: which manifest is which platform."""

from __future__ import annotations

import json
from typing import Any

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)


def platform_digests(index_json: str | bytes, wanted: list[str]) -> dict[str, str]:
    """{architecture: manifest digest} of a linux image index that holds exactly the
    `wanted` architectures, once each; ValueError says what differs."""
    try:
        index: Any = json.loads(index_json)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"the index is not JSON: {err}") from err
    if not isinstance(index, dict) or index.get("mediaType") not in INDEX_TYPES:
        raise ValueError("not an OCI image index (mediaType)")
    found: dict[str, str] = {}
    manifests = index.get("manifests")
    if not isinstance(manifests, list) or not all(isinstance(m, dict) for m in manifests):
        raise ValueError("the index has no list of manifests")
    for entry in manifests:
        platform = entry.get("platform")
        if not isinstance(platform, dict):
            raise ValueError(f"manifest {entry.get('digest')} names no platform")
        arch, system = platform.get("architecture"), platform.get("os")
        if system != "linux" or not isinstance(arch, str):
            raise ValueError(f"manifest {entry.get('digest')} is for {system}/{arch}, not linux")
        if arch in found:
            raise ValueError(f"the index holds linux/{arch} twice")
        found[arch] = str(entry.get("digest"))
    if sorted(found) != sorted(wanted):
        raise ValueError(f"the index holds {sorted(found)}, the release wants {sorted(wanted)}")
    return found

"""The krew manifest of a release: plugins/krew/sps.yaml (a krew-release-bot template)
rendered as the bot renders it, `{{ .TagName }}` as the tag and each
`{{addURIAndSha "URL" .TagName }}` as the URL and the sha256 of the archive `make release`
built for it (release/build-plugin.sh), so dist/ holds a manifest krew accepts as is."""

from __future__ import annotations

import re
from collections.abc import Mapping

_URI_AND_SHA = re.compile(r'^(\s*)\{\{addURIAndSha "([^"]+)" \.TagName \}\}$', re.M)
TAG = "{{ .TagName }}"
PLATFORMS = (("linux", "amd64"), ("linux", "arm64"), ("darwin", "amd64"), ("darwin", "arm64"))


def archive_name(tag: str, system: str, arch: str) -> str:
    return f"kubectl-sps_{tag}_{system}_{arch}.tar.gz"


def render_manifest(template: str, tag: str, sha256: Mapping[str, str]) -> str:
    """The manifest for `tag`; sha256 maps each archive's file name to its digest. A URL
    whose archive is not in sha256 is a ValueError (the release built no such archive)."""
    if not re.fullmatch(r"v\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?", tag):
        raise ValueError(f"not a release tag: {tag!r}")

    def fill(match: re.Match[str]) -> str:
        indent, uri = match.group(1), match.group(2).replace(TAG, tag)
        name = uri.rsplit("/", 1)[-1]
        if name not in sha256:
            raise ValueError(f"the manifest names {name}, which the release did not build")
        if not re.fullmatch(r"[0-9a-f]{64}", sha256[name]):
            raise ValueError(f"{name}: not a SHA-256 hex digest")
        return f"{indent}uri: {uri}\n{indent}sha256: {sha256[name]}"

    return _URI_AND_SHA.sub(fill, template).replace(TAG, tag)

"""The krew manifest of `kubectl sps` (plugins/krew/sps.yaml, a krew-release-bot template):
rendered as the bot renders it, it is a manifest krew accepts for this plugin."""

from __future__ import annotations

import hashlib
import re
import tomllib

import yaml
from ship_helpers import ROOT

MANIFEST = ROOT / "plugins" / "krew" / "sps.yaml"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def render(tag: str) -> dict:
    """What krew-release-bot makes of the template for a release tag: `{{ .TagName }}`, and
    `{{addURIAndSha "URL" .TagName }}` as the URL and the sha256 of what it downloads."""
    text = MANIFEST.read_text()

    def uri_and_sha(match: re.Match[str]) -> str:
        uri = match.group(1).replace("{{ .TagName }}", tag)
        indent = match.group(0)[: len(match.group(0)) - len(match.group(0).lstrip())]
        fake_sha = hashlib.sha256(uri.encode()).hexdigest()
        return f"{indent}uri: {uri}\n{indent}sha256: {fake_sha}"

    text = re.sub(r'^\s*\{\{addURIAndSha "([^"]+)" \.TagName \}\}$', uri_and_sha, text, flags=re.M)
    return dict(yaml.safe_load(text.replace("{{ .TagName }}", tag)))


def test_the_manifest_is_one_krew_accepts() -> None:
    manifest = render(f"v{VERSION}")
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    # The plugin's name is the executable's without `kubectl-`: pyproject's entry point.
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert f"kubectl-{manifest['metadata']['name']}" in scripts
    spec = manifest["spec"]
    assert spec["version"] == f"v{VERSION}"
    assert 0 < len(spec["shortDescription"]) <= 60
    assert spec["homepage"].startswith("https://")
    platforms = {(p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"]): p
                 for p in spec["platforms"]}  # fmt: skip
    assert set(platforms) == {(o, a) for o in ("linux", "darwin") for a in ("amd64", "arm64")}
    for (os_, arch), platform in platforms.items():
        assert platform["uri"] == (
            "https://github.com/sps-dev/sps-operator/releases/download/"
            f"v{VERSION}/kubectl-sps_v{VERSION}_{os_}_{arch}.tar.gz"
        )
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert platform["bin"] == "kubectl-sps"
        assert {f["from"] for f in platform["files"]} == {"kubectl-sps", "LICENSE"}
        assert (ROOT / "LICENSE").is_file()

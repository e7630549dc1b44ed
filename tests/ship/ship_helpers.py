"""Shared helpers of the ship tests: find helm, render the chart."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from sps_testbed.binaries import cache_dir
from waiting import wait_crd_established

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sps-operator"
# The tested Kubernetes version (the local control plane's). helm built from source
# without version ldflags would otherwise assume v1.20.
KUBE_VERSION = "v1.36.3"


def find_helm() -> Path:
    """helm from $SPS_HELM, else where the dev cluster finds its binaries (KUBEBUILDER_ASSETS,
    then the control-plane cache `make controlplane` fills), else PATH.

    A missing helm is an error, never a skip: `make test` builds it.
    """
    explicit = os.environ.get("SPS_HELM")
    if explicit:
        return Path(explicit)
    dirs = [Path(d) for d in [os.environ.get("KUBEBUILDER_ASSETS")] if d]
    dirs.append(cache_dir())
    for directory in dirs:
        candidate = directory / "helm"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    on_path = shutil.which("helm")
    if on_path:
        return Path(on_path)
    raise FileNotFoundError(
        f"helm not found (looked at $SPS_HELM, {', '.join(map(str, dirs))}, PATH); "
        "run `make controlplane` (testbed/recipes/build.sh) to build it"
    )


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    # Keep helm away from the user's config and any network repository.
    env.setdefault("HELM_CACHE_HOME", "/tmp/sps-helm-cache")
    env.setdefault("HELM_CONFIG_HOME", "/tmp/sps-helm-config")
    env.setdefault("HELM_DATA_HOME", "/tmp/sps-helm-data")
    return subprocess.run(
        [str(find_helm()), *args], capture_output=True, text=True, check=check, env=env
    )


def render(
    *set_args: str,
    release: str = "sps-operator",
    namespace: str = "sps-system",
) -> list[dict[str, Any]]:
    """`helm template` the chart with `--set` arguments; returns the rendered objects."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    args += ["--kube-version", KUBE_VERSION]
    for item in set_args:
        args += ["--set", item]
    out = helm(*args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def profile_manifest(name: str) -> str:
    """A minimal valid SpsProfile `name` (selecting Deployments labelled app=<name>), as
    YAML for `kubectl create -f -`."""
    return yaml.safe_dump(
        {
            "apiVersion": "sps.dev/v1alpha1",
            "kind": "SpsProfile",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "table": {"kind": "Diagonal", "sweep": {"maxBatchSize": 32}},
            },
        }
    )


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind]


def apply_chart_crd(kubectl: Any) -> None:
    """Server-side apply of the CRD (the chart's template has the same spec, `make crds`),
    and wait until served."""
    kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=ship-tests",
        "-f",
        str(ROOT / "crds" / "sps.dev_spsprofiles.yaml"),
    )
    wait_crd_established(kubectl)

"""What a test bed runs, built from the repo's own files and cached outside it.

- node binaries (kubelet, kube-proxy, CoreDNS, the GPU device plugin, pause):
  `testbed/recipes/build-nodes.sh`, cached by version in ~/.cache/sps-operator/nodes
- Kueue's manager and its rendered config/ (CRDs, RBAC, webhooks, Deployment):
  `testbed/recipes/build-kueue.sh`, cached by version in ~/.cache/sps-operator/kueue
- LeaderWorkerSet's manager and its rendered config/ (the same):
  `testbed/recipes/build-lws.sh`, cached by version in ~/.cache/sps-operator/lws
- containerd 2.x (daemon, runc shim, ctr): `testbed/recipes/build-containerd.sh`, cached
  by version in ~/.cache/sps-operator/containerd
- the CNCF Distribution registry: `testbed/recipes/build-registry.sh`, cached by version
  in ~/.cache/sps-operator/registry
- images (operator from the Dockerfile, the SGLang stand-in, pause, CoreDNS, Kueue, LWS):
  `testbed/images/build.sh`, OCI archives cached by a hash of their inputs in
  ~/.cache/sps-operator/images, pushed into a registry storage every bed serves a copy of
  (sps_testbed.registry.ensure_seed)
- the control plane: `sps_testbed.binaries.find_binaries` (build.sh)
- kube-router, whose network policy controller enforces NetworkPolicy on a bed started
  with it (opt-in, built on first use, not by `build_artifacts`):
  `testbed/recipes/build-kube-router.sh`, cached by version in
  ~/.cache/sps-operator/kube-router

runc, the CNI plugins and skopeo are Debian's
(`testbed/recipes/setup-host.sh --nodes`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sps_testbed.binaries import Binaries, find_binaries
from sps_testbed.registry import Image, RegistryError, ensure_seed

HOST_TOOLS = (
    "runc",
    "iptables",
    "ip",
    "unshare",
    "nsenter",
    "mount",
    "skopeo",
)
CNI_PLUGIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")


class ArtifactError(RuntimeError):
    """A binary or image could not be built or found; the message says which and why."""


@dataclass(frozen=True)
class Artifacts:
    controlplane: Binaries
    node_bin: Path
    containerd_bin: Path  # containerd, containerd-shim-runc-v2, ctr
    kueue_dir: Path  # manager, kueue.yaml (kubectl kustomize config/default), version
    lws_dir: Path  # manager, lws.yaml (kubectl kustomize config/default), version
    images: dict[str, Image]
    cni_bin: Path
    host_tools: dict[str, Path]
    registry_dir: Path  # registry (the binary), version
    registry_seed: Path  # a registry storage holding every image (registry.ensure_seed)
    chart: Path  # charts/sps-operator, which each bed pushes into its registry

    def to_json(self) -> dict[str, object]:
        return {
            "node_bin": str(self.node_bin),
            "containerd_bin": str(self.containerd_bin),
            "kueue_dir": str(self.kueue_dir),
            "lws_dir": str(self.lws_dir),
            "cni_bin": str(self.cni_bin),
            "images": {
                k: {"ref": v.ref, "archive": str(v.archive)} for k, v in self.images.items()
            },
            "host_tools": {k: str(v) for k, v in self.host_tools.items()},
            "registry_dir": str(self.registry_dir),
            "registry_seed": str(self.registry_seed),
            "chart": str(self.chart),
        }


def repo_root() -> Path:
    """The repository this package was installed from (editable install or a checkout)."""
    env = os.environ.get("SPS_TESTBED_REPO")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "testbed" / "recipes" / "build-nodes.sh").is_file():
            return parent
    raise ArtifactError(
        f"cannot find the sps-operator repository above {here}; set SPS_TESTBED_REPO"
    )


def _run_script(argv: list[str], what: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-30:])
        raise ArtifactError(
            f"building {what} failed ({' '.join(argv)}, exit {proc.returncode}):\n{tail}"
        )
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise ArtifactError(f"{' '.join(argv)} printed nothing")
    return lines[-1]


def host_tools() -> dict[str, Path]:
    found: dict[str, Path] = {}
    missing: list[str] = []
    for tool in HOST_TOOLS:
        path = shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        if path is None:
            missing.append(tool)
        else:
            found[tool] = Path(path)
    if missing:
        raise ArtifactError(
            f"missing host tools: {', '.join(missing)}; "
            "run `bash testbed/recipes/setup-host.sh --nodes`"
        )
    return found


def cni_bin_dir() -> Path:
    for d in CNI_PLUGIN_DIRS:
        if (Path(d) / "bridge").is_file() and (Path(d) / "host-local").is_file():
            return Path(d)
    raise ArtifactError(
        "no CNI plugins (bridge, host-local) in "
        + " or ".join(CNI_PLUGIN_DIRS)
        + "; run `bash testbed/recipes/setup-host.sh --nodes`"
    )


def build_artifacts() -> Artifacts:
    """Build (or find in the cache) everything a test bed needs; raise ArtifactError if not."""
    repo = repo_root()
    tools = host_tools()
    cni = cni_bin_dir()
    try:
        cp = find_binaries(build=True)
    except Exception as err:  # find_binaries raises its own error types
        raise ArtifactError(f"control-plane binaries: {err}") from err
    node_bin = Path(
        _run_script(["bash", str(repo / "testbed/recipes/build-nodes.sh")], "node binaries")
    )
    containerd_bin = Path(
        _run_script(["bash", str(repo / "testbed/recipes/build-containerd.sh")], "containerd")
    )
    kueue_dir = Path(
        _run_script(
            ["bash", str(repo / "testbed/recipes/build-kueue.sh")],
            "Kueue",
            env={**os.environ, "KUBECTL": str(cp.kubectl)},
        )
    )
    lws_dir = Path(
        _run_script(
            ["bash", str(repo / "testbed/recipes/build-lws.sh")],
            "LeaderWorkerSet",
            env={**os.environ, "KUBECTL": str(cp.kubectl)},
        )
    )
    registry_dir = Path(
        _run_script(["bash", str(repo / "testbed/recipes/build-registry.sh")], "the registry")
    )
    manifest = Path(
        _run_script(
            [
                "bash",
                str(repo / "testbed/images/build.sh"),
                str(node_bin),
                str(kueue_dir),
                str(lws_dir),
            ],
            "images",
        )
    )
    data = json.loads(manifest.read_text())
    images = {k: Image(ref=v["ref"], archive=Path(v["archive"])) for k, v in data.items()}
    for name in ("kubelet", "kube-proxy", "coredns", "sps-gpu-device-plugin", "pause"):
        if not (node_bin / name).is_file():
            raise ArtifactError(f"{node_bin / name} missing after build-nodes.sh")
    for name in ("containerd", "containerd-shim-runc-v2", "ctr"):
        if not (containerd_bin / name).is_file():
            raise ArtifactError(f"{containerd_bin / name} missing after build-containerd.sh")
    for name in ("manager", "kueue.yaml", "version"):
        if not (kueue_dir / name).is_file():
            raise ArtifactError(f"{kueue_dir / name} missing after build-kueue.sh")
    for name in ("manager", "lws.yaml", "version"):
        if not (lws_dir / name).is_file():
            raise ArtifactError(f"{lws_dir / name} missing after build-lws.sh")
    for name in ("registry", "version"):
        if not (registry_dir / name).is_file():
            raise ArtifactError(f"{registry_dir / name} missing after build-registry.sh")
    for image in images.values():
        if not image.archive.is_file():
            raise ArtifactError(f"image archive {image.archive} missing after images/build.sh")
    try:
        seed = ensure_seed(
            registry_dir / "registry",
            (registry_dir / "version").read_text().strip(),
            images,
            str(tools["skopeo"]),
        )
    except RegistryError as err:
        raise ArtifactError(f"pushing the images into the registry's seed: {err}") from err
    return Artifacts(
        controlplane=cp,
        node_bin=node_bin,
        containerd_bin=containerd_bin,
        kueue_dir=kueue_dir,
        lws_dir=lws_dir,
        images=images,
        cni_bin=cni,
        host_tools=tools,
        registry_dir=registry_dir,
        registry_seed=seed,
        chart=repo / "charts" / "sps-operator",
    )


def build_kube_router() -> Path:
    """The kube-router binary (built on first use, then cached by version)."""
    out = Path(
        _run_script(
            ["bash", str(repo_root() / "testbed/recipes/build-kube-router.sh")], "kube-router"
        )
    )
    binary = out / "kube-router"
    if not binary.is_file():
        raise ArtifactError(f"{binary} missing after build-kube-router.sh")
    return binary


@dataclass(frozen=True)
class PastRelease:
    """A past commit's tree (its chart, its Dockerfile) and its operator image."""

    commit: str
    tree: Path
    operator: Image

    @property
    def chart(self) -> Path:
        return self.tree / "charts" / "sps-operator"


# The releases the upgrade test installs before this tree's chart (tests/e2e/test_e2e_upgrade.py),
# by version: `sps-testbed build --past-releases` (`make test-tools`) builds their images
# before any test needs them. 0.1.0 is the tree before c9c618e, the first change
# CHANGELOG.md lists under Unreleased.
PAST_RELEASES = {"0.1.0": "18c8f3be64800e980440da49800f0b8a0a30c2de"}


def _past_tree(repo: Path, commit: str) -> Path:
    """`git archive` of `commit`, unpacked once into ~/.cache/sps-operator/trees/<commit>
    (no worktree: the repository's own state is left alone)."""
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sps-operator"
    tree = base / "trees" / commit
    if (tree / ".complete").is_file():
        return tree
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", commit],
        capture_output=True, check=False, timeout=120,
    )  # fmt: skip
    if archive.returncode != 0:
        raise ArtifactError(
            f"git archive {commit} in {repo} failed: {archive.stderr.decode().strip()}"
            " (a shallow clone lacks it: fetch the history, `git fetch --unshallow`)"
        )
    untar = subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout,
                           capture_output=True, check=False)  # fmt: skip
    if untar.returncode != 0:
        raise ArtifactError(f"unpacking {commit} into {tree}: {untar.stderr.decode().strip()}")
    (tree / ".complete").touch()
    return tree


def build_past_release(commit: str) -> PastRelease:
    """The operator image of a past commit, built as the bed built it then
    (`testbed/images/build-operator-at.sh`: that tree's Dockerfile FROM the bed's base),
    cached by commit; raise ArtifactError with the reason if it cannot be built."""
    repo = repo_root()
    proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", f"{commit}^{{commit}}"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise ArtifactError(f"commit {commit} is not in {repo}: {proc.stderr.strip()}")
    full = proc.stdout.strip()
    tree = _past_tree(repo, full)
    line = _run_script(
        ["bash", str(repo / "testbed/images/build-operator-at.sh"), str(tree), full],
        f"the operator image of {full[:12]}",
    )
    ref, _, archive = line.partition(" ")
    if not Path(archive).is_file():
        raise ArtifactError(f"image archive {archive} missing after build-operator-at.sh")
    return PastRelease(full, tree, Image(ref=ref, archive=Path(archive)))

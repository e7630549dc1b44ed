"""Finding (or building) the pinned control-plane binaries.

Order: `KUBEBUILDER_ASSETS` (the envtest convention: a directory with etcd,
kube-apiserver and kubectl) for whatever it holds, then the version-keyed build
cache that `testbed/recipes/build.sh` fills. What neither has is built by
build.sh, unless building is switched off; then a missing binary is an error.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Every binary the dev cluster uses; helm is only needed by chart tests and the demo.
CONTROL_PLANE_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
)
OPTIONAL_BINARIES = ("helm",)


class BinariesError(RuntimeError):
    """A control-plane binary is missing and could not be built."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    helm: Path | None

    def path_dirs(self) -> list[Path]:
        """Directories to put on PATH so `kubectl` and `helm` resolve to these builds."""
        dirs: list[Path] = []
        for exe in (self.kubectl, self.helm):
            if exe is not None and exe.parent not in dirs:
                dirs.append(exe.parent)
        return dirs


def recipe_dir() -> Path:
    """`testbed/recipes` of the source checkout (override: `SPS_CONTROLPLANE_RECIPE`)."""
    override = os.environ.get("SPS_CONTROLPLANE_RECIPE")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[1] / "recipes"


def _pin(go_mod: Path, module: str) -> str:
    for line in go_mod.read_text().splitlines():
        words = line.replace("require", " ").split()
        if len(words) >= 2 and words[0] == module:
            return words[1]
    raise BinariesError(f"no pin for {module} in {go_mod}")


def cache_dir(recipe: Path | None = None) -> Path:
    """The version-keyed bin directory build.sh writes (same rule as build.sh)."""
    recipe = recipe or recipe_dir()
    k8s = _pin(recipe / "go.mod", "k8s.io/kubernetes")
    etcd = _pin(recipe / "etcd" / "go.mod", "go.etcd.io/etcd/server/v3")
    helm = _pin(recipe / "helm" / "go.mod", "helm.sh/helm/v3")
    root = os.environ.get("SPS_CONTROLPLANE_CACHE")
    if root:
        base = Path(root)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        base = Path(xdg) / "sps-operator" / "controlplane"
    return base / f"k8s-{k8s}-etcd-{etcd}-helm-{helm}"


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _locate(dirs: list[Path]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for name in CONTROL_PLANE_BINARIES + OPTIONAL_BINARIES:
        for d in dirs:
            if _executable(d / name):
                found[name] = d / name
                break
    return found


def run_build(recipe: Path | None = None, only: list[str] | None = None, log: bool = True) -> Path:
    """Run build.sh (a no-op when everything is cached); returns the bin directory.

    `only` limits the build to those binaries (the rest come from KUBEBUILDER_ASSETS).
    """
    recipe = recipe or recipe_dir()
    script = recipe / "build.sh"
    if not script.is_file():
        raise BinariesError(
            f"control-plane build recipe not found at {script}; set KUBEBUILDER_ASSETS to a "
            "directory with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
            "kubectl, or SPS_CONTROLPLANE_RECIPE to testbed/recipes of a checkout"
        )
    targets = only or list(CONTROL_PLANE_BINARIES + OPTIONAL_BINARIES)
    if shutil.which("go") is None and not all(_executable(cache_dir(recipe) / b) for b in targets):
        raise BinariesError(
            "control-plane binaries are not cached and `go` is not on PATH to build them "
            f"(recipe {recipe}); install Go or set KUBEBUILDER_ASSETS"
        )
    env = dict(os.environ)
    if only:
        env["SPS_CONTROLPLANE_ONLY"] = " ".join(only)
    proc = subprocess.run(
        ["bash", str(script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=None if log else subprocess.PIPE,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        detail = "" if log else f":\n{proc.stderr[-4000:]}"
        raise BinariesError(f"{script} failed with exit code {proc.returncode}{detail}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise BinariesError(f"{script} printed no bin directory")
    return Path(lines[-1])


def find_binaries(build: bool = True) -> Binaries:
    """The binaries to run, building the missing ones with build.sh when `build` is true."""
    dirs: list[Path] = []
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        dirs.append(Path(assets))
    # Without the recipe (an installed package) KUBEBUILDER_ASSETS must hold everything.
    with contextlib.suppress(OSError, BinariesError):
        dirs.append(cache_dir())
    found = _locate(dirs)
    missing = [b for b in CONTROL_PLANE_BINARIES if b not in found]
    if missing and build:
        print(f"sps-operator: building control-plane binaries {missing}", file=sys.stderr)
        # build.sh skips what KUBEBUILDER_ASSETS holds; `only` keeps it to what is missing.
        dirs.append(run_build(only=missing + [b for b in OPTIONAL_BINARIES if b not in found]))
        found = _locate(dirs)
        missing = [b for b in CONTROL_PLANE_BINARIES if b not in found]
    elif build and "helm" not in found and shutil.which("go") is not None:
        # Chart tests and the demo need helm; the control plane does not, so a failed
        # helm build is not fatal here (helm stays None and its users say so).
        with contextlib.suppress(BinariesError, OSError):
            dirs.append(run_build(only=["helm"]))
            found = _locate(dirs)
    if "helm" not in found and shutil.which("helm"):
        found["helm"] = Path(str(shutil.which("helm")))
    if missing:
        where = ", ".join(str(d) for d in dirs) or "(nowhere)"
        raise BinariesError(
            f"control-plane binaries missing: {', '.join(missing)} (looked in {where}); "
            "run testbed/recipes/build.sh or set KUBEBUILDER_ASSETS"
        )
    return Binaries(
        etcd=found["etcd"],
        kube_apiserver=found["kube-apiserver"],
        kube_controller_manager=found["kube-controller-manager"],
        kube_scheduler=found["kube-scheduler"],
        kubectl=found["kubectl"],
        helm=found.get("helm"),
    )

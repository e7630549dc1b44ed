"""`python -m sps_release COMMAND`: the file and process work of `make release` around the
pure modules (release/release.sh calls it; docs/release.md)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sps_release.chart import pin_image_digest
from sps_release.checksums import format_sums, parse_sums
from sps_release.elf import HEADER_SIZE, elf_architecture, foreign_binaries
from sps_release.krew import render_manifest
from sps_release.lock import build_requirements, image_requirements, plugin_requirements
from sps_release.oci import platform_digests
from sps_release.provenance import provenance_predicate
from sps_release.reproducible import normalize_tar_gz
from sps_release.sbom import Component, debian_packages, python_distribution, spdx_document
from sps_release.versions import IMAGE_REPOSITORY, Sources, disagreements, package_version

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sps-operator"
SUMS = "SHA256SUMS"
# Who built it when SPS_RELEASE_BUILDER_ID does not say (CI sets it to the workflow run).
BUILDER_ID = "https://github.com/sps-dev/sps-operator/blob/main/release/release.sh"


def fail(message: str) -> int:
    print(f"sps-release: {message}", file=sys.stderr)
    return 1


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout


def sources(root: Path) -> Sources:
    return Sources(
        pyproject=(root / "pyproject.toml").read_text(),
        chart_yaml=(root / "charts/sps-operator/Chart.yaml").read_text(),
        changelog=(root / "CHANGELOG.md").read_text(),
        dockerfile=(root / "Dockerfile").read_text(),
    )


def cmd_check(args: argparse.Namespace) -> int:
    """Prints the version when the tree may be released (clean, versions agree)."""
    problems = disagreements(sources(ROOT), tag=args.tag or None)
    dirty = _git("status", "--porcelain", "--untracked-files=normal").strip()
    if dirty and not args.allow_dirty:
        problems.append(
            "the tree has uncommitted changes (a release is built from a commit): commit or "
            "remove them, or set ALLOW_DIRTY=1 for a build that is not a release:\n" + dirty
        )
    if problems:
        return fail("cannot release:\n- " + "\n- ".join(problems))
    if dirty:
        print("sps-release: ALLOW_DIRTY=1: building from a dirty tree", file=sys.stderr)
    print(package_version((ROOT / "pyproject.toml").read_text()))
    return 0


def cmd_python_dists(args: argparse.Namespace) -> int:
    """The sdist from a clean export of HEAD (`git archive`, or the work tree with
    --allow-dirty), then the wheel from the unpacked sdist, so the sdist is complete
    (`python -m build --no-isolation`: the venv has pyproject's build requirements, `make
    setup`; build refuses when one is missing, and nothing is downloaded)."""
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sps-release-") as tmp:
        src = Path(tmp) / "src"
        if args.allow_dirty:
            files = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard")
            for name in filter(None, files.split("\0")):
                if (ROOT / name).is_file():
                    (src / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(ROOT / name, src / name)
        else:
            src.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", "--format=tar", "HEAD"],
                capture_output=True,
                check=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        proc = subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        return fail(f"python -m build failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    for sdist in out.glob("*.tar.gz"):
        sdist.write_bytes(normalize_tar_gz(sdist.read_bytes(), epoch))
    print(proc.stdout.strip().splitlines()[-1])
    return 0


def cmd_chart(args: argparse.Namespace) -> int:
    """`helm package` of a copy of the chart with image.digest pinned."""
    out = Path(args.out).resolve()
    with tempfile.TemporaryDirectory(prefix="sps-chart-") as tmp:
        chart = Path(tmp) / "sps-operator"
        # symlinks=False: a vendored or packaged chart carries files, not links.
        shutil.copytree(CHART, chart, symlinks=False)
        values = chart / "values.yaml"
        values.write_text(pin_image_digest(values.read_text(), args.digest))
        proc = subprocess.run(
            [args.helm, "package", str(chart), "--destination", str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        return fail(f"helm package failed: {proc.stderr.strip()}")
    print(proc.stdout.strip().rsplit(" ", 1)[-1])
    return 0


def _rootfs_files(rootfs: Path) -> list[Path]:
    return [p for p in rootfs.rglob("*") if p.is_file() and not p.is_symlink()]


def cmd_sbom(args: argparse.Namespace) -> int:
    """The SPDX document of one architecture's unpacked image; refuses an image with a
    binary of another architecture in it."""
    rootfs = Path(args.rootfs)
    index = Path(args.index).read_bytes()
    digest = platform_digests(index, args.arches)[args.arch]
    components: list[Component] = debian_packages(
        (rootfs / "var/lib/dpkg/status").read_text(errors="replace")
    )
    machines: dict[str, str] = {}
    for path in _rootfs_files(rootfs):
        rel = str(path.relative_to(rootfs))
        if path.name == "METADATA" and path.parent.name.endswith(".dist-info"):
            dist = python_distribution(path.read_text(errors="replace"))
            if dist is not None:
                components.append(dist)
        if rel.startswith(("usr/", "lib/", "bin/", "sbin/")):
            with open(path, "rb") as f:
                arch = elf_architecture(f.read(HEADER_SIZE))
            if arch is not None:
                machines[rel] = arch
    foreign = foreign_binaries(machines, args.arch)
    if foreign:
        listed = ", ".join(f"{p} ({a})" for p, a in list(foreign.items())[:10])
        return fail(f"the linux/{args.arch} image holds binaries of another CPU: {listed}")
    python = [p for p in machines if p.startswith("usr/bin/python3")]
    wheels_so = [p for p in machines if "-packages/" in p and p.endswith(".so")]
    if not python or not wheels_so:
        return fail(f"the linux/{args.arch} image has no python3 or no compiled wheels to check")
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))
    document = spdx_document(
        image=IMAGE_REPOSITORY,
        version=args.version,
        arch=args.arch,
        image_digest=digest,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
        components=components,
    )
    Path(args.out).write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(
        f"linux/{args.arch}: {len(components)} packages; {len(machines)} ELF files, all "
        f"{args.arch} (python: {python[0]}, {len(wheels_so)} .so files of wheels)",
        file=sys.stderr,
    )
    return 0


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cmd_checksums(args: argparse.Namespace) -> int:
    dist = Path(args.dist)
    files = sorted(p for p in dist.iterdir() if p.is_file() and p.name != SUMS)
    (dist / SUMS).write_text(format_sums({p.name: _sha256(p) for p in files}))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Every file in dist/ is in SHA256SUMS with its digest, and nothing else is."""
    dist = Path(args.dist)
    try:
        sums = parse_sums((dist / SUMS).read_text())
    except (OSError, ValueError) as err:
        return fail(f"{dist / SUMS}: {err}")
    present = {p.name for p in dist.iterdir() if p.is_file() and p.name != SUMS}
    problems = [f"{n}: in {SUMS} but missing" for n in sorted(set(sums) - present)]
    problems += [f"{n}: not in {SUMS}" for n in sorted(present - set(sums))]
    changed = [n for n in sorted(present & set(sums)) if _sha256(dist / n) != sums[n]]
    problems += [f"{n}: checksum differs" for n in changed]
    if problems:
        return fail(f"{dist} does not match {SUMS}:\n- " + "\n- ".join(problems))
    return 0


def cmd_platforms(args: argparse.Namespace) -> int:
    """`<arch> <manifest digest>` per line of an index that holds exactly --arches."""
    found = platform_digests(Path(args.index).read_bytes(), args.arches)
    print("".join(f"{arch} {found[arch]}\n" for arch in args.arches), end="")
    return 0


def cmd_lock_inputs(args: argparse.Namespace) -> int:
    """requirements/image.in and build.in from pyproject.toml (what `make lock` pins)."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    out = Path(args.out)
    header = "# Generated from pyproject.toml by `make lock` (release/lock.sh). Do not edit.\n"
    (out / "image.in").write_text(header + "\n".join(image_requirements(pyproject)) + "\n")
    (out / "build.in").write_text(header + "\n".join(build_requirements(pyproject)) + "\n")
    (out / "plugin.in").write_text(header + "\n".join(plugin_requirements(pyproject)) + "\n")
    return 0


def cmd_krew_manifest(args: argparse.Namespace) -> int:
    """plugins/krew/sps.yaml with the URL and sha256 of each archive in DIST."""
    dist = Path(args.dist)
    digests = {p.name: _sha256(p) for p in sorted(dist.glob("kubectl-sps_*.tar.gz"))}
    template = (ROOT / "plugins/krew/sps.yaml").read_text()
    Path(args.out).write_text(render_manifest(template, args.tag, digests))
    return 0


def cmd_helm(args: argparse.Namespace) -> int:
    """The path of helm: $HELM, else the test bed's pinned build (built from the Go module
    proxy when missing, helm alone: testbed/recipes/build.sh)."""
    from sps_testbed.binaries import BinariesError, cache_dir, run_build

    explicit = os.environ.get("HELM")
    if explicit:
        print(explicit)
        return 0
    cached = cache_dir() / "helm"
    try:
        print(cached if cached.is_file() else run_build(only=["helm"], log=False) / "helm")
    except (BinariesError, OSError) as err:
        return fail(f"no helm: {err}; set HELM=/path/to/helm")
    return 0


# The files of the tree the image is built from, beside the commit, in the provenance.
PROVENANCE_MATERIALS = (
    "Dockerfile",
    "pyproject.toml",
    "requirements/image.txt",
    "requirements/build.txt",
    "release/build-image.sh",
)


def cmd_provenance(args: argparse.Namespace) -> int:
    """The SLSA provenance predicate of the release in DIST (after its SBOMs and chart)."""
    dist = Path(args.dist)
    materials = {
        name: _sha256(ROOT / name) for name in PROVENANCE_MATERIALS if (ROOT / name).is_file()
    }
    byproducts = {
        p.name: _sha256(p)
        for p in sorted(dist.iterdir())
        if p.is_file() and p.name.endswith((".spdx.json", ".tgz", ".whl", ".tar.gz"))
    }
    predicate = provenance_predicate(
        version=args.version,
        commit=_git("rev-parse", "HEAD").strip(),
        dirty=bool(_git("status", "--porcelain", "--untracked-files=normal").strip()),
        arches=args.arches,
        source_date_epoch=int(os.environ.get("SOURCE_DATE_EPOCH", "0")),
        builder_id=os.environ.get("SPS_RELEASE_BUILDER_ID") or BUILDER_ID,
        materials=materials,
        byproducts=byproducts,
    )
    Path(args.out).write_text(json.dumps(predicate, indent=1, sort_keys=True) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sps-release", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="versions agree, tree clean; prints the version")
    p.add_argument("--tag", default="", help="the git tag being released (v<version>)")
    p.add_argument("--allow-dirty", action="store_true")
    p.set_defaults(run=cmd_check)
    p = sub.add_parser("python-dists", help="sdist, then the wheel from it")
    p.add_argument("out")
    p.add_argument("--allow-dirty", action="store_true")
    p.set_defaults(run=cmd_python_dists)
    p = sub.add_parser("chart", help="helm package with image.digest pinned")
    p.add_argument("out")
    p.add_argument("--digest", required=True)
    p.add_argument("--helm", default="helm")
    p.set_defaults(run=cmd_chart)
    p = sub.add_parser("sbom", help="SPDX JSON of one architecture's unpacked image")
    p.add_argument("rootfs")
    p.add_argument("--index", required=True, help="the image index JSON")
    p.add_argument("--arch", required=True)
    p.add_argument("--arches", nargs="+", required=True, help="every architecture released")
    p.add_argument("--version", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(run=cmd_sbom)
    p = sub.add_parser("provenance", help="SLSA provenance predicate of the release in DIST")
    p.add_argument("dist")
    p.add_argument("--version", required=True)
    p.add_argument("--arches", nargs="+", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(run=cmd_provenance)
    p = sub.add_parser("platforms", help="the manifest digest of each architecture")
    p.add_argument("index", help="the image index JSON")
    p.add_argument("--arches", nargs="+", required=True)
    p.set_defaults(run=cmd_platforms)
    p = sub.add_parser("lock-inputs", help="requirements/*.in from pyproject.toml")
    p.add_argument("out")
    p.set_defaults(run=cmd_lock_inputs)
    p = sub.add_parser("krew-manifest", help="the krew manifest of the archives in DIST")
    p.add_argument("dist")
    p.add_argument("--tag", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(run=cmd_krew_manifest)
    p = sub.add_parser("helm", help="print the path of helm (building it if needed)")
    p.set_defaults(run=cmd_helm)
    p = sub.add_parser("checksums", help=f"write {SUMS} over every file in DIST")
    p.add_argument("dist")
    p.set_defaults(run=cmd_checksums)
    p = sub.add_parser("verify", help=f"check DIST against its {SUMS}")
    p.add_argument("dist")
    p.set_defaults(run=cmd_verify)
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (OSError, ValueError, RuntimeError, subprocess.CalledProcessError) as err:
        return fail(str(err))

"""`make release-check`: times `make release` (release/release.sh) and checks what it
built beyond the unit tests' reach, then prints the figures docs/release.md records.

Checks: dist/ matches SHA256SUMS; the index holds linux/amd64 and linux/arm64; each
architecture's SBOM lists that architecture's python3 and the operator's distribution;
and in each architecture's image `sps-operator --version` prints the version, the arm64
one under qemu-aarch64 (binfmt_misc; release/setup-host.sh). Every ELF file of each image
being of its CPU is checked by the release itself (`sps_release sbom`), not again here.

Usage: python bench/release_check.py [--no-build]   (exit 1 on a failed check)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "release"))

from sps_release.cli import main as release_cli  # noqa: E402
from sps_release.oci import platform_digests  # noqa: E402

ARCHES = ["amd64", "arm64"]


def buildah_env() -> dict[str, str]:
    cache = Path(
        os.environ.get("SPS_IMAGES_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sps-operator/images"
    )
    return {
        **os.environ,
        "CONTAINERS_CONF": str(cache / "containers/containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(cache / "containers/storage.conf"),
    }


def run_version(version: str, arch: str) -> tuple[str, float]:
    """`sps-operator --version` inside the image of `arch`, chrooted into its mounted root
    (a foreign CPU's binaries run through binfmt_misc's qemu handler)."""
    env = buildah_env()

    def buildah(*args: str) -> str:
        return subprocess.run(
            ["buildah", *args], capture_output=True, text=True, check=True, env=env
        ).stdout.strip()

    container = buildah("from", f"localhost/sps-release/sps-operator:{version}-{arch}")
    try:
        rootfs = buildah("mount", container)
        started = time.monotonic()
        out = subprocess.run(
            [
                shutil.which("chroot", path=os.environ["PATH"] + ":/usr/sbin:/sbin") or "chroot",
                rootfs,
                "/usr/local/bin/sps-operator",
                "--version",
            ],
            capture_output=True,
            text=True,
            check=False,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp"},
        )
        took = time.monotonic() - started
        if out.returncode != 0:
            raise RuntimeError(f"linux/{arch}: sps-operator --version failed: {out.stderr}")
        return out.stdout.strip(), took
    finally:
        subprocess.run(["buildah", "umount", container], capture_output=True, env=env)
        subprocess.run(["buildah", "rm", container], capture_output=True, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-build", action="store_true", help="check dist/ as it is")
    args = parser.parse_args()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    dist = ROOT / "dist"
    if not args.no_build:
        started = time.monotonic()
        subprocess.run(["bash", str(ROOT / "release/release.sh")], check=True)
        print(f"make release: {time.monotonic() - started:.0f} s")
    failures: list[str] = []
    if release_cli(["verify", str(dist)]) != 0:
        failures.append("dist/ does not match SHA256SUMS")
    index = subprocess.run(
        [
            "skopeo",
            "inspect",
            "--raw",
            f"oci-archive:{dist}/sps-operator-{version}.oci.tar:{version}",
        ],
        capture_output=True,
        check=True,
    ).stdout
    digests = platform_digests(index, ARCHES)
    pinned = (dist / f"sps-operator-{version}.index-digest").read_text().strip()
    print(f"index {pinned}: " + ", ".join(f"{a} {d}" for a, d in sorted(digests.items())))
    for arch in ARCHES:
        sbom = json.loads((dist / f"sps-operator-{version}-linux-{arch}.spdx.json").read_text())
        purls = [r["referenceLocator"] for p in sbom["packages"] for r in p["externalRefs"]]
        debs = [p for p in purls if p.startswith("pkg:deb/debian/python3.11-minimal@")]
        if not debs or f"arch={arch}" not in debs[0]:
            failures.append(f"linux/{arch} SBOM: no python3.11-minimal of {arch}: {debs}")
        if f"pkg:pypi/sps-operator@{version}" not in purls:
            failures.append(f"linux/{arch} SBOM: no sps-operator {version}")
        if sbom["packages"][0]["checksums"][0]["checksumValue"] != digests[arch][7:]:
            failures.append(f"linux/{arch} SBOM: not of the image in the index")
        print(f"linux/{arch} SBOM: {len(sbom['packages']) - 1} packages")
        try:
            out, took = run_version(version, arch)
        except (RuntimeError, subprocess.CalledProcessError) as err:
            failures.append(str(err))
            continue
        print(f"linux/{arch}: `sps-operator --version` -> {out!r} in {took:.1f} s")
        if out != f"sps-operator {version}":
            failures.append(f"linux/{arch}: --version printed {out!r}")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""What the test bed's images cost every node: their layers' sizes, and the time of every
node pulling them.

1. Each image archive `testbed/images/build.sh` made (`sps-testbed build`): every layer's
   compressed size (what a node downloads) and unpacked size (what its containerd writes).
2. With a bed attached (under `sps-testbed run`): every node pulls the operator and SGLang
   images at once, as the demo's prefetch does, and this waits for the last; the wall time
   of the pulls. `/usr/bin/time -v` around `sps-testbed run` gives the CPU of the whole bed
   (start, pulls, stop). Compare two checkouts by running it in each, one after the other.

Run:  flock /tmp/sps-bed.lock /usr/bin/time -v .venv/bin/sps-testbed run -- \\
        .venv/bin/python bench/bed_image_pulls.py
      .venv/bin/python bench/bed_image_pulls.py --sizes-only   # no bed
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tarfile
import time
from pathlib import Path

from sps_testbed.artifacts import build_artifacts
from sps_testbed.cluster import RealNodeCluster


def layer_sizes(archive: Path) -> list[tuple[int, int]]:
    """(compressed, unpacked) bytes of each layer of the first image in an OCI archive."""
    with tarfile.open(archive) as tar:

        def read(name: str) -> bytes:
            member = tar.extractfile(name)
            assert member is not None, name
            return member.read()

        def blob(digest: str) -> bytes:
            return read("blobs/sha256/" + digest.split(":", 1)[1])

        index = json.loads(read("index.json"))
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        sizes = []
        for layer in manifest["layers"]:
            data = blob(layer["digest"])
            unpacked = len(gzip.decompress(data)) if "gzip" in layer["mediaType"] else len(data)
            sizes.append((len(data), unpacked))
        return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-only", action="store_true", help="no bed: the sizes alone")
    args = parser.parse_args()
    images = build_artifacts().images
    for role in ("operator", "sglang"):
        sizes = layer_sizes(images[role].archive)
        layers = ", ".join(f"{c / 1e6:.1f}/{u / 1e6:.1f}" for c, u in sizes)
        total_c, total_u = sum(c for c, _ in sizes), sum(u for _, u in sizes)
        print(f"{role}: {total_c / 1e6:.1f} MB compressed, {total_u / 1e6:.1f} MB unpacked")
        print(f"  layers (MB compressed/unpacked): {layers}")
    if args.sizes_only:
        return 0
    bed = RealNodeCluster.attach(Path(os.environ["SPS_TESTBED_ATTACH"]))
    t0 = time.monotonic()
    codes = [p.wait() for p in bed.prefetch_images(["operator", "sglang"])]
    print(f"pulls on {len(codes)} nodes: exit codes {codes}, {time.monotonic() - t0:.1f} s")
    return max(codes)


if __name__ == "__main__":
    raise SystemExit(main())

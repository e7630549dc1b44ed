"""Rewrite an OCI archive (`oci-archive:` as buildah writes it) in place with every gzip
layer stored uncompressed (`application/vnd.oci.image.layer.v1.tar`): the manifests name the
new blobs, the index the new manifests; the config (its `diff_ids` are the uncompressed
digests already) and everything else are unchanged.

Why: every node of every bed pulls the images from the bed's registry, and a gzip layer
costs each node its decompression (about 3 CPU-s of the operator's and SGLang's ~640 MB),
dozens of nodes a `make test`. buildah 1.28's `push --disable-compression` and skopeo
1.9's `--dest-decompress` still write gzip layers into an oci-archive.

Usage: uncompress_layers.py ARCHIVE"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

GZIP_SUFFIX = "+gzip"
MANIFEST_TYPES = {
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
}
CHUNK = 1 << 20


def _blob(root: Path, digest: str) -> Path:
    algorithm, hexdigest = digest.split(":", 1)
    return root / "blobs" / algorithm / hexdigest


def _write_blob(root: Path, data: bytes) -> dict[str, Any]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    _blob(root, digest).write_bytes(data)
    return {"digest": digest, "size": len(data)}


def _uncompress(root: Path, layer: dict[str, Any]) -> dict[str, Any]:
    source = _blob(root, layer["digest"])
    digest = hashlib.sha256()
    size = 0
    with (
        tempfile.NamedTemporaryFile(dir=source.parent, delete=False) as out,
        gzip.open(source, "rb") as compressed,
    ):
        while chunk := compressed.read(CHUNK):
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
    target = _blob(root, "sha256:" + digest.hexdigest())
    Path(out.name).rename(target)
    return {
        **layer,
        "mediaType": layer["mediaType"][: -len(GZIP_SUFFIX)],
        "digest": "sha256:" + digest.hexdigest(),
        "size": size,
    }


def _rewrite_manifest(root: Path, descriptor: dict[str, Any]) -> dict[str, Any]:
    manifest = json.loads(_blob(root, descriptor["digest"]).read_bytes())
    layers = manifest.get("layers") or []
    if not any(str(layer.get("mediaType", "")).endswith(GZIP_SUFFIX) for layer in layers):
        return descriptor
    manifest["layers"] = [
        _uncompress(root, layer) if layer["mediaType"].endswith(GZIP_SUFFIX) else layer
        for layer in layers
    ]
    return {**descriptor, **_write_blob(root, json.dumps(manifest, separators=(",", ":")).encode())}


def _referenced(root: Path, index: dict[str, Any]) -> set[str]:
    keep = set()
    for descriptor in index["manifests"]:
        keep.add(descriptor["digest"])
        manifest = json.loads(_blob(root, descriptor["digest"]).read_bytes())
        keep.add(manifest["config"]["digest"])
        keep.update(layer["digest"] for layer in manifest.get("layers") or [])
    return keep


def uncompress(archive: Path) -> None:
    with tempfile.TemporaryDirectory(dir=archive.parent) as tmp:
        root = Path(tmp) / "oci"
        root.mkdir()
        subprocess.run(["tar", "-xf", str(archive), "-C", str(root)], check=True)
        index = json.loads((root / "index.json").read_text())
        for position, descriptor in enumerate(index["manifests"]):
            if descriptor.get("mediaType") not in MANIFEST_TYPES:
                kind = descriptor.get("mediaType")
                raise SystemExit(f"{archive}: {kind} is not an image manifest")
            index["manifests"][position] = _rewrite_manifest(root, descriptor)
        (root / "index.json").write_text(json.dumps(index, separators=(",", ":")))
        keep = _referenced(root, index)
        for blob in (root / "blobs" / "sha256").iterdir():
            if f"sha256:{blob.name}" not in keep:
                blob.unlink()
        partial = archive.with_name(archive.name + ".uncompressed")
        names = sorted(p.name for p in root.iterdir())
        subprocess.run(["tar", "-cf", str(partial), "-C", str(root), *names], check=True)
        shutil.move(partial, archive)


if __name__ == "__main__":
    uncompress(Path(sys.argv[1]))

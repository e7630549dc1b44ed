"""testbed/images/uncompress_layers.py: an OCI archive's gzip layers stored uncompressed,
every descriptor naming the bytes it points at, the config and its diff_ids untouched."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location(
    "uncompress_layers", ROOT / "testbed/images/uncompress_layers.py"
)
assert SPEC is not None and SPEC.loader is not None
uncompress_layers = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(uncompress_layers)

LAYER = "application/vnd.oci.image.layer.v1.tar"


def _layer_tar(name: str, text: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
    return out.getvalue()


def _archive(tmp: Path, layers: list[tuple[str, bytes]]) -> tuple[Path, list[bytes], str]:
    """An oci-archive of one image: `layers` as (mediaType, uncompressed tar)."""
    root = tmp / "layout"
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> dict[str, Any]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    raw = [tar for _, tar in layers]
    config = json.dumps(
        {"rootfs": {"type": "layers", "diff_ids": [put(t)["digest"] for t in raw]}}
    ).encode()
    descriptors = []
    for kind, tar in layers:
        data = gzip.compress(tar, mtime=0) if kind.endswith("+gzip") else tar
        descriptors.append({"mediaType": kind, **put(data)})
    config_descriptor = {"mediaType": "application/vnd.oci.image.config.v1+json", **put(config)}
    manifest = json.dumps(
        {"schemaVersion": 2, "config": config_descriptor, "layers": descriptors}
    ).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                **put(manifest),
                "annotations": {"org.opencontainers.image.ref.name": "x:1"},
            }
        ],
    }
    (root / "index.json").write_text(json.dumps(index))
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    archive = tmp / "image.tar"
    subprocess.run(["tar", "-cf", str(archive), "-C", str(root), "."], check=True)
    return archive, raw, config_descriptor["digest"]


def _read(archive: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, bytes]]:
    with tarfile.open(archive) as tar:
        files = {
            m.name.removeprefix("./"): tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }
    index = json.loads(files["index.json"])
    manifest_digest = index["manifests"][0]["digest"].split(":")[1]
    return index, json.loads(files[f"blobs/sha256/{manifest_digest}"]), files


def test_gzip_layers_become_uncompressed_and_every_digest_holds(tmp_path: Path) -> None:
    first, second = _layer_tar("a", b"alpha" * 1000), _layer_tar("b", b"beta")
    archive, raw, config = _archive(tmp_path, [(LAYER + "+gzip", first), (LAYER, second)])
    uncompress_layers.uncompress(archive)
    index, manifest, files = _read(archive)
    assert [layer["mediaType"] for layer in manifest["layers"]] == [LAYER, LAYER]
    for layer, tar in zip(manifest["layers"], raw, strict=True):
        blob = files[f"blobs/sha256/{layer['digest'].split(':')[1]}"]
        assert blob == tar and layer["size"] == len(tar)
        assert layer["digest"] == "sha256:" + hashlib.sha256(blob).hexdigest()
    descriptor = index["manifests"][0]
    manifest_bytes = files[f"blobs/sha256/{descriptor['digest'].split(':')[1]}"]
    assert descriptor["size"] == len(manifest_bytes)
    assert descriptor["annotations"] == {"org.opencontainers.image.ref.name": "x:1"}
    assert manifest["config"]["digest"] == config  # diff_ids: the uncompressed digests already
    # No blob nothing names (the gzip one) is left behind.
    named = {descriptor["digest"], config, *(layer["digest"] for layer in manifest["layers"])}
    blobs = {f"sha256:{n.split('/')[-1]}" for n in files if n.startswith("blobs/")}
    assert blobs == named


def test_an_archive_without_gzip_layers_is_left_as_it_was(tmp_path: Path) -> None:
    archive, _, _ = _archive(tmp_path, [(LAYER, _layer_tar("a", b"x"))])
    before = _read(archive)[:2]
    uncompress_layers.uncompress(archive)
    assert _read(archive)[:2] == before

"""`make publish` signs what it pushes (release/publish.sh; docs/release.md "Signatures"),
run for real: a dist/ as `make release` lays it out, but with a two-file image index (the
real one takes minutes under qemu), the real chart, SBOMs and provenance; published to a
Distribution registry on loopback (the bed's pinned build) with the pinned cosign and a
throwaway key pair. Then `cosign verify` passes for the signed index, its platforms and
the chart, and fails for an image pushed unsigned, for the tag moved to an altered image,
and against another key; `verify-attestation` returns the SBOM and the provenance. Every
cosign call runs with a proxy that refuses connections: signing and verifying are offline."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ship_helpers import find_helm

from sps_testbed.registry import loopback_registry

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
ARCHES = ("amd64", "arm64")
REPO = "sps-dev/sps-operator"
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
PASSWORD = "throwaway"
# Any connection but the loopback registry's would fail: nothing reaches Rekor or Fulcio.
OFFLINE = {
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1",
}

pytestmark = pytest.mark.slow


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:  # an error, never a skip: release/setup-host.sh installs it
        raise FileNotFoundError(f"{name} not found: run `make release-host`")
    return found


def _build_script(name: str) -> Path:
    """The Go tools' build scripts (testbed/recipes/)."""
    for path in sorted(ROOT.glob(f"testbed/**/{name}")):
        if path.is_file():
            return path
    raise FileNotFoundError(name)


def _run(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, **kw)


@pytest.fixture(scope="module")
def cosign() -> str:
    built = _run(["bash", str(ROOT / "release/build-cosign.sh")])
    assert built.returncode == 0, built.stderr
    return built.stdout.strip()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    built = _run(["bash", str(_build_script("build-registry.sh"))])
    assert built.returncode == 0, built.stderr
    work = tmp_path_factory.mktemp("registry")
    binary = Path(built.stdout.strip()) / "registry"
    with loopback_registry(binary, work / "storage", work / "registry.log") as addr:
        yield addr


def _keys(cosign: str, where: Path) -> tuple[Path, Path]:
    where.mkdir()
    env = {**os.environ, "COSIGN_PASSWORD": PASSWORD}
    made = _run([cosign, "generate-key-pair"], cwd=where, env=env)
    assert made.returncode == 0, made.stderr
    return where / "cosign.key", where / "cosign.pub"


def _blob(blobs: Path, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def oci_archive(out: Path, tag: str, salt: str) -> str:
    """A two-platform image index (one small layer each) in an OCI archive; its digest."""
    layout = out.with_suffix(".layout")
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    manifests = []
    for arch in ARCHES:
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as tar:
            content = f"sps-operator {arch} {salt}\n".encode()
            info = tarfile.TarInfo("etc/sps-release-test")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        layer = gzip.compress(raw.getvalue(), mtime=0)
        config = {
            "architecture": arch,
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(raw.getvalue()).hexdigest()}"]},  # noqa: E501
        }  # fmt: skip
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                **_blob(blobs, json.dumps(config).encode()),
            },
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **_blob(blobs, layer)}
            ],
        }
        manifests.append(
            {
                "mediaType": MANIFEST,
                **_blob(blobs, json.dumps(manifest).encode()),
                "platform": {"architecture": arch, "os": "linux"},
            }
        )
    index = _blob(
        blobs, json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": manifests}).encode()
    )
    top = {
        "schemaVersion": 2,
        "manifests": [
            {"mediaType": INDEX, **index, "annotations": {"org.opencontainers.image.ref.name": tag}}
        ],
    }  # fmt: skip
    (layout / "index.json").write_text(json.dumps(top))
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    with tarfile.open(out, "w") as tar:
        for path in sorted(layout.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(layout)), recursive=False)
    shutil.rmtree(layout)
    return str(index["digest"])


def _rel(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "release"), "SOURCE_DATE_EPOCH": "1767225600"}
    done = _run([sys.executable, "-m", "sps_release", *args], env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def make_dist(dist: Path, helm: Path) -> str:
    """dist/ as `make release` leaves it (small image); the index digest."""
    dist.mkdir()
    digest = oci_archive(dist / f"sps-operator-{VERSION}.oci.tar", VERSION, "released")
    (dist / f"sps-operator-{VERSION}.index-digest").write_text(digest + "\n")
    for arch in ARCHES:
        sbom = {
            "spdxVersion": "SPDX-2.3",
            "SPDXID": "SPDXRef-DOCUMENT",
            "name": f"sps-operator-{VERSION}-linux-{arch}",
            "packages": [{"SPDXID": "SPDXRef-image", "name": "sps-operator", "versionInfo": arch}],
        }
        (dist / f"sps-operator-{VERSION}-linux-{arch}.spdx.json").write_text(json.dumps(sbom))
    _rel("chart", str(dist), "--digest", digest, "--helm", str(helm))
    _rel(
        "provenance", str(dist), "--version", VERSION, "--arches", *ARCHES,
        "--out", str(dist / f"sps-operator-{VERSION}.provenance.json"),
    )  # fmt: skip
    _rel("checksums", str(dist))
    return digest


@pytest.fixture(scope="module")
def published(
    tmp_path_factory: pytest.TempPathFactory, cosign: str, registry: str
) -> dict[str, Any]:
    """`make publish` of a signed small release into the loopback registry."""
    work = tmp_path_factory.mktemp("publish")
    helm = find_helm()
    key, pub = _keys(cosign, work / "keys")
    _, other_pub = _keys(cosign, work / "other-keys")
    digest = make_dist(work / "dist", helm)
    env = {
        **os.environ,
        **OFFLINE,
        "REGISTRY": registry,
        "PLAIN_HTTP": "1",
        "DIST": str(work / "dist"),
        "PYTHON": sys.executable,
        "HELM": str(helm),
        "COSIGN": cosign,
        "COSIGN_KEY": str(key),
        "COSIGN_PASSWORD": PASSWORD,
    }
    done = _run(["bash", str(ROOT / "release/publish.sh")], env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return {
        "work": work, "digest": digest, "pub": pub, "other_pub": other_pub,
        "dist": work / "dist", "out": done.stdout + done.stderr,
    }  # fmt: skip


def verify(
    cosign: str, registry: str, pub: Path, ref: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """`cosign verify` as docs/release.md gives it (plus the plain-HTTP flag of this registry)."""
    return _run(
        [cosign, *extra[:1], "--key", str(pub), "--insecure-ignore-tlog=true",
         "--allow-http-registry", *extra[1:], f"{registry}/{ref}"],
        env={**os.environ, **OFFLINE},
    )  # fmt: skip


def _payloads(out: str) -> list[dict[str, Any]]:
    """The in-toto statements `cosign verify-attestation` printed (one DSSE envelope a line)."""
    return [
        json.loads(base64.b64decode(json.loads(line)["payload"]))
        for line in out.splitlines()
        if line.startswith("{")
    ]


def test_the_signed_index_its_platforms_and_the_chart_verify(
    cosign: str, registry: str, published: dict[str, Any]
) -> None:
    digest, pub = published["digest"], published["pub"]
    by_digest = verify(cosign, registry, pub, f"{REPO}@{digest}", "verify")
    assert by_digest.returncode == 0, by_digest.stderr
    (claim,) = json.loads(by_digest.stdout)
    assert claim["critical"]["image"]["docker-manifest-digest"] == digest
    # By tag, as a user would: the tag resolves to the signed index.
    by_tag = verify(cosign, registry, pub, f"{REPO}:{VERSION}", "verify")
    assert by_tag.returncode == 0, by_tag.stderr
    # --recursive: each platform's manifest is signed too (what a node pulls).
    index = json.loads(_index(published))
    for entry in index["manifests"]:
        platform = verify(cosign, registry, pub, f"{REPO}@{entry['digest']}", "verify")
        assert platform.returncode == 0, (entry["platform"], platform.stderr)
    chart = verify(cosign, registry, pub, f"charts/sps-operator:{VERSION}", "verify")
    assert chart.returncode == 0, chart.stderr


def _index(published: dict[str, Any]) -> str:
    archive = next(published["dist"].glob("*.oci.tar"))
    with tarfile.open(archive) as tar:
        digest = published["digest"].split(":", 1)[1]
        member = tar.extractfile(f"blobs/sha256/{digest}")
        assert member is not None
        return member.read().decode()


def test_the_sboms_and_the_provenance_are_attested_on_what_they_describe(
    cosign: str, registry: str, published: dict[str, Any]
) -> None:
    digest, pub, dist = published["digest"], published["pub"], published["dist"]
    index = json.loads(_index(published))
    arm64 = next(
        m["digest"] for m in index["manifests"] if m["platform"]["architecture"] == "arm64"
    )
    sbom = json.loads((dist / f"sps-operator-{VERSION}-linux-arm64.spdx.json").read_text())
    on_platform = verify(
        cosign, registry, pub, f"{REPO}@{arm64}", "verify-attestation", "--type", "spdxjson"
    )  # fmt: skip
    assert on_platform.returncode == 0, on_platform.stderr
    (statement,) = _payloads(on_platform.stdout)
    assert statement["predicateType"] == "https://spdx.dev/Document"
    assert statement["predicate"] == sbom
    assert statement["subject"][0]["digest"]["sha256"] == arm64.split(":", 1)[1]
    on_index = verify(
        cosign, registry, pub, f"{REPO}@{digest}", "verify-attestation", "--type", "spdxjson"
    )  # fmt: skip
    assert on_index.returncode == 0, on_index.stderr
    names = sorted(s["predicate"]["name"] for s in _payloads(on_index.stdout))
    assert names == [f"sps-operator-{VERSION}-linux-{a}" for a in ARCHES]
    provenance = verify(
        cosign, registry, pub, f"{REPO}@{digest}", "verify-attestation",
        "--type", "slsaprovenance1",
    )  # fmt: skip
    assert provenance.returncode == 0, provenance.stderr
    (statement,) = _payloads(provenance.stdout)
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"][0]["digest"]["sha256"] == digest.split(":", 1)[1]
    predicate = json.loads((dist / f"sps-operator-{VERSION}.provenance.json").read_text())
    # cosign re-encodes the predicate through its SLSA v1 type: an empty metadata appears.
    assert statement["predicate"]["runDetails"].pop("metadata") == {}
    assert statement["predicate"] == predicate
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    source = predicate["buildDefinition"]["resolvedDependencies"][0]
    assert source["digest"] == {"gitCommit": head.stdout.strip()}


def test_verify_fails_for_an_unsigned_image_an_altered_tag_and_another_key(
    cosign: str, registry: str, published: dict[str, Any]
) -> None:
    work, digest = published["work"], published["digest"]
    skopeo = _tool("skopeo")
    # Wrong key: the release's signature does not verify against another public key.
    other = verify(cosign, registry, published["other_pub"], f"{REPO}@{digest}", "verify")
    assert other.returncode != 0
    assert "no matching signatures" in other.stderr
    # Unsigned: an image pushed beside it without signing.
    unsigned_oci = work / "unsigned.oci.tar"
    unsigned = oci_archive(unsigned_oci, "x", "unsigned")
    pushed = _run(
        [skopeo, "copy", "--quiet", "--all", "--preserve-digests", "--dest-tls-verify=false",
         f"oci-archive:{unsigned_oci}:x", f"docker://{registry}/{REPO}:unsigned"]
    )  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr
    result = verify(cosign, registry, published["pub"], f"{REPO}@{unsigned}", "verify")
    assert result.returncode != 0
    assert "no signatures found" in result.stderr
    # Altered: the release's tag moved to other bytes. Verifying the tag fails; the pinned
    # digest (what the chart deploys) still verifies.
    altered_oci = work / "altered.oci.tar"
    altered = oci_archive(altered_oci, "x", "altered")
    pushed = _run(
        [skopeo, "copy", "--quiet", "--all", "--preserve-digests", "--dest-tls-verify=false",
         f"oci-archive:{altered_oci}:x", f"docker://{registry}/{REPO}:{VERSION}"]
    )  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr
    assert altered != digest
    moved = verify(cosign, registry, published["pub"], f"{REPO}:{VERSION}", "verify")
    assert moved.returncode != 0
    assert "no signatures found" in moved.stderr
    kept = verify(cosign, registry, published["pub"], f"{REPO}@{digest}", "verify")
    assert kept.returncode == 0, kept.stderr


def test_publish_refuses_to_push_unsigned_without_a_key_or_sign_0(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COSIGN_KEY", "SIGN")}
    dist = tmp_path / "dist"
    dist.mkdir()
    _rel("checksums", str(dist))
    env.update(REGISTRY="127.0.0.1:9", DIST=str(dist), PYTHON=sys.executable, HELM="true")
    done = _run(["bash", str(ROOT / "release/publish.sh")], env=env)
    assert done.returncode == 2
    assert "set COSIGN_KEY" in done.stderr

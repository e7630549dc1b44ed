"""The SBOM (release/sps_release/sbom.py): SPDX 2.3 JSON of one architecture's image, its
Debian packages and Python distributions; and the ELF check that keeps a binary of the
wrong CPU out of an image (elf.py), and the index reading (oci.py)."""

from __future__ import annotations

import json
import re
import struct
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sps_release.elf import elf_architecture, foreign_binaries
from sps_release.oci import platform_digests
from sps_release.sbom import (
    Component,
    debian_packages,
    normalize_name,
    python_distribution,
    spdx_document,
)

STATUS = """\
Package: libc6
Status: install ok installed
Architecture: arm64
Source: glibc
Version: 2.36-9+deb12u10
Homepage: https://www.gnu.org/software/libc/libc.html
Description: GNU C Library: Shared libraries
 Contains the standard libraries that are used by nearly all programs on
 the system.

Package: removed-one
Status: deinstall ok config-files
Architecture: arm64
Version: 1.0

Package: python3.11-minimal
Status: install ok installed
Architecture: arm64
Version: 3.11.2-6+deb12u6
"""

METADATA = """\
Metadata-Version: 2.1
Name: Pydantic_Core
Version: 2.33.2
License-Expression: MIT
Project-URL: Homepage, https://github.com/pydantic/pydantic-core

Long description that is not a header.
Name: not-this
"""

DIGEST = "sha256:" + "12" * 32


def test_installed_debian_packages_are_read_and_others_skipped() -> None:
    packages = debian_packages(STATUS)
    assert [(p.name, p.version, p.arch) for p in packages] == [
        ("libc6", "2.36-9+deb12u10", "arm64"),
        ("python3.11-minimal", "3.11.2-6+deb12u6", "arm64"),
    ]
    assert packages[0].homepage.startswith("https://www.gnu.org/")


def test_a_python_distribution_is_read_from_its_metadata_headers_only() -> None:
    dist = python_distribution(METADATA)
    assert dist == Component(
        kind="pypi",
        name="Pydantic_Core",
        version="2.33.2",
        license="MIT",
        homepage="https://github.com/pydantic/pydantic-core",
    )
    assert python_distribution("Metadata-Version: 2.1\nName: x\n") is None


def test_purls_follow_the_purl_spec() -> None:
    deb, _ = debian_packages(STATUS)
    assert deb.purl("debian-12") == (
        "pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=arm64&distro=debian-12"
    )
    dist = python_distribution(METADATA)
    assert dist is not None
    assert dist.purl("debian-12") == "pkg:pypi/pydantic-core@2.33.2"
    assert normalize_name("Foo.Bar__baz") == "foo-bar-baz"


def document() -> dict[str, object]:
    dist = python_distribution(METADATA)
    assert dist is not None
    return spdx_document(
        image="ghcr.io/sps-dev/sps-operator",
        version="1.2.3",
        arch="arm64",
        image_digest=DIGEST,
        created="2026-01-02T03:04:05Z",
        components=[*debian_packages(STATUS), dist],
    )


def test_the_document_has_the_spdx_2_3_shape() -> None:
    doc = json.loads(json.dumps(document()))  # plain JSON
    for key in ("spdxVersion", "dataLicense", "SPDXID", "name", "documentNamespace"):
        assert isinstance(doc[key], str), key
    assert doc["spdxVersion"] == "SPDX-2.3"
    assert doc["dataLicense"] == "CC0-1.0"
    assert doc["SPDXID"] == "SPDXRef-DOCUMENT"
    assert doc["creationInfo"] == {
        "created": "2026-01-02T03:04:05Z",
        "creators": ["Tool: sps-release"],
    }
    ids = [p["SPDXID"] for p in doc["packages"]]
    assert len(ids) == len(set(ids)) == 4
    assert all(re.fullmatch(r"SPDXRef-[A-Za-z0-9.-]+", i) for i in ids)
    required = {"SPDXID", "name", "downloadLocation", "versionInfo"}
    assert all(required <= set(p) for p in doc["packages"])
    image, *components = doc["packages"]
    assert image["primaryPackagePurpose"] == "CONTAINER"
    assert image["checksums"] == [{"algorithm": "SHA256", "checksumValue": DIGEST[7:]}]
    assert doc["documentDescribes"] == [image["SPDXID"]]
    assert DIGEST[7:] in doc["documentNamespace"] and "linux-arm64" in doc["documentNamespace"]
    contains = {
        r["relatedSpdxElement"]
        for r in doc["relationships"]
        if r["spdxElementId"] == image["SPDXID"] and r["relationshipType"] == "CONTAINS"
    }
    assert contains == {c["SPDXID"] for c in components}
    purls = sorted(c["externalRefs"][0]["referenceLocator"] for c in components)
    assert purls == [
        "pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=arm64&distro=debian-12",
        "pkg:deb/debian/python3.11-minimal@3.11.2-6%2Bdeb12u6?arch=arm64&distro=debian-12",
        "pkg:pypi/pydantic-core@2.33.2",
    ]


def test_the_same_inputs_give_the_same_document() -> None:
    assert json.dumps(document(), sort_keys=True) == json.dumps(document(), sort_keys=True)


@pytest.mark.parametrize(
    ("created", "digest"),
    [("2026-01-02 03:04:05", DIGEST), ("2026-01-02T03:04:05Z", "sha256:12")],
)
def test_bad_dates_and_digests_are_refused(created: str, digest: str) -> None:
    with pytest.raises(ValueError):
        spdx_document(
            image="i", version="1", arch="amd64", image_digest=digest, created=created,
            components=[],
        )  # fmt: skip


@given(st.text(max_size=400))
def test_any_status_or_metadata_text_parses_without_an_exception(text: str) -> None:
    for package in debian_packages(text):
        assert package.name and package.version
    dist = python_distribution(text)
    assert dist is None or (dist.name and dist.version)


def elf_header(machine: int, big_endian: bool = False, bits: int = 64) -> bytes:
    order = ">" if big_endian else "<"
    ident = b"\x7fELF" + bytes([2 if bits == 64 else 1, 2 if big_endian else 1, 1]) + bytes(9)
    return ident + struct.pack(f"{order}HH", 3, machine)


def test_elf_headers_name_their_cpu() -> None:
    assert elf_architecture(elf_header(183)) == "arm64"
    assert elf_architecture(elf_header(62)) == "amd64"
    assert elf_architecture(elf_header(183, big_endian=True)) == "arm64"
    assert elf_architecture(elf_header(999)) == "unknown-999"
    assert elf_architecture(b"#!/usr/bin/python3\n" + bytes(4)) is None
    assert elf_architecture(b"\x7fELF") is None
    with open(sys.executable, "rb") as f:  # this very interpreter is of the host's CPU
        assert elf_architecture(f.read(20)) in ("amd64", "arm64")


def test_foreign_binaries_are_the_ones_of_another_cpu() -> None:
    found = {"usr/bin/python3.11": "arm64", "usr/lib/x.so": "amd64", "usr/lib/y.so": "arm64"}
    assert foreign_binaries(found, "arm64") == {"usr/lib/x.so": "amd64"}
    assert foreign_binaries(found, "amd64") == {
        "usr/bin/python3.11": "arm64",
        "usr/lib/y.so": "arm64",
    }


def index(*platforms: tuple[str, str]) -> str:
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {"digest": f"sha256:{n}", "platform": {"os": system, "architecture": arch}}
                for n, (system, arch) in enumerate(platforms)
            ],
        }
    )


def test_the_index_names_each_wanted_architecture_once() -> None:
    both = index(("linux", "amd64"), ("linux", "arm64"))
    assert platform_digests(both, ["arm64", "amd64"]) == {
        "amd64": "sha256:0",
        "arm64": "sha256:1",
    }
    with pytest.raises(ValueError, match="wants"):
        platform_digests(index(("linux", "amd64")), ["amd64", "arm64"])
    with pytest.raises(ValueError, match="twice"):
        platform_digests(index(("linux", "amd64"), ("linux", "amd64")), ["amd64"])
    with pytest.raises(ValueError, match="not linux"):
        platform_digests(index(("windows", "amd64")), ["amd64"])
    with pytest.raises(ValueError, match="not an OCI image index"):
        platform_digests('{"mediaType": "application/vnd.oci.image.manifest.v1+json"}', [])


@given(
    st.recursive(
        st.none() | st.text(max_size=5) | st.integers(),
        lambda c: (
            st.lists(c, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    ["mediaType", "manifests", "platform", "os", "architecture", "digest"]
                ),
                c,
                max_size=4,
            )
        ),
        max_leaves=12,
    )
)
def test_any_json_is_an_index_or_a_value_error(data: object) -> None:
    with pytest.raises(ValueError):
        platform_digests(b"\xff not json", ["amd64"])
    try:
        found = platform_digests(json.dumps(data), ["amd64"])
    except ValueError:
        return
    assert list(found) == ["amd64"]  # only a real index of exactly that platform passes

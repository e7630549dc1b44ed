"""An SPDX 2.3 JSON document of one architecture's image: its Debian packages (from
dpkg's status file) and its Python distributions (from their METADATA files)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from email.parser import HeaderParser
from typing import Any
from urllib.parse import quote

MAX_FIELD = 4096  # a field longer than this is cut: the SBOM is a list, not an archive


@dataclass(frozen=True)
class Component:
    kind: str  # "deb" or "pypi"
    name: str
    version: str
    arch: str = ""  # Debian's architecture field ("all" for arch-independent)
    license: str = ""  # as the distribution declares it (free text), may be empty
    homepage: str = ""

    def purl(self, distro: str) -> str:
        if self.kind == "deb":
            return (
                f"pkg:deb/debian/{quote(self.name, safe='')}@{quote(self.version, safe='')}"
                f"?arch={quote(self.arch, safe='')}&distro={quote(distro, safe='')}"
            )
        return f"pkg:pypi/{normalize_name(self.name)}@{quote(self.version, safe='')}"


def normalize_name(name: str) -> str:
    """PEP 503's normal form of a distribution name (purl's pypi type uses it)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _paragraphs(text: str) -> Iterable[dict[str, str]]:
    fields: dict[str, str] = {}
    last = ""
    for line in text.splitlines():
        if not line.strip():
            if fields:
                yield fields
            fields, last = {}, ""
        elif line[0] in " \t":
            if last:
                fields[last] = (fields[last] + "\n" + line.strip())[:MAX_FIELD]
        elif ":" in line:
            key, _, value = line.partition(":")
            last = key.strip()
            fields[last] = value.strip()[:MAX_FIELD]
    if fields:
        yield fields


def debian_packages(status: str) -> list[Component]:
    """The installed packages of a dpkg status file (`/var/lib/dpkg/status`)."""
    found = []
    for fields in _paragraphs(status):
        if fields.get("Status", "").split()[-1:] != ["installed"]:
            continue
        if not fields.get("Package") or not fields.get("Version"):
            continue
        found.append(
            Component(
                kind="deb",
                name=fields["Package"],
                version=fields["Version"],
                arch=fields.get("Architecture", ""),
                homepage=fields.get("Homepage", ""),
            )
        )
    return sorted(found, key=lambda c: (c.name, c.arch))


def python_distribution(metadata: str) -> Component | None:
    """The distribution a METADATA (or PKG-INFO) file describes; None without name/version."""
    headers = HeaderParser().parsestr(metadata[: 64 * 1024], headersonly=True)
    name, version = headers.get("Name"), headers.get("Version")
    if not name or not version:
        return None
    license_text = headers.get("License-Expression") or headers.get("License") or ""
    home = headers.get("Home-page") or ""
    for url in headers.get_all("Project-URL") or []:
        label, _, link = str(url).partition(",")
        if not home and label.strip().lower() in ("homepage", "home", "source"):
            home = link.strip()
    return Component(
        kind="pypi",
        name=str(name).strip(),
        version=str(version).strip(),
        license=str(license_text).strip().splitlines()[0][:200] if license_text else "",
        homepage=str(home).strip(),
    )


def _spdx_id(used: set[str], *parts: str) -> str:
    base = "SPDXRef-" + re.sub(r"[^A-Za-z0-9.-]+", "-", "-".join(parts)).strip("-")
    spdx_id, n = base, 1
    while spdx_id in used:
        n += 1
        spdx_id = f"{base}-{n}"
    used.add(spdx_id)
    return spdx_id


def _package(spdx_id: str, name: str, version: str, purpose: str, purl: str) -> dict[str, Any]:
    return {
        "SPDXID": spdx_id,
        "name": name,
        "versionInfo": version,
        "primaryPackagePurpose": purpose,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": False,
        # Declared licenses are free text in both ecosystems, not always SPDX
        # expressions: kept in a comment (licenseComments), not asserted.
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "NOASSERTION",
        "copyrightText": "NOASSERTION",
        "externalRefs": [
            {
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": purl,
            }
        ],
    }


def spdx_document(
    *,
    image: str,
    version: str,
    arch: str,
    image_digest: str,
    created: str,
    components: Iterable[Component],
    distro: str = "debian-12",
    namespace_base: str = "https://github.com/sps-dev/sps-operator/spdx",
    creator_tool: str = "sps-release",
) -> dict[str, Any]:
    """The SPDX 2.3 document: the image (one architecture) CONTAINS every component.

    `created` is an ISO 8601 UTC time (`YYYY-MM-DDThh:mm:ssZ`; the release uses
    SOURCE_DATE_EPOCH so the same tree gives the same document).
    """
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", created):
        raise ValueError(f"created must be YYYY-MM-DDThh:mm:ssZ, not {created!r}")
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", image_digest):
        raise ValueError(f"not an image digest: {image_digest!r}")
    used = {"SPDXRef-DOCUMENT"}
    image_id = _spdx_id(used, "image", arch)
    name = f"{image}:{version} linux/{arch}"
    image_purl = (
        f"pkg:oci/{image.rsplit('/', 1)[-1]}@{quote(image_digest, safe='')}"
        f"?arch={arch}&repository_url={quote(image.rsplit('/', 1)[0], safe='')}"
        f"&tag={quote(version, safe='')}"
    )
    packages = [_package(image_id, image, version, "CONTAINER", image_purl)]
    packages[0]["checksums"] = [{"algorithm": "SHA256", "checksumValue": image_digest[7:]}]
    relationships = [
        {
            "spdxElementId": "SPDXRef-DOCUMENT",
            "relationshipType": "DESCRIBES",
            "relatedSpdxElement": image_id,
        }
    ]
    for comp in sorted(components, key=lambda c: (c.kind, normalize_name(c.name), c.version)):
        comp_id = _spdx_id(used, comp.kind, comp.name, comp.version)
        package = _package(comp_id, comp.name, comp.version, "LIBRARY", comp.purl(distro))
        if comp.license:
            package["licenseComments"] = f"declared: {comp.license}"
        if comp.homepage.startswith(("https://", "http://")):
            package["homepage"] = comp.homepage
        packages.append(package)
        relationships.append(
            {
                "spdxElementId": image_id,
                "relationshipType": "CONTAINS",
                "relatedSpdxElement": comp_id,
            }
        )
    return {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": name,
        "documentNamespace": f"{namespace_base}/{version}/linux-{arch}/{image_digest[7:]}",
        "creationInfo": {"created": created, "creators": [f"Tool: {creator_tool}"]},
        "documentDescribes": [image_id],
        "packages": packages,
        "relationships": relationships,
    }

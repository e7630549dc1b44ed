"""SHA256SUMS in the format `sha256sum --check` reads."""

from __future__ import annotations

import re
from collections.abc import Mapping

LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


def format_sums(digests: Mapping[str, str]) -> str:
    """`<hex>  <name>` lines sorted by name; names are plain file names in one directory."""
    out = []
    for name in sorted(digests):
        digest = digests[name]
        if "/" in name or "\n" in name or not name or name in (".", ".."):
            raise ValueError(f"not a plain file name: {name!r}")
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError(f"{name}: not a SHA-256 hex digest: {digest!r}")
        out.append(f"{digest}  {name}\n")
    return "".join(out)


def parse_sums(text: str) -> dict[str, str]:
    """The {name: hex digest} of a SHA256SUMS file; ValueError names a bad line."""
    sums: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = LINE.match(line)
        if not match:
            raise ValueError(f"SHA256SUMS line {number} is not '<sha256>  <name>': {line!r}")
        if match.group(2) in sums:
            raise ValueError(f"SHA256SUMS names {match.group(2)} twice")
        sums[match.group(2)] = match.group(1)
    return sums

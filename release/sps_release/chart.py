"""The packaged chart pins the image by the digest of the released image index."""

from __future__ import annotations

import re

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def pin_image_digest(values_yaml: str, digest: str) -> str:
    """values.yaml with `image.digest` set to `digest`, everything else byte for byte.

    The chart renders `repository:tag@digest` when it is set (templates/_helpers.tpl),
    so a cluster pulls exactly the released index whatever the tag points to later.
    Edits the one line rather than re-dumping the YAML, to keep the comments users read.
    """
    if not DIGEST.match(digest):
        raise ValueError(f"not an image digest (sha256:<64 hex>): {digest!r}")
    lines = values_yaml.splitlines(keepends=True)
    in_image = False
    for i, line in enumerate(lines):
        if re.match(r"^image:[ \t]*(#.*)?\r?\n?$", line):
            in_image = True
            continue
        if in_image and re.match(r"^\S", line):  # the next top-level key
            break
        match = re.match(r"^([ \t]+)digest:[ \t]*(\"\"|''|)[ \t]*(#.*)?(\r?\n)?$", line)
        if in_image and match:
            lines[i] = f'{match.group(1)}digest: "{digest}"{match.group(4) or ""}'
            return "".join(lines)
    raise ValueError(
        'values.yaml has no empty `digest: ""` under the top-level `image:` key to pin'
    )

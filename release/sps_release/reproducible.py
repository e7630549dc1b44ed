"""The sdist, byte for byte the same from the same commit: setuptools stamps its tar
entries with the files' times and gzip's header with the clock."""

from __future__ import annotations

import gzip
import io
import tarfile


def normalize_tar_gz(data: bytes, epoch: int) -> bytes:
    """`data` (a .tar.gz) with every entry's time set to `epoch`, owners to root and
    numeric ids, entries in name order, and a gzip header without a time or file name."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as src,
        gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as dst,
    ):
        for member in sorted(src.getmembers(), key=lambda m: m.name):
            member.mtime = epoch
            member.uid = member.gid = 0
            member.uname = member.gname = ""
            member.pax_headers = {}
            fileobj = src.extractfile(member) if member.isfile() else None
            dst.addfile(member, fileobj)
    return out.getvalue()

"""The image cache's helpers (testbed/images/buildah-env.sh), run by bash as build.sh runs
them: `file_hash` names an archive by its binary's content, and remembers it so that a
bed's start does not read the 50-90 MB binaries again."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV_SH = ROOT / "testbed/images/buildah-env.sh"


def file_hash(cache: Path, path: Path) -> str:
    script = f'repo={ROOT}; . "{ENV_SH}"; file_hash "$1"'
    env = {
        **os.environ,
        "SPS_IMAGES_CACHE": str(cache),
        "SPS_IMAGES_RUNROOT": str(cache / "run"),
    }
    env.pop("SPS_IMAGES_LOCKED", None)
    proc = subprocess.run(
        ["bash", "-c", script, "file_hash", str(path)],
        capture_output=True, text=True, env=env, check=True, timeout=30,
    )  # fmt: skip
    return proc.stdout.strip()


def test_file_hash_is_the_contents_hash_and_follows_a_rebuilt_file(tmp_path: Path) -> None:
    cache, binary = tmp_path / "cache", tmp_path / "manager"
    binary.write_bytes(b"first build")
    first = file_hash(cache, binary)
    assert first == hashlib.sha256(b"first build").hexdigest()[:16]
    assert file_hash(cache, binary) == first
    assert len(list((cache / "file-hashes").iterdir())) == 1

    # A rebuild writes the file again: another mtime (and here other contents).
    binary.write_bytes(b"second build")
    stat = binary.stat()
    os.utime(binary, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert file_hash(cache, binary) == hashlib.sha256(b"second build").hexdigest()[:16]


def test_file_hash_reads_a_file_once_while_it_is_unchanged(tmp_path: Path) -> None:
    """The second answer comes from the memo: a memo edited by hand is what it returns
    (so the binary was not hashed again)."""
    cache, binary = tmp_path / "cache", tmp_path / "coredns"
    binary.write_bytes(b"x" * 4096)
    file_hash(cache, binary)
    (memo,) = (cache / "file-hashes").iterdir()
    memo.write_text("0123456789abcdef\n")
    assert file_hash(cache, binary) == "0123456789abcdef"

"""SHA256SUMS: what `sha256sum --check` reads, and what `make publish` verifies first."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sps_release.checksums import format_sums, parse_sums
from sps_release.cli import main

NAMES = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="/"),
    min_size=1,
    max_size=30,
).filter(lambda n: n not in (".", ".."))
HEX = st.binary(min_size=32, max_size=32).map(bytes.hex)


@given(st.dictionaries(NAMES, HEX, max_size=8))
def test_format_and_parse_round_trip(digests: dict[str, str]) -> None:
    text = format_sums(digests)
    assert parse_sums(text) == digests
    assert text.splitlines() == sorted(text.splitlines(), key=lambda line: line[66:])


@pytest.mark.parametrize("name", ["a/b", "", ".", "..", "a\nb"])
def test_names_that_are_not_plain_file_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="plain file name"):
        format_sums({name: "0" * 64})


@pytest.mark.parametrize(
    "text",
    ["0" * 64 + " x\n", "0" * 63 + "  x\n", "Z" * 64 + "  x\n", ("0" * 64 + "  x\n") * 2],
)
def test_malformed_sums_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="SHA256SUMS"):
        parse_sums(text)


def test_sha256sum_checks_what_the_release_writes(tmp_path: Path) -> None:
    (tmp_path / "a.whl").write_bytes(b"wheel")
    (tmp_path / "b.tgz").write_bytes(b"chart")
    assert main(["checksums", str(tmp_path)]) == 0
    sums = (tmp_path / "SHA256SUMS").read_text()
    assert f"{hashlib.sha256(b'wheel').hexdigest()}  a.whl\n" in sums
    subprocess.run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=tmp_path, check=True)
    assert main(["verify", str(tmp_path)]) == 0


@pytest.mark.parametrize("change", ["modify", "add", "remove"])
def test_verify_refuses_a_dist_that_differs(tmp_path: Path, change: str) -> None:
    (tmp_path / "a.whl").write_bytes(b"wheel")
    (tmp_path / "b.tgz").write_bytes(b"chart")
    assert main(["checksums", str(tmp_path)]) == 0
    if change == "modify":
        (tmp_path / "a.whl").write_bytes(b"other")
    elif change == "add":
        (tmp_path / "c.txt").write_text("x")
    else:
        (tmp_path / "b.tgz").unlink()
    assert main(["verify", str(tmp_path)]) == 1

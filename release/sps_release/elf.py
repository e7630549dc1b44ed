"""Which CPU an ELF file is for, from its header: the arm64 image must really be arm64."""

from __future__ import annotations

# e_machine values (the ELF specification / <elf.h>) of the architectures an image names.
MACHINES = {3: "386", 40: "arm", 62: "amd64", 183: "arm64", 243: "riscv64", 21: "ppc64le"}
HEADER_SIZE = 20


def elf_architecture(header: bytes) -> str | None:
    """The OCI architecture name of an ELF header's machine, `unknown-<n>` for another
    machine, None when `header` (the file's first 20 bytes) is not an ELF header."""
    if len(header) < HEADER_SIZE or header[:4] != b"\x7fELF":
        return None
    order = {1: "little", 2: "big"}.get(header[5])
    if order is None:
        return None
    machine = int.from_bytes(header[18:20], order)  # type: ignore[arg-type]
    return MACHINES.get(machine, f"unknown-{machine}")


def foreign_binaries(found: dict[str, str], arch: str) -> dict[str, str]:
    """The files of {path: architecture} that are not for `arch`."""
    return {path: got for path, got in sorted(found.items()) if got != arch}

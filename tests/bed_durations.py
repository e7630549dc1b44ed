"""How long each shared bed test takes, so that `make test` starts the longest first.

The shared phase (tests/run-all.sh) hands tests to pytest-xdist's workers in collection
order and ends when its last test does: a 150 s test handed out last keeps one worker
busy while the others idle. tests/conftest.py therefore orders the shared tests' work units
(a test, or an `xdist_group` as a whole) longest first, by the seconds in
tests/bed-durations.txt (a test not listed counts as DEFAULT_SECONDS).

Refresh the file from a `make test` log (the bed lane prints every duration over 2 s):
    make test 2>&1 | tee /tmp/test.log; python tests/bed_durations.py < /tmp/test.log
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol, TypeVar

FILE = Path(__file__).with_name("bed-durations.txt")
DEFAULT_SECONDS = 20.0
HEADER = """\
# Seconds each shared bed test took in `make test` (call + setup + teardown), read by
# tests/conftest.py to start the longest first. Estimates; regenerate with
# `python tests/bed_durations.py < <make test log>` (tests/bed_durations.py).
"""


def load(path: Path = FILE) -> dict[str, float]:
    """nodeid (without an `@group` suffix) -> seconds; {} when the file is missing."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        seconds, _, nodeid = line.strip().partition(" ")
        if seconds and not seconds.startswith("#") and nodeid:
            out[nodeid.strip()] = float(seconds)
    return out


class _HasNodeId(Protocol):
    @property
    def nodeid(self) -> str: ...


Item = TypeVar("Item", bound=_HasNodeId)


def longest_first(
    items: list[Item], seconds: Mapping[str, float], unit: Callable[[Item], str]
) -> list[Item]:
    """`items` with the work units xdist hands out (`unit`: a test's own id, or its
    `xdist_group`) longest first by `seconds` (summed over a unit's tests; a test not in
    it counts DEFAULT_SECONDS). Stable: a unit's tests keep their order, and so do units
    of equal time."""
    total: dict[str, float] = {}
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        key = unit(item)
        first.setdefault(key, index)
        total[key] = total.get(key, 0.0) + seconds.get(item.nodeid.split("@")[0], DEFAULT_SECONDS)
    return sorted(items, key=lambda item: (-total[unit(item)], first[unit(item)]))


def from_log(lines: list[str]) -> dict[str, float]:
    """Sum pytest's `--durations` lines (`12.34s call     tests/x.py::t@group`) per test,
    only the shared phase's (the block before the line `==== bed, shared: exit`)."""
    sums: dict[str, float] = {}
    for line in lines:
        if line.startswith("==== bed, shared: exit"):
            break
        parts = line.split()
        if len(parts) == 3 and parts[0].endswith("s") and parts[1] in ("setup", "call", "teardown"):
            try:
                key = parts[2].split("@")[0]
                sums[key] = sums.get(key, 0.0) + float(parts[0][:-1])
            except ValueError:
                continue
    return dict(sums)


def main() -> int:
    sums = from_log(sys.stdin.read().splitlines())
    if not sums:
        print("no `--durations` lines of the shared phase on stdin", file=sys.stderr)
        return 1
    body = "".join(f"{round(s):4d} {n}\n" for n, s in sorted(sums.items(), key=lambda kv: -kv[1]))
    FILE.write_text(HEADER + body, encoding="utf-8")
    print(f"{FILE}: {len(sums)} tests, {sum(sums.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())

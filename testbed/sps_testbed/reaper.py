"""`python -m sps_testbed.reaper STATE_DIR`: cleans up after a supervisor that is gone.

The supervisor starts it first, in the host's namespaces and a session of its own, with
a pipe on stdin that only the supervisor holds. When the pipe closes (the supervisor
stopped, crashed or was killed) it stops the control plane, kills every process left in
the nodes' cgroups (containers, shims, containerd), removes those cgroups, the bed's
network namespace and its reservations. After a normal stop there is nothing left to do.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from sps_testbed.controlplane import ControlPlane, ControlPlaneError
from sps_testbed.plan import BedRecord, teardown


def reap(state_dir: Path) -> list[str]:
    with contextlib.suppress(ControlPlaneError, OSError, ValueError):
        ControlPlane.attach(state_dir / "cp").stop()
    try:
        record = BedRecord.load(state_dir)
    except (OSError, ValueError):
        return []
    return teardown(record)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m sps_testbed.reaper STATE_DIR", file=sys.stderr)
        return 2
    while sys.stdin.buffer.read(4096):
        pass
    problems = reap(Path(args[0]))
    for p in problems:
        print(f"left behind: {p}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where the bed's tests wait: sums a SPS_TEST_WAIT_LOG file (tests/waiting.py) per test
and per wait, longest first. `python3 tests/wait-report.py waits.jsonl [TOP]`."""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(path: str, top: int = 40) -> None:
    per_test: dict[str, float] = defaultdict(float)
    per_wait: dict[tuple[str, str], list[float]] = defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            per_test[row["test"]] += row["seconds"]
            per_wait[(row["test"], row["what"])].append(row["seconds"])
    print("seconds waited per test")
    for test, seconds in sorted(per_test.items(), key=lambda kv: -kv[1]):
        print(f"{seconds:8.1f}  {test}")
    print(f"\nthe {top} longest waits (total, count, test :: what)")
    rows = sorted(per_wait.items(), key=lambda kv: -sum(kv[1]))[:top]
    for (test, what), seconds in rows:
        print(f"{sum(seconds):8.1f} {len(seconds):3d}x  {test.rsplit('::', 1)[-1]} :: {what}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))

"""Where the bed's tests wait: sums a SPS_TEST_WAIT_LOG file (tests/waiting.py) per test
and per wait, longest first. `python3 tests/wait-report.py waits.jsonl [TOP]`.
With `--tools`: sums a SPS_TEST_TOOL_LOG file (sps_testbed/cluster.py) instead, the
kubectl and helm processes and their CPU-s per caller, costliest first."""

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


def tools(path: str, top: int = 40) -> None:
    per_tool: dict[str, list[float]] = defaultdict(list)
    per_caller: dict[tuple[str, str], list[float]] = defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            per_tool[row["tool"].split()[0]].append(row["cpu"])
            per_caller[(row["tool"], row["caller"])].append(row["cpu"])
    print("processes and CPU-s per tool")
    for tool, cpu in sorted(per_tool.items()):
        print(f"{len(cpu):6d}  {sum(cpu):8.1f}  {tool}")
    print(f"\nthe {top} costliest callers (CPU-s, count, command :: caller)")
    rows = sorted(per_caller.items(), key=lambda kv: -sum(kv[1]))[:top]
    for (tool, caller), cpu in rows:
        print(f"{sum(cpu):8.1f} {len(cpu):4d}x  {tool} :: {caller}")


if __name__ == "__main__":
    args = sys.argv[1:]
    report = tools if args and args[0] == "--tools" else main
    args = args[1:] if report is tools else args
    report(args[0], *(int(a) for a in args[1:2]))

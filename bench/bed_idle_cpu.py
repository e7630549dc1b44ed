"""What a test bed costs standing idle, by process: the CPU-seconds each kind of process of
an attached bed (its control plane, every node's kubelet, containerd, shims and containers)
uses over a window in which no test runs. CPU-seconds, not wall time, so that the figure
holds on a loaded host.

Every process below the bed's supervisor and in its nodes' cgroups is read from /proc
(user + system, and what its reaped children used: a `runc` or CNI call is counted in
the containerd that ran it) at the window's start and end; a process that started in the
window counts whole.

`--pods N` first starts N sleeping pods on every node (two containers each with the
sandbox): what a kubelet pays per container (cAdvisor's housekeeping, the pod workers'
syncs) shows only with containers to look after, as in `make test`.

Run:  flock /tmp/sps-bed.lock .venv/bin/sps-testbed run -- \\
        .venv/bin/python bench/bed_idle_cpu.py [--settle 30] [--window 120] [--pods 4]
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from sps_testbed import cgroups
from sps_testbed.cluster import RealNodeCluster

TICK = os.sysconf("SC_CLK_TCK")


def stat(pid: int) -> tuple[int, str, float] | None:
    """(parent pid, name, CPU-seconds of it and its reaped children), None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    # fields[0] is the state (field 3); utime, stime, cutime, cstime are fields 14-17.
    ticks = sum(int(f) for f in fields[11:15])
    return int(fields[1]), name, ticks / TICK


def bed_processes(supervisor: int, cgroup_roots: list[str]) -> dict[int, tuple[str, float]]:
    """Every live process of the bed: the supervisor's descendants and the nodes' cgroups."""
    table = {pid: s for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
             if (s := stat(pid)) is not None}  # fmt: skip
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (parent, _, _) in table.items():
        children[parent].append(pid)
    found: set[int] = set()
    todo = [supervisor, *(p for root in cgroup_roots for p in cgroups.members(root))]
    while todo:
        pid = todo.pop()
        if pid in found or pid not in table:
            continue
        found.add(pid)
        todo.extend(children[pid])
    return {pid: (table[pid][1], table[pid][2]) for pid in found}


def by_name(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    spent: dict[str, float] = defaultdict(float)
    for pid, (name, cpu) in after.items():
        start = before[pid][1] if pid in before and before[pid][0] == name else 0.0
        spent[name] += cpu - start
    return dict(spent)


NAMESPACE = "bench-idle"


def sleeping_pod(name: str, node: str, image: str) -> dict[str, Any]:
    """A pod that only sleeps, bound to `node` (no scheduler in the measure)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "securityContext": {
                    "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                    "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
                },
            }],
        },
    }  # fmt: skip


def start_pods(bed: RealNodeCluster, nodes: list[str], per_node: int, timeout: float) -> None:
    """`per_node` sleeping pods on each of `nodes`; returns once all run."""
    bed.api("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    image = bed.image("operator")
    for node in nodes:
        for i in range(per_node):
            bed.api("POST", f"/api/v1/namespaces/{NAMESPACE}/pods",
                    sleeping_pod(f"{node}-{i}", node, image))  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        pods = (bed.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods") or {}).get("items", [])
        running = sum(p.get("status", {}).get("phase") == "Running" for p in pods)
        if running == per_node * len(nodes):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"{running} of {per_node * len(nodes)} pods running after {timeout} s")
        time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settle", type=float, default=30.0, help="seconds before the window")
    parser.add_argument("--window", type=float, default=120.0, help="seconds measured")
    parser.add_argument("--pods", type=int, default=0, help="sleeping pods on every node")
    args = parser.parse_args()
    bed = RealNodeCluster.attach(Path(os.environ["SPS_TESTBED_ATTACH"]))
    record = bed.record()
    roots = [n.cgroup_root for n in record.nodes]
    if args.pods:
        start_pods(bed, [n.name for n in record.nodes], args.pods, timeout=300)
    time.sleep(args.settle)
    before = bed_processes(record.supervisor_pid, roots)
    time.sleep(args.window)
    after = bed_processes(record.supervisor_pid, roots)
    spent = by_name(before, after)
    total = sum(spent.values())
    print(f"idle bed, {len(record.nodes)} nodes, {args.pods} pods each, {args.window:.0f} s: "
          f"{total:.1f} CPU-s "
          f"({100 * total / args.window:.1f} % of one core), {len(after)} processes")  # fmt: skip
    for name, cpu in sorted(spent.items(), key=lambda kv: -kv[1]):
        if cpu >= 0.05:
            print(f"  {name:<24} {cpu:7.1f} CPU-s")


if __name__ == "__main__":
    main()

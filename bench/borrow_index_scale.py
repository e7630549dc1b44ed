"""One profile's pass time with 0 and with 20,000 annotated Deployments in another namespace
(issue 33 §2: the cost of a pass must not grow with what another tenant creates).

In-process: the real reconciler on the unit tests' fake API, reading its world from the
operator's own index functions (`indexes.world_for`, as kopf hands them to a pass). Both
worlds are built once; passes alternate between them so both see the same machine load;
the figure is the median of each, side by side, and their ratio.

    PYTHONPATH=operator:sim:testbed:tests/unit .venv/bin/python bench/borrow_index_scale.py
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))

from controller_harness import Harness, deployment, indexes_of

from sps_operator.api import labels as L
from sps_operator.controller import indexes as ix


def annotated(i: int) -> dict[str, Any]:
    """A Deployment of team-b carrying a borrow record (anyone who may edit it may)."""
    dep = deployment(f"d{i}", labels={"app": f"x{i}"})
    dep["metadata"]["namespace"] = "team-b"
    record = {"profile_uid": f"u{i}", "profile": "q", "run": f"r{i}", "replicas": 2,
              "product": "NVIDIA-H100-80GB-HBM3", "at": "2026-03-01T00:00:00Z"}  # fmt: skip
    dep["metadata"]["annotations"] = {L.ANNOTATION_BORROWED: json.dumps(record)}
    dep["metadata"]["managedFields"] = [
        {"manager": "sps-operator", "operation": "Update",
         "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{L.ANNOTATION_BORROWED}": {}}}}}
    ]  # fmt: skip
    return dep


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--others", type=int, default=20_000)
    parser.add_argument("--passes", type=int, default=200)
    args = parser.parse_args(argv)
    h = Harness.one_target(capacity={"mode": "BorrowReplica"})
    h.profile_once()  # a live table: the steady pass every profile runs on each wake-up
    base = h.cluster_objects()
    worlds = {0: indexes_of(base), args.others: indexes_of(base + [
        annotated(i) for i in range(args.others)])}  # fmt: skip
    assert h.reconciler is not None
    times: dict[int, list[float]] = {n: [] for n in worlds}
    for _ in range(args.passes):
        for n, idx in worlds.items():
            body = copy.deepcopy(h.kube.obj("SpsProfile", "p"))
            start = time.perf_counter()
            h.reconciler.reconcile(body, ix.world_for(h.kube, body, idx))
            times[n].append(time.perf_counter() - start)
    assert h.status()["tables"], "the profile must stay Ready through the passes"
    medians = {n: statistics.median(t) * 1e3 for n, t in times.items()}
    print(f"{'annotated Deployments in team-b':>32}  {'pass median (ms)':>16}  {'p90 (ms)':>9}")
    for n, t in times.items():
        p90 = sorted(t)[int(len(t) * 0.9)] * 1e3
        print(f"{n:>32,}  {medians[n]:>16.3f}  {p90:>9.3f}")
    ratio = medians[args.others] / medians[0]
    print(f"ratio {ratio:.2f} (issue 33: <= 1.2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Series the operator's /metrics carries per SpsProfile, in-process: a profile through a
typical life (a table live, every condition set, a failed and a succeeded run, a wait for
GPUs, a borrow, a rollout, its cost written), then /metrics as Prometheus would scrape it.

    PYTHONPATH=operator python bench/metrics_series.py [--profiles N]

Prints the series labelled with one profile, the series per namespace (the histograms),
and the operator-wide ones, then the total at N profiles in N/20 namespaces.
"""

from __future__ import annotations

import argparse
from collections import Counter

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sps_operator.api.reasons import CONDITION_TYPES
from sps_operator.api.status import SpsProfileStatus
from sps_operator.controller.kube.builders import ProfileRef
from sps_operator.controller.process.metrics import Metrics

AT = "2026-03-01T12:00:00Z"


def live_profile(m: Metrics, ref: ProfileRef) -> None:
    m.passed(ref)
    m.run_started(ref)
    m.run_finished(ref, "failed", 300.0)
    m.run_started(ref)
    m.gpu_wait(ref, 40.0)
    m.run_finished(ref, "succeeded", 900.0)
    m.rollout(ref, "Inject")
    m.cost_written(ref, [], [{"gpuProduct": "G", "gpuSeconds": 900.0, "lentSeconds": 900.0}])
    m.status(
        ref,
        SpsProfileStatus.model_validate(
            {
                "tables": [{"gpuProduct": "G", "fingerprint": "f", "configMap": "c", "hash": "h",
                            "kind": "Diagonal", "profiledAt": AT}],
                "currentRun": {
                    "name": "r", "job": "r", "phase": "Diagonal", "gpuProduct": "G",
                    "fingerprint": "f", "target": "d", "trigger": "Schedule", "startedAt": AT,
                    "waiting": {"reason": "WaitingForGPUs", "message": "m", "since": AT},
                    "borrow": {"deployment": "d", "replicas": 2, "at": AT},
                },
                "conditions": [{"type": t, "status": "True", "reason": "R",
                                "lastTransitionTime": AT} for t in CONDITION_TYPES],
            }
        ),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profiles", type=int, default=2000)
    args = parser.parse_args()
    m = Metrics()
    namespaces = max(args.profiles // 20, 1)
    for i in range(args.profiles):
        live_profile(m, ProfileRef(f"p{i}", f"ns{i % namespaces}", f"uid{i}"))
    families = text_string_to_metric_families(generate_latest(m.registry).decode())
    samples = [s for f in families for s in f.samples]
    one = Counter(s.name for s in samples if s.labels.get("profile") == "p0")
    per_ns = Counter(
        s.name for s in samples if s.labels.get("namespace") == "ns0" and "profile" not in s.labels
    )
    wide = [s for s in samples if "namespace" not in s.labels]
    for name, n in sorted(one.items()):
        print(f"  {n:3d}  {name}")
    print(f"series per profile: {sum(one.values())}")
    for name, n in sorted(per_ns.items()):
        print(f"  {n:3d}  {name}")
    print(f"series per namespace (not per profile): {sum(per_ns.values())}")
    print(f"operator-wide series: {len(wide)}")
    print(f"total at {args.profiles} profiles in {namespaces} namespaces: {len(samples)}")


if __name__ == "__main__":
    main()

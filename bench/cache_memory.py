"""What the operator's caches keep per object of another tenant, before and after the
projections (`controller/kube/projections.py`), side by side in one run: for each kind a
tenant may create at no compute cost (a Deployment at 0 replicas with a 1 MB env list and
250 KB of annotations, a PDB with a 4,000-value selector, a 1 MB ConfigMap carrying the
operator's managed-by label, an HPA with 250 KB of annotations; a StatefulSet, a
LeaderWorkerSet and a suspended Job with the operator's label carrying the Deployment's
1 MB template), N objects are decoded as
kopf receives them and filed by the index function; the bytes as JSON of what is kept and
the Python heap the index holds after the bodies are dropped (tracemalloc), per object.
"Before" is the former index value (the whole object but managedFields).

    prlimit --as=2000000000 nice -n 19 python bench/cache_memory.py [--objects N]
"""

from __future__ import annotations

import argparse
import gc
import json
import tracemalloc
from collections.abc import Callable
from typing import Any

from sps_operator.api import labels as L
from sps_operator.controller.kube import projections as pj

LIMIT = 512 * 2**20  # the chart's memory limit
ANNOTATIONS = {"example.com/note": "x" * 250_000}


def team_b_object(kind: str, i: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"junk-{i}", "namespace": "team-b", "uid": f"u{i}",
                            "annotations": ANNOTATIONS}  # fmt: skip
    if kind == "Deployment":
        env = [{"name": f"V{j}", "value": "y" * 900} for j in range(1000)]
        pod = {"containers": [{"name": "sglang", "image": "sglang", "env": env}]}
        labels = {"app": "junk"}
        spec = {"replicas": 0, "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod}}  # fmt: skip
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}
    if kind == "Deployment at every bound":
        # Crafted to keep the most the projection keeps: labels, a template and the
        # operator's annotation keys each just under its bound, owner references too.
        dep = team_b_object("Deployment", i)
        pod = {"containers": [{"name": "sglang", "args": ["a" * 60] * 480}]}
        labels = {f"k{j}": "v" * 60 for j in range(140)}
        dep["metadata"].update(
            labels=labels,
            annotations={f"sps.dev/k{j}": "x" * pj.MAX_ANNOTATION_VALUE for j in range(16)},
            ownerReferences=[{"apiVersion": "v1", "kind": "X", "name": "n" * 200,
                              "uid": f"u{j}"} for j in range(250)],
        )  # fmt: skip
        dep["spec"]["template"] = {"metadata": {"labels": labels}, "spec": pod}
        dep["spec"]["selector"] = {"matchLabels": labels}
        return dep
    if kind in ("StatefulSet", "LeaderWorkerSet", "Job"):
        dep = team_b_object("Deployment", i)
        if kind == "LeaderWorkerSet":
            group = {"size": 2, "workerTemplate": dep["spec"].pop("template")}
            dep["spec"] = {"replicas": 0, "leaderWorkerTemplate": group}
        if kind == "Job":  # suspended: no pod runs; anyone may set the label
            meta["labels"] = {L.LABEL_MANAGED_BY: L.MANAGED_BY}
            dep["spec"] = {"suspend": True, "template": dep["spec"]["template"]}
        return {**dep, "kind": kind}
    if kind == "PodDisruptionBudget":
        many = {"key": "app", "operator": "In", "values": ["v" * 60] * 4000}
        return {"kind": kind, "metadata": meta, "spec": {"selector": {"matchExpressions": [many]}}}
    if kind == "HorizontalPodAutoscaler":
        ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "junk"}
        return {"kind": kind, "metadata": meta, "spec": {"scaleTargetRef": ref, "maxReplicas": 2}}
    meta["labels"] = {L.LABEL_MANAGED_BY: L.MANAGED_BY}
    return {"kind": "ConfigMap", "metadata": meta, "data": {"x": "z" * 1_000_000}}


AFTER: dict[str, Callable[[dict[str, Any]], Any]] = {
    "Deployment": pj.project_deployment,
    "Deployment at every bound": pj.project_deployment,
    "StatefulSet": pj.project_stateful_set,
    "LeaderWorkerSet": pj.project_leader_worker_set,
    "Job": pj.project_job,
    "PodDisruptionBudget": pj.project_pdb,
    "HorizontalPodAutoscaler": pj.project_hpa,
    "ConfigMap": pj.project_config_map,
}


def former(body: dict[str, Any]) -> dict[str, Any]:
    """The index value before the projections: the whole object but managedFields."""
    return {**body, "metadata": {**body.get("metadata", {}), "managedFields": []}}


def kept(kind: str, entry: Callable[[dict[str, Any]], Any], n: int) -> tuple[float, float]:
    """(JSON bytes, heap bytes) the index keeps per object."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    index: list[Any] = []
    for i in range(n):
        body = json.loads(json.dumps(team_b_object(kind, i)))  # as decoded from a watch
        index.append(entry(body))
        del body
    gc.collect()
    heap = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    size = sum(len(json.dumps(v, default=repr)) for v in index)
    return size / n, heap / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=20)
    args = parser.parse_args()
    print(f"{'kind':26} {'before JSON':>12} {'after JSON':>11} {'before heap':>12} "
          f"{'after heap':>11} {'objects to 512Mi before/after':>30}")  # fmt: skip
    for kind in AFTER:
        b_json, b_heap = kept(kind, former, args.objects)
        a_json, a_heap = kept(kind, AFTER[kind], args.objects)
        print(
            f"{kind:26} {b_json:12,.0f} {a_json:11,.0f} {b_heap:12,.0f} {a_heap:11,.0f} "
            f"{LIMIT / b_heap:14,.0f} / {LIMIT / a_heap:,.0f}"
        )


if __name__ == "__main__":
    main()

"""CPU-seconds of an operator start's Kubernetes client, two checkouts side by side.

Each run is a fresh Python that imports what `sps-operator run` imports before kopf starts
(controller/main.py's `main`), builds `Kube` and the `LeaseElector`, and sends one request
of each kind the operator sends (the REST client answered in-process: no API server, no
network), so a typed API's import, its models and its per-method validators all count.
Runs alternate between the checkouts (`--before`, `--after`: their `operator/` folders),
so a load change on the shared host hits both alike.

    .venv/bin/python bench/operator_start_cpu.py --before /path/to/old/checkout --runs 7
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import inspect, json
import urllib3
from kubernetes.client import rest

BODY = json.dumps({"apiVersion": "v1", "kind": "X", "metadata": {"name": "x", "uid": "u"},
                   "items": [], "groupVersion": "x/v1", "resources": [],
                   "involvedObject": {}, "spec": {"selector": {}, "template": {}}}).encode()

def answer(self, method, url, headers=None, body=None, post_params=None, _request_timeout=None):
    status = 404 if "/leases/" in url and method == "GET" else 200
    return rest.RESTResponse(urllib3.HTTPResponse(body=BODY, status=status, reason="R"))

rest.RESTClientObject.request = answer

import datetime, kopf
from sps_operator.controller import main
from sps_operator.controller.handlers import Runtime, register
from sps_operator.controller.kube.builders import JobDefaults
from sps_operator.controller.kube.client import Kube
from sps_operator.controller.kube.ratelimit import TokenBucket
from sps_operator.controller.passes.state import Settings
from sps_operator.controller.process.leader import LeaseElector
from sps_operator.controller.process.metrics import Metrics
from sps_operator.controller.reconcile.reconciler import Reconciler

kube = Kube(limit=TokenBucket(1000, 1000))
dep = {"kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"}}
kube.list_targets("ns", "app=x"), kube.serves("LeaderWorkerSet"), kube.get("Job", "ns", "j")
kube.list_jobs("ns", "a=b"), kube.list_config_maps("ns", "a=b"), kube.list_services("ns")
kube.list_pdbs("ns"), kube.list_hpas("ns"), kube.list_leases("ns", ""), kube.list_profiles("ns")
kube.create({**dep, "kind": "Job"}), kube.create({**dep, "kind": "ConfigMap"})
kube.apply(dep), kube.delete("Job", "ns", "j", uid="u")
kube.patch_metadata("Deployment", "ns", "d", {}), kube.patch_status("ns", "p", {})
kube.event(dep, "Normal", "R", "m", datetime.datetime.now())
api = inspect.signature(LeaseElector).parameters["api"].annotation
if "CoordinationV1Api" in str(api):  # before: the elector took a typed API
    from kubernetes import client
    LeaseElector("l", "ns", "me", api=client.CoordinationV1Api()).try_once()
else:
    LeaseElector("l", "ns", "me").try_once()
"""


def cpu_of_one_run(operator_dir: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(operator_dir)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", CHILD], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout to compare")
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sides = {"before": args.before / "operator", "after": args.after / "operator"}
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(args.runs):
        for side, operator_dir in sides.items():
            cpu[side].append(cpu_of_one_run(operator_dir))
    print("| side | CPU-s per start (median) | min | runs |")
    print("| --- | --- | --- | --- |")
    for side, values in cpu.items():
        print(f"| {side} | {statistics.median(values):.2f} | {min(values):.2f} | {len(values)} |")
    saved = statistics.median(cpu["before"]) - statistics.median(cpu["after"])
    print(f"saved per start: {saved:.2f} CPU-s (median against median)")


if __name__ == "__main__":
    main()

"""CPU-seconds of one `kubectl sps` command against a real API server, this checkout's
plugin against another's (e.g. the main checkout), side by side in one run.

Starts the local control plane (kube-apiserver, no nodes), creates one SpsProfile with a
run in progress, its table ConfigMap, the run's Job and a Warning event, then runs each
command `--runs` times per checkout, alternating, and reports user+system CPU-s per run
(the child's rusage) and whether both printed the same bytes. The command is the plugin's
entry point (`kubectl-sps`), without kubectl in front.

    .venv/bin/python bench/plugin_start.py [--baseline /work/main] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sps_operator.api import labels as L
from sps_operator.api.status import SpsProfileStatus
from sps_operator.constants import API_GROUP, API_VERSION
from sps_operator.tables.formats import SpsCostTable
from sps_testbed.binaries import find_binaries
from sps_testbed.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[1]
NS = "bench"
GPU = "NVIDIA-H100-80GB-HBM3"
TABLE = SpsCostTable([8, 16, 32, 64], [1000.0, 900.0, 600.0, 350.0], 128)
COMMANDS: list[list[str]] = [
    ["get", "-n", NS],
    ["get", "-A", "-o", "json"],
    ["explain", "llama", "-n", NS],
    ["table", "llama", "-n", NS],
]
DURATION = re.compile(r"\b(\d+[smhd])+\b")
ENTRY = "import sys; from sps_operator.plugin.cli import main; sys.exit(main())"


def status() -> dict[str, Any]:
    wire = {
        "observedGeneration": 1,
        "gpuProduct": GPU,
        "liveTable": "llama-table",
        "tables": [
            {
                "gpuProduct": GPU, "fingerprint": "fp01", "kind": "Diagonal",
                "configMap": "llama-table", "hash": "0123456789abcdef",
                "quality": {"rmsMs": 0.03, "r2": 0.999, "maxRelErr": 0.02},
                "profiledAt": "2026-12-02T11:30:00Z", "run": "llama-0a1b",
            }
        ],
        "currentRun": {
            "name": "llama-1", "job": "llama-1-job", "phase": "Diagonal",
            "gpuProduct": GPU, "fingerprint": "fp01", "target": "llama",
            "trigger": "Schedule", "startedAt": "2026-12-02T12:00:00Z",
        },
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "TableLive", "message": "live",
             "lastTransitionTime": "2026-12-02T11:31:00Z", "observedGeneration": 1}
        ],
    }  # fmt: skip
    return SpsProfileStatus.model_validate(wire).to_k8s()


def objects() -> list[dict[str, Any]]:
    cm = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "llama-table", "namespace": NS},
        "data": {L.TABLE_KEY: TABLE.to_json(), L.META_KEY: "{}"},
    }  # fmt: skip
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "llama-1-job", "namespace": NS},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "profiler", "image": "registry.invalid/profiler:1"}]}}},
    }  # fmt: skip
    profile = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "SpsProfile",
        "metadata": {"name": "llama", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "llama"}}},
    }  # fmt: skip
    event = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "llama.1", "namespace": NS},
        "involvedObject": {"kind": "SpsProfile", "name": "llama", "namespace": NS},
        "type": "Warning", "reason": "ProfilingFailed", "message": "the last run failed",
        "lastTimestamp": "2026-12-02T12:01:00Z", "firstTimestamp": "2026-12-02T12:01:00Z",
        "count": 1, "source": {"component": "sps-operator"},
    }  # fmt: skip
    return [cm, job, profile, event]


def run_once(src: Path, argv: Sequence[str], env: dict[str, str]) -> tuple[float, str]:
    """CPU-s (user + system) of one command and its stdout + stderr."""
    env = {**env, "PYTHONPATH": os.pathsep.join(str(src / d) for d in ("operator", "sim"))}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, *argv], env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # Ages ("45s", "5d") tick between runs; the rest must match byte for byte.
    text = DURATION.sub("<t>", f"{done.stdout}{done.stderr}")
    return cpu, f"rc={done.returncode}\n{text}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline", type=Path, help="another checkout to compare with")
    p.add_argument("--runs", type=int, default=5)
    ns = p.parse_args(argv)
    sources = {"this checkout": ROOT}
    if ns.baseline is not None:
        sources = {"baseline": ns.baseline.resolve(), **sources}
    with tempfile.TemporaryDirectory(prefix="plugin-start-") as state:
        cp = ControlPlane(Path(state), binaries=find_binaries(build=True))
        cp.start()
        try:
            kubectl = [str(cp.binaries.kubectl), f"--kubeconfig={cp.kubeconfig}"]

            def k(*args: str, stdin: str | None = None) -> None:
                subprocess.run([*kubectl, *args], input=stdin, text=True, check=True,
                               capture_output=True, timeout=120)  # fmt: skip

            k("apply", "--server-side", "-f", str(ROOT / "crds" / "sps.dev_spsprofiles.yaml"))
            k("wait", "--for=condition=Established", "crd/spsprofiles.sps.dev", "--timeout=60s")
            k("create", "namespace", NS)
            for obj in objects():
                k("create", "-f", "-", stdin=json.dumps(obj))
            k("patch", "spsprofile", "llama", "-n", NS, "--subresource=status",
              "--type=merge", "-p", json.dumps({"status": status()}))  # fmt: skip
            env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
            print(f"CPU-s of one `kubectl-sps` run (user + system), {ns.runs} runs each")
            print("| command | " + " | ".join(sources) + " | ratio | same output |")
            print("|---|" + "---|" * (len(sources) + 2))
            for args in COMMANDS:
                cpu: dict[str, list[float]] = {name: [] for name in sources}
                outputs: dict[str, set[str]] = {name: set() for name in sources}
                for _ in range(ns.runs):  # alternating, so both see the same load
                    for name, src in sources.items():
                        seconds, out = run_once(src, args, env)
                        cpu[name].append(seconds)
                        outputs[name].add(out)
                medians = [statistics.median(cpu[name]) for name in sources]
                ratio = f"{medians[-1] / medians[0]:.2f}" if len(medians) > 1 else "-"
                same = "yes" if len({frozenset(o) for o in outputs.values()}) == 1 else "NO"
                cells = " | ".join(f"{m:.2f}" for m in medians)
                print(f"| `kubectl sps {' '.join(args)}` | {cells} | {ratio} | {same} |")
                if same == "NO" or any(
                    not o.startswith("rc=0") for s in outputs.values() for o in s
                ):
                    for name in sources:
                        print(f"  {name}: {sorted(outputs[name])[:1]}")
        finally:
            cp.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

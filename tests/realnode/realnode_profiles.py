"""Profiles on the real-node bed: the examples made quick, waiting for Ready, reading what
a pod serves (shared by the chart tests)."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from realnode_helpers import get_json

from sps_operator.api.legacy_tables import without_v1_twins
from sps_testbed import RealNodeCluster
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TABLE_PATH = "/etc/sps/table/table.json"
# Model seconds per wall second in the simulated servers (the pods' env, cloned into Jobs).
SIM_TIME_SCALE = "40"
# A quick sweep: four batch sizes, one round each.
QUICK_SWEEP = {"batchSizes": [1, 2, 4, 8], "ciRelWidth": 0.05, "repeats": 1}


@contextlib.contextmanager
def chart_installed(bed: RealNodeCluster, namespace: str, *values: str) -> Iterator[str]:
    """`helm install oci://<bed registry>/charts/sps-operator` (the chart the bed pushed
    there; with `--set` `values`) into `namespace`, created to enforce `restricted` pod
    security; uninstalled and deleted afterwards."""
    bed.kubectl("create", "namespace", namespace)
    bed.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    sets = [arg for value in values for arg in ("--set", value)]
    try:
        # --take-ownership: the CRD an earlier release in another namespace left behind
        # (crds.keep) becomes this release's, as after a reinstall elsewhere.
        bed.helm(
            "install", "sps-operator", *bed.chart_args(),
            "--namespace", namespace, *sets, "--take-ownership", "--wait", "--timeout", "300s",
        )  # fmt: skip
        yield namespace
    finally:
        bed.helm("uninstall", "sps-operator", "--namespace", namespace, check=False)
        bed.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def load(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((EXAMPLES / name).read_text()))


def with_env(deployment: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    out = copy.deepcopy(deployment)
    (container,) = out["spec"]["template"]["spec"]["containers"]
    kept = [e for e in container.get("env") or [] if e["name"] not in env]
    container["env"] = kept + [{"name": k, "value": v} for k, v in env.items()]
    return out


def quick(profile: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(profile)
    sweep = out["spec"]["table"]["sweep"]
    sweep.pop("maxBatchSize", None)
    sweep.update(QUICK_SWEEP)
    sweep.setdefault("vocabSize", 128256)
    out["spec"]["job"] = {"activeDeadlineSeconds": 900}
    return out


def ref(image: str) -> str:
    """An image reference without the default registry (what the runtime adds)."""
    return image.removeprefix("docker.io/")


def conditions(profile: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (profile.get("status") or {}).get("conditions") or []}


def diagnostics(bed: RealNodeCluster, release_ns: str, ns: str, profile: str) -> str:
    parts = []
    for args in (
        ("get", "spsprofile", profile, "-n", ns, "-o", "yaml"),
        ("get", "pods,jobs,configmaps", "-n", ns, "-o", "wide"),
        ("logs", "-n", release_ns, "-l", "app.kubernetes.io/name=sps-operator", "--tail=80"),
        ("logs", "-n", ns, "-l", f"sps.dev/profile={profile}", "--all-containers", "--tail=40"),
    ):
        parts.append(f"--- kubectl {' '.join(args)} ---\n{bed.kubectl(*args, check=False)}")
    return "\n".join(parts)


def wait_ready(bed: RealNodeCluster, release_ns: str, ns: str, profile: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        prof = get_json(bed, "spsprofile", profile, "-n", ns)
        conds = conditions(prof)
        # Degraded=True is terminal enough to stop waiting and show why.
        return prof if conds.get("Ready") == "True" or conds.get("Degraded") == "True" else None

    try:
        prof: dict[str, Any] = wait_for(f"SpsProfile {ns}/{profile} Ready", ready, timeout=600)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnostics(bed, release_ns, ns, profile)}") from None
    assert conditions(prof).get("Ready") == "True", diagnostics(bed, release_ns, ns, profile)
    status = prof.get("status") or {}
    if "tables" in status:  # as the operator reads them (no entries listed for 0.1.0)
        status["tables"] = without_v1_twins(status["tables"])
    return prof


def rolled_out(dep: dict[str, Any]) -> bool:
    status, replicas = dep.get("status", {}), dep["spec"].get("replicas", 1)
    return bool(
        status.get("observedGeneration", 0) >= dep["metadata"]["generation"]
        and status.get("updatedReplicas", 0) == replicas
        and status.get("availableReplicas", 0) == replicas
        and status.get("replicas", 0) == replicas
    )


def ready_pod_with(bed: RealNodeCluster, ns: str, app: str, table_hash: str) -> Any:
    """A Ready, not terminating pod of `app` whose template carries `table_hash`."""
    for p in get_json(bed, "pods", "-n", ns, "-l", f"app={app}")["items"]:
        ready = any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p.get("status", {}).get("conditions") or []
        )
        ann = p["metadata"].get("annotations") or {}
        if (
            ready
            and ann.get("sps.dev/table-hash") == table_hash
            and not p["metadata"].get("deletionTimestamp")
        ):
            return dict(p)
    return None


def rolled_pod(bed: RealNodeCluster, ns: str, app: str, table_hash: str) -> dict[str, Any]:
    """Wait for a Ready pod of `app` rolled onto the table `table_hash`."""
    pod: dict[str, Any] = wait_for(
        "a Ready pod of the rolled Deployment",
        lambda: ready_pod_with(bed, ns, app, table_hash),
        timeout=300,
    )
    return pod


def serves(bed: RealNodeCluster, ns: str, app: str, table_hash: str) -> dict[str, Any]:
    """A rolled pod of `app` whose server says it loaded the table `table_hash`; the pod."""
    pod = rolled_pod(bed, ns, app, table_hash)
    served = served_table(bed, ns, pod["metadata"]["name"], "sglang")
    assert served["loaded"] is True and served["sha256"] == table_hash, served
    return pod


def served_table(bed: RealNodeCluster, ns: str, pod: str, container: str) -> dict[str, Any]:
    """The sps_table section of the server's /server_info, asked inside its pod."""
    info = json.loads(in_pod(bed, ns, pod, container, SERVER_INFO))
    return dict(info["sps_table"])


def in_pod(bed: RealNodeCluster, ns: str, pod: str, container: str, code: str) -> str:
    return bed.kubectl("exec", "-n", ns, pod, "-c", container, "--", "python3", "-c", code)


SERVER_INFO = (
    "import urllib.request; "
    "print(urllib.request.urlopen('http://127.0.0.1:30000/server_info', timeout=10).read()"
    ".decode())"
)

"""The chart in `watch.mode=namespaces` on real nodes: the operator's Role in the watched
namespace is enough to profile and roll there, and it neither touches nor may read the
Deployments of a namespace it does not watch."""

from __future__ import annotations

import uuid
from pathlib import Path

from realnode_helpers import apply, get_json
from realnode_profiles import (
    SIM_TIME_SCALE,
    load,
    quick,
    ready_pod_with,
    served_table,
    wait_ready,
    with_env,
)

from sps_testbed import RealNodeCluster
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def test_namespaces_mode_profiles_in_its_namespace_only(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    bed, watched = realnode_cluster, realnode_namespace
    suffix = uuid.uuid4().hex[:5]
    release, other = f"sps-ns-{suffix}", f"unwatched-{suffix}"
    for ns in (release, other):
        bed.kubectl("create", "namespace", ns)
    bed.kubectl("label", "namespace", release, "pod-security.kubernetes.io/enforce=restricted")
    try:
        bed.helm(
            "install",
            "sps-operator",
            str(REPO / "charts" / "sps-operator"),
            "--namespace",
            release,
            "--set",
            "watch.mode=namespaces",
            "--set",
            f"watch.namespaces={{{watched}}}",
            "--set",
            "replicaCount=1",
            "--wait",
            "--timeout",
            "300s",
        )
        account = f"system:serviceaccount:{release}:sps-operator"
        for verb in ("list deployments", "patch deployments", "create jobs"):
            allowed = bed.kubectl(
                "auth", "can-i", *verb.split(), "-n", other, "--as", account, check=False
            ).strip()
            assert allowed == "no", (verb, other, allowed)
            allowed = bed.kubectl(
                "auth", "can-i", *verb.split(), "-n", watched, "--as", account, check=False
            ).strip()
            assert allowed == "yes", (verb, watched, allowed)

        server = with_env(load("sglang-deployment.yaml"), {"SPS_SIM_TIME_SCALE": SIM_TIME_SCALE})
        profile = quick(load("diagonal.yaml"))
        # The unwatched namespace first: by the time the watched profile is Ready, an
        # operator that saw the other one would have written its status.
        apply(bed, other, server, profile)
        apply(bed, watched, server, profile)
        prof = wait_ready(bed, release, watched, "llama")
        (table,) = prof["status"]["tables"]
        serving = wait_for(
            "a Ready pod of the rolled Deployment",
            lambda: ready_pod_with(bed, watched, "llama", table["hash"]),
            timeout=300,
        )
        served = served_table(bed, watched, serving["metadata"]["name"], "sglang")
        assert served["sha256"] == table["hash"], served
        assert not get_json(bed, "spsprofile", "llama", "-n", other).get("status")
        assert not get_json(bed, "jobs", "-n", other)["items"]
        dep = get_json(bed, "deployment", "llama", "-n", other)
        assert "sps.dev/table-hash" not in (
            dep["spec"]["template"]["metadata"].get("annotations") or {}
        )
    finally:
        bed.helm("uninstall", "sps-operator", "--namespace", release, check=False)
        for ns in (release, other):
            bed.kubectl("delete", "namespace", ns, "--wait=false", check=False)

"""The chart in `watch.mode=namespaces` on real nodes: the operator's Role in the watched
namespace is enough to profile and roll there, and it neither touches nor may read the
Deployments of a namespace it does not watch."""

from __future__ import annotations

import uuid

from realnode_helpers import apply, get_json
from realnode_profiles import (
    SIM_TIME_SCALE,
    chart_installed,
    load,
    quick,
    serves,
    wait_ready,
    with_env,
)

from sps_testbed import RealNodeCluster


def test_namespaces_mode_profiles_in_its_namespace_only(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    bed, watched = realnode_cluster, realnode_namespace
    suffix = uuid.uuid4().hex[:5]
    release, other = f"sps-ns-{suffix}", f"unwatched-{suffix}"
    bed.kubectl("create", "namespace", other)
    values = ("watch.mode=namespaces", f"watch.namespaces={{{watched}}}", "replicaCount=1")
    try:
        with chart_installed(bed, release, *values):
            run_in_watched_namespace_only(bed, release, watched, other)
    finally:
        bed.kubectl("delete", "namespace", other, "--wait=false", check=False)


def run_in_watched_namespace_only(
    bed: RealNodeCluster, release: str, watched: str, other: str
) -> None:
    """The chart in namespaces mode: rights in `watched` only, a profile there served,
    the same profile in `other` left alone."""
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
    serves(bed, watched, "llama", table["hash"])
    assert not get_json(bed, "spsprofile", "llama", "-n", other).get("status")
    assert not get_json(bed, "jobs", "-n", other)["items"]
    dep = get_json(bed, "deployment", "llama", "-n", other)
    assert "sps.dev/table-hash" not in (
        dep["spec"]["template"]["metadata"].get("annotations") or {}
    )

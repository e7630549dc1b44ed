"""NetworkPolicy is enforced on a bed started with kube-router's policy controller
(`sps-testbed up --with network-policies`), and not on one without it; and a profile in a
default-deny namespace goes live with the chart's egress policy, and without it fails saying
what to allow.

A client pod on the first node (the one kube-router enforces for: see docs/dev-cluster.md,
"Network policy in the bed") probes a server on its own node, a server on another node and
the API server. The same pods and the same probes: open before any policy, all blocked under
a default-deny policy (ingress and egress), open again once a policy allows them. On the
session's bed, which runs no policy controller, the default-deny policy changes nothing: what
blocks the traffic is the controller, not a broken network.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_cluster import E2eCluster
from e2e_env import (
    GROUP,
    PLURAL,
    VERSION,
    Env,
    OperatorRelease,
    create,
    install_crd,
    kubectl_sps,
    rolled_to,
    server_deployment,
    sps_profile,
    tables,
    wait_ready,
)
from realnode_helpers import apply, get_json, pod

from sps_operator.api import reasons as R
from sps_sim.costmodel import GPU_H100, GPU_H200
from sps_testbed import RealNodeCluster
from waiting import wait_for

# A bed of its own beside the session's, and on the session's bed its own namespace only;
# one worker for the module, so that its tests share that bed.
pytestmark = [pytest.mark.bed_shared, pytest.mark.xdist_group("network-policy-bed")]

# One line of JSON: each target's "open" or "blocked" (a connect within 2 s, or not).
PROBE = """
import json, socket, sys
out = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        out[target] = "open"
    except OSError:
        out[target] = "blocked"
print(json.dumps(out))
"""

DENY_ALL = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "default-deny"},
    "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
}
ALLOW_ALL = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "allow-all"},
    "spec": {
        "podSelector": {},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{}],
        "egress": [{}],
    },
}


# The node whose pods kube-router enforces policies for (the bed's first).
ENFORCED = "np-0"


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "sps_testbed.cli", f"--state-dir={state}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)


@pytest.fixture(scope="module")
def policy_bed(
    realnode_cluster: RealNodeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealNodeCluster]:
    """Two nodes, with kube-router's policy controller; stopped after the module. Beside the
    session's bed (which marks this a real-node test, out of `-m "not k8s"`). The first node,
    the enforced one, holds two GPUs: a server and its profiling Job's clone."""
    state = tmp_path_factory.mktemp("policy-bed") / "bed"
    out = _cli(
        state,
        "up",
        f"--node={ENFORCED}={GPU_H200}:2",
        f"--node=np-1={GPU_H100}:1",
        "--with=network-policies",
    )
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        bed = RealNodeCluster.attach(state)
        assert "kube-router" in bed.record().pids
        bed.build()  # its kubectl and helm (cached: the session's build)
        yield bed
    finally:
        down = _cli(state, "down")
        assert down.returncode == 0, down.stdout + down.stderr


def _on(node: str) -> dict[str, str]:
    return {"kubernetes.io/hostname": node}


def _server(name: str, image: str, node: str) -> dict[str, Any]:
    return pod(
        name,
        image,
        ["python3", "-m", "http.server", "8000", "-d", "/"],
        labels={"app": name},
        node_selector=_on(node),
        restart="Always",
    )


def _probe_setup(bed: RealNodeCluster, ns: str, enforced: str, other: str) -> list[str]:
    """Servers on `enforced` and `other`, a client on `enforced`; the probe's targets."""
    image = bed.image("operator")
    client = pod("client", image, ["sleep", "3600"], node_selector=_on(enforced), restart="Always")
    for obj in (_server("same", image, enforced), _server("other", image, other), client):
        apply(bed, ns, obj)

    def ip(name: str) -> str | bool:
        status = get_json(bed, "pod", name, "-n", ns).get("status", {})
        return (status.get("phase") == "Running" and str(status.get("podIP", ""))) or False

    # 300 s: the bed of its own pulls the operator image cold (≈ 640 MB unpacked per node)
    # while the shared phase loads both cores.
    ips = {n: str(wait_for(f"{ns}/{n} running", lambda n=n: ip(n), 300)) for n in ("same", "other")}
    wait_for(f"{ns}/client running", lambda: ip("client"), 300)
    # The API server as a pod reaches it: its Service's ClusterIP (DNATed to its endpoint).
    return [f"{ips['same']}:8000", f"{ips['other']}:8000", "10.96.0.1:443"]


def _probe(bed: RealNodeCluster, ns: str, targets: list[str]) -> dict[str, str]:
    out = bed.kubectl("exec", "-n", ns, "client", "--", "python3", "-c", PROBE, *targets)
    return dict(json.loads(out.strip().splitlines()[-1]))


def _until(bed: RealNodeCluster, ns: str, targets: list[str], want: str) -> dict[str, str]:
    """Probe until every target is `want` (the controller applies a policy within seconds);
    the last result either way, for the assertion's message."""
    last: dict[str, str] = {}

    def settled() -> bool:
        last.clear()
        last.update(_probe(bed, ns, targets))
        return all(last.get(t) == want for t in targets)

    # Timing out is not the failure: the caller's assertion shows what was seen last.
    with contextlib.suppress(AssertionError):
        wait_for(f"all of {targets} {want}", settled, 60, interval=2.0)
    return last


def test_default_deny_blocks_pod_and_api_server_traffic_until_a_policy_allows_it(
    policy_bed: RealNodeCluster,
) -> None:
    bed = policy_bed
    ns = bed.create_namespace("np-enforced")
    targets = _probe_setup(bed, ns, enforced=ENFORCED, other="np-1")
    opened = _until(bed, ns, targets, "open")
    assert opened == dict.fromkeys(targets, "open"), f"before any policy: {opened}"

    apply(bed, ns, DENY_ALL)
    blocked = _until(bed, ns, targets, "blocked")
    assert blocked == dict.fromkeys(targets, "blocked"), f"under default-deny: {blocked}"

    apply(bed, ns, ALLOW_ALL)
    allowed = _until(bed, ns, targets, "open")
    assert allowed == dict.fromkeys(targets, "open"), f"with allow-all beside it: {allowed}"


def test_without_the_controller_default_deny_blocks_nothing(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    bed, ns = realnode_cluster, realnode_namespace
    nodes = [n.name for n in bed.record().nodes]
    assert "kube-router" not in bed.record().pids
    targets = _probe_setup(bed, ns, enforced=nodes[0], other=nodes[-1])
    apply(bed, ns, DENY_ALL)
    seen = _until(bed, ns, targets, "open")
    assert seen == dict.fromkeys(targets, "open"), f"no controller, default-deny: {seen}"


def _api_server_endpoint(bed: RealNodeCluster) -> tuple[str, int]:
    """The API server's address and port as pods reach it after kube-proxy's DNAT, read
    as docs/security.md tells a user to (the `kubernetes` Service's EndpointSlice)."""
    (eps,) = get_json(
        bed, "endpointslices", "-n", "default", "-l", "kubernetes.io/service-name=kubernetes"
    )["items"]
    return str(eps["endpoints"][0]["addresses"][0]), int(eps["ports"][0]["port"])


def _last_failure(env: Env) -> dict[str, Any] | None:
    failure = (env.profile().get("status") or {}).get("lastFailure") or {}
    return dict(failure) if failure.get("reason") else None


def test_a_profile_in_a_default_deny_namespace_goes_live_with_the_charts_policy_only(
    policy_bed: RealNodeCluster, tmp_path: Path
) -> None:
    """Issue 19 §4: in a namespace whose default-deny policy (ingress and egress) the user
    keeps, the chart's `networkPolicy.profilingPods` (the API server's address and port
    from its EndpointSlice, as docs/security.md says) lets the profiling pod write its
    result: the table goes live. Without that policy the next run fails within about a
    minute (the profiler's writes are bounded in time), the status and `kubectl sps explain`
    say the profiler never wrote its result and which egress to allow, and the live table
    stays. Every pod of the namespace runs on the enforced node."""
    bed, cluster = policy_bed, E2eCluster(policy_bed)
    install_crd(cluster)
    ns = bed.create_namespace("np-tenant")
    apply(bed, ns, DENY_ALL)
    address, port = _api_server_endpoint(bed)
    release = OperatorRelease(
        cluster, bed.create_namespace("np-system"), ns, tmp_path / "clock",
        extra_values=[
            "networkPolicy.profilingPods.enabled=true",
            f"networkPolicy.profilingPods.apiServer.cidrs={{{address}/32}}",
            f"networkPolicy.profilingPods.apiServer.ports={{{port}}}",
        ],
    )  # fmt: skip
    env = Env(cluster, bed.api_client(), ns, release)
    profile = sps_profile()
    profile["spec"]["table"]["sweep"]["batchSizes"] = [1, 2]
    try:
        create(env, server_deployment(GPU_H200), profile)  # H200: only the enforced node
        release.start()
        wait_ready(env, timeout=420)  # both images pulled cold on the bed of its own
        (table,) = tables(env)
        wait_for("the server rolled onto the table", lambda: rolled_to(env, table["hash"]), 120)
        (job,) = env.jobs()
        (job_pod,) = env.pods(f"job-name={job['metadata']['name']}")
        assert job_pod["spec"]["nodeName"] == ENFORCED, job_pod["spec"].get("nodeName")

        # The same namespace without the chart's policy: the next run cannot write.
        bed.kubectl("delete", "networkpolicy", "-n", ns, f"{release.name}-profiling-egress")
        env.custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "sps",
            {"metadata": {"annotations": {"sps.dev/reprofile": "without-the-policy"}}},
        )  # fmt: skip
        failure = wait_for("the run without the policy failed", lambda: _last_failure(env), 300)
        assert failure["reason"] == R.PROFILING_FAILED, failure
        assert R.NEVER_WROTE_RESULT in failure["message"], failure
        assert "networkPolicy.profilingPods.enabled" in failure["message"], failure
        assert "could not reach the API server" in kubectl_sps(env, "explain", "sps")
        assert [t["hash"] for t in tables(env)] == [table["hash"]]  # the live table stays
        assert rolled_to(env, table["hash"])
    finally:
        print(env.diagnostics())
        release.uninstall()

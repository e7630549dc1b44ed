"""NetworkPolicy is enforced on a bed started with kube-router's policy controller
(`sps-testbed up --with network-policies`), and not on one without it.

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
from realnode_helpers import apply, get_json, pod

from sps_testbed import RealNodeCluster
from waiting import wait_for

# A bed of its own beside the session's, and on the session's bed its own namespace only.
pytestmark = pytest.mark.bed_shared

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


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "sps_testbed.cli", f"--state-dir={state}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)


@pytest.fixture
def policy_bed(realnode_cluster: RealNodeCluster, tmp_path: Path) -> Iterator[RealNodeCluster]:
    """Two nodes, with kube-router's policy controller; stopped afterwards. Beside the
    session's bed (which marks this a real-node test, out of `-m "not k8s"`)."""
    state = tmp_path / "bed"
    out = _cli(
        state,
        "up",
        "--node=np-0=NVIDIA-H200:1",
        "--node=np-1=NVIDIA-H100:1",
        "--with=network-policies",
    )
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        bed = RealNodeCluster.attach(state)
        assert "kube-router" in bed.record().pids
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
    targets = _probe_setup(bed, ns, enforced="np-0", other="np-1")
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

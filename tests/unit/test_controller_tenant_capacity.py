"""Issue 33: what a tenant can write on the shared GPU pool, and why the operator never
believes it (the borrow record, the queue, the holds, the messages, the cost of a pass)."""

from __future__ import annotations

from typing import Any

from capacity_harness import BORROW, harness
from controller_harness import Harness, deployment, indexes_of

from sps_operator.api.spec import CapacitySpec
from sps_operator.controller.indexes import deployments_covered
from sps_operator.controller.policies.borrow import borrow_refusal, pdb_covers


def blocked_by(h: Harness) -> str:
    from capacity_harness import start_waiting

    start_waiting(h)
    h.tick(30)
    waiting = h.run_pass()["currentRun"]["waiting"]
    assert waiting["reason"] == "BorrowBlocked" and not h.kube.scales, waiting
    return str(waiting["message"])


# ----------------------------------------------------------------------------- PDBs


def pdb(selector: Any, allowed: int = 0) -> dict[str, Any]:
    spec = {"minAvailable": 2} | ({"selector": selector} if selector is not None else {})
    return {"kind": "PodDisruptionBudget", "metadata": {"name": "all-pods", "namespace": "serving"},
            "spec": spec, "status": {"disruptionsAllowed": allowed}}  # fmt: skip


def test_an_empty_pdb_selector_covers_every_pod_of_its_namespace() -> None:
    """policy/v1: `selector: {}` selects every pod of the namespace. The borrow once read
    it as matching nothing and scaled down a replica the PDB protects."""
    h = harness(**BORROW)
    h.add(pdb({}))
    assert "PodDisruptionBudget all-pods allows no disruption" in blocked_by(h)
    # A null selector covers nothing; an empty one with room for a disruption lets it go.
    dep = deployment()
    dep["spec"]["replicas"] = 3
    dep["status"].update(replicas=3, updatedReplicas=3, availableReplicas=3, readyReplicas=3)
    labels = dep["spec"]["template"]["metadata"]["labels"]
    capacity = CapacitySpec(mode="BorrowReplica")
    assert pdb_covers(pdb({}), labels) and not pdb_covers(pdb(None), labels)
    assert borrow_refusal(dep, capacity, [pdb(None)], []) is None
    assert borrow_refusal(dep, capacity, [pdb({}, allowed=1)], []) is None
    assert borrow_refusal(dep, capacity, [pdb({"matchLabels": {"x": "y"}})], []) is None
    # ... and its status changes wake the profiles of every Deployment there.
    idx = indexes_of([dep])
    assert [d["metadata"]["name"] for d in deployments_covered(idx.deployments, "serving", {})] == [
        "server"
    ]
    assert deployments_covered(idx.deployments, "serving", None) == []

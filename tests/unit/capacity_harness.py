"""Helpers for the capacity tests: a Deployment that fills its pool, a profile, and the
profiling Job's pod as the pod index has it."""

from __future__ import annotations

from typing import Any

from controller_harness import NS, Harness, deployment, profile_body

from sps_operator.api import labels as L
from sps_operator.controller.policies.placement import PodInfo

NO_GPU = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
BORROW = {"capacity": {"mode": "BorrowReplica", "borrowAfterSeconds": 30}}


def harness(replicas: int = 2, **spec: Any) -> Harness:
    h = Harness()
    dep = deployment()
    dep["spec"]["replicas"] = replicas
    h.add(dep)
    h.kube.roll(h.kube.obj("Deployment", "server"))
    h.add(profile_body(**spec))
    h.place(count=replicas)
    return h


def job_pod(h: Harness, unschedulable: str | None = NO_GPU) -> None:
    """The profiling Job's pod, as the pod index has it."""
    run = h.status()["currentRun"]["name"]
    uid = h.kube.obj("SpsProfile", "p")["metadata"]["uid"]
    labels = {L.LABEL_RUN: run, L.LABEL_COMPONENT: L.COMPONENT_POD, L.LABEL_PROFILE_UID: uid}
    h.pods = [p for p in h.pods if p.labels.get(L.LABEL_RUN) != run]
    node = None if unschedulable else "n1"
    h.pods.append(PodInfo(f"{run}-xyz", labels, node, unschedulable=unschedulable,
                          **job_owner(h)))  # fmt: skip


def job_owner(h: Harness, profile: str = "p", namespace: str = NS) -> dict[str, Any]:
    """A pod's controller: the profile's current Job (as the Job controller sets it)."""
    job = h.status(profile, namespace)["currentRun"]["job"]
    meta = h.kube.obj("Job", job, namespace)["metadata"]
    return {"controller": "Job", "controller_uid": meta["uid"], "created": "2026-03-01T12:00:00Z"}


def start_waiting(h: Harness) -> None:
    h.tick()
    h.run_pass()
    job_pod(h)
    h.tick()
    h.run_pass()


def local_queue(h: Harness, name: str = "gpu-profiling", namespace: str = NS) -> None:
    """Kueue's LocalQueue `name` (the API group is served unless the test says not)."""
    h.kube.put({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"clusterQueue": "gpu"}})  # fmt: skip

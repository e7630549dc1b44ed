"""The profiling Jobs the operator builds, created on a real API server and read back
(defaulted as the API server defaults them): each is still the Job the operator builds
(policies/job_adoption.py), so the crash between a Job's create and its status write
adopts it. A unit test can only list the defaults it knows of; this one asks the server
(it found the deprecated `serviceAccount` the server mirrors from `serviceAccountName`)."""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_controller_builders import plan, production_plan

from sps_operator.api.labels import LABEL_KUEUE_QUEUE
from sps_operator.controller.kube import builders
from sps_operator.controller.policies.job_adoption import job_refusal

pytestmark = pytest.mark.k8s

# The unit tests' production target, with what the API server validates made valid.
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}
            ]
        }
    }
}
TARGET = {**production_plan().target_pod_spec, "affinity": AFFINITY}
PLANS = {
    "clone": dataclasses.replace(
        plan(), target_pod_spec={**plan().target_pod_spec, "affinity": AFFINITY}
    ),
    "production": dataclasses.replace(production_plan(), target_pod_spec=TARGET),
    "kueue": dataclasses.replace(
        plan(job={"labels": {LABEL_KUEUE_QUEUE: "team"}}), target_pod_spec=TARGET
    ),
    "external": plan(server={"source": "External", "url": "http://sglang:30000"}),
}  # fmt: skip


def _create(kubectl: Callable[..., str], namespace: str, job: dict[str, Any]) -> dict[str, Any]:
    out = kubectl("create", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(job))
    created: dict[str, Any] = json.loads(out)
    return created


@pytest.mark.parametrize("kind", sorted(PLANS))
def test_k8s_each_job_the_operator_builds_is_its_own_as_the_api_server_returns_it(
    kubectl: Callable[..., str], namespace: str, kind: str
) -> None:
    built = builders.profiling_job(PLANS[kind])
    built["metadata"]["namespace"] = namespace
    built["metadata"].pop("ownerReferences", None)  # (no profile here to own it)
    created = _create(kubectl, namespace, built)
    refusal = job_refusal(created, built)
    assert refusal is None, f"{refusal}: {json.dumps(created['spec'])}"
    tampered = copy.deepcopy(built)
    tampered["metadata"]["name"] += "-x"
    tampered["spec"]["parallelism"] = 64
    assert job_refusal(_create(kubectl, namespace, tampered), built) is not None

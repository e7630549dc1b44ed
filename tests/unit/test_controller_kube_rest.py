"""The operator's client on the bare ApiClient (`controller/kube/rest.py`): no typed
Kubernetes API is ever loaded, and every `Kube` method sends the request the typed one
sent (path, query, content type, body) and raises what it raised. The HTTP is answered
here (`fakerest`); tests/k8s runs the same methods against a real API server."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from fakerest import FakeRest, Sent
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException, NotFoundException

from sps_operator.controller.kube.client import Kube, api_error_detail, is_transient
from sps_operator.controller.kube.rest import RESOURCES
from sps_operator.controller.process.leader import LeaseElector, Timing
from sps_operator.kube_rest import OBJECT_CAP, AnswerRefused

# What `sps-operator run` imports and builds before kopf starts (controller/main.py's
# `main`), then one call of each request the operator makes.
START = """
import datetime, json, sys
from fakerest import FakeRest

import kopf
from sps_operator.controller import main
from sps_operator.controller.handlers import Runtime, register
from sps_operator.controller.kube.builders import JobDefaults
from sps_operator.controller.kube.client import Kube
from sps_operator.controller.kube.ratelimit import TokenBucket
from sps_operator.controller.passes.state import Settings
from sps_operator.controller.process.leader import LeaseElector
from sps_operator.controller.process.metrics import Metrics
from sps_operator.controller.reconcile.reconciler import Reconciler

ANY = {"items": [], "metadata": {"uid": "u"}, "groupVersion": "g/v1", "resources": [],
       "involvedObject": {}}  # parses into any model a typed API would ask for
fake = FakeRest(lambda sent: (200, ANY))
kube = Kube(fake.api, TokenBucket(1000, 1000))
dep = {"kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"}}
kube.list_targets("ns", "app=x"), kube.serves("LeaderWorkerSet"), kube.get("Job", "ns", "j")
kube.list_pdbs("ns"), kube.list_hpas("ns"), kube.list_leases("ns", ""), kube.list_profiles("ns")
kube.list_workloads("ns", ""), kube.pending_workloads("ns", "q", 1)
kube.create({**dep, "kind": "Job"}), kube.apply(dep), kube.delete("Lease", "ns", "l", uid="u")
kube.patch_metadata("Lease", "ns", "l", {}), kube.patch_lender("ns", "d", {})
kube.patch_status("ns", "p", {}), kube.event(dep, "Normal", "R", "m", datetime.datetime.now())
leases = FakeRest(lambda sent: (404, {}) if sent.method == "GET" else (200, ANY))
assert LeaseElector("l", "ns", "me", api=leases.api).try_once()
apis = sorted(m for m in sys.modules if m.startswith("kubernetes.client.api."))
models = [m for m in sys.modules if m.startswith("kubernetes.client.models.")]
print(json.dumps({"apis": apis, "models": len(models)}))
"""


def test_the_operators_start_loads_no_typed_kubernetes_api() -> None:
    """Each typed API (`CoreV1Api`, ...) of client 37 imports and builds pydantic models and
    a validator per method: about 1.3 CPU-s of every operator start (docs/dev-cluster.md,
    "Cutting CPU-seconds"). A fresh interpreter, as the pod's."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", START], capture_output=True, text=True,
                         env=env, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout.splitlines()[-1])
    assert loaded["apis"] == []
    # kopf imports V1ObjectMeta (and the two models it refers to) to recognise one; a
    # typed API would import a few hundred.
    assert loaded["models"] <= 3, loaded


def _ok(body: dict[str, Any]) -> Any:
    return lambda sent: (200, body)


def _refusing(status: int) -> Any:
    return lambda sent: (status, {"kind": "Status", "code": status})


# Each kind's object path, spelled out (a wrong group, version or plural in the table fails).
PATHS = {
    "Deployment": "/apis/apps/v1/namespaces/ns/deployments/x",
    "StatefulSet": "/apis/apps/v1/namespaces/ns/statefulsets/x",
    "LeaderWorkerSet": "/apis/leaderworkerset.x-k8s.io/v1/namespaces/ns/leaderworkersets/x",
    "Job": "/apis/batch/v1/namespaces/ns/jobs/x",
    "ConfigMap": "/api/v1/namespaces/ns/configmaps/x",
    "ServiceAccount": "/api/v1/namespaces/ns/serviceaccounts/x",
    "Service": "/api/v1/namespaces/ns/services/x",
    "Event": "/api/v1/namespaces/ns/events/x",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles/x",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/rolebindings/x",
    "Lease": "/apis/coordination.k8s.io/v1/namespaces/ns/leases/x",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/ns/poddisruptionbudgets/x",
    "HorizontalPodAutoscaler": "/apis/autoscaling/v2/namespaces/ns/horizontalpodautoscalers/x",
    "SpsProfile": "/apis/sps.dev/v1alpha1/namespaces/ns/spsprofiles/x",
    "LocalQueue": "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/localqueues/x",
    "Workload": "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads/x",
}


@pytest.mark.parametrize("kind", sorted(PATHS))
def test_each_kind_is_read_at_its_path_as_a_plain_dict(kind: str) -> None:
    fake = FakeRest(_ok({"kind": kind, "metadata": {"name": "x"}}))
    assert Kube(fake.api).get(kind, "ns", "x") == {"kind": kind, "metadata": {"name": "x"}}
    (sent,) = fake.sent
    assert (sent.method, sent.path, sent.query) == ("GET", PATHS[kind], {})
    assert sent.headers["Accept"] == "application/json"


def test_the_table_names_every_kind_the_test_does() -> None:
    assert set(RESOURCES) == set(PATHS)


def test_absent_is_none_and_an_error_carries_status_reason_and_body() -> None:
    status = {"kind": "Status", "message": "etcd is sad", "code": 503}
    answers = {"gone": (404, {"kind": "Status", "code": 404}), "sad": (503, status)}
    fake = FakeRest(lambda sent: answers[sent.path.rsplit("/", 1)[-1]])
    kube = Kube(fake.api)
    assert kube.get("ConfigMap", "ns", "gone") is None
    with pytest.raises(ApiException) as raised:
        kube.get("ConfigMap", "ns", "sad")
    exc = raised.value
    assert (exc.status, exc.reason, json.loads(exc.body or "")) == (503, "Refused", status)
    assert api_error_detail(exc) == "API error 503 Refused: etcd is sad"
    assert is_transient(exc)
    with pytest.raises(NotFoundException):  # the typed client's subclasses, as before
        kube.patch_metadata("ConfigMap", "ns", "gone", {})


def test_lists_send_the_label_selector_and_find_every_workload_kind_served() -> None:
    def answer(sent: Sent) -> tuple[int, Any]:
        if "leaderworkersets" in sent.path:
            return 404, {"kind": "Status"}  # no LeaderWorkerSet CRD
        return 200, {"items": [{"metadata": {"name": sent.path.rsplit("/", 1)[-1]}}]}

    fake = FakeRest(answer)
    kube = Kube(fake.api)
    found = kube.list_targets("ns", "app in (a,b)")
    assert [(t["kind"], t["metadata"]["name"]) for t in found] == [
        ("Deployment", "deployments"),
        ("StatefulSet", "statefulsets"),
    ]
    assert all(s.query == {"labelSelector": "app in (a,b)"} for s in fake.sent)
    assert fake.sent[0].raw_path == "/apis/apps/v1/namespaces/ns/deployments"
    fake.sent.clear()
    assert kube.list_pdbs("ns") == [{"metadata": {"name": "poddisruptionbudgets"}}]
    assert fake.sent[0].query == {}  # no selector: every object

    def no_statefulsets(sent: Sent) -> tuple[int, Any]:
        return (404, {}) if "statefulsets" in sent.path else (200, {"items": []})

    with pytest.raises(ApiException):  # a built-in kind's 404 is an error, not "not served"
        Kube(FakeRest(no_statefulsets).api).list_targets("ns", "")


def test_discovery_says_whether_a_crd_kind_is_served() -> None:
    resources = {"resources": [{"name": "leaderworkersets"}, {"name": "leaderworkersets/scale"}]}
    fake = FakeRest(_ok(resources))
    kube = Kube(fake.api)
    assert kube.serves("LeaderWorkerSet") and kube.serves("Deployment")
    assert [s.path for s in fake.sent] == ["/apis/leaderworkerset.x-k8s.io/v1"]
    assert kube.serves("LeaderWorkerSet") and len(fake.sent) == 1  # asked once a minute
    assert not Kube(FakeRest(lambda sent: (404, {})).api).serves("LeaderWorkerSet")
    odd = {"resources": ["leaderworkersets", None, {"name": 7}]}  # not what a server says
    assert not Kube(FakeRest(_ok(odd)).api).serves("LeaderWorkerSet")


def test_create_returns_the_uid_and_none_when_the_name_is_taken() -> None:
    job: dict[str, Any] = {"apiVersion": "batch/v1", "kind": "Job",
                           "metadata": {"name": "j", "namespace": "ns"}}  # fmt: skip
    fake = FakeRest(_ok({**job, "metadata": {**job["metadata"], "uid": "u-1"}}))
    assert Kube(fake.api).create(job) == "u-1"
    (sent,) = fake.sent
    assert (sent.method, sent.path, sent.body) == ("POST", "/apis/batch/v1/namespaces/ns/jobs", job)
    taken = FakeRest(lambda sent: (409, {"kind": "Status", "reason": "AlreadyExists"}))
    assert Kube(taken.api).create(job) is None


def test_delete_is_background_and_with_a_uid_only_that_object() -> None:
    fake = FakeRest(_ok({}))
    kube = Kube(fake.api)
    kube.delete("ConfigMap", "ns", "t", uid="u-1")
    kube.delete("RoleBinding", "ns", "r")
    first, second = fake.sent
    assert (first.method, first.path) == ("DELETE", "/api/v1/namespaces/ns/configmaps/t")
    assert first.body == {"propagationPolicy": "Background", "preconditions": {"uid": "u-1"}}
    assert second.body == {"propagationPolicy": "Background"}
    for status in (404, 409):  # gone already; replaced by another under the name
        Kube(FakeRest(_refusing(status)).api).delete("Job", "ns", "j", uid="u")
    with pytest.raises(ApiException):  # a 409 without a uid is not "another object"
        Kube(FakeRest(lambda sent: (409, {})).api).delete("Job", "ns", "j")


def test_apply_is_a_forced_server_side_apply_as_the_operator() -> None:
    body = {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "ns", "resourceVersion": "7"}}  # fmt: skip
    fake = FakeRest(_ok(body))
    Kube(fake.api).apply(body)
    (sent,) = fake.sent
    assert (sent.method, sent.path, sent.body) == (
        "PATCH", "/apis/apps/v1/namespaces/ns/deployments/d", body)  # fmt: skip
    assert sent.query == {"fieldManager": "sps-operator", "force": "true"}
    assert sent.headers["Content-Type"] == "application/apply-patch+yaml"


def test_merge_patches_of_metadata_of_a_lender_and_of_status() -> None:
    patched = {"metadata": {"name": "d", "resourceVersion": "8"}}
    fake = FakeRest(_ok(patched))
    kube = Kube(fake.api)
    patch = {"metadata": {"annotations": {"a": None}, "resourceVersion": "7"}}
    assert kube.patch_metadata("Lease", "ns", "l", patch) == patched
    kube.patch_lender("ns", "g", patch, kind="LeaderWorkerSet")
    kube.patch_status("ns", "p", {"phase": "Ready"})
    meta, lender, status = fake.sent
    assert meta.path == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
    assert lender.path == "/apis/leaderworkerset.x-k8s.io/v1/namespaces/ns/leaderworkersets/g"
    for sent in (meta, lender):
        assert (sent.method, sent.body) == ("PATCH", patch)
        assert sent.query == {"fieldManager": "sps-operator"}
        assert sent.headers["Content-Type"] == "application/merge-patch+json"
    assert status.path == "/apis/sps.dev/v1alpha1/namespaces/ns/spsprofiles/p/status"
    assert status.body == {"status": {"phase": "Ready"}} and status.query == {}
    assert status.headers["Content-Type"] == "application/merge-patch+json"


def test_kueue_kinds_follow_the_version_found() -> None:
    def answer(sent: Sent) -> tuple[int, Any]:
        return (404, {}) if "/v1beta2/" in sent.path else (200, {"items": []})

    fake = FakeRest(answer)
    kube = Kube(fake.api)
    assert kube.list_workloads("ns", "") == []
    assert kube.get("LocalQueue", "ns", "q") == {"items": []}
    assert fake.sent[-1].path == "/apis/kueue.x-k8s.io/v1beta1/namespaces/ns/localqueues/q"


def test_an_event_is_posted_and_a_refused_one_only_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    involved = {"kind": "SpsProfile", "apiVersion": "sps.dev/v1alpha1",
                "metadata": {"name": "p", "namespace": "ns", "uid": "u"}}  # fmt: skip
    now = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)
    fake = FakeRest(_ok({}))
    Kube(fake.api).event(involved, "Warning", "Refused", "x" * 2000, now)
    (sent,) = fake.sent
    assert (sent.method, sent.path) == ("POST", "/api/v1/namespaces/ns/events")
    assert sent.body["involvedObject"] == {"apiVersion": "sps.dev/v1alpha1",
        "kind": "SpsProfile", "name": "p", "namespace": "ns", "uid": "u"}  # fmt: skip
    assert sent.body["metadata"] == {"generateName": "p.", "namespace": "ns"}
    assert len(sent.body["message"]) == 1024
    assert sent.body["lastTimestamp"] == "2026-12-07T06:00:00Z"
    refused = FakeRest(lambda sent: (403, {}))
    with caplog.at_level(logging.WARNING):
        Kube(refused.api).event(involved, "Normal", "Fine", "m", now)
    assert "could not post event Fine" in caplog.text


ANSWERED = FakeRest(_ok({}))


@given(namespace=st.text(max_size=30), name=st.text(max_size=30))
def test_a_name_is_one_path_segment_whatever_it_holds(namespace: str, name: str) -> None:
    """Names come from specs and workloads the operator did not write: a `/`, `?`, `#` or
    `%` in one never makes another path or adds a query."""
    ANSWERED.sent.clear()
    Kube(ANSWERED.api).get("ConfigMap", namespace, name)
    (sent,) = ANSWERED.sent
    assert sent.query == {}
    segments = sent.raw_path.split("/")
    assert len(segments) == 7 and segments[:4] == ["", "api", "v1", "namespaces"]
    assert segments[5] == "configmaps"
    assert sent.path == f"/api/v1/namespaces/{namespace}/configmaps/{name}"


def test_the_elector_creates_renews_and_releases_its_lease() -> None:
    stored: dict[str, Any] = {}

    def leases(sent: Sent) -> tuple[int, Any]:
        if sent.method == "GET":
            return (200, stored["lease"]) if stored else (404, {})
        lease = {**sent.body, "metadata": {**sent.body["metadata"], "resourceVersion": "2"}}
        stored["lease"] = lease
        return 200, lease

    fake = FakeRest(leases)
    elector = LeaseElector("ops", "sps-system", "me", api=fake.api, timing=Timing())
    assert elector.try_once() and elector.try_once()
    elector.release()
    prefix = "/apis/coordination.k8s.io/v1/namespaces/sps-system/leases"
    methods = [(s.method, s.path.removeprefix(prefix)) for s in fake.sent]
    assert methods == [("GET", "/ops"), ("POST", ""), ("GET", "/ops"),
                       ("PUT", "/ops"), ("GET", "/ops"), ("PUT", "/ops")]  # fmt: skip
    renewal = fake.sent[3].body
    assert renewal["metadata"]["resourceVersion"] == "2"  # a concurrent taker makes it a 409
    assert renewal["spec"]["holderIdentity"] == "me"
    assert stored["lease"]["spec"]["holderIdentity"] is None and not elector.is_leader()


def test_an_answer_over_its_cap_or_no_object_fails_the_request_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An API server, or a proxy in front of it, is untrusted input: a LIST over LIST_CAP,
    an object over OBJECT_CAP, an answer that is no JSON object are each refused as an
    ApiException that no caller takes for a 404 or a 409 and whose detail names the path
    (before, a whole answer was read, and an array raised a bare ValueError)."""
    monkeypatch.setattr("sps_operator.controller.kube.client.LIST_CAP", 1 << 20)
    big = {"items": [{"metadata": {"name": "x" * (1 << 20)}}]}
    with pytest.raises(AnswerRefused) as refused:
        Kube(FakeRest(_ok(big)).api).list_config_maps("ns", "")
    exc = refused.value
    assert api_error_detail(exc) == (
        "API answer refused: /api/v1/namespaces/ns/configmaps: "
        "the API server's answer is over the 1 MiB cap (refused)"
    )
    assert not is_transient(exc) and exc.status == 200
    huge = {"data": {"x": "y" * OBJECT_CAP}}
    with pytest.raises(AnswerRefused, match="over the 4 MiB cap"):
        Kube(FakeRest(_ok(huge)).api).get("ConfigMap", "ns", "x")
    array = FakeRest(lambda sent: (200, [{"metadata": {}}]))
    with pytest.raises(AnswerRefused, match="answered no JSON object"):
        Kube(array.api).get("ConfigMap", "ns", "x")
    # Refused, not "absent": a caller's 404 branch does not swallow it.
    with pytest.raises(ApiException):
        Kube(array.api).delete("ConfigMap", "ns", "x")

"""A run whose Job Kueue holds (issue 21 §2): Kueue's own words in status, Kueue not
installed, the LocalQueue missing."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from api_snapshot import api_snapshot
from capacity_harness import BORROW, harness, job_pod, local_queue
from controller_harness import NODES, NS, Harness, indexes_of
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client.rest import ApiException

from sps_operator.api import labels as L
from sps_operator.api.labels import max_exec_seconds
from sps_operator.controller.kicks import profiles_waiting_for_a_local_queue
from sps_operator.controller.kube.kueue_cache import KueueCache
from sps_operator.controller.main import parse_args
from sps_operator.controller.passes.state import Settings
from sps_operator.controller.policies.kueue import (
    KUEUE_RECHECK_SECONDS,
    WORDS_LIMIT,
    KueueState,
    kueue_deactivated,
    kueue_words,
    owned_workload,
    queue_position,
    run_limit,
)
from sps_operator.controller.reconcile.reconciler import Reconciler

QUEUE = "gpu-profiling"
QUOTA = (
    "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in "
    "flavor h100, request > maximum capacity (1 > 0)"
)
QUEUED = {"job": {"labels": {L.LABEL_KUEUE_QUEUE: QUEUE}}}


def workload(
    h: Harness,
    job: dict[str, Any],
    conditions: list[dict[str, Any]],
    namespace: str = NS,
    owner_uid: str | None = None,
    name: str = "job-w",
) -> dict[str, Any]:
    """Kueue's Workload for `job` (label and ownerReference as Kueue writes them)."""
    uid = job["metadata"]["uid"]
    return h.kube.put({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {L.LABEL_KUEUE_JOB_UID: uid},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "controller": True,
                                 "name": job["metadata"]["name"], "uid": owner_uid or uid}],
        },
        "status": {"conditions": conditions},
    })  # fmt: skip


def not_reserved(message: str) -> list[dict[str, Any]]:
    return [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message}]


def queued(h: Harness) -> dict[str, Any]:
    """The first pass creates the Job (suspended); returns it."""
    h.tick()
    h.run_pass()
    (job,) = h.kube.kinds("Job")
    assert job["spec"]["suspend"] is True
    return job


def waiting(h: Harness, seconds: float = 20) -> dict[str, Any]:
    h.tick(seconds)  # past the read cache
    return dict(h.run_pass()["currentRun"]["waiting"])


# ----------------------------------------------------------------------------- the words


def test_the_profile_shows_kueues_own_words_while_its_job_is_queued() -> None:
    h = harness(**QUEUED)
    local_queue(h)
    job = queued(h)
    assert "has not reported" in waiting(h)["message"]
    workload(h, job, not_reserved(QUOTA))
    w = waiting(h)
    assert w["reason"] == "QueuedInKueue"
    assert QUOTA in w["message"] and QUEUE in w["message"]
    profiling = h.condition("Profiling")
    assert profiling[:2] == ("False", "QueuedInKueue") and QUOTA in profiling[2]
    # Admitted by quota, then waiting on the admission checks: Kueue's next words.
    job_w = h.kube.obj("Workload", "job-w")
    job_w["status"]["conditions"] = [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "ok"},
        {"type": "Admitted", "status": "False", "reason": "Pending",
         "message": "The workload has not all checks ready"},
    ]  # fmt: skip
    assert "Admitted: The workload has not all checks ready" in waiting(h)["message"]


def pending(h: Harness, *names: str, local: int = 0) -> None:
    """Kueue's visibility API: the LocalQueue's pending workloads, first in line first."""
    h.kube.pending = {(NS, QUEUE): {"items": [
        {"metadata": {"name": n}, "positionInClusterQueue": i + 3,
         "positionInLocalQueue": i + local, "priority": 0, "localQueueName": QUEUE}
        for i, n in enumerate(names)
    ]}}  # fmt: skip


def test_the_queue_position_kueue_reports_is_in_status_and_the_message() -> None:
    h = harness(**QUEUED)
    local_queue(h)
    job = queued(h)
    workload(h, job, not_reserved(QUOTA))
    pending(h, "other-w", "job-w")
    w = waiting(h)
    assert w["queuePosition"] == 5  # 1 is admitted next; Kueue counts from 0
    assert f"position 5 in its ClusterQueue (2 in LocalQueue {QUEUE})" in w["message"]
    pending(h, "job-w")
    assert waiting(h)["queuePosition"] == 4
    # Not among the pending (being admitted): no position, nothing invented.
    pending(h, "other-w")
    w = waiting(h)
    assert "queuePosition" not in w and "position" not in w["message"]
    # The visibility API is not served (or refuses): the words stay, the position is unknown.
    h.kube.pending = None
    w = waiting(h)
    assert "queuePosition" not in w and QUOTA in w["message"]
    assert "visibility API (pendingworkloads) is not served" in w["message"]
    h.kube.pending = {}
    h.kube.fail["pending_workloads"] = ApiException(status=503, reason="ServiceUnavailable")
    w = waiting(h)
    assert w["reason"] == "QueuedInKueue" and QUOTA in w["message"]
    assert "position unknown: Kueue's visibility API" in w["message"]


def test_queue_position_reads_only_a_well_formed_entry_of_the_workload() -> None:
    item = {"metadata": {"name": "w"}, "positionInClusterQueue": 0, "positionInLocalQueue": 0}
    assert queue_position({"items": [item]}, "w") == (1, 1)
    assert queue_position({"items": [item]}, "other") is None
    for bad in (-1, True, "3", 1.5, 10**9, None):
        assert queue_position({"items": [{**item, "positionInClusterQueue": bad}]}, "w") is None
    assert queue_position({"items": "x"}, "w") is None and queue_position([], "w") is None


@given(st.recursive(st.none() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c,
                                                                        max_size=3)))  # fmt: skip
def test_queue_position_of_any_answer_is_a_position_or_none(summary: Any) -> None:
    found = queue_position({"items": [summary]} if isinstance(summary, dict) else summary, "w")
    assert found is None or all(type(v) is int and v >= 1 for v in found)


def test_kueues_words_are_read_only_from_the_workload_the_runs_job_owns() -> None:
    h = harness(**QUEUED)
    local_queue(h)
    job = queued(h)
    # Same label, another namespace; same label, owned by another Job: neither is read.
    local_queue(h, namespace="other")
    workload(h, job, not_reserved("from another tenant"), namespace="other")
    workload(h, job, not_reserved("forged"), owner_uid="uid-someone-else", name="forged")
    message = waiting(h)["message"]
    assert "another tenant" not in message and "forged" not in message
    assert "has not reported" in message


def test_kueues_words_are_bounded_and_without_control_characters() -> None:
    h = harness(**QUEUED)
    local_queue(h)
    job = queued(h)
    workload(h, job, not_reserved("\x1b[2J\x1b]0;owned\x07\ninsufficient quota " + "x" * 5000))
    message = waiting(h)["message"]
    assert not any(ord(c) < 32 for c in message)
    assert "insufficient quota" in message and len(message) < WORDS_LIMIT + 200


@pytest.mark.parametrize(("recheck", "read_again_after"), [(None, 15.0), (4.0, 2.0)])
def test_a_queued_run_looks_again_as_often_as_the_operator_is_told(
    recheck: float | None, read_again_after: float
) -> None:
    """The default (30 s, Kueue read at most every 15 s) and a shorter test setting
    (`--kueue-recheck-seconds`, the bed's e2e operator)."""
    h = harness(**QUEUED)
    if recheck is not None:
        h.settings = Settings(gpu_debounce_seconds=0, isolate_fits=False,
                              kueue_recheck_seconds=recheck)  # fmt: skip
        h.reconciler = Reconciler(h.kube, h.settings, clock=lambda: h.now)
    local_queue(h)
    queued(h)
    h.tick()
    h.kube.calls.clear()
    body = copy.deepcopy(h.kube.obj("SpsProfile", "p", NS))
    wake = h.reconciler.reconcile(body, api_snapshot(h.kube, body, h.pods_now(), NODES))
    assert wake is not None and wake <= (recheck or KUEUE_RECHECK_SECONDS)
    assert h.kube.calls.count("list_workloads") == 1
    h.tick(read_again_after - 0.5)
    h.run_pass()
    assert h.kube.calls.count("list_workloads") == 1  # still the cached words
    h.tick(1.0)
    h.run_pass()
    assert h.kube.calls.count("list_workloads") == 2


@pytest.mark.parametrize("text", ["0", "-3", "nan", "inf", "soon"])
def test_the_recheck_flag_refuses_what_is_not_a_positive_time(text: str) -> None:
    with pytest.raises(SystemExit):
        parse_args([f"--kueue-recheck-seconds={text}"], testing=True)
    assert parse_args([]).kueue_recheck_seconds == KUEUE_RECHECK_SECONDS
    assert parse_args(["--kueue-recheck-seconds=2.5"], testing=True).kueue_recheck_seconds == 2.5


def test_a_workload_that_cannot_be_read_is_said_and_the_run_waits_on() -> None:
    h = harness(**QUEUED)
    local_queue(h)
    queued(h)
    h.kube.fail["list_workloads"] = ApiException(status=403, reason="Forbidden")
    w = waiting(h)
    assert w["reason"] == "QueuedInKueue" and "could not be read" in w["message"]
    assert h.status().get("lastFailure") is None


# ----------------------------------------------------------------------------- not there


def test_kueue_not_installed_ends_the_run_at_once_and_says_what_to_do() -> None:
    h = harness(**QUEUED)
    h.kube.kueue_installed = False
    queued(h)
    h.tick()
    status = h.run_pass()
    assert status.get("currentRun") is None
    assert not h.kube.kinds("Job")  # deleted at once, not after waitTimeoutSeconds
    failure = status["lastFailure"]
    assert failure["reason"] == "KueueNotInstalled"
    assert "install Kueue" in failure["message"] and QUEUE in failure["message"]
    assert h.condition("Degraded")[:2] == ("True", "KueueNotInstalled")


def test_a_missing_local_queue_is_said_within_one_pass() -> None:
    h = harness(capacity={"waitTimeoutSeconds": 600}, **QUEUED)
    job = queued(h)
    workload(h, job, not_reserved(f"LocalQueue {QUEUE} doesn't exist"))
    h.tick()
    w = h.run_pass()["currentRun"]["waiting"]
    assert w["reason"] == "LocalQueueMissing"
    assert f"no LocalQueue {QUEUE}" in w["message"] and "create the LocalQueue" in w["message"]
    assert f"LocalQueue {QUEUE} doesn't exist" in w["message"]  # and Kueue's words
    assert h.condition("Profiling")[:2] == ("False", "LocalQueueMissing")
    # Created meanwhile: the same run goes on waiting for Kueue.
    local_queue(h)
    assert waiting(h)["reason"] == "QueuedInKueue"


def test_a_local_queue_created_wakes_the_runs_waiting_for_it_and_is_read_at_once() -> None:
    h = harness(capacity={"waitTimeoutSeconds": 600}, **QUEUED)
    queued(h)
    h.tick()
    assert h.run_pass()["currentRun"]["waiting"]["reason"] == "LocalQueueMissing"
    # The LocalQueue watch finds the profiles to wake in the caches, in O(those).
    idx = indexes_of(h.cluster_objects())
    uid = h.kube.obj("SpsProfile", "p")["metadata"]["uid"]
    assert profiles_waiting_for_a_local_queue(NS, idx.profiles) == [uid]
    assert profiles_waiting_for_a_local_queue("elsewhere", idx.profiles) == []
    local_queue(h)
    assert h.reconciler is not None
    h.tick()  # well within the read interval: what was read is forgotten, not waited out
    h.reconciler.capacity.queue_created(NS, QUEUE)
    assert h.run_pass()["currentRun"]["waiting"]["reason"] == "QueuedInKueue"
    idx = indexes_of(h.cluster_objects())
    assert profiles_waiting_for_a_local_queue(NS, idx.profiles) == []


def test_kueue_reasons_give_a_lent_replica_back() -> None:
    h = harness(**BORROW, **QUEUED)
    local_queue(h)
    job = queued(h)
    job["spec"]["suspend"] = False
    job_pod(h)
    h.tick(31)
    h.run_pass()
    h.tick(31)
    h.run_pass()
    assert h.status()["currentRun"].get("borrow")
    job_pod(h, unschedulable=None)
    h.tick()
    h.run_pass()
    h.kube.objects.pop(("LocalQueue", NS, QUEUE))
    job["spec"]["suspend"] = True
    h.pods = [p for p in h.pods if L.LABEL_RUN not in p.labels]
    w = waiting(h)
    assert w["reason"] == "LocalQueueMissing"
    assert "the lent replica was given back" in w["message"]
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2


def test_both_priorities_reach_the_job_where_kueue_and_the_scheduler_read_them() -> None:
    labels = {L.LABEL_KUEUE_QUEUE: QUEUE, L.LABEL_KUEUE_PRIORITY: "high"}
    h = harness(job={"labels": labels, "priorityClassName": "profiling-low"})
    job = queued(h)
    # Kueue reads the WorkloadPriorityClass from the Job's own labels; the pod's
    # priorityClassName is the scheduler's (and Kueue's when no WorkloadPriorityClass).
    assert job["metadata"]["labels"][L.LABEL_KUEUE_PRIORITY] == "high"
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"][L.LABEL_KUEUE_PRIORITY] == "high"
    assert pod["spec"]["priorityClassName"] == "profiling-low"


# ------------------------------------------------------- maximum execution time (§2)

MAX_EXEC = {L.LABEL_KUEUE_MAX_EXEC: "300"}


def test_kueues_max_exec_time_caps_how_long_a_replica_stays_lent_from_when_the_job_runs() -> None:
    h = harness(**BORROW, job={"labels": MAX_EXEC, "activeDeadlineSeconds": 3600})
    h.tick()
    h.run_pass()
    (job,) = h.kube.kinds("Job")
    assert job["metadata"]["labels"][L.LABEL_KUEUE_MAX_EXEC] == "300"  # as Kueue reads it
    job_pod(h)
    h.tick()
    h.run_pass()
    h.tick(31)
    h.tick(600)  # a long wait for GPUs does not count
    borrow = h.run_pass()["currentRun"]["borrow"]
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 1
    assert borrow["limitSeconds"] == 300 and L.LABEL_KUEUE_MAX_EXEC in borrow["limit"]
    job_pod(h, unschedulable=None)
    h.tick()
    assert h.run_pass()["currentRun"]["runningSince"]
    h.tick(299)
    assert h.run_pass().get("currentRun"), "still within its 300 s"
    h.tick(1)
    status = h.run_pass()
    assert status.get("currentRun") is None and not h.kube.kinds("Job")
    failure = status["lastFailure"]
    assert failure["reason"] == "DeadlineExceeded"
    assert f"past the Job's label {L.LABEL_KUEUE_MAX_EXEC} 300" in failure["message"]
    assert "the lent replica was given back" in failure["message"]
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2


def test_the_run_deadline_wins_when_it_is_shorter_than_kueues_max_exec_time() -> None:
    h = harness(**BORROW, job={"labels": {L.LABEL_KUEUE_MAX_EXEC: "7200"},
                                "activeDeadlineSeconds": 600})  # fmt: skip
    h.tick()
    h.run_pass()
    job_pod(h)
    h.tick()
    h.run_pass()
    h.tick(31)
    borrow = h.run_pass()["currentRun"]["borrow"]
    assert (borrow["limitSeconds"], borrow["limit"]) == (600, "spec.job.activeDeadlineSeconds")


def test_a_max_exec_time_that_is_no_number_or_too_long_is_refused_by_the_policy() -> None:
    for value, said in (
        ("0", "must be a whole number of seconds of at least 1"),
        ("5m", "must be a whole number of seconds of at least 1"),
        ("1e3", "must be a whole number of seconds of at least 1"),
        (str(86_400 + 1), "more than the 86400 s a profiling Job may hold GPUs"),
    ):
        h = harness(job={"labels": {L.LABEL_KUEUE_MAX_EXEC: value}})
        h.tick()
        failure = h.run_pass()["lastFailure"]
        assert failure["reason"] == "JobPolicy" and said in failure["message"], value
        assert not h.kube.kinds("Job")


def test_a_workload_kueue_deactivated_ends_the_run_at_once_and_gives_the_replica_back() -> None:
    h = harness(**BORROW, job={"labels": {L.LABEL_KUEUE_QUEUE: QUEUE, **MAX_EXEC}})
    local_queue(h)
    job = queued(h)
    job["spec"]["suspend"] = False
    job_pod(h)
    h.tick(31)
    h.run_pass()
    h.tick(31)
    h.run_pass()
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 1
    job_pod(h, unschedulable=None)
    h.tick()
    h.run_pass()
    # Kueue counts from admission: it deactivates the Workload and suspends the Job first.
    w = workload(h, job, [{"type": "DeactivationTarget", "status": "True",
                           "reason": "MaximumExecutionTimeExceeded",
                           "message": "exceeding the maximum execution time"}])  # fmt: skip
    w["spec"] = {"active": False}
    job["spec"]["suspend"] = True
    h.pods = [p for p in h.pods if L.LABEL_RUN not in p.labels]
    h.tick(20)
    status = h.run_pass()
    assert status.get("currentRun") is None and not h.kube.kinds("Job")
    failure = status["lastFailure"]
    assert failure["reason"] == "KueueDeactivated"
    assert (
        "MaximumExecutionTimeExceeded: exceeding the maximum execution time" in failure["message"]
    )
    assert "will not admit it again" in failure["message"]
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2


def test_max_exec_seconds_and_run_limit() -> None:
    assert max_exec_seconds({L.LABEL_KUEUE_MAX_EXEC: "300"}) == 300
    assert max_exec_seconds({}) is None
    assert run_limit(600, {L.LABEL_KUEUE_MAX_EXEC: "300"})[0] == 300
    assert run_limit(600, {L.LABEL_KUEUE_MAX_EXEC: "900"}) == (
        600, "spec.job.activeDeadlineSeconds")  # fmt: skip
    assert kueue_deactivated({"spec": {"active": True}, "status": {}}) is None
    assert kueue_deactivated({"spec": {"active": False}}) == (
        "the Workload is inactive (spec.active false)")  # fmt: skip


@given(st.text(max_size=40))
def test_any_max_exec_label_is_a_positive_bounded_number_or_none(text: str) -> None:
    seconds = max_exec_seconds({L.LABEL_KUEUE_MAX_EXEC: text})
    assert seconds is None or (1 <= seconds < 10**10 and str(seconds) == text.lstrip("0"))


# ----------------------------------------------------------------------------- pure


def test_owned_workload_needs_namespace_and_controller_owner() -> None:
    def wl(ns: str, uid: str, controller: bool = True, ts: str = "2026-01-01T00:00:00Z") -> Any:
        return {
            "metadata": {
                "namespace": ns,
                "creationTimestamp": ts,
                "ownerReferences": [
                    {"apiVersion": "batch/v1", "kind": "Job", "uid": uid, "controller": controller}
                ],
            }
        }

    older, newer = wl("a", "u"), wl("a", "u", ts="2026-01-02T00:00:00Z")
    assert owned_workload([wl("b", "u"), wl("a", "v"), wl("a", "u", False)], "a", "u") is None
    assert owned_workload([older, newer, "junk", {"metadata": []}], "a", "u") is newer
    assert owned_workload([older], "", "u") is None


def test_kueue_words_prefer_an_eviction_and_skip_true_conditions() -> None:
    evicted = {"type": "Evicted", "status": "True", "reason": "Preempted",
               "message": "Preempted to accommodate a workload"}  # fmt: skip
    reserved = {"type": "QuotaReserved", "status": "False", "message": QUOTA}
    assert kueue_words({"status": {"conditions": [reserved, evicted]}}) == (
        "evicted: Preempted to accommodate a workload"
    )
    assert kueue_words({"status": {"conditions": [reserved]}}) == f"QuotaReserved: {QUOTA}"
    admitted = {"type": "Admitted", "status": "True", "message": "admitted"}
    assert kueue_words({"status": {"conditions": [admitted]}}) is None
    no_message = {"type": "QuotaReserved", "status": "False", "reason": "Inadmissible"}
    assert kueue_words({"status": {"conditions": [no_message]}}) == "QuotaReserved: Inadmissible"
    assert kueue_words(None) is None


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=30,
))  # fmt: skip
def test_kueue_words_never_raise_and_stay_bounded(status: Any) -> None:
    for body in ({"status": status}, {"status": {"conditions": status}}):
        words = kueue_words(body)  # type: ignore[arg-type]
        assert words is None or (
            len(words) <= WORDS_LIMIT + 20 and not any(ord(c) < 32 for c in words)
        )


@given(st.text())
def test_kueue_words_of_any_message_are_printable_and_bounded(text: str) -> None:
    reserved = {"type": "QuotaReserved", "status": "False", "message": text}
    words = kueue_words({"status": {"conditions": [reserved]}})
    assert words is None or (len(words) <= WORDS_LIMIT + 20 and not any(ord(c) < 32 for c in words))


def test_the_read_cache_expires_and_stays_bounded() -> None:
    cache = KueueCache(seconds=10, entries=2)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    state = KueueState(words="w")
    cache.put(("a", "1", "q"), now, state)
    assert cache.get(("a", "1", "q"), now + timedelta(seconds=9)) is state
    assert cache.get(("a", "1", "q"), now + timedelta(seconds=10)) is None
    assert cache.get(("a", "1", "q"), now - timedelta(seconds=1)) is None  # a clock step back
    cache.put(("a", "2", "q"), now, state)
    cache.put(("a", "3", "q"), now, state)
    assert cache.get(("a", "1", "q"), now) is None and cache.get(("a", "3", "q"), now) is state


def _kube_answering(served: set[str]) -> tuple[Any, list[str]]:
    """The operator's real client, its HTTP answered here: Kueue's API served at the
    versions in `served` (a 404 for any other), one LocalQueue `q` in each."""
    import urllib3
    from kubernetes import client
    from kubernetes.client import rest

    from sps_operator.controller.kube.client import Kube

    api: Any = client.ApiClient()
    sent: list[str] = []

    def answer(method: str, url: str, **_: Any) -> rest.RESTResponse:
        sent.append(url.split("/apis/", 1)[-1].split("?")[0])
        version = next((v for v in ("v1beta2", "v1beta1") if f"/{v}/" in url), "")
        found = version in served and ("/workloads" in url or url.endswith("/localqueues/q"))
        body, status = (b'{"items": []}', 200) if found else (b"{}", 404)
        return rest.RESTResponse(urllib3.HTTPResponse(body=body, status=status))

    api.rest_client.request = answer
    return Kube(api), sent


def test_the_client_finds_kueues_served_version_and_says_when_none_is() -> None:
    kube, sent = _kube_answering(set())
    assert kube.list_workloads("ns", f"{L.LABEL_KUEUE_JOB_UID}=u") is None
    assert sent == ["kueue.x-k8s.io/v1beta2/namespaces/ns/workloads",
                    "kueue.x-k8s.io/v1beta1/namespaces/ns/workloads"]  # fmt: skip
    older, _ = _kube_answering({"v1beta1"})  # Kueue before v0.15
    assert older.list_workloads("ns", "") == []
    assert older.get("LocalQueue", "ns", "q") is not None
    assert older.get("LocalQueue", "ns", "missing") is None
    current, sent = _kube_answering({"v1beta2"})
    assert current.list_workloads("ns", "") == [] and current.get("LocalQueue", "ns", "q")
    assert all("v1beta1" not in url for url in sent)


def test_the_client_reads_pending_workloads_from_kueues_visibility_api() -> None:
    import urllib3
    from kubernetes import client
    from kubernetes.client import rest

    from sps_operator.controller.kube.client import Kube

    api: Any = client.ApiClient()
    sent: list[str] = []
    answers = {"v1beta2": (b'{"items": [{"metadata": {"name": "w"}}]}', 200)}

    def answer(method: str, url: str, **_: Any) -> rest.RESTResponse:
        sent.append(url.split("/apis/", 1)[-1])
        version = "v1beta2" if "/v1beta2/" in url else "v1beta1"
        body, status = answers.get(version, (b"{}", 404))
        return rest.RESTResponse(urllib3.HTTPResponse(body=body, status=status))

    api.rest_client.request = answer
    kube = Kube(api)
    assert kube.pending_workloads("ns", "q", 200) == {"items": [{"metadata": {"name": "w"}}]}
    assert sent == [
        "visibility.kueue.x-k8s.io/v1beta2/namespaces/ns/localqueues/q/pendingworkloads?limit=200"
    ]
    answers.clear()  # not served at any version
    assert kube.pending_workloads("ns", "q", 200) is None
    answers["v1beta2"] = (b'{"message": "service unavailable"}', 503)
    try:
        kube.pending_workloads("ns", "q", 200)
    except ApiException as exc:
        assert exc.status == 503
    else:
        raise AssertionError("a 503 of the aggregated API is an error, not 'not served'")

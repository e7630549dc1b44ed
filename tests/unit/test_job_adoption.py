"""Whether a Job found under a run's name is the one the operator builds
(policies/job_adoption.py): the API server's defaults and Kueue's admission are the
operator's Job still; any change to a field the operator builds, and anything it does not
build, is not."""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Iterator
from typing import Any

import pytest
from controller_harness import Harness
from hypothesis import given, settings
from hypothesis import strategies as st
from test_controller_builders import plan, production_plan
from test_controller_group_clone import group_plan

from sps_operator.api.labels import LABEL_KUEUE_QUEUE
from sps_operator.controller.kube import builders
from sps_operator.controller.policies.job_adoption import job_refusal, parse_quantity
from sps_operator.controller.policies.ownership import adoption_refusal

Obj = dict[str, Any]


def _queued() -> builders.RunPlan:
    queued = plan(job={"labels": {LABEL_KUEUE_QUEUE: "team"}})
    return dataclasses.replace(queued, target_pod_spec=production_plan().target_pod_spec)


BUILT: dict[str, Obj] = {
    "clone": builders.profiling_job(plan()),
    "production": builders.profiling_job(production_plan()),
    "kueue": builders.profiling_job(_queued()),
    "external": builders.profiling_job(
        plan(server={"source": "External", "url": "http://sglang:30000"})
    ),
    # A multi-node target's clone: an Indexed Job with a per-index backoff limit.
    "group": builders.profiling_job(group_plan()),
}


def _containers(pod: Obj) -> Iterator[Obj]:
    for field in ("initContainers", "containers"):
        yield from pod.get(field) or []


def as_the_api_server_returns(built: Obj, rng: random.Random, kueue_admitted: bool) -> Obj:
    """`built` after creation: some of the API server's defaults (each drawn), quantities
    in another spelling, its metadata and status; Kueue's admission when it queued it."""
    job = copy.deepcopy(built)

    def maybe(obj: Obj, key: str, value: Any) -> None:
        if key not in obj and rng.random() < 0.7:
            obj[key] = value

    job["metadata"].update(
        uid="uid-job", resourceVersion="7", creationTimestamp="2026-12-07T00:00:00Z"
    )
    job["metadata"].setdefault("annotations", {})["kubectl.kubernetes.io/last-applied"] = "{}"
    spec = job["spec"]
    if "backoffLimitPerIndex" in spec:  # the API server's default beside a per-index limit
        spec.setdefault("backoffLimit", 2**31 - 1)
    for key, value in (
        ("completions", 1), ("parallelism", 1), ("completionMode", "NonIndexed"),
        ("podReplacementPolicy", "TerminatingOrFailed"), ("manualSelector", False),
        ("suspend", False),
        ("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": "uid-job"}}),
    ):  # fmt: skip
        maybe(spec, key, value)
    template = spec["template"]
    template["metadata"]["labels"].update({"job-name": "x", "controller-uid": "uid-job"})
    maybe(template["metadata"], "creationTimestamp", None)
    pod = template["spec"]
    for key, value in (
        ("terminationGracePeriodSeconds", 30), ("dnsPolicy", "ClusterFirst"),
        ("schedulerName", "default-scheduler"), ("securityContext", {}),
        ("enableServiceLinks", True), ("serviceAccount", pod.get("serviceAccountName")),
    ):  # fmt: skip
        maybe(pod, key, value)
    for container in _containers(pod):
        maybe(container, "terminationMessagePath", "/dev/termination-log")
        maybe(container, "terminationMessagePolicy", "File")
        maybe(container, "imagePullPolicy", rng.choice(["Always", "IfNotPresent"]))
        resources = container.setdefault("resources", {})
        limits = resources.get("limits") or {}
        for name, quantity in list(limits.items()):
            limits[name] = rng.choice([str(quantity), f"{int(quantity) * 1000}m"])
            if rng.random() < 0.8:  # requests default to the limits
                resources.setdefault("requests", {}).setdefault(name, str(quantity))
        for port in container.get("ports") or []:
            maybe(port, "protocol", "TCP")
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if probe in container:
                for key, value in (("timeoutSeconds", 1), ("periodSeconds", 10),
                                   ("successThreshold", 1), ("failureThreshold", 3)):  # fmt: skip
                    maybe(container[probe], key, value)
                if "httpGet" in container[probe]:
                    maybe(container[probe]["httpGet"], "scheme", "HTTP")
    for volume in pod.get("volumes") or []:
        for source in ("configMap", "secret", "projected"):
            if source in volume:
                maybe(volume[source], "defaultMode", 420)
        for item in (volume.get("projected") or {}).get("sources") or []:
            if "downwardAPI" in item:
                for entry in item["downwardAPI"].get("items") or []:
                    if "fieldRef" in entry:
                        maybe(entry["fieldRef"], "apiVersion", "v1")
    if kueue_admitted:
        spec["suspend"] = False
        pod.setdefault("nodeSelector", {})["cloud.example/flavor"] = "spot"
        pod["tolerations"] = [*pod.get("tolerations", []), {"key": "spot", "operator": "Exists"}]
        maybe(pod, "schedulingGates", [{"name": "kueue.x-k8s.io/topology"}])
        template["metadata"].setdefault("annotations", {})["kueue.x-k8s.io/podset"] = "main"
    job["status"] = {"active": 1}
    return job


def leaves(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value the operator builds (in the compared part of the Job)."""
    if path in (("spec", "suspend"),) or path[:2] in (
        ("metadata", "name"),
        ("metadata", "namespace"),
    ):
        return
    if path[:1] == ("metadata",) and len(path) >= 2 and path[1] not in ("labels", "annotations"):
        return
    if isinstance(obj, dict) and obj:
        for key, value in obj.items():
            yield from leaves(value, (*path, key))
    elif isinstance(obj, list) and obj:
        for i, value in enumerate(obj):
            yield from leaves(value, (*path, i))
    elif path[:1] in (("spec",), ("metadata",)):
        yield path


def changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return f"{value}-x"
    if isinstance(value, dict):
        return {"added": "by-someone"}
    if isinstance(value, list):
        return ["added"]
    return "set"


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


KINDS = sorted(BUILT)


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(KINDS), rng=st.randoms(use_true_random=False), admitted=st.booleans())
def test_the_operators_job_as_the_api_server_and_kueue_return_it_is_adopted(
    kind: str, rng: random.Random, admitted: bool
) -> None:
    built = BUILT[kind]
    existing = as_the_api_server_returns(built, rng, admitted and kind == "kueue")
    assert job_refusal(existing, built) is None


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(KINDS), data=st.data(), admitted=st.booleans())
def test_any_change_to_a_field_the_operator_builds_is_refused(
    kind: str, data: st.DataObject, admitted: bool
) -> None:
    built = BUILT[kind]
    path = data.draw(st.sampled_from(list(leaves(built))))
    tampered = copy.deepcopy(built)
    _at(tampered, path[:-1])[path[-1]] = changed(_at(built, path))
    rng = data.draw(st.randoms(use_true_random=False))
    existing = as_the_api_server_returns(tampered, rng, admitted and kind == "kueue")
    assert job_refusal(existing, built) is not None, path


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(KINDS), data=st.data())
def test_a_dropped_item_of_a_built_list_is_refused(kind: str, data: st.DataObject) -> None:
    built = BUILT[kind]
    lists = list(_paths_to_lists(built["spec"], ("spec",)))
    path = data.draw(st.sampled_from(lists))
    tampered = copy.deepcopy(built)
    items = _at(tampered, path)
    del items[data.draw(st.integers(0, len(items) - 1))]
    assert job_refusal(tampered, built) is not None, path


def _paths_to_lists(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(obj, list) and obj:
        yield path
    children = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else []
    )
    for key, value in children:
        yield from _paths_to_lists(value, (*path, key))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(KINDS), junk=JSON, where=st.integers(0, 5))
def test_whatever_someone_wrote_in_the_job_gives_an_answer_never_an_exception(
    kind: str, junk: Any, where: int
) -> None:
    built = BUILT[kind]
    existing = copy.deepcopy(built)
    spots = [existing, existing["spec"], existing["spec"]["template"],
             existing["spec"]["template"]["spec"],
             existing["spec"]["template"]["spec"]["containers"][0],
             existing["spec"]["template"]["spec"]["volumes"][0]]  # fmt: skip
    spots[where]["spec" if where == 0 else "resources" if where == 4 else "x"] = junk
    refusal = job_refusal(existing, built)
    assert refusal is None or isinstance(refusal, str)


# --------------------------------------------------------------------------- each hole


def _pod(job: Obj) -> Obj:
    pod: Obj = job["spec"]["template"]["spec"]
    return pod


def _profiler(job: Obj) -> Obj:
    return next(c for c in _pod(job)["containers"] if c["name"] == "profiler")


def _tamper(kind: str, how: str) -> tuple[Obj, Obj]:
    built = BUILT[kind]
    job = copy.deepcopy(built)
    pod, profiler = _pod(job), _profiler(job)
    if how == "command":
        profiler["command"] = ["sh", "-c", "sleep 86400"]
    elif how == "gpus":
        profiler.setdefault("resources", {}).setdefault("limits", {})["nvidia.com/gpu"] = "8"
    elif how == "cpu request":
        profiler.setdefault("resources", {}).setdefault("requests", {})["cpu"] = "64"
    elif how == "parallelism":
        job["spec"]["parallelism"] = 64
    elif how == "deadline":
        job["spec"]["activeDeadlineSeconds"] += 86400
    elif how == "backoff":
        job["spec"]["backoffLimit"] = 100
    elif how == "extra container":
        pod["containers"].append({"name": "miner", "image": profiler["image"]})
    elif how == "extra init container":
        pod.setdefault("initContainers", []).append({"name": "x", "image": "busybox"})
    elif how == "hostPath":
        pod["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    elif how == "hostPath in a built volume":
        pod["volumes"][0]["hostPath"] = {"path": "/"}
    elif how == "extra mount":
        profiler["volumeMounts"].append({"name": "sps-work", "mountPath": "/etc"})
    elif how == "env":
        profiler["env"].append({"name": "LD_PRELOAD", "value": "/tmp/x.so"})
    elif how == "privileged":
        profiler["securityContext"]["privileged"] = True
    elif how == "hostNetwork":
        pod["hostNetwork"] = True
    elif how == "nodeName":
        pod["nodeName"] = "gpu-node-1"
    elif how == "lifecycle":
        profiler["lifecycle"] = {"postStart": {"exec": {"command": ["sh", "-c", "x"]}}}
    elif how == "toleration":
        pod["tolerations"] = [*pod.get("tolerations", []), {"operator": "Exists"}]
    elif how == "nodeSelector":
        pod.setdefault("nodeSelector", {})["reserved-pool"] = "true"
    elif how == "priority class":
        pod["priorityClassName"] = "system-node-critical"
    elif how == "account":
        pod["serviceAccountName"] = "default"
    elif how == "deprecated account":
        pod["serviceAccount"] = "default"
    elif how == "priority":
        pod["priority"] = 2_000_000_000
    elif how == "suspended by its author":
        job["spec"]["suspend"] = True
    elif how == "manual selector":
        job["spec"].update(manualSelector=True, selector={"matchLabels": {"app": "sglang"}})
    return job, built


@pytest.mark.parametrize(
    "how",
    [
        "command", "gpus", "cpu request", "parallelism", "deadline", "backoff",
        "extra container", "extra init container", "hostPath", "hostPath in a built volume",
        "extra mount", "env", "privileged", "hostNetwork", "nodeName", "lifecycle",
        "toleration", "nodeSelector", "priority class", "account", "manual selector",
        "suspended by its author", "priority", "deprecated account",
    ],
)  # fmt: skip
def test_a_job_that_would_run_more_than_the_operators_is_refused(how: str) -> None:
    job, built = _tamper("production", how)
    refusal = job_refusal(job, built)
    assert refusal is not None and refusal.endswith("is not what the operator builds"), refusal


def test_kueue_may_add_placement_to_a_job_it_queued_and_only_to_that_one() -> None:
    for how in ("toleration", "nodeSelector"):
        queued, built = _tamper("kueue", how)
        assert job_refusal(queued, built) is None, how
        not_queued, built = _tamper("production", how)
        assert job_refusal(not_queued, built) is not None, how


def test_quantities_are_compared_by_value_and_requests_copied_from_limits_are_the_operators() -> (
    None
):
    built = BUILT["clone"]
    job = copy.deepcopy(built)
    server = next(c for c in _pod(job)["initContainers"] if c["name"] == "sglang-server")
    server["resources"] = {
        "limits": {"nvidia.com/gpu": "1000m"},
        "requests": {"nvidia.com/gpu": "1"},
    }
    assert job_refusal(job, built) is None
    server["resources"]["requests"]["nvidia.com/gpu"] = "2"
    assert job_refusal(job, built) is not None


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", 1), ("1000m", 1), ("1k", 1000), ("1Ki", 1024), ("1Gi", 2**30), ("1e3", 1000),
     ("1E", 10**18), ("0.5", 0.5), ("500m", 0.5), (8, 8)],
)  # fmt: skip
def test_a_quantity_is_read_by_value(text: str | int, value: float) -> None:
    assert parse_quantity(text) == pytest.approx(value)


@given(st.text(max_size=60))
def test_any_text_is_a_quantity_or_none(text: str) -> None:
    parse_quantity(text)


@given(st.integers(0, 10**6), st.sampled_from(["", "k", "M", "Ki", "Mi", "Gi"]))
def test_a_quantity_reads_the_same_in_millis(n: int, suffix: str) -> None:
    whole = parse_quantity(f"{n}{suffix}")
    assert whole is not None and parse_quantity(f"{int(whole * 1000)}m") == whole


def test_a_name_twice_in_a_built_list_is_compared_by_position() -> None:
    # Kubernetes allows an env variable twice (the last wins): the target's may be.
    built = copy.deepcopy(BUILT["clone"])
    _profiler(built)["env"].append(dict(_profiler(built)["env"][0], value="again"))
    job = copy.deepcopy(built)
    assert job_refusal(job, built) is None
    _profiler(job)["env"][-1]["value"] = "changed"
    assert job_refusal(job, built) is not None
    _profiler(job)["env"] = _profiler(built)["env"][::-1]
    assert job_refusal(job, built) is not None


def test_adoption_still_needs_the_profile_as_controller() -> None:
    built = BUILT["clone"]
    existing = copy.deepcopy(built)
    existing["metadata"]["ownerReferences"] = [{"uid": "other", "controller": True}]
    assert adoption_refusal(existing, built, "uid-1") is not None
    existing["metadata"]["ownerReferences"] = [{"uid": "uid-1", "controller": True}]
    assert adoption_refusal(existing, built, "uid-1") is None


# --------------------------------------------------------------------------- after an upgrade


def test_a_running_job_an_upgraded_operator_would_build_otherwise_is_followed_not_refused() -> None:
    """What is compared, and when: only a Job found by a create (the crash window, no run
    recorded). A run status records is followed by its Job's UID, whatever the operator
    would build now: an operator restarted with another profiler image (an upgrade, as
    tests/e2e/test_e2e_upgrade.py plays with 0.1.0's running Job) keeps following it."""
    h = Harness.one_target()
    h.tick()
    run = h.run_pass()["currentRun"]
    h.settings = dataclasses.replace(h.settings, profiler_image="registry.example/sps:v2")
    h.reconciler = type(h.reconciler)(h.kube, h.settings, clock=lambda: h.now)  # restart
    h.tick()
    status = h.run_pass()
    assert status["currentRun"]["jobUid"] == run["jobUid"], status
    assert "lastFailure" not in status, status["lastFailure"]
    job = h.kube.obj("Job", run["job"])
    upgraded = copy.deepcopy(job)
    _profiler(upgraded)["image"] = h.settings.profiler_image
    assert job_refusal(job, upgraded) is not None  # the comparison would have refused it

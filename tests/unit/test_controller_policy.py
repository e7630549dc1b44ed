"""The profile author vs the cluster admin (issue 18, items 5, 6, 20, 21, 22): what a
profiling Job may be, the GPU pin, a phase 2 that measures the server phase 1 measured,
labels that would make the clone pass for a server pod, and External URLs."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from controller_harness import (
    H100,
    H200,
    NS,
    Harness,
    additive_rounds,
    deployment,
    profile_body,
    rounds,
)
from hypothesis import given
from hypothesis import strategies as st

from sps_operator.api import labels as L
from sps_operator.api.endpoints import forbidden_peer
from sps_operator.api.job import JobOverrides
from sps_operator.api.kinds import RunPhase
from sps_operator.api.result import build_patch
from sps_operator.api.spec import ServerSpec, SpsProfileSpec
from sps_operator.controller.kube import builders
from sps_operator.controller.kube.names import label_value as names_label
from sps_operator.controller.passes.state import Settings
from sps_operator.controller.policies import job_policy
from sps_operator.controller.policies.job_policy import JobPolicy, NameRule, ServiceInfo
from sps_operator.controller.policies.placement import PodInfo, placement

GPU = "nvidia.com/gpu.product"
QUEUE = L.LABEL_KUEUE_QUEUE


def settings(defaults: builders.JobDefaults | None = None, **policy_fields: Any) -> Settings:
    """The harness's settings with these job defaults and policy fields (the default policy
    when none are given)."""
    fields: dict[str, Any] = {"policy": JobPolicy(**policy_fields)} if policy_fields else {}
    if defaults is not None:
        fields["job_defaults"] = defaults
    return Settings(gpu_debounce_seconds=0, isolate_fits=False, **fields)


def first_pass(h: Harness) -> dict[str, Any]:
    h.tick()
    return h.run_pass()


def refused(h: Harness, reason: str, *words: str) -> dict[str, Any]:
    """One pass; it must create nothing and say why (the reason, the words)."""
    status = first_pass(h)
    assert not h.kube.kinds("Job") and not h.kube.kinds("ServiceAccount"), "a refused run"
    failure = status["lastFailure"]
    assert failure["reason"] == reason, failure
    for word in words:
        assert word in failure["message"], failure["message"]
    assert status.get("currentRun") is None
    assert h.condition("Degraded")[:2] == ("True", reason)
    return failure


def started(h: Harness) -> dict[str, Any]:
    status = first_pass(h)
    assert status.get("currentRun"), status.get("lastFailure")
    (job,) = h.kube.kinds("Job")
    return job


# --------------------------------------------------------------------------- 5. the GPU pin


def test_a_job_node_selector_naming_another_gpu_product_is_refused() -> None:
    """Reproduced on the real bed: spec.job.nodeSelector H200 won over the pin, the Job ran
    on H200, and its table went live as H100's."""
    h = Harness.one_target(job={"nodeSelector": {GPU: H200, "pool": "a"}})
    refused(h, "GpuPinConflict", f"{GPU}={H200}", H100, "spec.job.nodeSelector")


def test_the_pin_wins_over_every_node_selector_in_the_job() -> None:
    spec = SpsProfileSpec.model_validate(
        {**profile_body()["spec"], "job": {"nodeSelector": {GPU: H200, "pool": "a"}}}
    )
    target = deployment()["spec"]["template"]["spec"] | {"nodeSelector": {GPU: H200}}
    job = builders.profiling_job(
        builders.RunPlan(
            profile=builders.ProfileRef("p", NS, "uid"), spec=spec, run="p-1",
            phase=RunPhase.DIAGONAL,
            gpu_product=H100, fingerprint="f" * 16, target_pod_spec=target,
            server_container="sglang", server=_server(),
        )
    )  # fmt: skip
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {GPU: H100, "pool": "a"}


def _server() -> Any:
    from sps_operator.controller.sglang.serverconfig import parse_server

    return parse_server(deployment()["spec"]["template"]["spec"]["containers"][0])


def test_the_same_gpu_product_in_the_job_node_selector_is_fine() -> None:
    h = Harness.one_target(job={"nodeSelector": {GPU: H100}})
    job = started(h)
    assert job["spec"]["template"]["spec"]["nodeSelector"][GPU] == H100


def _affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
            }
        }
    }


@pytest.mark.parametrize(
    ("affinity", "ok"),
    [
        (_affinity([{"key": GPU, "operator": "In", "values": [H200]}]), False),
        (_affinity([{"key": GPU, "operator": "NotIn", "values": [H100]}]), False),
        (_affinity([{"key": GPU, "operator": "DoesNotExist"}]), False),
        (
            _affinity(
                [{"key": GPU, "operator": "In", "values": [H200]}],
                [
                    {"key": GPU, "operator": "In", "values": [H100]},
                    {"key": "z", "operator": "Exists"},
                ],
            ),
            True,
        ),
        (_affinity([{"key": GPU, "operator": "Exists"}]), True),
        (_affinity([{"key": "zone", "operator": "In", "values": ["a"]}]), True),
    ],
    ids=["in-other", "notin-ours", "doesnotexist", "one-term-admits", "exists", "other-key"],
)
def test_a_target_affinity_that_admits_no_node_of_its_gpu_product_creates_no_job(
    affinity: dict[str, Any], ok: bool
) -> None:
    """The target's own affinity is copied into the clone: one that excludes the product the
    pods run on (a Deployment moving pools, say) would leave the Job pending for an hour."""
    h = Harness()
    dep = deployment()
    dep["spec"]["template"]["spec"]["affinity"] = affinity
    h.add(dep)
    h.add(profile_body())
    h.place()
    if ok:
        job = started(h)
        assert job["spec"]["template"]["spec"]["affinity"] == affinity
    else:
        refused(h, "GpuPinConflict", "required node affinity", H100)


def test_a_refusal_for_one_server_does_not_hold_back_another() -> None:
    h = Harness()
    moving = deployment("moving")
    moving["spec"]["template"]["spec"]["affinity"] = _affinity(
        [{"key": GPU, "operator": "In", "values": [H200]}]
    )
    h.add(moving)
    h.add(deployment("other", args=["--model-path", "org/other", "--speculative-algorithm",
                                    "DSPARK", "--port", "30000"]))  # fmt: skip
    h.add(profile_body())
    h.place("moving")
    h.place("other")
    status = first_pass(h)
    assert status["currentRun"]["target"] == "other"
    (job,) = h.kube.kinds("Job")
    assert "affinity" not in job["spec"]["template"]["spec"]


# --------------------------------------------------------------------------- 6. phase 2


ADDITIVE = {
    "table": {"kind": "Additive", "sweep": {"batchSizes": [1, 2, 4], "fracs": [0.25, 0.5, 1.0]}}
}


def _phase_one_done(h: Harness) -> dict[str, Any]:
    h.tick()
    h.run_pass()
    h.finish(result=build_patch(status="succeeded", rounds=rounds(batch_sizes=(1, 2, 4))[:3]))
    return dict(h.status()["currentRun"])


def test_phase_two_never_clones_a_server_that_changed_after_phase_one() -> None:
    """An image upgrade between the phases: phase 2 cloned the new server and its table was
    stored under the old fingerprint, then rolled onto the old servers."""
    h = Harness.one_target(**ADDITIVE)
    run = _phase_one_done(h)
    dep = h.kube.obj("Deployment", "server")
    dep["spec"]["template"]["spec"]["containers"][0]["args"] += ["--dtype", "float16"]
    h.tick()
    status = h.run_pass()
    jobs = {j["metadata"]["name"]: j for j in h.kube.kinds("Job")}
    assert f"{run['job']}-p2" not in jobs, "no phase 2 of the old run"
    failure = status["lastFailure"]
    assert failure["reason"] == "TargetChanged" and failure["run"] == run["name"]
    assert run["fingerprint"] in failure["message"] and "fingerprint" in failure["message"]
    # The server as it is now gets a run of its own, labelled with its own fingerprint.
    new = status["currentRun"]
    assert new["fingerprint"] != run["fingerprint"] and new["phase"] == "Diagonal"
    (job,) = jobs.values()
    assert job["metadata"]["labels"][L.LABEL_FINGERPRINT] == new["fingerprint"]


def test_phase_two_runs_when_the_server_is_the_same() -> None:
    h = Harness.one_target(**ADDITIVE)
    run = _phase_one_done(h)
    h.tick()
    status = h.run_pass()
    assert status["currentRun"]["phase"] == "OffDiagonal"
    assert status["currentRun"]["fingerprint"] == run["fingerprint"]
    h.finish(
        result=build_patch(status="succeeded", rounds=additive_rounds()),
        phase=RunPhase.OFF_DIAGONAL,
    )
    status = h.settle()
    assert [t["fingerprint"] for t in status["tables"]] == [run["fingerprint"]]


def test_phase_two_is_checked_against_the_policy_again() -> None:
    """The spec changed between the phases (a label that escapes the queue): no phase-2
    Job; the run ends with the refusal, and no new run starts while it holds."""
    queued = {"job": {"labels": {QUEUE: "gpu"}}}
    h = Harness.one_target(settings(allowed_queues=("gpu",)), **ADDITIVE, **queued)
    _phase_one_done(h)
    body = h.kube.obj("SpsProfile", "p")
    body["spec"]["job"]["labels"][QUEUE] = ""
    h.tick()
    status = h.run_pass()
    assert len(h.kube.kinds("Job")) == 1
    assert status.get("currentRun") is None
    assert status["lastFailure"]["reason"] == "JobPolicy"
    assert "jobPolicy.allowedQueues" in status["lastFailure"]["message"]
    status = h.settle(passes=2)
    assert status.get("currentRun") is None and len(h.kube.kinds("Job")) == 1


# --------------------------------------------------------------------------- 20. pod selectors


def _service(name: str, selector: dict[str, str], type_: str = "ClusterIP") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": selector, "type": type_},
    }


def _pdb(name: str, selector: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": selector, "maxUnavailable": 1},
    }


@pytest.mark.parametrize(
    ("labels", "extra", "names"),
    [
        ({"app": "sglang", "deploy": "server"}, None, "Deployment server"),
        ({"app": "web"}, _service("web", {"app": "web"}), "Service web"),
        (
            {"tier": "gpu"},
            _pdb("gpus", {"matchLabels": {"tier": "gpu"}}),
            "PodDisruptionBudget gpus",
        ),
    ],
    ids=["target-selector", "service", "pdb"],
)
def test_job_labels_that_select_server_pods_are_refused(
    labels: dict[str, str], extra: dict[str, Any] | None, names: str
) -> None:
    """spec.job.labels equal to the target's pod selector: the Service sent user traffic
    to the profiling clone and placement counted it as a replica."""
    h = Harness.one_target(job={"labels": labels})
    if extra is not None:
        h.add(extra)
    refused(h, "JobLabelsSelectPods", names, "spec.job.labels")


@pytest.mark.parametrize(
    ("labels", "extra", "names"),
    [
        ({"app": "sglang", "deploy": "server"}, None, "Deployment server"),
        ({"app": "web"}, _service("web", {"app": "web"}), "Service web"),
        (
            {"team": "ml"},
            _service("gpu-team", {"team": "ml", L.LABEL_GPU: names_label(H100)}),
            "Service gpu-team",
        ),
    ],
    ids=["target-selector", "service", "service-on-an-operator-key"],
)
def test_the_cached_pass_finds_what_selects_the_profiling_pod(
    labels: dict[str, str], extra: dict[str, Any] | None, names: str
) -> None:
    """The operator's pass reads the candidates from its indexes, not the namespace: a
    selector filed under a label the run adds (its GPU product) is found too."""
    h = Harness.one_target(job={"labels": labels})
    if extra is not None:
        h.add(extra)
    h.tick()
    status = h.run_cached_pass()
    assert not h.kube.kinds("Job"), "a refused run"
    failure = status["lastFailure"]
    assert failure["reason"] == "JobLabelsSelectPods" and names in failure["message"], failure


def test_a_selector_in_another_namespace_refuses_nothing() -> None:
    h = Harness.one_target(job={"labels": {"app": "web"}})
    elsewhere = _service("web", {"app": "web"})
    elsewhere["metadata"]["namespace"] = "other"
    h.add(elsewhere)
    h.tick()
    status = h.run_cached_pass()
    assert status.get("currentRun"), status.get("lastFailure")


def test_what_selects_the_operators_own_labels_alone_refuses_nothing() -> None:
    """A PDB or Service that matches every pod of the operator (or an empty selector,
    which selects nothing) is not made to match by the profile: no refusal."""
    h = Harness.one_target(job={"labels": {"team": "ml"}})
    h.add(_pdb("all", {"matchLabels": {L.LABEL_MANAGED_BY: L.MANAGED_BY}}))
    h.add(_service("headless", {}))
    h.add(_service("team", {"team": "other"}))
    started(h)


def test_a_profiling_pod_never_counts_as_a_replica_of_the_target() -> None:
    """Even with the target's labels, on another GPU product: placement ignores it."""
    selector = {"matchLabels": {"app": "sglang", "deploy": "server"}}
    nodes = {"n1": {GPU: H100}, "n2": {GPU: H200}}
    server = PodInfo("server-0", {"app": "sglang", "deploy": "server"}, "n1")
    labels = {"app": "sglang", "deploy": "server"}
    by_labels = PodInfo("run-p", {**labels, L.LABEL_MANAGED_BY: L.MANAGED_BY,
                                  L.LABEL_COMPONENT: L.COMPONENT_POD}, "n2")  # fmt: skip
    where = placement(selector, [server, by_labels], nodes, GPU)
    assert where.products == {H100} and where.pods == 1
    by_owner = PodInfo("run-q", labels, "n2", controller="Job")
    assert placement(selector, [server, by_owner], nodes, GPU).products == {H100}


def test_the_pod_index_keeps_the_controller_kind() -> None:
    from sps_operator.controller.policies.placement import pod_info

    meta = {"ownerReferences": [{"kind": "Job", "name": "x", "controller": True}]}
    assert pod_info("p", {}, {}, {}, meta).controller == "Job"
    assert pod_info("p", {}, {}, {}, {}).controller is None


# --------------------------------------------------------------------------- 21. admin policy


@pytest.mark.parametrize(
    ("policy_fields", "defaults", "job_labels", "ok"),
    [
        ({}, {QUEUE: "gpu"}, {QUEUE: ""}, False),  # the issue: "" escapes the admin's queue
        ({}, {QUEUE: "gpu"}, {QUEUE: "other"}, False),
        ({}, {QUEUE: "gpu"}, {}, True),
        ({}, {}, {QUEUE: ""}, True),  # no queue rule without a default queue
        ({"allowed_queues": ("team-*",)}, {}, {}, False),
        ({"allowed_queues": ("team-*",)}, {}, {QUEUE: "team-a"}, True),
        ({"allowed_queues": ("team-*",)}, {QUEUE: "team-a"}, {QUEUE: "gpu"}, False),
    ],
)
def test_the_admins_queue_cannot_be_escaped(
    policy_fields: dict[str, Any], defaults: dict[str, str], job_labels: dict[str, str], ok: bool
) -> None:
    s = settings(builders.JobDefaults(labels=defaults), **policy_fields)
    h = Harness.one_target(s, job={"labels": job_labels})
    if ok:
        started(h)
    else:
        refused(h, "JobPolicy", "jobPolicy.allowedQueues")


@pytest.mark.parametrize(
    ("job", "target_priority", "default_priority", "where"),
    [
        ({"priorityClassName": "system-node-critical"}, None, None, "spec.job.priorityClassName"),
        ({"labels": {L.LABEL_KUEUE_PRIORITY: "system-high"}}, None, None, L.LABEL_KUEUE_PRIORITY),
        ({}, "system-cluster-critical", None, "the target Deployment's priorityClassName"),
        ({}, None, "system-node-critical", "jobDefaults.priorityClassName"),
    ],
    ids=["spec", "kueue-label", "target", "default"],
)
def test_system_priority_classes_are_refused_wherever_they_come_from(
    job: dict[str, Any], target_priority: str | None, default_priority: str | None, where: str
) -> None:
    h = Harness(settings=settings(builders.JobDefaults(priority_class=default_priority)))
    dep = deployment()
    if target_priority:
        dep["spec"]["template"]["spec"]["priorityClassName"] = target_priority
    h.add(dep)
    h.add(profile_body(job=job))
    h.place()
    refused(h, "JobPolicy", "jobPolicy.priorityClasses", where)


def test_an_allowed_priority_class_runs_and_the_admin_may_lift_a_system_one() -> None:
    started(Harness.one_target(job={"priorityClassName": "profiling-low"}))
    lifted = settings(priority_classes=NameRule(("*", "system-cluster-critical"), ("system-*",)))
    job = started(Harness.one_target(lifted, job={"priorityClassName": "system-cluster-critical"}))
    assert job["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"


@pytest.mark.parametrize(
    ("job", "ok"),
    [
        ({"labels": {"sps.dev/borrowed": "x"}}, False),
        ({"labels": {"batch.kubernetes.io/job-name": "x"}}, False),
        ({"labels": {"kueue.x-k8s.io/prebuilt-workload-name": "w"}}, False),
        (
            {
                "annotations": {
                    "container.apparmor.security.beta.kubernetes.io/sglang-server": "unconfined"
                }
            },
            False,
        ),
        ({"annotations": {QUEUE: "other"}}, False),  # as an annotation, Kueue's key is reserved
        ({"labels": {"app.kubernetes.io/name": "sps", "team": "ml"}}, True),
        ({"annotations": {"example.com/owner": "ml"}}, True),
    ],
)
def test_reserved_label_and_annotation_keys_are_refused(job: dict[str, Any], ok: bool) -> None:
    h = Harness.one_target(job=job)
    if ok:
        started(h)
    else:
        refused(h, "JobPolicy", "may not set")


def test_a_deadline_beyond_the_admins_maximum_is_refused() -> None:
    refused(
        Harness.one_target(job={"activeDeadlineSeconds": 7 * 24 * 3600}),
        "JobPolicy",
        "jobPolicy.maxActiveDeadlineSeconds",
        "at most 86400",
    )
    h = Harness.one_target(settings(max_active_deadline_seconds=1800))
    assert "(its default)" in refused(h, "JobPolicy")["message"]
    shorter = {"activeDeadlineSeconds": 1800}
    started(Harness.one_target(settings(max_active_deadline_seconds=1800), job=shorter))


def test_a_refusal_is_said_once_and_a_fixed_spec_runs_at_the_next_pass() -> None:
    """A refusal is not a failed run: no retry counting, no backoff, no new event at every
    pass; the first pass after the spec is fixed starts the run and clears it."""
    h = Harness.one_target(job={"priorityClassName": "system-node-critical"})
    first = refused(h, "JobPolicy")
    for _ in range(3):
        h.tick(60)
        assert h.run_pass()["lastFailure"] == first
    warnings = [e for e in h.kube.events if e[0] == "JobCreateFailed"]
    assert len(warnings) == 1, h.kube.events
    h.kube.obj("SpsProfile", "p")["spec"]["job"] = {"priorityClassName": "profiling-low"}
    status = first_pass(h)
    assert status.get("currentRun") and status.get("lastFailure") is None
    assert h.kube.kinds("Job")


def test_job_image_and_account_rules_are_the_policys() -> None:
    refused(
        Harness.one_target(job={"image": "evil/miner:1"}), "JobPolicy", "jobPolicy.allowedImages"
    )
    admin = {"serviceAccountName": "admin"}
    refused(Harness.one_target(job=admin), "JobPolicy", "jobPolicy.allowedServiceAccounts")


# --------------------------------------------------------------------------- 22. External


def external(url: str) -> dict[str, Any]:
    return {"server": {"source": "External", "url": url}}


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://169.254.169.254/latest/meta-data", ("link-local",)),
        ("http://[::ffff:169.254.169.254]:80", ("link-local",)),
        ("http://2852039166/", ("link-local",)),
        ("http://100.100.100.200/", ("metadata",)),
        ("http://127.0.0.1:30000", ("loopback",)),
        ("http://metadata.google.internal/", ("jobPolicy.allowedServerHosts",)),
        ("http://sglang.other-team.svc.cluster.local:30000", ("jobPolicy.allowedServerHosts",)),
        ("http://sglang.serving.svc:30000", ("jobPolicy.allowedServerHosts",)),  # search path
        ("http://a.b.serving.svc.cluster.local", ("jobPolicy.allowedServerHosts",)),
        ("http://10.0.0.7:30000", ("jobPolicy.allowedServerHosts",)),
        ("http://sglang.serving.svc.cluster.local:notaport", ("not a usable URL",)),
    ],
)
def test_an_external_url_outside_the_policy_creates_no_job(
    url: str, words: tuple[str, ...]
) -> None:
    refused(Harness.one_target(**external(url)), "JobPolicy", *words)


def test_an_external_name_service_cannot_stand_for_a_server_of_the_namespace() -> None:
    h = Harness.one_target(**external("http://meta.serving.svc.cluster.local"))
    h.add(_service("meta", {}, type_="ExternalName"))
    refused(h, "JobPolicy", "ExternalName")


def test_a_service_of_the_namespace_is_an_allowed_external_server() -> None:
    url = "http://sglang-profiling.serving.svc.cluster.local:30000"
    h = Harness.one_target(**external(url))
    h.add(_service("sglang-profiling", {"app": "sglang-profiling"}))
    job = started(h)
    (profiler,) = job["spec"]["template"]["spec"]["containers"]
    assert profiler["args"][profiler["args"].index("--base-url") + 1] == url
    # The admin may allow more hosts; never a metadata address, whatever it allows.
    anywhere = settings(allowed_server_hosts=("*",))
    started(Harness.one_target(anywhere, **external("http://10.0.0.7:30000")))
    refused(Harness.one_target(anywhere, **external("http://169.254.169.254")), "JobPolicy")


# --------------------------------------------------------------------------- pure rules


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("team", True),
        ("app.kubernetes.io/name", True),
        ("example.com/x", True),
        ("kubernetes.io/arch", False),
        ("node.kubernetes.io/x", False),
        ("k8s.io/x", False),
        ("x.k8s.io/y", False),
        ("kueue.x-k8s.io/pod-group-name", False),
        ("sps.dev/run", False),
        ("other.sps.dev/x", False),
        ("x-k8s.io/y", True),  # another domain: only the dot makes a subdomain
    ],
)
def test_the_default_key_rule(name: str, ok: bool) -> None:
    assert JobPolicy().label_keys.permits(name) is ok


def test_an_allowed_pattern_lifts_a_reservation_only_from_inside_it() -> None:
    rule = NameRule(("*", "*.kubernetes.io/*"), ("*.kubernetes.io/*", "sps.dev/*"))
    assert rule.permits("node.kubernetes.io/x") and not rule.permits("sps.dev/x")
    assert not NameRule(("team-*",)).permits("other")
    assert not NameRule((), ()).permits("x")


@given(st.text(max_size=300))
def test_any_url_is_refused_or_admitted_never_an_exception(url: str) -> None:
    spec = SpsProfileSpec.model_construct(
        server=ServerSpec.model_construct(source="External", url=url),
        job=JobOverrides.model_construct(active_deadline_seconds=60),
    )
    found = job_policy.spec_refusal(
        JobPolicy(allowed_server_hosts=("*",)), spec, namespace=NS, profiler_image="i"
    )
    assert found is None or found.reason == "JobPolicy"


@given(st.integers(0, 2**16 - 1), st.sampled_from(["dotted", "decimal", "hex", "mapped"]))
def test_every_spelling_of_a_link_local_address_is_refused(low: int, form: str) -> None:
    value = (169 << 24) | (254 << 16) | low
    host = {
        "dotted": f"169.254.{low >> 8}.{low & 255}",
        "decimal": str(value),
        "hex": hex(value),
        "mapped": f"[::ffff:169.254.{low >> 8}.{low & 255}]",
    }[form]
    spec = SpsProfileSpec.model_validate({**profile_body()["spec"], **external(f"http://{host}/")})
    found = job_policy.spec_refusal(
        JobPolicy(allowed_server_hosts=("*",)), spec, namespace=NS, profiler_image="i"
    )
    assert found is not None and "link-local" in found.message
    assert forbidden_peer(host.strip("[]")) is not None


def test_host_patterns_match_label_by_label() -> None:
    assert job_policy.host_matches("a.ns.svc.cluster.local", "*.ns.svc.cluster.local")
    assert not job_policy.host_matches("a.b.ns.svc.cluster.local", "*.ns.svc.cluster.local")
    assert not job_policy.host_matches("a.other.svc.ns.svc.cluster.local", "*.ns.svc.cluster.local")
    assert job_policy.host_matches("gpu-3.inference.example.com", "gpu-*.inference.example.com")
    assert job_policy.host_matches("anything.at.all", "*")


def test_services_are_read_from_the_namespace() -> None:
    h = Harness.one_target()
    h.add(_service("web", {"app": "web"}, type_="NodePort"))
    other = _service("elsewhere", {"app": "x"})
    other["metadata"]["namespace"] = "other"
    h.add(other)
    from api_snapshot import api_snapshot

    body = {
        "metadata": {"name": "p", "namespace": NS, "uid": "uid"},
        "spec": profile_body()["spec"],
    }
    snap = api_snapshot(h.kube, body).for_profile(
        h.kube, builders.ProfileRef("p", NS, "uid"), _spec()
    )
    assert list(snap.services) == [ServiceInfo("web", {"app": "web"}, "NodePort")]
    assert [d["metadata"]["name"] for d in snap.pod_selecting_deployments] == ["server"]


def _spec() -> SpsProfileSpec:
    return SpsProfileSpec.model_validate(copy.deepcopy(profile_body()["spec"]))


def test_every_refusal_and_the_phase_change_are_explained() -> None:
    from sps_operator.api.reason_registry import FAILURE_ADVICE
    from sps_operator.controller.profiling.run import TARGET_CHANGED

    assert job_policy.REFUSAL_REASONS | {TARGET_CHANGED} <= FAILURE_ADVICE.keys()

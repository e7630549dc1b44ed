"""What the operator's caches keep of each watched object (`kube/projections.py`): any
object, projected, never raises and stays within a fixed size; within the bounds a pass
reads the same answers from the projection as from the whole object; beyond them it
refuses (TargetTooLarge, with today's message) or fails safe (a PDB protects everything);
and whole passes through the caches, with every ConfigMap's data read back by a GET,
end as the passes through LISTs do (rollout, rollback, reuse, AnnotateOnly)."""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Callable
from typing import Any

import pytest
import test_controller_rollout
import test_controller_rollout_kinds
import test_controller_tenant_tables
from controller_harness import NS, Harness, deployment, indexes_of, profile_body, started
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sps_operator.api import labels as L
from sps_operator.api.limits import MAX_TARGET_TEMPLATE_BYTES
from sps_operator.api.spec import CapacitySpec
from sps_operator.controller import indexes as ix
from sps_operator.controller.kube import projections as pj
from sps_operator.controller.policies import (
    borrow,
    cost,
    deployments,
    ownership,
    run_job,
    workloads,
)
from sps_operator.controller.policies.job_policy import pod_selectors, selector_refusal
from sps_operator.controller.policies.placement import PodInfo
from sps_operator.controller.policies.stable_writers import system_object
from sps_operator.controller.sglang.serverconfig import find_server_container
from sps_operator.controller.sglang.serverread import target_size_problem

# What one projection may keep at most, whatever the object: a template within the bound
# the caches keep whole, bounded metadata, labels and selector, and a few KiB more.
META_BOUND = (pj.MAX_SELECTION_BYTES + pj.MAX_KEPT_ANNOTATIONS * (pj.MAX_ANNOTATION_VALUE
              + pj.MAX_TEXT) + pj.MAX_OWNER_REFERENCE_BYTES + 64 * 1024)  # fmt: skip
BOUND = {
    "Deployment": pj.MAX_INLINE_TEMPLATE_BYTES + 2 * pj.MAX_SELECTION_BYTES + META_BOUND,
    "StatefulSet": pj.MAX_INLINE_TEMPLATE_BYTES + 2 * pj.MAX_SELECTION_BYTES + META_BOUND,
    "LeaderWorkerSet": 2 * pj.MAX_INLINE_TEMPLATE_BYTES + 2 * pj.MAX_SELECTION_BYTES + META_BOUND,
    "PodDisruptionBudget": pj.MAX_PDB_SELECTOR_BYTES + META_BOUND,
    "HorizontalPodAutoscaler": META_BOUND,
    "ConfigMap": pj.MAX_INLINE_DATA_BYTES + META_BOUND,
    "Job": pj.MAX_SELECTION_BYTES + META_BOUND,
}
PROJECT: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "Deployment": pj.project_deployment,
    "StatefulSet": pj.project_stateful_set,
    "LeaderWorkerSet": pj.project_leader_worker_set,
    "PodDisruptionBudget": pj.project_pdb,
    "HorizontalPodAutoscaler": pj.project_hpa,
    "ConfigMap": pj.project_config_map,
    "Job": pj.project_job,
}

# --------------------------------------------------------------------------- any object

# Any JSON, and strings long enough to cross every bound (one repeated character: cheap).
_long = st.builds(lambda c, n: c * n, st.sampled_from('xy{["é'), st.integers(0, 300_000))
_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _long
_json = st.recursive(
    _scalars | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
_many = st.builds(lambda v, n: [v] * n, _json, st.integers(0, 5000))  # repeated: cheap
_field = _json | _many


def _maybe(fields: dict[str, Any]) -> Any:
    return st.fixed_dictionaries({}, optional=fields)


_meta = _maybe({"name": _field, "namespace": _field, "uid": _field, "labels": _field,
                "annotations": _field, "ownerReferences": _field, "managedFields": _field,
                "resourceVersion": _field})  # fmt: skip
_pod_spec = _maybe({"containers": _field, "volumes": _field, "nodeSelector": _field})
_template = _maybe({"metadata": _meta, "spec": _pod_spec | _field})
_objects = _maybe({
    "apiVersion": _field, "kind": _field, "metadata": _meta | _field, "immutable": _field,
    "data": _field, "binaryData": _field, "status": _field,
    "spec": _maybe({"selector": _field, "replicas": _field, "strategy": _field,
                    "template": _template | _field, "scaleTargetRef": _field,
                    "minAvailable": _field, "updateStrategy": _field,
                    "rolloutStrategy": _field, "startupPolicy": _field,
                    "leaderWorkerTemplate": _maybe({
                        "size": _field, "leaderTemplate": _template | _field,
                        "workerTemplate": _template | _field}) | _field}) | _field,
})  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=_objects, kind=st.sampled_from(sorted(PROJECT)))
def test_any_object_projected_never_raises_and_stays_within_a_fixed_size(
    obj: dict[str, Any], kind: str
) -> None:
    projected = PROJECT[kind](obj)
    assert pj.json_size(projected) <= BOUND[kind]
    json.dumps(projected)  # plain JSON, as kopf keeps it
    # The index functions file it under keys drawn from the projection: bounded too.
    entries = {
        "Deployment": ix.deployment_entries,
        "StatefulSet": lambda o: ix.deployment_entries(o, "StatefulSet"),
        "LeaderWorkerSet": lambda o: ix.deployment_entries(o, "LeaderWorkerSet"),
        "PodDisruptionBudget": ix.pdb_entries,
        "HorizontalPodAutoscaler": ix.hpa_entries,
        "ConfigMap": ix.config_map_entries,
        "Job": ix.job_entries,
    }
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return  # the API server's objects always have one
    meta.update(name="n", namespace="team-b")  # as the API server validates them
    keys = entries[kind](obj)
    assert len(json.dumps([list(k) for k in keys], default=str)) <= 4 * pj.MAX_SELECTION_BYTES


# --------------------------------------------------------------------------- within bounds

_name = st.text("abcdefgh-", min_size=1, max_size=10)
_labels = st.dictionaries(_name, _name, max_size=4)
_own_annotations = st.fixed_dictionaries({}, optional={
    L.ANNOTATION_OWNER: _name,
    L.ANNOTATION_BORROWED: st.just('{"profile_uid":"u","profile":"p","run":"r","replicas":2,'
                                   '"product":"H100","at":"2026-01-01T00:00:00Z"}'),
})  # fmt: skip
_foreign_annotations = st.fixed_dictionaries({}, optional={
    "kubectl.kubernetes.io/last-applied-configuration": _long,
    "example.com/note": _long, "deployment.kubernetes.io/revision": st.just("3"),
})  # fmt: skip
_managers = st.lists(st.fixed_dictionaries({
    "manager": st.sampled_from(["sps-operator", "argocd", "kubectl"]),
    "operation": st.sampled_from(["Apply", "Update"]),
    "fieldsV1": st.sampled_from([{"f:spec": {"f:replicas": {}}}, {"f:spec": {"f:paused": {}}},
                                 {"f:metadata": {"f:annotations": {
                                     f"f:{L.ANNOTATION_BORROWED}": {}}}}]),
}), max_size=3)  # fmt: skip
_container = st.fixed_dictionaries({
    "name": st.sampled_from(["sglang", "sidecar"]),
    "args": st.lists(_name, max_size=6),
    "env": st.lists(st.fixed_dictionaries({"name": _name, "value": _name}), max_size=3),
})  # fmt: skip
_volume = st.fixed_dictionaries({"name": _name, "configMap": st.fixed_dictionaries(
    {"name": _name})})  # fmt: skip
_condition = st.fixed_dictionaries({
    "type": st.sampled_from(["Progressing", "Available"]),
    "status": st.sampled_from(["True", "False"]),
    "reason": st.sampled_from(["NewReplicaSetAvailable", "ProgressDeadlineExceeded"]),
})  # fmt: skip


@st.composite
def _deployments(draw: st.DrawFn) -> dict[str, Any]:
    labels, pod_labels = draw(_labels), draw(_labels)
    annotations = {**draw(_foreign_annotations), **draw(_own_annotations)}
    pod_spec = {"containers": draw(st.lists(_container, min_size=1, max_size=2)),
                "volumes": draw(st.lists(_volume, max_size=2))}  # fmt: skip
    generation = draw(st.integers(1, 3))
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": draw(_name), "namespace": NS, "uid": "d1", "labels": labels,
                     "annotations": annotations, "generation": generation,
                     "resourceVersion": "7", "managedFields": draw(_managers)},
        "spec": {"replicas": draw(st.integers(0, 4)), "selector": {"matchLabels": pod_labels},
                 "progressDeadlineSeconds": draw(st.integers(1, 2**31 - 1)),
                 "strategy": {"type": "RollingUpdate",
                              "rollingUpdate": {"maxUnavailable": draw(st.sampled_from(
                                  [0, 1, "25%"]))}},
                 "template": {"metadata": {"labels": pod_labels, "annotations": {
                     L.ANNOTATION_TABLE_HASH: draw(_name), "example.com/x": draw(_long)}},
                              "spec": pod_spec}},
        "status": {"observedGeneration": draw(st.integers(1, 3)),
                   "replicas": draw(st.integers(0, 4)), "readyReplicas": draw(st.integers(0, 4)),
                   "updatedReplicas": draw(st.integers(0, 4)),
                   "availableReplicas": draw(st.integers(0, 4)),
                   "conditions": draw(st.lists(_condition, max_size=2))},
    }  # fmt: skip


def _readings(dep: dict[str, Any], pdb: dict[str, Any], hpa: dict[str, Any]) -> list[Any]:
    """What a pass's policies read of a Deployment, a PDB and an HPA of its namespace."""
    pod_spec = dep["spec"]["template"]["spec"]
    server = find_server_container(pod_spec, "sglang")
    capacity = CapacitySpec()
    return [
        deployments.deployment_rolled_out(dep),
        deployments.max_unavailable(dep, 4),
        deployments.progress_deadline_seconds(dep),
        ownership.recorded_owner(dep),
        sorted(ownership.mounted_config_maps(dep)),
        ownership.workload_reference(dep),
        borrow.read_tag(dep),
        borrow.written_by_operator(dep),
        borrow.replicas_owners(dep),
        borrow.replicas_changed_by(dep),
        borrow.kueue_managed_refusal(dep),
        borrow.borrow_refusal(dep, capacity, [pdb], []),
        borrow.borrow_refusal(dep, capacity, [], [hpa]),
        # The profiling pod must never pass for a pod of theirs (spec.job.labels).
        selector_refusal({"app": "sglang", "x": "y"}, {"x": "y"}, pod_selectors([dep], [], [pdb])),
        server,
        target_size_problem(pod_spec, server),
        dep["spec"]["selector"],
        dep["metadata"]["labels"],
        dep["spec"]["template"]["metadata"]["labels"],
        dep["spec"]["template"]["metadata"]["annotations"].get(L.ANNOTATION_TABLE_HASH),
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dep=_deployments(), selector=_labels, allowed=st.integers(0, 1), scales=st.booleans())
def test_within_bounds_a_pass_reads_the_same_answers_from_the_projection(
    dep: dict[str, Any], selector: dict[str, str], allowed: int, scales: bool
) -> None:
    pdb = {"metadata": {"name": "b", "namespace": NS, "annotations": {"x": "y"}},
           "spec": {"selector": {"matchLabels": selector}},
           "status": {"disruptionsAllowed": allowed}}  # fmt: skip
    target = {"apiVersion": "apps/v1", "kind": "Deployment",
              "name": dep["metadata"]["name"] if scales else "other"}  # fmt: skip
    hpa = {"metadata": {"name": "h", "namespace": NS, "annotations": {"x": "y" * 1000}},
           "spec": {"scaleTargetRef": target, "minReplicas": 1, "maxReplicas": 3,
                    "metrics": [{"type": "Resource"}]}}  # fmt: skip
    projected = pj.project_deployment(copy.deepcopy(dep))
    assert _readings(projected, pj.project_pdb(pdb), pj.project_hpa(hpa)) == _readings(
        dep, pdb, hpa)  # fmt: skip
    assert pj.OMITTED not in projected
    assert "kubectl.kubernetes.io/last-applied-configuration" not in projected["metadata"][
        "annotations"]  # fmt: skip


def test_a_table_config_map_keeps_its_data_labels_owners_and_system_marks() -> None:
    cm: dict[str, Any] = {"metadata": {"name": "t", "namespace": NS, "uid": "c1",
                       "labels": {L.LABEL_COMPONENT: L.COMPONENT_TABLE},
                       "annotations": {L.ANNOTATION_TABLE_HASH: "h", "kubernetes.io/x": "y",
                                       "example.com/z": "w" * 1000},
                       "ownerReferences": [{"apiVersion": "sps.dev/v1alpha1", "kind": "SpsProfile",
                                            "name": "p", "uid": "u1", "controller": True}]},
          "immutable": True, "data": {L.TABLE_KEY: "{}"}}  # fmt: skip
    projected = pj.project_config_map(cm)
    assert projected["data"] == cm["data"] and not pj.data_omitted(projected)
    assert projected["metadata"]["ownerReferences"] == cm["metadata"]["ownerReferences"]
    assert ix.controller_profile(projected) == "u1"
    assert system_object(projected) == "kubernetes.io/x"
    assert projected["metadata"]["annotations"] == {L.ANNOTATION_TABLE_HASH: "h",
                                                    "kubernetes.io/x": "y"}  # fmt: skip
    cm["data"] = {L.TABLE_KEY: "x" * (pj.MAX_INLINE_DATA_BYTES + 1)}
    big = pj.project_config_map(cm)
    assert "data" not in big and pj.data_omitted(big)


_rolling = st.fixed_dictionaries({}, optional={
    "partition": st.integers(0, 3), "maxUnavailable": st.sampled_from([0, 1, 2, "50%", "x%"]),
    "maxSurge": st.sampled_from([0, 1, "25%"]),
})  # fmt: skip
_revision = st.sampled_from(["r1", "r2"])


def _pod_template(draw: st.DrawFn, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"labels": labels, "annotations": {
                L.ANNOTATION_TABLE_HASH: draw(_name), "example.com/x": draw(_long)}},
            "spec": {"containers": draw(st.lists(_container, min_size=1, max_size=2)),
                     "volumes": draw(st.lists(_volume, max_size=2))}}  # fmt: skip


@st.composite
def _other_workloads(draw: st.DrawFn) -> dict[str, Any]:
    """A StatefulSet or a LeaderWorkerSet within every bound, with what the adapter reads
    of each drawn (update strategies, partitions, revisions, the group and its templates)."""
    kind = draw(st.sampled_from([workloads.STATEFUL_SET, workloads.LEADER_WORKER_SET]))
    pod_labels = draw(_labels)
    generation, want = draw(st.integers(1, 2)), draw(st.integers(0, 3))
    near = st.sampled_from([want, want, max(want - 1, 0), want + 1])  # often rolled out
    strategy_type = draw(st.sampled_from(["RollingUpdate", "OnDelete"]))
    status = {"observedGeneration": draw(st.integers(1, 2)),
              "replicas": draw(near), "readyReplicas": draw(near),
              "updatedReplicas": draw(near),
              "conditions": draw(st.lists(st.fixed_dictionaries({
                  "type": st.sampled_from(["UpdateInProgress", "Available", "ReplicaFailure"]),
                  "status": st.sampled_from(["True", "False"]),
                  "message": _name}), max_size=2))}  # fmt: skip
    spec: dict[str, Any] = {"replicas": want}
    if kind == workloads.STATEFUL_SET:
        spec |= {"selector": {"matchLabels": pod_labels}, "serviceName": draw(_name),
                 "podManagementPolicy": draw(st.sampled_from(["OrderedReady", "Parallel"])),
                 "updateStrategy": {"type": strategy_type, "rollingUpdate": draw(_rolling)},
                 "template": _pod_template(draw, pod_labels),
                 "volumeClaimTemplates": [{"metadata": {"name": "w"}, "spec": {
                     "resources": {"requests": {"storage": draw(_long)}}}}]}  # fmt: skip
        status |= {"currentRevision": draw(_revision), "updateRevision": draw(_revision),
                   "currentReplicas": draw(near)}  # fmt: skip
    else:
        group: dict[str, Any] = {"size": draw(st.integers(1, 4)),
                                 "workerTemplate": _pod_template(draw, pod_labels)}  # fmt: skip
        if draw(st.booleans()):
            group["leaderTemplate"] = _pod_template(draw, pod_labels)
        spec |= {"leaderWorkerTemplate": group, "startupPolicy": "LeaderCreated",
                 "rolloutStrategy": {"type": "RollingUpdate",
                                     "rollingUpdateConfiguration": draw(_rolling)}}  # fmt: skip
    return {
        "apiVersion": workloads.KINDS[kind].api_version, "kind": kind,
        "metadata": {"name": draw(_name), "namespace": NS, "uid": "w1",
                     "labels": draw(_labels), "generation": generation, "resourceVersion": "7",
                     "annotations": {**draw(_foreign_annotations), **draw(_own_annotations)},
                     "managedFields": draw(_managers)},
        "spec": spec,
        "status": status,
    }  # fmt: skip


def _adapter_readings(obj: dict[str, Any]) -> list[Any]:
    """What the workload adapter and a pass read of a workload of any kind."""
    found = workloads.templates(obj)
    servers = [find_server_container(t["spec"], "sglang") for _, t in found]
    return [
        workloads.kind_of(obj).kind,
        workloads.replicas(obj),
        workloads.group_size(obj),
        workloads.pod_selector(obj),
        [path for path, _ in found],
        workloads.rolled_out(obj),
        workloads.max_unavailable(obj, 4),
        workloads.progress_deadline_seconds(obj, 900.0),
        workloads.deadline_exceeded(obj),
        workloads.roll_waits(obj),
        workloads.controller_failure(obj),
        ownership.recorded_owner(obj),
        sorted(ownership.mounted_config_maps(obj)),
        borrow.read_tag(obj),
        servers,
        [target_size_problem(t["spec"], c) for (_, t), c in zip(found, servers, strict=True)],
        [t["metadata"]["labels"] for _, t in found],
        [t["metadata"]["annotations"].get(L.ANNOTATION_TABLE_HASH) for _, t in found],
        obj["metadata"]["labels"],
        (obj.get("spec") or {}).get("selector"),
    ]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=_other_workloads())
def test_within_bounds_the_adapter_reads_the_same_of_a_projected_stateful_or_leader_worker_set(
    obj: dict[str, Any],
) -> None:
    projected = pj.project_workload(copy.deepcopy(obj), obj["kind"])
    assert _adapter_readings(projected) == _adapter_readings(obj)
    assert pj.OMITTED not in projected and not pj.template_omitted(projected)
    assert "volumeClaimTemplates" not in projected["spec"]  # never read: never kept
    assert "kubectl.kubernetes.io/last-applied-configuration" not in projected["metadata"][
        "annotations"]  # fmt: skip


def _job_readings(job: dict[str, Any]) -> list[Any]:
    """What a pass reads of one of its run's Jobs from the caches."""
    spec, meta = job["spec"], job["metadata"]
    return [
        meta["name"], meta["uid"], meta["labels"], meta["annotations"].get(L.ANNOTATION_VOLUME_PIN),
        ix.controller_profile(job), spec.get("suspend"), run_job.group_pods(job),
        cost.pod_gpus(job), cost.job_gpus(job),
        spec["template"]["metadata"]["labels"], spec["template"]["spec"].get("priorityClassName"),
        borrow.pool_bid("p", "u", "H100", [PodInfo(
            "x", {}, None, controller_uid="j1", unschedulable="no GPU", created="2026-01-01",
            priority_class=spec["template"]["spec"].get("priorityClassName"))], job),
        job.get("status"),
    ]  # fmt: skip


@pytest.mark.parametrize("group", [False, True])
def test_a_run_job_reads_the_same_from_its_projection(group: bool) -> None:
    """The operator's own Job (a one-pod clone, an Indexed group), as the caches keep it:
    every field a pass reads of it answers the same; the rest of its template goes."""
    import test_controller_group_clone as clones

    h = Harness.one_target()
    job = clones.builders.profiling_job(clones.group_plan()) if group else None
    if job is None:
        started(h)
        (job,) = [o for o in h.cluster_objects() if o["kind"] == "Job"]
    job = copy.deepcopy(job)
    job["metadata"] |= {"uid": "j1", "annotations": {L.ANNOTATION_VOLUME_PIN: "n1", "x": "y"},
                        "ownerReferences": [{"apiVersion": "sps.dev/v1alpha1",
                                             "kind": "SpsProfile", "name": "p", "uid": "u",
                                             "controller": True}]}  # fmt: skip
    job["status"] = {"active": 1, "failedIndexes": "1", "startTime": "2026-01-01T00:00:00Z",
                     "conditions": [{"type": "Failed", "status": "True", "reason": "X",
                                     "message": "m"}]}  # fmt: skip
    projected = pj.project_job(copy.deepcopy(job))
    assert _job_readings(projected) == _job_readings(job)
    assert cost.job_gpus(job) == (4 if group else 0)  # 2 ranks of 2 GPUs; the harness's: none
    assert pj.json_size(projected) < pj.json_size(job)
    assert "env" not in json.dumps(projected["spec"]["template"])


# --------------------------------------------------------------------------- beyond them


def _statuses(h: Harness, passes: Callable[[], Any]) -> dict[str, Any]:
    h.tick()
    passes()
    return h.status()


def test_a_template_within_the_parse_bound_but_not_kept_whole_is_read_with_a_get() -> None:
    """A template of 200 KB (within the 512 KiB the pass parses, over the 32 KiB the
    caches keep whole): the caches keep a stub, the pass of the profile selecting it reads
    the Deployment and ends as a pass through a LIST does."""
    dep = deployment()
    server = dep["spec"]["template"]["spec"]["containers"][0]
    server["env"] = [{"name": f"V{i}", "value": "y" * 200} for i in range(1000)]
    server["env"].append({"name": "M", "valueFrom": {"configMapKeyRef": {"name": "models",
                                                                         "key": "m"}}})  # fmt: skip
    dep["spec"]["template"]["spec"]["volumes"] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "weights"}}]  # fmt: skip
    (kept,) = indexes_of([dep]).deployments[(ix.NAMESPACE, NS)]
    assert pj.template_omitted(kept) and pj.json_size(kept) < 4096
    idx = indexes_of([dep]).deployments
    assert (ix.ENV, NS, "models") in idx  # its env ConfigMap still wakes its profile
    assert ownership.mounted_config_maps(kept) == set()
    listed, cached = Harness.one_target(), Harness.one_target()
    for h in (listed, cached):
        h.kube.put(copy.deepcopy(dep))
        models = {"name": "models", "namespace": NS}
        h.kube.put(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": models, "data": {"m": "x"}}
        )
    for _ in range(3):
        via_list = _statuses(listed, listed.run_pass)
        via_caches = _statuses(cached, cached.run_cached_pass)
    assert via_caches.get("targets") == via_list.get("targets")
    assert via_caches.get("currentRun", {}).get("fingerprint") == via_list.get(
        "currentRun", {}).get("fingerprint")  # fmt: skip
    assert via_caches.get("targets"), via_caches


@pytest.mark.parametrize("what", ["template", "args", "labels"])
def test_a_target_over_a_bound_is_refused_through_the_caches_as_through_the_api(
    what: str,
) -> None:
    """The stub the caches keep of a template over the bound gives the pass the refusal
    and the message a LIST gives (the limit the template exceeds). Labels and selector
    over theirs (32 KiB; real ones are well under 1 KiB) are not kept: the Deployment is
    then selected by no profile (its own namespace's only: no other tenant's concern)."""
    big = deployment()
    server = big["spec"]["template"]["spec"]["containers"][0]
    if what == "template":
        server["env"] = [{"name": f"V{i}", "value": "y" * 900} for i in range(1000)]
    elif what == "args":  # the command line's own limit comes first, as in the pass
        server["args"] = [*server.get("args", []), *(["--x"] * 3000), "z" * 600_000]
    else:
        big["metadata"]["labels"].update({f"l{i}": "v" * 60 for i in range(1500)})
    listed, cached = Harness.one_target(), Harness.one_target()
    for h in (listed, cached):
        h.kube.put(copy.deepcopy(big))
    (dep,) = indexes_of([big]).deployments[(ix.NAMESPACE, NS)]
    assert pj.json_size(dep) < 128 * 1024
    via_list = _statuses(listed, listed.run_pass)
    via_caches = _statuses(cached, cached.run_cached_pass)
    if what == "labels":
        assert (
            dep["metadata"]["labels"] == {}
            and dep[pj.OMITTED]["selection"] > pj.MAX_SELECTION_BYTES
        )
        assert via_caches.get("targets") in (None, []), via_caches
        stub = dep["spec"]["template"]["spec"]
        assert "labels and selector are" in str(target_size_problem(stub, None))
        return
    assert via_caches["targets"] == via_list["targets"]
    (target,) = via_caches["targets"]
    assert target["reason"] == "TargetTooLarge", target
    expected = "words" if what == "args" else f"at most {MAX_TARGET_TEMPLATE_BYTES}"
    assert expected in target["message"]


@pytest.mark.parametrize("where", ["leaderTemplate", "workerTemplate"])
def test_a_group_template_over_the_bound_is_refused_through_the_caches_as_through_the_api(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Either template of a LeaderWorkerSet over the bound the pass parses: the caches
    keep it as a stub (a few KiB) and the other as a Deployment's; the pass refuses the
    group with what a LIST gives (the worker's named by its path, after the leader is
    read, as a LIST's pass reads it), with no GET. A leader the caches keep as a stub
    within the bound is read back with one (else the pass would read a stub's server)."""
    big = test_controller_rollout_kinds.leader_worker_set()
    template = big["spec"]["leaderWorkerTemplate"][where]
    template["spec"]["containers"][0]["env"] = [
        {"name": f"V{i}", "value": "y" * 900} for i in range(1000)
    ]
    listed, cached = Harness(), Harness()
    for h in (listed, cached):
        h.add(copy.deepcopy(big))
        h.add(profile_body())
        h.pods = test_controller_rollout_kinds.group_pods()
    (kept,) = indexes_of([big]).deployments[(ix.NAMESPACE, NS)]
    assert pj.json_size(kept) < 16 * 1024 and not pj.template_omitted(kept)
    via_list = _statuses(listed, listed.run_pass)
    via_caches = _statuses(cached, cached.run_cached_pass)
    assert via_caches["targets"] == via_list["targets"]
    (target,) = via_caches["targets"]
    assert target["reason"] == "TargetTooLarge", target
    assert f"at most {MAX_TARGET_TEMPLATE_BYTES}" in target["message"]
    assert (where == "workerTemplate") == ("workerTemplate:" in target["message"])
    monkeypatch.setattr(pj, "MAX_INLINE_TEMPLATE_BYTES", -1)  # the other one a stub too
    (kept,) = indexes_of([big]).deployments[(ix.NAMESPACE, NS)]
    assert pj.template_omitted(kept) == (where == "workerTemplate")


def test_a_pdb_selector_over_the_bound_protects_every_pod_of_its_namespace() -> None:
    """Fail safe: what the caches cannot keep of a PDB's selector makes it cover every
    pod, so a borrow it might forbid is refused, never allowed."""
    dep = deployment()
    dep["status"] = {"readyReplicas": 3, "observedGeneration": 1, "updatedReplicas": 3,
                     "replicas": 3, "availableReplicas": 3}  # fmt: skip
    dep["spec"]["replicas"], dep["metadata"]["generation"] = 3, 1
    values = ["sglang", *(f"v{i:05d}" + "x" * 50 for i in range(4000))]
    pdb = {"metadata": {"name": "guard", "namespace": NS},
           "spec": {"selector": {"matchExpressions": [
               {"key": "app", "operator": "In", "values": values}]}},
           "status": {"disruptionsAllowed": 0}}  # fmt: skip
    capacity = CapacitySpec()
    whole = borrow.borrow_refusal(dep, capacity, [pdb], [])
    (kept,) = indexes_of([{**pdb, "kind": "PodDisruptionBudget"}]).pdbs[(ix.NAMESPACE, NS)]
    assert pj.json_size(kept) < 4096 and kept[pj.OMITTED]["selector"] > pj.MAX_PDB_SELECTOR_BYTES
    assert borrow.borrow_refusal(dep, capacity, [kept], []) == whole
    assert whole and "allows no disruption" in whole
    # One that covers nothing of it, kept whole, still lets the borrow through.
    values[0] = "other"
    assert borrow.borrow_refusal(dep, capacity, [pdb], []) is None
    (kept,) = indexes_of([{**pdb, "kind": "PodDisruptionBudget"}]).pdbs[(ix.NAMESPACE, NS)]
    assert borrow.borrow_refusal(dep, capacity, [kept], [])


# --------------------------------------------------------------------------- whole passes


def _run_pass_through_the_caches(self: Harness, name: str = "p") -> dict[str, Any]:
    """`Harness.run_pass` as the operator runs it: on what its kopf indexes keep (the
    projections), the pods as the kubelet follows the templates."""
    assert self.reconciler is not None
    body = copy.deepcopy(self.kube.obj("SpsProfile", name, NS))
    pods = self.pods_now()
    saved, self.pods = self.pods, []
    try:
        # No watch of a kind the cluster does not serve: its objects are in no cache.
        lws = getattr(self.kube, "lws_installed", True)
        built = indexes_of([o for o in self.cluster_objects()
                            if lws or o["kind"] != "LeaderWorkerSet"])  # fmt: skip
    finally:
        self.pods = saved
    by_pod: dict[Any, list[Any]] = {}
    for pod in pods:
        by_pod.setdefault((ix.NAMESPACE, NS), []).append(pod)
        for k, v in pod.labels.items():
            by_pod.setdefault((ix.LABEL, NS, k, v), []).append(pod)
        if pod.node:
            by_pod.setdefault((ix.NODE, pod.node), []).append(NS)
    idx = ix.Indexes(**{**{f: getattr(built, f) for f in built.__dataclass_fields__},
                        "pods": by_pod})  # fmt: skip
    self.reconciler.reconcile(body, ix.world_for(body, idx))
    return self.status(name)


def _whole_pass_tests() -> list[Any]:
    """The rollout, rollback, reuse, AnnotateOnly and tables' tests that take no argument,
    and those of StatefulSets and LeaderWorkerSets."""
    found = []
    for module in (
        test_controller_rollout,
        test_controller_tenant_tables,
        test_controller_rollout_kinds,
    ):
        for name, fn in sorted(vars(module).items()):
            if name.startswith("test_") and callable(fn) and not inspect.signature(fn).parameters:
                found.append(pytest.param(fn, id=f"{module.__name__}::{name}"))
    return found


@pytest.mark.parametrize("test", _whole_pass_tests())
def test_whole_passes_through_the_caches_end_as_through_lists(
    test: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of those tests again, every pass reading the caches' projections, with no
    ConfigMap's data and no pod template kept whole in them: every reader of a table's, a
    result's or a stable ConfigMap's bytes reads them with a GET, a selected Deployment is
    read whole, and each sees the same (the GETs are counted)."""
    gets: list[str] = []
    real_get = Harness().kube.get.__func__  # type: ignore[attr-defined]

    def counting_get(kube: Any, kind: str, namespace: str, name: str) -> Any:
        gets.append(kind)
        return real_get(kube, kind, namespace, name)

    monkeypatch.setattr(pj, "MAX_INLINE_DATA_BYTES", -1)
    monkeypatch.setattr(pj, "MAX_INLINE_TEMPLATE_BYTES", -1)
    monkeypatch.setattr(Harness, "run_pass", _run_pass_through_the_caches)
    monkeypatch.setattr(type(Harness().kube), "get", counting_get)
    test()
    if test.__name__ not in NO_TEMPLATE_READ:
        # The selected target's templates were read back, with a GET of its own kind (a
        # GET of another kind finds nothing or another UID: the target would be lost).
        other = test.__module__ == test_controller_rollout_kinds.__name__
        kinds = {"StatefulSet", "LeaderWorkerSet"} if other else {"Deployment"}
        assert kinds & set(gets), gets
    if test.__name__ not in NO_TABLE_READ:
        assert "ConfigMap" in gets  # the bytes were read back, not taken from the caches


# Tests whose passes never read a target's template (refused before: its size, the spec).
NO_TEMPLATE_READ = {
    "test_a_huge_target_is_refused_with_the_limit_before_it_is_parsed",
    "test_kube_root_ca_is_refused_up_front_with_a_validation_message",
}
# Tests whose passes never read a ConfigMap's bytes (refused before any table).
NO_TABLE_READ = {
    "test_a_group_whose_ranks_are_not_one_server_is_refused",
    "test_nnodes_must_be_the_group_size",
    "test_a_group_whose_workers_ask_for_other_gpus_than_the_leader_is_refused",
    "test_a_huge_target_is_refused_with_the_limit_before_it_is_parsed",
    "test_a_mount_of_the_tenants_own_over_the_table_path_is_refused",
    "test_a_pass_that_fails_outside_its_steps_still_writes_status_and_never_raises",
    "test_kube_root_ca_is_refused_up_front_with_a_validation_message",
    "test_the_error_path_writes_status_even_when_ending_the_run_fails_too",
}


def test_an_owner_reference_that_is_not_an_object_is_no_profiles() -> None:
    """Found by the property above in CI (a Job whose ownerReferences held a null raised
    out of the index function): any list item that is not an object is not an owner."""
    from sps_operator.controller import indexes as ix

    for refs in ([None], [1, "x"], "not a list", None):
        body = {"metadata": {"name": "n", "namespace": "team-b", "ownerReferences": refs}}
        assert ix.controller_profile(body) is None

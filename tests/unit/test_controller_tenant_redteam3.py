"""What issue 33 built, attacked a third time by a tenant with `edit` in one namespace
(team-b) against another (team-a, the harness's namespace NS) and against what every
tenant shares (the operator's memory, its API budget, `kubectl sps explain`), with cases
neither the issue text nor the two earlier suites list. Played in-process against the
real reconciler and the unit tests' fake API, the operator's own cache functions, or the
pure function a read path reaches. A handled attack is a regression guard; a hole found
is asserted safe and marked xfail(strict) until fixed."""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

import pytest
from controller_harness import NS, Harness, deployment, indexes_of, profile_body

from sps_operator.api import labels as L
from sps_operator.api.limits import MAX_TARGET_TEMPLATE_BYTES
from sps_operator.controller.kube.builders import SERVER_CONTAINER

TEAM_B = "team-b"

# --------------------------------------------------------------------------- the operator's memory

# What one object of another tenant may cost the operator's caches at most: a target's
# template within the bound the operator parses (larger ones are refused, not read), plus
# room for its metadata; anything else a pass reads of an object is a few KiB.
RETAINED_BOUND = {
    "Deployment": MAX_TARGET_TEMPLATE_BYTES + 64 * 1024,
    "StatefulSet": MAX_TARGET_TEMPLATE_BYTES + 64 * 1024,
    "LeaderWorkerSet": 2 * MAX_TARGET_TEMPLATE_BYTES + 64 * 1024,  # two templates
}
SMALL_BOUND = 64 * 1024
ANNOTATIONS = {"example.com/note": "x" * 250_000}  # the API server's total: 256 KiB


def _team_b_object(kind: str) -> dict[str, Any]:
    """An object any `edit` user of team-b may create at no compute cost (no pod runs),
    as large as the API server accepts."""
    meta: dict[str, Any] = {"name": "junk", "namespace": TEAM_B, "annotations": ANNOTATIONS}
    if kind == "Deployment":
        dep = deployment("junk")
        dep["metadata"].update(meta)
        dep["spec"]["replicas"] = 0
        env = [{"name": f"V{i}", "value": "y" * 900} for i in range(1000)]
        dep["spec"]["template"]["spec"]["containers"][0]["env"] = env
        return dep
    if kind == "Job":  # suspended: no pod runs; the label and owner anyone may write
        template = _team_b_object("Deployment")["spec"]["template"]
        labels = {L.LABEL_MANAGED_BY: L.MANAGED_BY}
        owner = {"apiVersion": "sps.dev/v1alpha1", "kind": "SpsProfile", "name": "p",
                 "uid": "b1", "controller": True}  # fmt: skip
        return {"kind": kind, "metadata": {**meta, "labels": labels, "ownerReferences": [owner]},
                "spec": {"suspend": True, "template": template}}  # fmt: skip
    if kind in ("StatefulSet", "LeaderWorkerSet"):
        # The same 1 MB template, at 0 replicas; a LeaderWorkerSet's in its worker template
        # beside a small leader (each template must be bounded, not only the server's).
        template = _team_b_object("Deployment")["spec"]["template"]
        spec: dict[str, Any] = {"replicas": 0, "template": template,
                                "selector": {"matchLabels": {"app": "junk"}}}  # fmt: skip
        if kind == "LeaderWorkerSet":
            small = deployment("junk")["spec"]["template"]
            spec = {"replicas": 0, "leaderWorkerTemplate": {
                "size": 2, "leaderTemplate": small, "workerTemplate": template}}  # fmt: skip
        return {"kind": kind, "metadata": meta, "spec": spec}
    if kind == "PodDisruptionBudget":
        many = {"key": "app", "operator": "In", "values": ["v" * 60] * 4000}
        return {"kind": kind, "metadata": meta, "spec": {"selector": {"matchExpressions": [many]}}}
    if kind == "HorizontalPodAutoscaler":
        target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "junk"}
        return {"kind": kind, "metadata": meta,
                "spec": {"scaleTargetRef": target, "minReplicas": 1, "maxReplicas": 2}}  # fmt: skip
    # A ConfigMap with the label the operator's cache selects its own by: anyone may set it.
    meta = {**meta, "labels": {L.LABEL_MANAGED_BY: L.MANAGED_BY}}
    return {"kind": "ConfigMap", "metadata": meta, "data": {"x": "z" * 1_000_000}}


def _retained_bytes(obj: dict[str, Any]) -> int:
    """What the operator's caches keep of `obj` (JSON bytes of each distinct value its
    index functions return, as kopf stores them)."""
    built = indexes_of([obj])
    seen: dict[int, Any] = {}
    for name in built.__dataclass_fields__:
        for values in getattr(built, name).values():
            seen.update((id(v), v) for v in values)
    return sum(len(json.dumps(v, default=repr)) for v in seen.values())


@pytest.mark.parametrize(
    "kind",
    [
        "Deployment",
        "StatefulSet",
        "LeaderWorkerSet",
        "Job",
        "PodDisruptionBudget",
        "ConfigMap",
        "HorizontalPodAutoscaler",
    ],
)
def test_another_tenants_objects_cost_the_operators_caches_a_bounded_size(kind: str) -> None:
    """Hole found and fixed: the operator watches these kinds in every namespace it serves
    and kept them in its kopf indexes whole (only managedFields dropped). team-b creates
    objects as large as the API server takes (a Deployment at 0 replicas with a 1 MB env
    list and 250 KB of annotations, a PDB with a 4,000-value selector, a 1 MB ConfigMap
    carrying the operator's managed-by label, an HPA with 250 KB of annotations): each was
    kept at its full size (~450 such objects passed the chart's 512Mi limit, no pod
    needed), so the operator's memory grew with team-b's bytes until the kubelet killed it,
    for every tenant, and again after each restart's LIST. Now each index keeps a bounded
    projection (`kube/projections.py`). The same hole stayed open for StatefulSets,
    LeaderWorkerSets and suspended Jobs carrying the operator's label and an SpsProfile
    owner (kept whole but for managedFields) until they were projected too."""
    obj = _team_b_object(kind)
    assert len(json.dumps(obj)) > (200_000 if kind == "HorizontalPodAutoscaler" else 500_000)
    assert _retained_bytes(obj) <= RETAINED_BOUND.get(kind, SMALL_BOUND)


def test_the_env_configmap_cache_is_bounded_in_bytes_not_only_in_entries() -> None:
    """Hole found and fixed: `EnvSources` keeps a reduced copy of each ConfigMap server
    containers read env from, and was bounded by entries only (10,000, each up to 256 keys
    of 1 KiB: 2.5 GiB at the bound). team-b: one Deployment at 0 replicas with an `envFrom`
    entry for each of 2,000 ConfigMaps of its own, each with 256 keys of 1,024 characters
    (~260 KB, below the 1 MiB a ConfigMap may hold): the watch kept every one, ~520 MB,
    past the operator's 512Mi limit. Now the cache also holds at most `MAX_CHARS`
    characters, forgetting the oldest (a pass reads a forgotten one again with a GET)."""
    from sps_operator.controller.kube.envsources import MAX_CHARS, MAX_ENTRIES, EnvSources
    from sps_operator.controller.sglang.podenv import MAX_KEYS, MAX_VALUE_CHARS

    value = "v" * MAX_VALUE_CHARS  # one string object: the test itself stays small
    data = {f"K{i:03d}": value for i in range(MAX_KEYS)}
    cache = EnvSources()
    count = 2000
    for i in range(count):
        cache.observe(TEAM_B, f"cm-{i}", {"data": data}, referenced=True)
    per_entry = MAX_KEYS * (4 + MAX_VALUE_CHARS)
    assert per_entry * MAX_ENTRIES > 2 * 2**30  # what the entry bound alone allowed
    assert len(cache) * per_entry <= MAX_CHARS <= 128 * 2**20, len(cache)
    assert cache._chars == len(cache) * per_entry  # the count follows what is kept
    kept = cache.read(None, TEAM_B, [f"cm-{count - 1}"])  # type: ignore[arg-type]
    assert kept[f"cm-{count - 1}"] is not None  # the newest is kept (no GET: kube is None)


# --------------------------------------------------------------------------- the API budget


def _passes_cost(h: Harness, passes: int = 10, seconds: float = 600) -> tuple[Counter[str], int]:
    """The API calls other than reads and the events of `passes` passes once settled."""
    h.settle(passes=3)
    h.kube.calls.clear()
    events = len(h.kube.events)
    for _ in range(passes):
        h.tick(seconds)
        h.run_pass()
    writes = Counter(c for c in h.kube.calls if not c.startswith(("list_", "get")))
    return writes, len(h.kube.events) - events


@pytest.mark.parametrize("refusal", ["policy", "too-large"])
def test_a_refused_profile_spends_no_writes_of_the_shared_budget_while_nothing_changes(
    refusal: str,
) -> None:
    """Every tenant's passes share one client-side budget (`kube.ratelimit.TokenBucket`, not
    per namespace): team-b's profiles that stay refused (a PriorityClass the admin
    forbids, a target past the parse bound) must not spend it pass after pass, or a
    thousand of them would hold team-a's writes back."""
    h = Harness()
    dep = deployment()
    spec: dict[str, Any] = {}
    if refusal == "policy":
        spec = {"job": {"priorityClassName": "system-node-critical"}}
    elif refusal == "too-large":
        dep["spec"]["template"]["spec"]["containers"][0]["args"] = ["--bogus"] * 3000
    h.add(dep)
    h.add(profile_body(**spec))
    h.place()
    writes, events = _passes_cost(h, seconds=30)
    assert (writes, events) == (Counter(), 0), (writes, h.kube.events[-3:])


# --------------------------------------------------------------------------- kubectl sps explain


def _warning(uid: str, reason: str, at: str) -> dict[str, Any]:
    """A Warning event about SpsProfile p as the operator writes it (client.Kube.event)."""
    involved = {"kind": "SpsProfile", "name": "p", "namespace": NS, "uid": uid}
    return {"type": "Warning", "reason": reason, "message": f"{reason} of {uid}",
            "involvedObject": involved, "lastTimestamp": at}  # fmt: skip


def _unready_profile(uid: str) -> dict[str, Any]:
    """Profile p in team-a, matching no Deployment yet: no topic of explain has a finding,
    so the fallbacks answer (a Warning event first)."""
    body = profile_body()
    body["metadata"]["uid"] = uid
    body["status"] = {"observedGeneration": 1, "targets": []}
    return body


def test_explain_shows_this_profiles_newest_warning_not_an_old_or_a_former_ones() -> None:
    """Hole found and fixed: explain lists the namespace's events about `SpsProfile p` by
    name and showed the first Warning in time order, i.e. the OLDEST one, whatever object
    it was about. Events live an hour: a profile deleted and created again under its name
    (or after a problem since solved) was explained by what the former profile, or the
    profile an hour ago, was told. Now only events about this profile's UID count, the
    newest first; one without a UID (an older client's) still counts."""
    from sps_operator.plugin.explain import explain

    events = [
        _warning("uid-former", "ProfilingFailed", "2026-03-01T11:10:00Z"),
        _warning("uid-now", "TableModified", "2026-03-01T11:20:00Z"),
        _warning("uid-now", "StableTableContested", "2026-03-01T11:50:00Z"),
    ]
    findings = explain(_unready_profile("uid-now"), events=events)["findings"]
    assert [f["what"] for f in findings] == ["Warning event StableTableContested"], findings
    only_former = explain(_unready_profile("uid-now"), events=events[:1])["findings"]
    assert not any("uid-former" in f["why"] for f in only_former), only_former
    no_uid = copy.deepcopy(events[2])
    del no_uid["involvedObject"]["uid"]
    findings = explain(_unready_profile("uid-now"), events=[no_uid])["findings"]
    assert [f["what"] for f in findings] == ["Warning event StableTableContested"], findings


# --------------------------------------------------------------------------- the clone


def _knob_from_config_map(h: Harness, value: str) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "knobs", "namespace": NS},
          "data": {"fast": value}}  # fmt: skip
    h.kube.objects.pop(("ConfigMap", NS, "knobs"), None)
    h.add(cm)


def test_the_clone_runs_the_fingerprinted_env_values_not_a_reference_read_later() -> None:
    """A fingerprinted variable (`SGLANG_DSPARK_FAST_KERNEL`, one of the cost inputs SGLang
    reads from the environment) set from a ConfigMap key: the fingerprint is computed from
    the value when the run starts, but the clone was given the reference, so its pod read
    the ConfigMap when it started (after a wait in Kueue or for the pool: hours). A change
    in between (a GitOps sync, the tenant) made it measure another configuration than its
    table is labelled for; a change back made that table go live on the first one. The
    clone's command line was already pinned to the values read; now its fingerprinted
    variables are too (a Secret, which no cost input may come from, stays a reference)."""
    h = Harness()
    _knob_from_config_map(h, "1")
    knob = {"name": "SGLANG_DSPARK_FAST_KERNEL",
            "valueFrom": {"configMapKeyRef": {"name": "knobs", "key": "fast"}}}  # fmt: skip
    token = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t"}}}
    h.add(deployment(env=[knob, {"name": "PLAIN", "value": "kept"}, token]))
    h.add(profile_body())
    h.place()
    h.tick()
    run = h.run_pass()["currentRun"]
    job = h.kube.obj("Job", run["job"])
    containers = job["spec"]["template"]["spec"]["initContainers"]
    server = next(c for c in containers if c["name"] == SERVER_CONTAINER)
    env = {e["name"]: e for e in server["env"]}
    assert env["SGLANG_DSPARK_FAST_KERNEL"] == {"name": "SGLANG_DSPARK_FAST_KERNEL", "value": "1"}
    assert env["PLAIN"] == {"name": "PLAIN", "value": "kept"}
    assert env["HF_TOKEN"] == token  # not a cost input: a Secret stays a reference


def _operator_pod(namespace: str, image: str) -> dict[str, Any]:
    labels = dict(part.split("=") for part in L.OPERATOR_POD_SELECTOR.split(","))
    return {
        "metadata": {"name": "sps-operator-0", "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": L.OPERATOR_CONTAINER, "image": image}]},
        "status": {"containerStatuses": [{"name": L.OPERATOR_CONTAINER, "ready": True}]},
    }


def test_kubectl_sps_version_prints_no_terminal_escape_from_a_tenants_pod() -> None:
    """Hole found and fixed: `kubectl sps version` without --operator-namespace lists the
    pods of every namespace carrying the operator's labels (which anyone may put on a pod)
    and printed their image as it is. The API server refuses only surrounding whitespace in
    an image, so team-b's pod (never pulled: it need not run) with ESC/BEL sequences in it
    wrote into the terminal of whoever asked, e.g. the admin: OSC 52 sets their clipboard,
    CSI erases the line that says which namespace the pod is in. Now what a pod says is
    printed as clean text; the pod's namespace still shows that it is not the operator's."""
    from sps_operator.plugin.view import operator_pod_version, render_version

    evil = "ghcr.io/x/sps-operator:9.9.9\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2K\x1b[1A\r"
    pods = [_operator_pod("sps-system", "ghcr.io/sps/sps-operator:0.2.0"),
            _operator_pod(TEAM_B, evil)]  # fmt: skip
    versions = [operator_pod_version(p) for p in pods]
    text = render_version("0.2.0", versions, "every namespace")
    assert not any(ch in text for ch in "\x1b\x07\r"), repr(text)
    assert f"({TEAM_B}/sps-operator-0, " in text  # whose pod it is stays visible


# --------------------------------------------------------------------------- deletion


def test_deleting_a_profile_looks_at_its_namespaces_borrow_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hole found and fixed (while reading what the delete handler believes): when the
    borrowed-Deployments cache became keyed by namespace (issue 33 §2), `sps_release` kept
    reading it under the old key "all", which no longer exists, so a borrow recorded on a
    Deployment that does not record the profile as its owner was never seen: with status
    missing the borrow (the crash between the record and the status write, the case this
    check is for), deletion released nothing and the replica stayed lent until the orphan
    sweep, minutes later. Now it reads the profile's own namespace's records."""
    import kopf

    from sps_operator.controller import handlers
    from sps_operator.controller.policies.borrow import BorrowTag

    h = Harness()
    assert h.reconciler is not None
    registry = kopf.OperatorRegistry()
    handlers.register(registry, h.reconciler, handlers.Runtime())
    handler = next(x for x in registry._changing.get_all_handlers() if x.id == "sps_release")
    release: Any = handler.fn
    tag = BorrowTag("uid-p", "p", "p-run", 2, "NVIDIA-H100-80GB-HBM3", "2026-03-01T12:00:00Z")
    lender = deployment("lender")
    lender["metadata"]["annotations"] = {L.ANNOTATION_BORROWED: tag.to_annotation()}
    caches = indexes_of([{**lender, "metadata": {**lender["metadata"], "namespace": NS}}])
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(handlers, "release_or_retry", lambda *_, **kw: calls.append(kw))
    body = profile_body()
    release(namespace=NS, name="p", uid="uid-p", spec=body["spec"], status={},
            sps_deployments=caches.deployments, sps_config_maps=caches.config_maps,
            sps_borrowed=caches.borrowed, sps_stateful_sets={},
            sps_leader_worker_sets={})  # fmt: skip
    assert calls == [{"lists_needed": True}], calls


def test_a_profile_created_again_under_its_name_mid_run_never_takes_the_former_run() -> None:
    """team-b deletes its profile while its run's Job runs (the finalizer done, or stripped:
    `edit` may) and creates it again under the same name at once; the former Job and its
    result ConfigMap remain until garbage collection, and the former Job then completes
    with a result written by its pod (team-b's image). The new profile (another UID) runs
    its own Job, never follows or adopts the former one, and never publishes its result."""
    h = Harness.one_target()
    h.tick()
    former = h.run_pass()["currentRun"]
    old_body = h.kube.objects.pop(("SpsProfile", NS, "p"))
    h.add(profile_body())
    new_uid = h.kube.obj("SpsProfile", "p")["metadata"]["uid"]
    assert new_uid != old_body["metadata"]["uid"]
    h.tick()
    run = h.run_pass()["currentRun"]
    assert run["name"] != former["name"] and run["jobUid"] != former["jobUid"], run
    # The former Job completes with a table-worthy result, before garbage collection.
    fresh = h.status()
    h.kube.objects[("SpsProfile", NS, "p")]["status"]["currentRun"] = former
    h.finish()
    h.kube.objects[("SpsProfile", NS, "p")]["status"] = fresh
    status = h.settle()
    assert status["tables"] == [], status["tables"]
    assert status["currentRun"]["name"] == run["name"], status["currentRun"]
    job = h.kube.obj("Job", run["job"])
    assert [o["uid"] for o in job["metadata"]["ownerReferences"]] == [new_uid]

"""Tenants cannot touch each other (issue 18): the contract, on the real bed.

One operator in cluster mode (the chart's default) serves two namespaces:
- A, the victim: two profiled servers with live tables (`sps`, Inject; `gitops`,
  AnnotateOnly), a full pool (e2e_pool.POOL) for BorrowReplica, and objects of its users that have
  nothing to do with SPS (`payments-config`, `billing-config`, a Job `nightly-report`);
- B, the attacker: a real user (a client certificate signed by the bed's CA) with the
  built-in `edit` role in B only, its own SGLang server behind a Service.
The cluster admin's policy (chart values) puts every profiling Job in the Kueue queue
`gpu-profiling`, and the bed runs the real Kueue (`realnode_kueue`): A's LocalQueue
`gpu-profiling` points at the ClusterQueue `gpu`, so Kueue admits A's Jobs; B has no
such queue, so a Job of B's profiles that stays in it never runs, and one that escaped it
runs at once, unqueued (the attacks on the queue look for that).

Each row of ATTACKS is one thing B can do, with what it may know (A's namespace name,
A's profile UIDs and run names: labels and UIDs are not secrets). After each: every
Deployment, Job, ConfigMap and SpsProfile status of A is what it was, field for field
(`e2e_tenants.normalized` says what is not compared and why), except what A's own owner
changed meanwhile; B's planted objects are ignored (the operator wrote none of them), and
B's own profiles report what they were refused. A new case is a new row.

One release and one A set up for the whole module; attacks run one after another, each
followed by a wait bounded by operator passes (`Passes.settle`), not by a sleep.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from e2e_cluster import E2eCluster
from e2e_env import (
    GROUP,
    PLURAL,
    TABLE_PATH,
    VERSION,
    Env,
    OperatorRelease,
    server_deployment,
    sps_profile,
)
from e2e_pool import BORROWED, POOL, create_full_pool_deployment, wait_serving
from e2e_tenants import (
    Passes,
    Tenant,
    damage,
    listed_at,
    namespace_objects,
    nothing_else,
    seen_since,
)
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException

from sps_operator.api import labels as L
from sps_operator.api.legacy_tables import without_v1_twins
from sps_operator.api.reasons import JOB_LABELS_SELECT_PODS, JOB_POLICY
from sps_operator.api.result import build_patch, read_result
from sps_operator.constants import GPU_RESOURCE
from sps_operator.controller.kube.names import label_value
from sps_sim.costmodel import GPU_H100
from sps_testbed.cluster import KubectlError
from sps_testbed.kueue import KueueSetup, create_local_queue
from waiting import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.slow]

KUEUE_QUEUE = L.LABEL_KUEUE_QUEUE
ADMIN_QUEUE = "gpu-profiling"  # A's LocalQueue of that name points at the ClusterQueue
# The cluster admin's policy, as chart values of the release.
ADMIN_VALUES = [f"jobDefaults.labels.kueue\\.x-k8s\\.io/queue-name={ADMIN_QUEUE}"]
STABLE = "sglang-sps-table"  # A's AnnotateOnly ConfigMap
OURS = {L.LABEL_MANAGED_BY: L.MANAGED_BY}
Obj = dict[str, Any]


# ----------------------------------------------------------------------------- the two tenants


@dataclass
class Tenancy:
    cluster: E2eCluster
    api: ApiClient
    operator: OperatorRelease
    a: Env  # namespace A, as its owner (the admin) sees it
    b: str
    tenant: Tenant  # B's user
    passes: Passes
    kueue: KueueSetup
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def uid(self, name: str, namespace: str | None = None) -> str:
        ns = namespace or self.a.namespace
        obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        return str(obj["metadata"]["uid"])

    def profiles(self, namespace: str) -> list[str]:
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
        return [p["metadata"]["name"] for p in items["items"]]

    def settle(self, *b_profiles: str) -> None:
        """Until every profile of A (and `b_profiles` of B) was passed after now."""
        wanted = [(self.a.namespace, n) for n in self.profiles(self.a.namespace)]
        self.passes.settle([*wanted, *((self.b, n) for n in b_profiles)])

    def world(self) -> dict[str, Obj]:
        return namespace_objects(self.api, self.a.namespace)

    def status(self, name: str, namespace: str | None = None) -> Obj:
        ns = namespace or self.a.namespace
        obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        status = dict(obj.get("status") or {})
        if "tables" in status:  # as the operator reads them (no entries for 0.1.0)
            status["tables"] = without_v1_twins(status["tables"])
        return status

    def wait_gone(self, namespace: str, name: str, timeout: float = 120) -> None:
        def gone() -> bool:
            try:
                self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            except ApiException as exc:
                return exc.status == 404
            return False

        wait_for(f"SpsProfile {namespace}/{name} gone", gone, timeout=timeout)


def gitops_deployment() -> Obj:
    """An AnnotateOnly server as Git has it: it mounts STABLE and reads the table there."""
    dep = server_deployment(GPU_H100, name="gitops-server")
    return mount_table(dep, STABLE)


def mount_table(dep: Obj, config_map: str) -> Obj:
    pod_spec = dep["spec"]["template"]["spec"]
    pod_spec["volumes"] = [{"name": "table", "configMap": {"name": config_map}}]
    container = pod_spec["containers"][0]
    container["args"] += ["--speculative-dspark-sps-table-path", TABLE_PATH]
    container["volumeMounts"] = [{"name": "table", "mountPath": "/etc/sps/table"}]
    return dep


def selecting(deployment: str) -> Obj:
    return {"matchLabels": {"deploy": deployment}}


def config_map(name: str, labels: dict[str, str], data: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels}, "data": data or {}}  # fmt: skip


def job(name: str, image: str, labels: dict[str, str], suspend: bool) -> Obj:
    """A Job whose pod exits at once (or never starts, suspended)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "suspend": suspend,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": image, "command": ["true"]}],
                }
            },
        },
    }


@pytest.fixture(scope="module")
def tenancy(
    e2e_cluster: E2eCluster,
    e2e_api: ApiClient,
    operator_namespace: str,
    realnode_kueue: KueueSetup,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Tenancy]:
    started = time.monotonic()
    suffix = secrets.token_hex(3)
    a_ns = e2e_cluster.create_namespace(f"tenant-a-{suffix}")
    b_ns = e2e_cluster.create_namespace(f"tenant-b-{suffix}")
    tmp = tmp_path_factory.mktemp("tenancy")
    operator = OperatorRelease(e2e_cluster, operator_namespace, None, tmp / "clock",
                               extra_values=list(ADMIN_VALUES))  # fmt: skip
    a = Env(e2e_cluster, e2e_api, a_ns, operator)
    try:
        create_local_queue(e2e_cluster.bed, a_ns, ADMIN_QUEUE)
        operator.start()
        tenant = Tenant.enrol(e2e_cluster, b_ns, tmp)
        # A: users' objects, two profiled servers, the full pool.
        a.core.create_namespaced_config_map(a_ns, config_map("payments-config", {},
                                                             {"iban": "DE00 1234"}))  # fmt: skip
        a.core.create_namespaced_config_map(a_ns, config_map("billing-config", {}, {"plan": "b"}))
        image = e2e_cluster.bed.image("operator")
        a.batch.create_namespaced_job(a_ns, job("nightly-report", image, {}, suspend=True))
        a.apps.create_namespaced_deployment(a_ns, server_deployment(GPU_H100))
        a.apps.create_namespaced_deployment(a_ns, gitops_deployment())
        a.custom.create_namespaced_custom_object(
            GROUP, VERSION, a_ns, PLURAL, sps_profile(name="sps", selector=selecting("server"))
        )
        a.custom.create_namespaced_custom_object(
            GROUP, VERSION, a_ns, PLURAL,
            sps_profile(name="gitops", selector=selecting("gitops-server"),
                        rollout={"mode": "AnnotateOnly", "tableConfigMap": STABLE}),
        )  # fmt: skip
        pool_replicas = create_full_pool_deployment(a, name="pool")
        # B: its own server behind a Service.
        tenant.create(server_deployment(GPU_H100), {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "server"},
            "spec": {"selector": {"deploy": "server"}, "ports": [{"port": 30000}]},
        })  # fmt: skip
        for name in ("sps", "gitops"):
            table = wait_for(f"A's {name} table", lambda n=name: table_of(a, n), timeout=300)
            wait_for(f"A's {name} rolled", lambda n=name, t=table: rolled(a, n, t), timeout=120)
            wait_ready_named(a, name)
        wait_serving(a, pool_replicas, "A's pool serving", name="pool")
        wait_serving(Env(e2e_cluster, e2e_api, b_ns, operator), 1, "B's server serving")
        t = Tenancy(e2e_cluster, e2e_api, operator, a, b_ns, tenant, Passes(e2e_api, operator),
                    realnode_kueue)  # fmt: skip
        t.settle()
        t.timings["setup"] = time.monotonic() - started
        yield t
        print(f"tenant suite timings (s): {t.timings}")
    finally:
        print(a.diagnostics())
        operator.uninstall()
        e2e_cluster.delete_namespace(a_ns)
        e2e_cluster.delete_namespace(b_ns)


def table_of(env: Env, profile: str) -> Obj | None:
    status = env.profile(profile).get("status") or {}
    return next(iter(status.get("tables") or []), None)


def rolled(env: Env, profile: str, table: Obj) -> bool:
    deployment = {"sps": "server", "gitops": "gitops-server"}[profile]
    dep = env.deployment(deployment)
    st = dep.get("status") or {}
    annotations = dep["spec"]["template"].get("metadata", {}).get("annotations") or {}
    return (
        annotations.get(L.ANNOTATION_TABLE_HASH) == table["hash"]
        and st.get("observedGeneration", 0) >= dep["metadata"]["generation"]
        and st.get("updatedReplicas", 0) == st.get("replicas", -1) == st.get("readyReplicas", 0)
    )


def wait_ready_named(env: Env, name: str, timeout: float = 120) -> None:
    def ready() -> bool:
        return bool(env.condition("Ready", name).get("status") == "True")

    wait_for(f"A's {name} Ready", ready, timeout=timeout)


# ----------------------------------------------------------------------------- the contract


@dataclass
class Outcome:
    """What an attack did and saw: the objects B planted (`(kind, name)`: the operator
    must not write them), B's own servers and profiles (the profiles are checked by what
    they report), what A's owner changed meanwhile (keys of `Tenancy.world` that may
    differ), and what went wrong that the generic checks do not see."""

    planted: list[tuple[str, str]] = field(default_factory=list)
    own: list[tuple[str, str]] = field(default_factory=list)  # B's servers for its profiles
    profiles: list[str] = field(default_factory=list)  # B's SpsProfiles it created
    allowed: Callable[[str], bool] = nothing_else
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Attack:
    id: str
    issue: str  # where issue 18 names it
    what: str
    run: Callable[[Tenancy, Outcome], None]


def plant(t: Tenancy, out: Outcome, *objects: Obj) -> None:
    t.tenant.create(*objects)
    out.planted += [(o["kind"], o["metadata"]["name"]) for o in objects]


def untouched(t: Tenancy, planted: list[tuple[str, str]]) -> list[str]:
    """B's objects are B's: the operator never writes to one of them, nor deletes it."""
    problems = []
    for kind, name in planted:
        obj = t.tenant.get(kind, name)
        if obj is None:
            problems.append(f"B's {kind} {name} was deleted")
            continue
        managers = {m.get("manager") for m in obj["metadata"].get("managedFields") or []}
        if "sps-operator" in managers:
            problems.append(f"the operator wrote to B's {kind} {name}")
    return problems


def reports(status: Obj, *words: str, reason: str | None = None) -> str | None:
    """A message of the profile's conditions, targets or lastFailure containing every
    word (and with `reason`), if any."""
    entries = [*(status.get("conditions") or []), *(status.get("targets") or [])]
    if status.get("lastFailure"):
        entries.append(status["lastFailure"])
    for entry in entries:
        message = str(entry.get("message") or "")
        if (reason is None or entry.get("reason") == reason) and all(w in message for w in words):
            return message
    return None


# ----------------------------------------------------------------------------- §1 isolation


def hide_the_stable_config_map(t: Tenancy, out: Outcome) -> None:
    """ConfigMaps in B labelled with A's namespace name under A's stable ConfigMap names:
    the live one (`gitops`) and one a new GitOps profile of A is about to need."""
    forged = {**OURS, L.LABEL_PROFILE_UID: t.a.namespace, L.LABEL_COMPONENT: L.COMPONENT_STABLE}
    table = json.dumps({"sample_batch_tokens": [4], "sample_steps_per_sec": [1.0],
                        "max_batch_tokens": 4})  # fmt: skip
    plant(t, out, config_map(STABLE, forged, {"table.json": table}),
          config_map("fresh-table", forged, {"table.json": table}))  # fmt: skip
    t.settle()
    # A's owner applies a new GitOps server and profile: the operator must create its
    # stable ConfigMap at once (SGLang's "no table") so the pods can start.
    fresh = mount_table(server_deployment(GPU_H100, name="fresh-server"), "fresh-table")
    fresh["spec"]["replicas"] = 0
    t.a.apps.create_namespaced_deployment(t.a.namespace, fresh)
    t.a.custom.create_namespaced_custom_object(
        GROUP, VERSION, t.a.namespace, PLURAL,
        sps_profile(name="fresh", selector=selecting("fresh-server"),
                    rollout={"mode": "AnnotateOnly", "tableConfigMap": "fresh-table"}),
    )  # fmt: skip
    t.settle()
    out.allowed = lambda key: key in {
        "Deployment/fresh-server", "SpsProfile/fresh", "ConfigMap/fresh-table"
    }  # fmt: skip
    try:
        created = t.a.config_map("fresh-table")
    except ApiException:
        out.problems.append("A's new AnnotateOnly profile never got its stable ConfigMap "
                            "fresh-table: B's ConfigMap of that name hid it")  # fmt: skip
    else:
        if L.ANNOTATION_PLACEHOLDER not in (created["metadata"].get("annotations") or {}):
            out.problems.append(f"A's fresh-table is not SGLang's placeholder: {created['data']}")
    # A's owner removes the new server again (a Deployment scaled to zero keeps nothing).
    t.a.delete_profile("fresh")
    t.a.apps.delete_namespaced_deployment("fresh-server", t.a.namespace)
    with contextlib.suppress(ApiException):
        t.a.core.delete_namespaced_config_map("fresh-table", t.a.namespace)


def trim_a_by_uid(t: Tenancy, out: Outcome) -> None:
    """Four "tables" in B carrying A's profile UID, the oldest named like a ConfigMap of
    A's users: a history trim that ignores namespaces deletes A/payments-config."""
    labels = {**OURS, L.LABEL_PROFILE_UID: t.uid("sps"), L.LABEL_PROFILE: "sps",
              L.LABEL_COMPONENT: L.COMPONENT_TABLE, L.LABEL_GPU: label_value(GPU_H100)}  # fmt: skip
    for name in ("payments-config", "decoy-1", "decoy-2", "decoy-3"):
        plant(t, out, config_map(name, labels, {"table.json": "{}"}))
        time.sleep(1.1)  # creation timestamps have seconds: an order the trim sees
    t.settle()


def forge_a_live_table(t: Tenancy, out: Outcome) -> None:
    """A ConfigMap in B under the name of A's live table, labelled like it, holding another
    table."""
    live = t.status("sps")["tables"][0]
    real = t.a.config_map(live["configMap"])
    labels = dict(real["metadata"]["labels"])
    table = json.dumps({"sample_batch_tokens": [4, 32], "sample_steps_per_sec": [50.0, 10.0],
                        "max_batch_tokens": 32})  # fmt: skip
    plant(t, out, config_map(live["configMap"], labels, {**real["data"], "table.json": table}))
    t.settle()


def hijack_a_run(t: Tenancy, out: Outcome) -> None:
    """Objects in B carrying A's UID while A profiles again: a Job named like A's users'
    Job and a "result" named like their ConfigMap (a cleanup of old runs that ignores
    namespaces deletes A's), then a completed Job and a result under A's run's names,
    8x slower than A's server, while A's real Job still runs."""
    uid = t.uid("sps")
    before = t.status("sps")
    old = before["tables"][0]
    real = t.a.config_map(f"{old['run']}-result")
    measured = read_result(real.get("data"), real.get("binaryData"))
    image = t.cluster.bed.image("operator")
    stale = {**OURS, L.LABEL_PROFILE_UID: uid, L.LABEL_PROFILE: "sps", L.LABEL_RUN: "sps-0"}
    old_job = job("nightly-report", image, {**stale, L.LABEL_COMPONENT: L.COMPONENT_JOB}, True)
    old_result = config_map("billing-config", {**stale, L.LABEL_COMPONENT: L.COMPONENT_RESULT})
    plant(t, out, old_job, old_result)
    t.settle()
    # A's owner asks for a new table.
    t.a.custom.patch_namespaced_custom_object(
        GROUP, VERSION, t.a.namespace, PLURAL, "sps",
        {"metadata": {"annotations": {L.ANNOTATION_REPROFILE: f"hijack-{secrets.token_hex(2)}"}}},
    )  # fmt: skip

    def new_run() -> Obj | None:
        run = t.status("sps").get("currentRun") or {}
        return run if run.get("name") and run["name"] != old["run"] else None

    run = wait_for("A's new run", new_run, timeout=60, interval=0.2)
    forged = {
        **OURS,
        L.LABEL_PROFILE_UID: uid,
        L.LABEL_PROFILE: "sps",
        L.LABEL_RUN: run["name"],
        L.LABEL_GPU: label_value(GPU_H100),
        L.LABEL_FINGERPRINT: run["fingerprint"],
    }
    slow = [slowed(r, 8.0) for r in measured.rounds]
    result = build_patch(
        status="succeeded", progress="4/4", manifest=measured.manifest, rounds=slow
    )
    data = {k: v for k, v in result["data"].items() if v is not None}
    forged_result = config_map(
        f"{run['name']}-result", {**forged, L.LABEL_COMPONENT: L.COMPONENT_RESULT}, data
    )
    forged_job = job(run["name"], image, {**forged, L.LABEL_COMPONENT: L.COMPONENT_JOB}, False)
    plant(t, out, forged_result, forged_job)

    def completed() -> bool:
        obj = t.tenant.get("job", run["name"]) or {}
        return bool((obj.get("status") or {}).get("succeeded"))

    wait_for("B's forged Job completed", completed, timeout=60)
    t.settle()
    after = t.status("sps")
    real_jobs = {j["metadata"]["name"]: j for j in t.a.jobs()}
    real_done = bool((real_jobs.get(run["name"], {}).get("status") or {}).get("succeeded"))
    # On a fast host A's real Job may finish first: then its run ends on its own result.
    if (after.get("currentRun") or {}).get("name") != run["name"] and not real_done:
        out.problems.append(
            f"A's run {run['name']} ended as soon as B's forged Job completed (A's real Job "
            f"still ran): {after.get('lastFailure')}"
        )

    def ended() -> Obj | None:
        status = t.status("sps")
        return status if (status.get("currentRun") or {}).get("name") != run["name"] else None

    status = wait_for("A's run ended", ended, timeout=240)
    newest = next((x for x in status.get("tables") or [] if x["run"] == run["name"]), None)
    if newest is None:
        out.problems.append(f"A's run {run['name']} published no table: "
                            f"{status.get('lastFailure')}")  # fmt: skip
    else:
        wait_for("A rolled to its new table", lambda: rolled(t.a, "sps", newest), timeout=120)
        ratio = mean_steps(t.a.config_map(newest["configMap"])) / mean_steps(
            t.a.config_map(old["configMap"])
        )
        if ratio < 0.5:
            out.problems.append(f"A's new table is {1 / ratio:.1f}x slower than A's server: it "
                                "is B's forged result, now live on A's server")  # fmt: skip
    wait_ready_named(t.a, "sps")
    out.allowed = lambda key: (
        key in {"Deployment/server", "SpsProfile/sps"}
        or key.startswith(("Job/sps-", "ConfigMap/sps-"))
    )


def slowed(round_: Obj, factor: float) -> Obj:
    keep = {k: v for k, v in round_.items() if not k.startswith("clock") and k != "ar1"}
    keep["steps_per_sec"] = round_["steps_per_sec"] / factor
    for key in ("median_step_time", "ci_low", "ci_high", "step_time_se"):
        if keep.get(key) is not None:
            keep[key] = keep[key] * factor
    return keep


def mean_steps(table_cm: Obj) -> float:
    steps = json.loads(table_cm["data"]["table.json"])["sample_steps_per_sec"]
    return float(sum(steps) / len(steps))


# ----------------------------------------------------------------------------- §2.9 stable writers


def annotate_only_writers(t: Tenancy, out: Outcome) -> None:
    """Two AnnotateOnly profiles of B naming one stable ConfigMap, named like A's: one
    writes it (in B), the other reports Conflict; A's is not touched."""
    for n, model in ((1, "sim/dspark-8b"), (2, "sim/dspark-70b")):
        dep = mount_table(server_deployment(GPU_H100, name=f"model-{n}"), STABLE)
        dep["spec"]["replicas"] = 0
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        args[args.index("--model-path") + 1] = model
        t.tenant.create(dep)
        out.own.append(("Deployment", f"model-{n}"))
        rollout = {"mode": "AnnotateOnly", "tableConfigMap": STABLE}
        writer = sps_profile(name=f"writer-{n}", selector=selecting(f"model-{n}"), rollout=rollout)
        t.tenant.create(writer)
        out.profiles.append(f"writer-{n}")
        time.sleep(1.1)  # creation order decides who writes
    t.settle(*out.profiles)
    conflicts = [n for n in out.profiles if reports(t.status(n, t.b), STABLE, reason="Conflict")]
    if len(conflicts) != 1:
        statuses = {n: ready(t.status(n, t.b)) for n in out.profiles}
        out.problems.append(f"two AnnotateOnly profiles write B/{STABLE}; {len(conflicts)} of "
                            f"them report Conflict: {statuses}")  # fmt: skip
    if t.tenant.get("configmap", STABLE) is None:
        out.problems.append(f"B's stable ConfigMap {STABLE} was never written in B")


# ----------------------------------------------------------------------------- §3.14 borrows


def forge_a_borrow(t: Tenancy, out: Outcome) -> None:
    """A borrow record on a Deployment of B (scaled to zero) on A's pool's GPU product:
    A's BorrowReplica must still borrow."""
    tag = {"at": "2026-01-01T00:00:00Z", "product": POOL, "profile": "payments",
           "profile_uid": "00000000-0000-0000-0000-000000000000", "replicas": 2,
           "run": "payments-1"}  # fmt: skip
    lender = server_deployment(POOL, name="lender")
    lender["spec"]["replicas"] = 0
    lender["metadata"]["annotations"] = {BORROWED: json.dumps(tag)}
    plant(t, out, lender)
    t.settle()
    t.a.custom.create_namespaced_custom_object(
        GROUP, VERSION, t.a.namespace, PLURAL,
        sps_profile(name="pool", selector=selecting("pool"),
                    capacity={"mode": "BorrowReplica", "borrowAfterSeconds": 0}),
    )  # fmt: skip
    out.allowed = lambda key: (
        key in {"Deployment/pool", "SpsProfile/pool"}
        or key.startswith(("Job/pool-", "ConfigMap/pool-"))
    )

    def decided() -> str | None:
        dep = t.a.deployment("pool")
        run = (t.status("pool").get("currentRun") or {}).get("name")
        tag_now = ((dep["metadata"].get("annotations") or {}).get(BORROWED)) or ""
        if run and run in tag_now:
            return "borrowed"
        blocked = reports(t.status("pool"), "payments")
        return f"blocked: {blocked}" if blocked else None

    try:
        verdict = wait_for("A's borrow, or why not", decided, timeout=120)
        if verdict != "borrowed":
            out.problems.append(f"B's forged record blocks A's BorrowReplica: {verdict}")
    finally:
        t.a.delete_profile("pool")  # gives the replica back
        wait_serving(t.a, 2, "A's pool whole again", name="pool")
        wait_for("A's pool run collected", lambda: not [
            k for k in t.world() if k.startswith(("Job/pool-", "ConfigMap/pool-"))
        ], timeout=60)  # fmt: skip
    lender_now = t.tenant.get("deployment", "lender") or {}
    if (lender_now.get("metadata", {}).get("annotations") or {}).get(BORROWED) != json.dumps(tag):
        out.problems.append("the operator changed B's forged borrow record")


# ----------------------------------------------------------------------------- §4 the author


def refused_profile(t: Tenancy, out: Outcome, name: str, words: tuple[str, ...],
                    reason: str = JOB_POLICY, **spec: Any) -> None:  # fmt: skip
    """B creates a profile of its own server asking for `spec`: the operator's policy
    creates no Job and says why (a message with `words`, with `reason`: not a Job the API
    or Kueue's webhook refused, which says that too). A Job that escaped the admin's queue runs
    at once (Kueue leaves a Job without a queue alone), and the operator may collect it
    before the check: every Job and pod of the profile since its creation counts."""
    job = {"activeDeadlineSeconds": 600, **spec.pop("job", {})}
    selector = f"{L.LABEL_PROFILE}={label_value(name)}"
    since = {kind: listed_at(t.api, kind, t.b, selector) for kind in ("jobs", "pods")}
    try:
        t.tenant.create(sps_profile(name=name, selector=selecting("server"), job=job, **spec))
    except KubectlError as exc:  # refused at admission (the CRD's rules): held
        if not all(w in exc.stderr for w in words):
            out.problems.append(f"B's profile {name} refused without saying why: {exc.stderr}")
        return
    out.profiles.append(name)
    t.settle(name)
    jobs = seen_since(t.api, "jobs", t.b, selector, since["jobs"])
    pods = seen_since(t.api, "pods", t.b, selector, since["pods"])
    for made in jobs.values():
        pod = made.spec.template
        theirs = {k: v for k, v in (pod.metadata.labels or {}).items() if k not in OPERATOR_LABELS}
        ran = sorted(
            p.metadata.name
            for p in pods.values()
            if (p.metadata.labels or {}).get("job-name") == made.metadata.name
        )
        queue = (made.metadata.labels or {}).get(KUEUE_QUEUE)
        out.problems.append(
            f"Job {t.b}/{made.metadata.name} created (suspend={made.spec.suspend}, Kueue queue "
            f"{queue!r}, pod labels beside the operator's {theirs}, priorityClassName "
            f"{pod.spec.priority_class_name!r}); "
            + (f"its pods ran unqueued: {ran}" if ran else "no pod of it ran")
        )
    status = t.status(name, t.b)
    if reports(status, *words, reason=reason) is None:
        out.problems.append(f"B's profile {name} does not say why it is refused (no {reason} "
                            f"message with {words}): Ready is {ready(status)}")  # fmt: skip


# Labels on every profiling pod that come from the operator or the Job controller.
OPERATOR_LABELS = {
    L.LABEL_MANAGED_BY, L.LABEL_COMPONENT, L.LABEL_FINGERPRINT, L.LABEL_GPU, L.LABEL_PROFILE,
    L.LABEL_PROFILE_UID, L.LABEL_RUN, "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name", "controller-uid", "job-name",
}  # fmt: skip


def ready(status: Obj) -> tuple[str, str, str] | None:
    """The Ready condition as (status, reason, message)."""
    c = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), None)
    return (c["status"], c.get("reason", ""), c.get("message", "")) if c else None


def a_server_url(t: Tenancy) -> str:
    pods = [p for p in t.a.pods("deploy=server") if p.get("status", {}).get("podIP")]
    return f"http://{pods[0]['status']['podIP']}:30000"


ATTACKS = [
    Attack("hide-stable-by-namespace-label", "§1",
           "ConfigMaps in B labelled with A's namespace name hide A's stable ConfigMaps",
           hide_the_stable_config_map),
    Attack("trim-deletes-by-uid", "§1",
           "ConfigMaps in B with A's UID make A's history trim delete A/payments-config",
           trim_a_by_uid),
    Attack("forged-live-table", "§1",
           "a ConfigMap in B under A's live table's name and labels", forge_a_live_table),
    Attack("two-writers-of-a-stable-config-map", "§2.9",
           "two AnnotateOnly profiles of B name one stable ConfigMap, named like A's",
           annotate_only_writers),
    Attack("job-labels-select-the-servers-pods", "§4.20",
           "spec.job.labels equal to the pod labels B's Service selects",
           lambda t, out: refused_profile(t, out, "labels", ("spec.job.labels",),
                                          reason=JOB_LABELS_SELECT_PODS,
                                          job={"labels": {"app": "sglang", "deploy": "server"}})),
    Attack("job-labels-leave-the-admins-queue", "§4.21",
           "spec.job.labels {kueue.x-k8s.io/queue-name: ''}",
           lambda t, out: refused_profile(t, out, "queue", (KUEUE_QUEUE, ADMIN_QUEUE),
                                          job={"labels": {KUEUE_QUEUE: ""}})),
    Attack("system-node-critical", "§4.21", "spec.job.priorityClassName system-node-critical",
           lambda t, out: refused_profile(t, out, "priority", ("system-node-critical",),
                                          job={"priorityClassName": "system-node-critical"})),
    Attack("external-url-at-a-server", "§4.22",
           "an External server.url pointing at A's serving pod",
           lambda t, out: refused_profile(t, out, "external", ("server.url",),
                                          server={"source": "External", "url": a_server_url(t)})),
    Attack("forged-borrow-record", "§3.14",
           "a sps.dev/borrowed record on a Deployment of B blocks A's BorrowReplica",
           forge_a_borrow),
    # Last: today it leaves a forged table live on A's server.
    Attack("hijack-a-run", "§1",
           "a Job and a result in B under A's UID and run names while A profiles",
           hijack_a_run),
]  # fmt: skip


def test_e2e_the_tenant_may_use_its_namespace_and_nothing_else(tenancy: Tenancy) -> None:
    t, a = tenancy.tenant, tenancy.a.namespace
    for verb, resource in [("create", "configmaps"), ("create", "jobs.batch"),
                           ("patch", "deployments.apps"), ("create", "spsprofiles.sps.dev"),
                           ("delete", "spsprofiles.sps.dev")]:  # fmt: skip
        assert t.can_i(verb, resource), (verb, resource)
    for verb, resource, where in [
        ("get", "configmaps", a), ("list", "jobs.batch", a), ("patch", "deployments.apps", a),
        ("get", "spsprofiles.sps.dev", a),
        ("create", "rolebindings.rbac.authorization.k8s.io", t.namespace),
        ("list", "nodes", t.namespace),
    ]:  # fmt: skip
        assert not t.can_i(verb, resource, where), (verb, resource, where)
    # Status is the operator's record: no user role writes it (issue 18, item 19).
    assert not t.can_i("patch", "spsprofiles.sps.dev", subresource="status")
    assert t.can_i("patch", "spsprofiles.sps.dev")
    # Not an impersonation: the API server knows the user by its certificate.
    who = json.loads(t.kubectl("auth", "whoami", "-o", "json"))
    assert who["status"]["userInfo"]["username"] == t.user


def test_e2e_kueue_admitted_the_trusted_tenants_jobs_from_the_admins_queue(
    tenancy: Tenancy,
) -> None:
    """A's profiling Jobs waited in the admin's queue and ran when Kueue admitted them
    (ClusterQueue `gpu`, the flavor of their GPU product); A's own Job without a queue is
    not Kueue's and stays as its owner left it."""
    t = tenancy
    batch = client.BatchV1Api(t.api)
    ours = f"{L.LABEL_COMPONENT}={L.COMPONENT_JOB},{L.LABEL_MANAGED_BY}={L.MANAGED_BY}"
    jobs = batch.list_namespaced_job(t.a.namespace, label_selector=ours).items
    assert {j.metadata.labels[L.LABEL_PROFILE] for j in jobs} >= {"sps", "gitops"}, jobs
    for made in jobs:
        name = made.metadata.name
        assert made.metadata.labels[KUEUE_QUEUE] == ADMIN_QUEUE, name
        assert made.status.succeeded == 1, (name, made.status)
        workload = workload_of(t, made.metadata.uid)
        assert workload is not None, f"Kueue has no Workload of Job {name}"
        admission = workload["status"]["admission"]
        assert admission["clusterQueue"] == t.kueue.cluster_queue, (name, admission)
        (assignment,) = admission["podSetAssignments"]
        product = made.metadata.labels[L.LABEL_GPU]
        assert product == label_value(GPU_H100), (name, product)
        assert assignment["flavors"][GPU_RESOURCE] == t.kueue.flavors[GPU_H100], (name, admission)
    report = batch.read_namespaced_job("nightly-report", t.a.namespace)
    assert report.spec.suspend is True
    assert workload_of(t, report.metadata.uid) is None


def workload_of(t: Tenancy, job_uid: str) -> Obj | None:
    """The Kueue Workload of a Job of A (None: Kueue does not queue it)."""
    items = t.custom.list_namespaced_custom_object(
        L.KUEUE_GROUP, "v1beta2", t.a.namespace, "workloads",
        label_selector=f"{L.LABEL_KUEUE_JOB_UID}={job_uid}",
    )["items"]  # fmt: skip
    return items[0] if items else None


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.id for a in ATTACKS])
def test_e2e_a_tenant_cannot_touch_another_namespace(tenancy: Tenancy, attack: Attack) -> None:
    t = tenancy
    started = time.monotonic()
    before = t.world()
    out = Outcome()
    try:
        attack.run(t, out)
        t.settle(*out.profiles)
        problems = [
            *out.problems,
            *(f"A's {d}" for d in damage(before, t.world(), out.allowed)),
            *untouched(t, out.planted),
        ]
    finally:
        clean(t, out)
        t.timings[attack.id] = time.monotonic() - started
    assert not problems, f"{attack.issue} {attack.what}:\n" + "\n".join(problems)


def clean(t: Tenancy, out: Outcome) -> None:
    """B deletes what it made; the operator has looked again before the next attack."""
    for name in out.profiles:
        t.tenant.delete("spsprofile", name)
    for name in out.profiles:
        t.wait_gone(t.b, name)
    kinds: dict[str, list[str]] = {}
    for kind, name in [*out.planted, *out.own]:
        kinds.setdefault(kind.lower(), []).append(name)
    for kind, names in kinds.items():
        t.tenant.delete(kind, *names)
    t.settle()

"""The operator at scale, on the local control plane (issues 10 and 18).

Prints a table: with 0, 500 and 2,000 idle SpsProfiles, the operator's CPU, RSS and the
rate of its requests to the API server (counted by the API server's own audit log, watches
included); the latency of each hop of a real profile (apply → Job, Job finished → table,
table → Deployment patched, rolled out → Ready), p50/p99 over repeated runs, with 0 and
2,000 profiles around; the time to delete 500 profiles; and with `--burst N`, N profiles
created at once, each with a running server of its own, until every one is Ready (each with
one Job and one table, its server running it: none lost, none duplicated).

    .venv/bin/python bench/operator_scale.py                      # this checkout's operator
    .venv/bin/python bench/operator_scale.py --operator /tmp/old/.venv/bin/sps-operator \
        --chart /tmp/old/charts/sps-operator --label before      # another build, side by side
    .venv/bin/python bench/operator_scale.py --sizes --hop-sizes --delete 0 --burst 50 \
        --flags=--gpu-debounce-seconds=2                         # 50 profiles at once only

An idle fleet is what an idle cluster looks like: each profile selects one SGLang
Deployment of its own, scaled to zero (scale-to-zero serving), except `--pending` whose
pod cannot be scheduled, `--crashing` whose server exits at start (CrashLoopBackOff) and
`--rolling` stuck mid-rollout (the new pods' image cannot be pulled, the old pod serves);
`--fleet none` is the old fleet, profiles that select nothing. The hop runs use a
one-replica SGLang Deployment (sps-sim at 40x) and a two-probe Diagonal sweep.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from sps_operator.constants import API_GROUP, API_VERSION, PLURAL
from sps_sim.costmodel import GPU_H100, GPU_H200
from sps_testbed import RealNodeCluster

SYSTEM_NS, IDLE_NS, HOP_NS, BURST_NS = "sps-system", "bench-idle", "bench-hops", "bench-burst"
RELEASE = "sps-bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


@dataclass
class Cluster:
    kubeconfig: Path
    api: client.ApiClient
    audit_log: Path
    kubectl: Callable[..., str]
    helm: Callable[..., str]


@contextmanager
def cluster(workdir: Path) -> Iterator[Cluster]:
    policy = workdir / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    audit_log = workdir / "audit.log"
    # The real-node test bed: pods run on kubelets from the images `make testbed` built.
    bed = RealNodeCluster(
        workdir / "bed",
        apiserver_args=[
            f"--audit-policy-file={policy}",
            f"--audit-log-path={audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",
        ],
    )
    bed.start()

    def kubectl(*args: str, input: str | None = None) -> str:
        return bed.kubectl(*args, input=input)

    try:
        api = config.new_client_from_config(str(bed.kubeconfig))
        yield Cluster(bed.kubeconfig, api, audit_log, kubectl, bed.helm)
    finally:
        bed.stop()


# --------------------------------------------------------------------------- the chart


def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


def split_rendered(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(CRDs, everything else) from `helm template` output."""
    docs = [d for d in yaml.safe_load_all(text) if d]
    crds = [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
    return crds, [d for d in docs if d.get("kind") != "CustomResourceDefinition"]


def chart_operator(objects: list[dict[str, Any]]) -> tuple[str, str]:
    """(service account, its namespace) of the chart's Deployment."""
    (deployment,) = [o for o in objects if o.get("kind") == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    return str(pod["serviceAccountName"]), str(deployment["metadata"]["namespace"])


def token_kubeconfig(admin: dict[str, Any], token: str, user: str) -> dict[str, Any]:
    """A kubeconfig for the admin's cluster that authenticates with a bearer token."""
    cluster = admin["clusters"][0]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
        "current-context": user,
    }


def install(c: Cluster, chart: Path) -> tuple[str, str]:
    """The CRD and the chart's RBAC (namespaces mode, the bench namespaces); returns the
    operator's (service account, its namespace)."""
    for ns in (SYSTEM_NS, IDLE_NS, HOP_NS, BURST_NS):
        c.kubectl("create", "namespace", ns)
    rendered = c.helm(
        "template", RELEASE, str(chart),
        "--namespace", SYSTEM_NS, "--kube-version", "v1.36.3", "--include-crds",
        "--set", "watch.mode=namespaces",
        "--set", f"watch.namespaces={{{IDLE_NS},{HOP_NS},{BURST_NS}}}",
        "--set", "replicaCount=0",
    )  # fmt: skip
    crds, rest = split_rendered(rendered)
    c.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(crds))
    c.kubectl("wait", "--for=condition=Established", "crd/spsprofiles.sps.dev", "--timeout=60s")
    c.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(rest))
    account, ns = chart_operator(rest)
    return account, ns


def start_operator(
    c: Cluster, account: str, ns: str, exe: str, flags: list[str], workdir: Path
) -> subprocess.Popen[bytes]:
    token = json.loads(
        c.kubectl("create", "token", account, "-n", ns, "--duration=24h", "-o", "json")
    )["status"]["token"]
    admin = yaml.safe_load(c.kubeconfig.read_text())
    kubeconfig = workdir / "operator.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(token_kubeconfig(admin, token, account)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(kubeconfig)
    argv = [exe, "run", "-n", IDLE_NS, "-n", HOP_NS, "-n", BURST_NS, "--metrics-port", "0", *flags]
    log = (workdir / "operator.log").open("ab")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)


# --------------------------------------------------------------------------- measurements


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime, all threads


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def operator_requests(audit_log: Path, user: str, since: float, until: float) -> int:
    """Requests the operator's user made, received within [since, until] (epoch seconds)."""
    seen: set[str] = set()
    with audit_log.open() as lines:
        for line in lines:
            if f'"{user}"' not in line:
                continue
            event = json.loads(line)
            if (event.get("user") or {}).get("username") != user:
                continue
            stamp = str(event["requestReceivedTimestamp"]).replace("Z", "+00:00")
            if since <= datetime.fromisoformat(stamp).timestamp() <= until:
                seen.add(event["auditID"])
    return len(seen)


def idle_profile(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "SpsProfile",
        "metadata": {"name": name, "namespace": IDLE_NS},
        "spec": {"selector": {"matchLabels": {"bench": name}}},
    }


@dataclass(frozen=True)
class Fleet:
    """What the idle profiles select: `kind` "targets" (a Deployment each: `pending`,
    `crashing` and `rolling` of them so, the rest scaled to zero) or "none"."""

    kind: str = "targets"
    pending: int = 10
    crashing: int = 5
    rolling: int = 5

    def state(self, i: int) -> str:
        if self.kind == "none":
            return "none"
        for state, upto in (
            ("pending", self.pending),
            ("crashing", self.pending + self.crashing),
            ("rolling", self.pending + self.crashing + self.rolling),
        ):
            if i < upto:
                return state
        return "zero"


NO_SUCH_PRODUCT = "NVIDIA-B200"  # no node of the bed has it: the pod stays Pending
MISSING_IMAGE = "lmsysorg/sglang:no-such-tag"  # the rollout to it never completes


def fleet_deployment(name: str, state: str) -> dict[str, Any]:
    """The Deployment idle profile `name` selects, in `state`."""
    dep = server_deployment(name)
    dep["metadata"]["labels"] = {"bench": name}
    dep["spec"]["selector"] = {"matchLabels": {"bench": name}}
    pod = dep["spec"]["template"]
    pod["metadata"]["labels"] = {"bench": name}
    container = pod["spec"]["containers"][0]
    container.pop("resources")  # no GPU taken: the bed has 32 and the fleet is idle
    dep["spec"]["strategy"] = {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    if state == "zero":
        dep["spec"]["replicas"] = 0
    elif state == "pending":
        pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": NO_SUCH_PRODUCT}
    elif state == "crashing":
        container["env"] = [{"name": "SPS_SIM_TIME_SCALE", "value": "not-a-number"}]
    return dep


def create_idle(api: client.ApiClient, fleet: Fleet, start: int, stop: int) -> None:
    """Profiles `start`..`stop` and, for a fleet of targets, their Deployments first (a
    rolling one settled on its first image, then moved to an image that does not exist)."""
    apps, custom = client.AppsV1Api(api), client.CustomObjectsApi(api)

    def deployment(i: int) -> None:
        name, state = f"idle-{i:05d}", fleet.state(i)
        if state != "none":
            body: Any = fleet_deployment(name, state)
            apps.create_namespaced_deployment(IDLE_NS, body)

    def roll(i: int) -> None:
        name = f"idle-{i:05d}"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            dep = raw(apps.read_namespaced_deployment, name, IDLE_NS)
            if (dep.get("status") or {}).get("availableReplicas", 0) >= 1:
                break
            time.sleep(1)
        else:
            raise RuntimeError(f"the rolling Deployment {name} never became available")
        patch: Any = {
            "spec": {
                "template": {"spec": {"containers": [{"name": "sglang", "image": MISSING_IMAGE}]}}
            }
        }
        apps.patch_namespaced_deployment(name, IDLE_NS, patch)

    def profile(i: int) -> None:
        custom.create_namespaced_custom_object(
            API_GROUP, API_VERSION, IDLE_NS, PLURAL, idle_profile(f"idle-{i:05d}")
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(deployment, range(start, stop)))
        list(pool.map(roll, [i for i in range(start, stop) if fleet.state(i) == "rolling"]))
        list(pool.map(profile, range(start, stop)))


def wait_all_observed(custom: client.CustomObjectsApi, count: int, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        items: Any = custom.list_namespaced_custom_object(API_GROUP, API_VERSION, IDLE_NS, PLURAL)
        done = sum(1 for p in items["items"] if (p.get("status") or {}).get("observedGeneration"))
        if done >= count:
            return time.monotonic() - started
        time.sleep(1)
    return float("nan")


@dataclass
class Hops:
    apply_to_job: list[float] = field(default_factory=list)
    job_to_table: list[float] = field(default_factory=list)
    table_to_patch: list[float] = field(default_factory=list)
    rolled_to_ready: list[float] = field(default_factory=list)
    apply_to_ready: list[float] = field(default_factory=list)
    job_running: list[float] = field(default_factory=list)  # real work: the Job itself


def server_deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    args = ["--model-path", "sim/dspark-8b", "--speculative-algorithm", "DSPARK",
            "--speculative-dspark-block-size", "3", "--cuda-graph-max-bs", "16",
            "--max-running-requests", "16", "--host", "0.0.0.0", "--port", "30000"]  # fmt: skip
    container = {
        "name": "sglang",
        "image": "lmsysorg/sglang:v0.5.16",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": args,
        "env": [{"name": "SPS_SIM_TIME_SCALE", "value": "40"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": 30000}, "periodSeconds": 1},
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": GPU_H100},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [container],
                },
            },
        },
    }


def server_profile(name: str, namespace: str) -> dict[str, Any]:
    """The profile of server_deployment(name): a two-probe Diagonal sweep."""
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "SpsProfile",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "table": {"kind": "Diagonal", "sweep": {"batchSizes": [1, 2], "vocabSize": 32000}},
        },
    }


def raw(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A client call's JSON body as plain dicts."""
    return json.loads(call(*args, _preload_content=False, **kwargs).data)


def rolled(dep: dict[str, Any]) -> bool:
    status = dep.get("status") or {}
    return (
        status.get("observedGeneration", 0) >= dep["metadata"]["generation"]
        and status.get("updatedReplicas", 0) >= 1
        and status.get("availableReplicas", 0) >= 1
        and status.get("replicas", 0) <= 1
    )


def one_hop_run(api: client.ApiClient, name: str, hops: Hops, timeout: float = 180) -> None:
    """Create a settled Deployment, then its profile; time each hop until Ready."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    batch, custom = client.BatchV1Api(api), client.CustomObjectsApi(api)
    body: Any = server_deployment(name)
    apps.create_namespaced_deployment(HOP_NS, body)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # settled first: placement is then immediate
        dep = raw(apps.read_namespaced_deployment, name, HOP_NS)
        if (dep.get("status") or {}).get("availableReplicas", 0) >= 1:
            break
        time.sleep(0.2)
    else:
        raise RuntimeError(f"the server Deployment {name} never became available")
    t: dict[str, float] = {"apply": time.monotonic()}
    custom.create_namespaced_custom_object(
        API_GROUP, API_VERSION, HOP_NS, PLURAL, server_profile(name, HOP_NS)
    )
    mine = f"sps.dev/profile={name}"
    while time.monotonic() < deadline and "ready" not in t:
        now = time.monotonic()
        jobs = raw(batch.list_namespaced_job, HOP_NS, label_selector=mine)["items"]
        if jobs:
            t.setdefault("job", now)
        conditions = [c for j in jobs for c in (j.get("status") or {}).get("conditions") or []]
        if any(c["type"] == "Complete" and c["status"] == "True" for c in conditions):
            t.setdefault("job_done", now)
        tables = raw(
            core.list_namespaced_config_map,
            HOP_NS,
            label_selector=f"{mine},sps.dev/component=table",
        )["items"]
        if tables:
            t.setdefault("table", now)
        dep = raw(apps.read_namespaced_deployment, name, HOP_NS)
        annotations = dep["spec"]["template"].get("metadata", {}).get("annotations") or {}
        if annotations.get("sps.dev/table-hash"):
            t.setdefault("patch", now)
        if "patch" in t and rolled(dep):
            t.setdefault("rolled", now)
        obj = raw(custom.get_namespaced_custom_object, API_GROUP, API_VERSION, HOP_NS, PLURAL, name)
        conds = (obj.get("status") or {}).get("conditions") or []
        if "rolled" in t and any(c["type"] == "Ready" and c["status"] == "True" for c in conds):
            t["ready"] = now
        time.sleep(0.05)
    if "ready" not in t:
        raise RuntimeError(f"hop run {name} did not become Ready: {sorted(t)}")
    hops.apply_to_job.append(t["job"] - t["apply"])
    hops.job_to_table.append(t["table"] - t["job_done"])
    hops.table_to_patch.append(t["patch"] - t["table"])
    hops.rolled_to_ready.append(t["ready"] - t["rolled"])
    hops.apply_to_ready.append(t["ready"] - t["apply"])
    hops.job_running.append(t["job_done"] - t["job"])
    custom.delete_namespaced_custom_object(API_GROUP, API_VERSION, HOP_NS, PLURAL, name)
    apps.delete_namespaced_deployment(name, HOP_NS)


def ready(profile: dict[str, Any]) -> bool:
    conditions = (profile.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def burst(api: client.ApiClient, count: int, timeout: float = 1800) -> Rows:
    """`count` servers (on both GPU products, no GPU asked for: more of them than the bed
    has GPUs; sps-sim at 200x) and a profile each, all created at once; how long until
    every profile is Ready, and that each ran once and serves its one table (raises
    otherwise)."""
    apps, batch = client.AppsV1Api(api), client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)
    names = [f"burst-{count}-{i}" for i in range(count)]

    def create(name: str) -> None:
        dep: Any = server_deployment(name)
        pod = dep["spec"]["template"]["spec"]
        if int(name.rsplit("-", 1)[1]) % 2:  # every node, both products
            pod["nodeSelector"] = {"nvidia.com/gpu.product": GPU_H200}
        container = pod["containers"][0]
        container.pop("resources")
        container["env"] = [{"name": "SPS_SIM_TIME_SCALE", "value": "200"}]
        apps.create_namespaced_deployment(BURST_NS, dep)

    def profile(name: str) -> None:
        body = server_profile(name, BURST_NS)
        custom.create_namespaced_custom_object(API_GROUP, API_VERSION, BURST_NS, PLURAL, body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, names))
        started = time.monotonic()
        list(pool.map(profile, names))
    wanted = set(names)
    first: float | None = None
    while time.monotonic() - started < timeout:
        items = raw(custom.list_namespaced_custom_object, API_GROUP, API_VERSION, BURST_NS, PLURAL)
        done = {p["metadata"]["name"] for p in items["items"] if ready(p)} & wanted
        if done and first is None:
            first = time.monotonic() - started
        if done == wanted:
            break
        time.sleep(1)
    else:
        raise RuntimeError(f"burst of {count}: not Ready after {timeout:.0f} s: {len(done)} were")
    took = time.monotonic() - started
    jobs = raw(batch.list_namespaced_job, BURST_NS)["items"]
    runs: dict[str, list[str]] = {}
    for job in jobs:
        runs.setdefault(job["metadata"]["labels"].get("sps.dev/profile", ""), []).append(
            job["metadata"]["name"]
        )
    for p in items["items"]:
        name = p["metadata"]["name"]
        (table,) = p["status"]["tables"]
        dep = raw(apps.read_namespaced_deployment, name, BURST_NS)
        running = (dep["spec"]["template"].get("metadata") or {}).get("annotations") or {}
        if runs.get(name) != [table["run"]] or running.get("sps.dev/table-hash") != table["hash"]:
            raise RuntimeError(f"{name}: runs {runs.get(name)}, table {table}, serving {running}")
    for name in names:
        custom.delete_namespaced_custom_object(API_GROUP, API_VERSION, BURST_NS, PLURAL, name)
        apps.delete_namespaced_deployment(name, BURST_NS)
    return [
        (f"{count} profiles at once: first Ready", f"{first:.0f} s"),
        (f"{count} profiles at once: all Ready, one run and one table each", f"{took:.0f} s"),
    ]


def delete_all_idle(custom: client.CustomObjectsApi, count: int, timeout: float) -> float:
    names = [f"idle-{i:05d}" for i in range(count)]
    started = time.monotonic()

    def one(name: str) -> None:
        try:
            custom.delete_namespaced_custom_object(API_GROUP, API_VERSION, IDLE_NS, PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, names))
    wanted = set(names)
    while time.monotonic() - started < timeout:
        items: Any = custom.list_namespaced_custom_object(API_GROUP, API_VERSION, IDLE_NS, PLURAL)
        if not wanted & {p["metadata"]["name"] for p in items["items"]}:
            return time.monotonic() - started
        time.sleep(0.2)
    return float("nan")


def finalizer_latency(audit_log: Path, user: str, namespace: str) -> list[float]:
    """Per deleted profile: seconds from its DELETE's response to the operator's last write
    to it (the finalizer's removal), from the API server's audit log."""
    deleted: dict[str, float] = {}
    written: dict[str, float] = {}
    with audit_log.open() as lines:
        for line in lines:
            if '"spsprofiles"' not in line or '"ResponseComplete"' not in line:
                continue
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if ref.get("namespace") != namespace or not ref.get("name"):
                continue
            received = str(event["requestReceivedTimestamp"]).replace("Z", "+00:00")
            answered = str(event["stageTimestamp"]).replace("Z", "+00:00")
            if event["verb"] == "delete":
                deleted[ref["name"]] = datetime.fromisoformat(answered).timestamp()
            elif (event.get("user") or {}).get("username") == user and event["verb"] in (
                "patch",
                "update",
            ):
                written[ref["name"]] = datetime.fromisoformat(received).timestamp()
    return [written[n] - t for n, t in deleted.items() if written.get(n, 0) >= t]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


Rows = list[tuple[str, str]]


def measure_idle(c: Cluster, pid: int, user: str, size: int, seconds: float, settle: float) -> Rows:
    time.sleep(settle)  # after the creations: debounces, the first runs of the fleet
    cpu0, t0, w0 = cpu_seconds(pid), time.monotonic(), time.time()
    time.sleep(seconds)
    cpu1, t1, w1 = cpu_seconds(pid), time.monotonic(), time.time()
    requests = operator_requests(c.audit_log, user, w0, w1)
    cpu = (cpu1 - cpu0) / (t1 - t0)
    per_profile = f" ({cpu / size * 1000:.3f} ‰ per profile)" if size else ""
    return [
        (f"{size} idle profiles: operator CPU", f"{cpu:.1%} of a core{per_profile}"),
        (f"{size} idle profiles: RSS", f"{rss_mib(pid):.0f} MiB"),
        (f"{size} idle profiles: API requests", f"{requests / (w1 - w0):.2f} req/s"),
    ]


def measure_hops(c: Cluster, size: int, runs: int) -> Rows:
    hops = Hops()
    for i in range(runs):
        one_hop_run(c.api, f"hop-{size}-{i}", hops)
    return [
        (f"{size} profiles: {label} p50 / p99", f"{pct(v, 0.5):.2f} s / {pct(v, 0.99):.2f} s")
        for label, v in (
            ("apply → Job", hops.apply_to_job),
            ("Job finished → table", hops.job_to_table),
            ("table → Deployment patched", hops.table_to_patch),
            ("rolled out → Ready", hops.rolled_to_ready),
            ("apply → Ready (whole run)", hops.apply_to_ready),
            ("of which the Job ran", hops.job_running),
        )
    ]


def run(args: argparse.Namespace, workdir: Path) -> Rows:
    rows: Rows = []
    with cluster(workdir) as c:
        account, account_ns = install(c, args.chart)
        user = f"system:serviceaccount:{account_ns}:{account}"
        proc = start_operator(c, account, account_ns, args.operator, args.flags, workdir)
        custom = client.CustomObjectsApi(c.api)
        fleet = Fleet(args.fleet, args.pending, args.crashing, args.rolling)
        created = 0
        try:
            for size in args.sizes:
                if size > created:
                    create_idle(c.api, fleet, created, size)
                    took = wait_all_observed(custom, size, timeout=1800)
                    rows.append(
                        (f"{size} profiles: all reconciled after creation", f"{took:.0f} s")
                    )
                    created = size
                rows += measure_idle(
                    c, proc.pid, user, size, args.idle_seconds, args.settle_seconds
                )
                if size in args.hop_sizes:
                    rows += measure_hops(c, size, args.hops)
            for count in args.burst:
                rows += burst(c.api, count)
            if args.delete:
                count = min(args.delete, created)
                took = delete_all_idle(custom, count, 600)
                rows.append((f"deleting {count} profiles: all gone after", f"{took:.1f} s"))
                time.sleep(2)  # the audit log is written asynchronously
                latency = finalizer_latency(c.audit_log, user, IDLE_NS)
                rows.append(
                    (
                        f"deleting {count} profiles: DELETE → finalizer removed p50/p99/max",
                        f"{pct(latency, 0.5):.2f} s / {pct(latency, 0.99):.2f} s / "
                        f"{max(latency, default=float('nan')):.2f} s",
                    )
                )
        except Exception:
            proc.send_signal(signal.SIGUSR1)  # the operator prints its threads' stacks
            time.sleep(1)
            log = (workdir / "operator.log").read_text(errors="replace").splitlines()
            print("--- operator log (tail) ---\n" + "\n".join(log[-150:]), file=sys.stderr)
            raise
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[0, 500, 2000])
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=60.0,
        help="wait after the creations before measuring (past the GPU debounce)",
    )
    parser.add_argument(
        "--fleet",
        choices=("targets", "none"),
        default="targets",
        help="idle profiles select a Deployment each (scaled to zero, pending, crash-looping, "
        "mid-rollout) or nothing",
    )
    parser.add_argument("--pending", type=int, default=10, help="targets with a Pending pod")
    parser.add_argument("--crashing", type=int, default=5, help="crash-looping targets")
    parser.add_argument("--rolling", type=int, default=5, help="targets stuck mid-rollout")
    parser.add_argument("--hop-sizes", type=int, nargs="*", default=[0, 2000])
    parser.add_argument("--hops", type=int, default=5, help="hop runs per size")
    parser.add_argument("--delete", type=int, default=500)
    parser.add_argument(
        "--burst",
        type=int,
        nargs="*",
        default=[],
        help="profiles created at once, each with a running server, until all are Ready",
    )
    parser.add_argument("--operator", default=str(Path(sys.executable).with_name("sps-operator")))
    parser.add_argument("--flags", action="append", default=[], help="more operator flags")
    parser.add_argument("--label", default="this checkout")
    parser.add_argument(
        "--chart",
        type=Path,
        default=repo_root() / "charts" / "sps-operator",
        help="the chart (CRD and RBAC) matching --operator's build",
    )
    parser.add_argument("--workdir", type=Path, help="keep the cluster's files and logs here")
    args = parser.parse_args(argv)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        rows = run(args, args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="sps-scale-") as tmp:
            rows = run(args, Path(tmp))
    width = max(len(r[0]) for r in rows)
    print(f"\noperator: {args.label} ({args.operator} {' '.join(args.flags)})")
    if args.fleet == "targets":
        print(
            f"  fleet: each profile selects a Deployment; {args.pending} pending, "
            f"{args.crashing} crash-looping, {args.rolling} mid-rollout, the rest scaled to zero"
        )
    for what, value in rows:
        print(f"  {what:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The end-to-end test bed: the operator as the chart's Deployment from its image, and
helpers that build SGLang Deployments and SpsProfiles and read their state.

Everything runs on the real-node test bed (kubelets, containerd, runc): the operator is
`helm install`ed per test (namespaces mode, watching the test's namespace, its own
release in the module's operator namespace; the tenant suite installs one release in
cluster mode, the chart's default, for its whole module), SGLang Deployments run the stand-in image
(`sps-sim`, fast: SPS_SIM_TIME_SCALE in the pod), profiling Jobs the operator's image. A
test sets the operator's flags (`operator.extraArgs`), moves its clock (a host directory
mounted through `extraVolumes`, read by `--clock-offset-file`), reads its log
(`kubectl logs`) and metrics (its pod's port), scales it, and kills it (SIGKILL through
the node's containerd, then the pod force-deleted).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from e2e_cluster import E2eCluster
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families

from sps_operator.api.legacy_tables import without_v1_twins
from waiting import wait_crd_established, wait_for

ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION, PLURAL = "sps.dev", "v1alpha1", "spsprofiles"
CRD = f"{PLURAL}.{GROUP}"
SIM_TIME_SCALE = "40"
TABLE_PATH = "/etc/sps/table/table.json"
CLOCK_MOUNT = "/var/run/sps-clock"
# The flags every test's operator starts with: a short GPU debounce, a verbose plain log,
# the clock the test can move. A test's own `extra_args` come after (the last one wins).
BASE_ARGS = (
    "--resync-seconds=60",
    # Tests trigger several refreshes in a row; the chart's minimum (1 h) would hold them.
    "--min-refresh-interval-seconds=0",
    "--gpu-debounce-seconds=2",
    # A run queued in Kueue looks at Kueue's words again every 3 s, not 30 s: the Kueue
    # scenarios' steps each waited out one 30 s recheck (docs/dev-cluster.md, budgets).
    "--kueue-recheck-seconds=3",
    f"--clock-offset-file={CLOCK_MOUNT}/offset",
)


# ----------------------------------------------------------------------------- helpers


def ready_true(obj: dict[str, Any]) -> bool:
    """Whether `obj`'s status (a pod's, a profile's) has the condition Ready=True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@dataclass
class OperatorRelease:
    """The chart installed (on the first `start`) as release `name` in `namespace`,
    watching `watched` only (namespaces mode), or every namespace (cluster mode) when
    `watched` is None."""

    cluster: E2eCluster
    namespace: str  # the release's namespace (its pods, ServiceAccount, Lease)
    watched: str | None
    clock_dir: Path  # on the host; mounted into the operator's pods
    name: str = field(default_factory=lambda: f"sps-operator-{secrets.token_hex(3)}")
    replicas: int = 1
    extra_args: list[str] = field(default_factory=list)
    # More chart values (`key=value`, as for `helm --set`), e.g. the admin's jobDefaults.
    extra_values: list[str] = field(default_factory=list)
    installed: bool = False
    killed_logs: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.clock_dir.mkdir(parents=True, exist_ok=True)
        self.clock_dir.chmod(0o755)  # the operator runs as 65532
        self.set_clock_offset(0)

    @property
    def selector(self) -> str:
        return f"app.kubernetes.io/instance={self.name}"

    @property
    def lease(self) -> str:
        """The Lease its replicas elect a leader on (the chart's fullname)."""
        return self.name

    def set_clock_offset(self, seconds: float) -> None:
        """Seconds the operator adds to its wall clock from its next pass on."""
        path = self.clock_dir / "offset"
        path.write_text(str(seconds))
        path.chmod(0o644)

    def values(self) -> list[str]:
        args = [*BASE_ARGS, *self.extra_args]
        watch = (
            ["watch.mode=cluster"]
            if self.watched is None
            else ["watch.mode=namespaces", f"watch.namespaces={{{self.watched}}}"]
        )
        return [
            f"replicaCount={self.replicas}",
            "crds.enabled=false",  # one release per test: the session applies the CRD
            *watch,
            *self.extra_values,
            "operator.logLevel=verbose",
            "operator.logFormat=plain",
            # The test entry point: the only one that takes --clock-offset-file and
            # --pause-before-write (`sps-operator run` refuses them).
            "operator.command={python,-m,sps_operator.controller.testing_main}",
            f"operator.extraArgs={{{','.join(args)}}}",
            "extraVolumes[0].name=clock",
            f"extraVolumes[0].hostPath.path={self.clock_dir}",
            "extraVolumes[0].hostPath.type=Directory",
            "extraVolumeMounts[0].name=clock",
            f"extraVolumeMounts[0].mountPath={CLOCK_MOUNT}",
            "extraVolumeMounts[0].readOnly=true",
        ]

    def start(self) -> None:
        """Install the release, or scale it back to `replicas` after `stop`/`kill`."""
        if not self.installed:
            sets = [arg for value in self.values() for arg in ("--set", value)]
            self.cluster.helm(
                "install", self.name, *self.cluster.bed.chart_args(), "--namespace",
                self.namespace, *sets,
            )  # fmt: skip
            self.installed = True
        else:
            self.scale(self.replicas)
        self.wait_up()

    def wait_up(self, timeout: float = 600) -> None:
        """Until each of `replicas` pods is Ready (its process serves its health endpoint,
        leading or standing by). A test's own waits then time what the operator does, not
        how long the bed takes to pull, unpack and import it: under make test's load that
        took over 3 min once, and a test's first 180 s wait ran out with an empty log."""

        def up() -> bool:
            failure = self.failure()
            if failure:
                raise AssertionError(failure)
            ready = [pod for pod in self.pods() if ready_true(pod)]
            return len(ready) >= self.replicas

        wait_for(f"{self.replicas} operator replica(s) Ready", up, timeout=timeout, interval=1)

    def upgrade(self) -> None:
        """`helm upgrade` to the current values (e.g. other `extra_args`): the pods restart
        with them. Replicas are left as they are (`start` scales back after `kill`)."""
        sets = [arg for value in self.values() for arg in ("--set", value)]
        self.cluster.helm(
            "upgrade", self.name, *self.cluster.bed.chart_args(), "--namespace",
            self.namespace, *sets,
        )  # fmt: skip

    def wait_log(self, text: str, timeout: float = 180) -> str:
        """The first log line of the running replica that contains `text`."""

        def line() -> str | None:
            pods = self.pods()
            log = self.pod_log(pods[0]["metadata"]["name"], tail=2000) if pods else ""
            return next((ln for ln in log.splitlines() if text in ln), None)

        found: str = wait_for(f"{text!r} in the operator's log", line, timeout, interval=1)
        return found

    def scale(self, replicas: int) -> None:
        self.cluster.kubectl(
            "scale", "deployment", self.name, "-n", self.namespace, f"--replicas={replicas}"
        )

    @functools.cached_property
    def core(self) -> client.CoreV1Api:
        """The API client, not kubectl, for what tests poll (a kubectl process per poll,
        twice a second, took CPU the bed needs)."""
        return client.CoreV1Api(self.cluster.bed.api_client())

    def all_pods(self) -> list[dict[str, Any]]:
        """Its pods, those being deleted too."""
        resp = self.core.list_namespaced_pod(
            self.namespace, label_selector=self.selector, _preload_content=False
        )
        return list(json.loads(resp.data)["items"])

    def pods(self) -> list[dict[str, Any]]:
        return [p for p in self.all_pods() if not p["metadata"].get("deletionTimestamp")]

    def wait_gone(self, pods: list[str], timeout: float = 60) -> None:
        def gone() -> bool:
            return not {p["metadata"]["name"] for p in self.all_pods()} & set(pods)

        wait_for(f"operator pods {pods} gone", gone, timeout=timeout)

    def stop(self) -> None:
        """Scale to zero and wait until its pods are gone (SIGTERM: a clean shutdown)."""
        if not self.installed:
            return
        names = [p["metadata"]["name"] for p in self.pods()]
        self.scale(0)
        self.wait_gone(names, timeout=90)

    def kill(self, pod: str | None = None) -> None:
        """SIGKILL an operator with no chance to clean up, and delete its pod at once.
        `pod` None: every replica, and the release stays down until `start`; a pod name:
        that replica only (the Deployment replaces it, as after a node failure)."""
        nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in self.pods()}
        targets = list(nodes) if pod is None else [pod]
        for name in targets:
            self.killed_logs.append(self.pod_log(name))
            self.cluster.bed.kill_pod_containers(self.namespace, name)
        if pod is None:
            self.scale(0)
        self.cluster.kubectl("delete", "pod", "-n", self.namespace, *targets, "--force",
                             "--grace-period=0", "--wait=false", check=False)  # fmt: skip
        self.wait_gone(targets)
        # The kubelet restarts a killed container until it has seen its pod deleted, and a
        # force-deleted pod's containers outlive its API object: a restarted operator (the
        # Lease's holder by name) acted on for seconds under load (ci19: it gave a borrowed
        # replica back while the test had it killed). Killed again until none runs.
        bed = self.cluster.bed

        def none_running() -> bool:
            return not sum(
                bed.kill_containers_of(node, self.namespace, name)
                for name in targets
                if (node := nodes.get(name))
            )

        wait_for(f"no container of {targets} running", none_running, timeout=60, interval=0.2)

    def uninstall(self) -> None:
        if self.installed:
            self.cluster.helm("uninstall", self.name, "--namespace", self.namespace,
                              check=False)  # fmt: skip
            self.installed = False

    def failure(self) -> str | None:
        """Why its pods cannot run (a container that crashed or cannot start), if so."""
        for pod in self.pods():
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                waiting = (status.get("state") or {}).get("waiting") or {}
                if status.get("restartCount") or waiting.get("reason") in {
                    "CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff",
                    "CreateContainerConfigError", "CreateContainerError",
                }:  # fmt: skip
                    return f"operator pod {pod['metadata']['name']}: {status}"
        return None

    def get(self, port: int, path: str, pod: str | None = None) -> httpx.Response:
        """GET `path` on `port` of `pod` (default: the only running replica)."""
        pods = [p for p in self.pods() if pod in (None, p["metadata"]["name"])]
        assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
        return httpx.get(f"http://{pods[0]['status']['podIP']}:{port}{path}", timeout=10)

    def metrics(self, pod: str | None = None) -> str:
        return self.get(9090, "/metrics", pod).text

    def passes(self) -> dict[tuple[str, str], float]:
        """Reconcile passes so far per (namespace, profile), from the running replica."""
        return {
            (s.labels["namespace"], s.labels["profile"]): s.value
            for family in text_string_to_metric_families(self.metrics())
            for s in family.samples
            if s.name == "sps_reconcile_passes_total"
        }

    def pod_log(self, pod: str, tail: int = 300) -> str:
        try:
            text = self.core.read_namespaced_pod_log(
                pod, self.namespace, container="operator", timestamps=True, tail_lines=tail
            )
        except ApiException as exc:  # not started yet, or gone: what kubectl would print
            text = f"(no log: {exc.status} {exc.reason})"
        return f"==> {pod} <==\n{str(text).rstrip()}"

    def log(self, tail: int = 120) -> str:
        """The log of every replica (and of those killed), newest last."""
        running = [self.pod_log(p["metadata"]["name"], tail) for p in self.pods()]
        return "\n".join([*self.killed_logs, *running])


@dataclass
class Env:
    cluster: E2eCluster
    api: ApiClient
    namespace: str
    operator: OperatorRelease

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def profile(self, name: str = "sps") -> dict[str, Any]:
        """The SpsProfile, its `status.tables` as the operator reads them: without the
        entries it lists for 0.1.0 (api/legacy_tables.py; `stored_profile` has them)."""
        obj = self.stored_profile(name)
        status = obj.get("status") or {}
        if "tables" in status:
            status["tables"] = without_v1_twins(status["tables"])
        return obj

    def stored_profile(self, name: str = "sps") -> dict[str, Any]:
        """The SpsProfile as stored, with the version-1 twins (what 0.1.0 reads)."""
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name
        )
        return obj

    def delete_profile(self, name: str = "sps", timeout: float = 120) -> None:
        """Delete the SpsProfile and wait until it is gone (its finalizer done)."""
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

        def gone() -> bool:
            try:
                self.profile(name)
            except ApiException as exc:
                return exc.status == 404
            return False

        wait_for(f"the SpsProfile {name} gone (its finalizer done)", gone, timeout=timeout)

    def condition(self, type_: str, name: str = "sps") -> dict[str, Any]:
        status = self.profile(name).get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})

    def deployment(self, name: str = "server") -> dict[str, Any]:
        resp = self.apps.read_namespaced_deployment(name, self.namespace, _preload_content=False)
        return dict(json.loads(resp.data))

    def jobs(self) -> list[dict[str, Any]]:
        resp = self.batch.list_namespaced_job(
            self.namespace, label_selector="sps.dev/profile=sps", _preload_content=False
        )
        return list(json.loads(resp.data)["items"])

    def config_map(self, name: str) -> dict[str, Any]:
        resp = self.core.read_namespaced_config_map(name, self.namespace, _preload_content=False)
        return dict(json.loads(resp.data))

    def pods(self, selector: str) -> list[dict[str, Any]]:
        resp = self.core.list_namespaced_pod(
            self.namespace, label_selector=selector, _preload_content=False
        )
        return list(json.loads(resp.data)["items"])

    def diagnostics(self) -> str:
        parts = [f"--- operator log ---\n{self.operator.log()}"]
        with contextlib.suppress(Exception):
            parts.append("--- profile ---\n" + yaml.safe_dump(self.profile().get("status")))
        return "\n".join(parts)


def server_deployment(
    gpu: str, name: str = "server", image: str = "lmsysorg/sglang:v0.5.16", env: dict | None = None
) -> dict[str, Any]:
    container_env = {
        "SGLANG_RAGGED_VERIFY_MODE": "compact",
        "SPS_SIM_TIME_SCALE": SIM_TIME_SCALE,
        **(env or {}),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            # `deploy` selects this one Deployment (a profile's selector reads these).
            "labels": {"app": "sglang", "deploy": name, "app.kubernetes.io/instance": "argo-app"},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "sglang", "deploy": name}},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {"app": "sglang", "deploy": name}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": gpu},
                    "terminationGracePeriodSeconds": 2,
                    "containers": [
                        {
                            "name": "sglang",
                            "image": image,
                            "command": ["python3", "-m", "sglang.launch_server"],
                            "args": [
                                "--model-path",
                                "sim/dspark-8b",
                                "--tp",
                                "1",
                                "--speculative-algorithm",
                                "DSPARK",
                                "--speculative-dspark-block-size",
                                "3",
                                "--cuda-graph-max-bs",
                                "16",
                                "--max-running-requests",
                                "16",
                                "--host",
                                "0.0.0.0",
                                "--port",
                                "30000",
                            ],
                            "env": [{"name": k, "value": v} for k, v in container_env.items()],
                            "ports": [{"containerPort": 30000, "name": "http"}],
                            "readinessProbe": {
                                "httpGet": {"path": "/health", "port": 30000},
                                "periodSeconds": 1,
                            },
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            },
        },
    }


def sps_profile(kind: str = "Diagonal", name: str = "sps", **spec: Any) -> dict[str, Any]:
    sweep: dict[str, Any] = {
        "batchSizes": [1, 2, 4, 8],
        "ciRelWidth": 0.05,
        "repeats": 1,
        "vocabSize": 32000,
    }
    if kind == "Additive":
        sweep["fracs"] = [0.25, 0.5, 1.0]
    body: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "sglang"}},
        "serverContainer": "sglang",
        "table": {"kind": kind, "sweep": sweep},
        "job": {"activeDeadlineSeconds": 600},
    }
    body.update(spec)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SpsProfile",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/instance": "argo-app"}},
        "spec": body,
    }


def tables(env: Env) -> list[dict[str, Any]]:
    """The profile's tables as the operator reads them (no version-1 twins for 0.1.0)."""
    return list((env.profile().get("status") or {}).get("tables") or [])


def table_for(env: Env, gpu: str) -> dict[str, Any] | None:
    return next((t for t in tables(env) if t["gpuProduct"] == gpu), None)


def running_table_hash(env: Env) -> str | None:
    template = env.deployment()["spec"]["template"]
    return ((template.get("metadata") or {}).get("annotations") or {}).get("sps.dev/table-hash")


def rolled_to(env: Env, table_hash: str) -> bool:
    dep = env.deployment()
    status = dep.get("status", {})
    return (
        running_table_hash(env) == table_hash
        and status.get("observedGeneration", 0) >= dep["metadata"]["generation"]
        and status.get("updatedReplicas", 0) == 1
        and status.get("availableReplicas", 0) == 1
        and status.get("replicas", 0) == 1
    )


def serving_pod_info(env: Env, table_hash: str) -> dict[str, Any]:
    """/server_info of the Ready serving pod that runs `table_hash`."""

    def ready_pod() -> dict[str, Any] | None:
        for pod in env.pods("deploy=server"):
            ann = pod["metadata"].get("annotations") or {}
            if (
                ann.get("sps.dev/table-hash") == table_hash
                and ready_true(pod)
                and not pod["metadata"].get("deletionTimestamp")
            ):
                return pod
        return None

    pod = wait_for("a Ready serving pod with the table", ready_pod, timeout=60)
    ip = pod["status"]["podIP"]
    info: dict[str, Any] = httpx.get(f"http://{ip}:30000/server_info", timeout=10).json()
    return {"pod": pod, "info": info}


# ----------------------------------------------------------------------------- fixtures


def kubectl_sps(env: Env, *args: str) -> str:
    """`kubectl sps ...` as a user runs it: kubectl finds the plugin on PATH."""
    run_env = env.cluster.env()
    run_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), run_env["PATH"]])
    proc = subprocess.run(
        ["kubectl", "sps", *args, "-n", env.namespace],
        capture_output=True,
        text=True,
        env=run_env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def install_crd(cluster: E2eCluster) -> None:
    """The CRD as `make crds` generates it (server-side, so a newer one replaces the old)."""
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "-f",
        str(ROOT / "crds" / "sps.dev_spsprofiles.yaml"),
    )  # fmt: skip
    wait_crd_established(cluster.kubectl)


def crd_gone(env: Env) -> bool:
    return (
        env.cluster.bed.api("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}")
        is None
    )


def force_crd_gone(env: Env) -> None:
    """Removes the finalizer of every SpsProfile left in the cluster until the CRD is gone.

    This test runs alone on its bed (not `bed_shared`), but profiles of earlier tests may
    still be there, in namespaces being deleted, their operators gone: each would hold a
    terminating CRD for ever, and every later test would find it "terminating"."""
    patch = json.dumps({"metadata": {"finalizers": None}})

    def gone_after_forcing() -> bool:
        if crd_gone(env):
            return True
        listed = env.cluster.kubectl("get", "spsprofiles", "-A", "-o", "json", check=False)
        for item in (json.loads(listed) if listed.strip() else {}).get("items", []):
            meta = item["metadata"]
            env.cluster.kubectl("patch", "spsprofile", meta["name"], "-n", meta["namespace"],
                                "--type=merge", "-p", patch, check=False)  # fmt: skip
        return crd_gone(env)

    wait_for("the CRD gone", gone_after_forcing, timeout=120, interval=2)


def create(env: Env, deployment: dict[str, Any], profile: dict[str, Any]) -> None:
    env.apps.create_namespaced_deployment(env.namespace, deployment)
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, profile)


def wait_ready(env: Env, timeout: float = 240.0) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        failure = env.operator.failure()
        if failure:
            raise AssertionError(failure)
        c = env.condition("Ready")
        return c if c.get("status") == "True" else None

    try:
        return dict(wait_for("Ready=True", ready, timeout=timeout))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{env.diagnostics()}") from None

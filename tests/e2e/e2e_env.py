"""The end-to-end test bed: the operator as a subprocess under the chart's RBAC, and
helpers that build SGLang Deployments and SpsProfiles and read their state.

Pods run on the real-node test bed (kubelets, containerd, runc): SGLang Deployments from
the stand-in image (`sps-sim`, fast: SPS_SIM_TIME_SCALE in the pod), profiling Jobs from
the operator's image. The operator runs as a local process with a real token of the
chart's ServiceAccount (RBAC rendered with helm), so a test can set its flags, move its
clock, read its log and kill it; the chart's own Deployment of it is tested in
tests/realnode.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
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

from sps_testbed.controlplane import free_port
from waiting import wait_crd_established, wait_for

ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION, PLURAL = "sps.dev", "v1alpha1", "spsprofiles"
SIM_TIME_SCALE = "40"
TABLE_PATH = "/etc/sps/table/table.json"


# ----------------------------------------------------------------------------- helpers


@dataclass
class OperatorProcess:
    kubeconfig: Path
    namespace: str
    log_path: Path
    clock_file: Path
    proc: subprocess.Popen[bytes] | None = None
    metrics_port: int = 0
    liveness_port: int = 0
    extra_args: list[str] = field(default_factory=list)
    name: str = "operator"  # POD_NAME: its identity in a leader election

    def start(self) -> None:
        exe = Path(sys.executable).with_name("sps-operator")
        self.metrics_port, self.liveness_port = free_port(), free_port()
        argv = [
            str(exe), "run", "--namespace", self.namespace, "--resync-seconds", "60",
            "--gpu-debounce-seconds", "2", "--metrics-port", str(self.metrics_port),
            "--liveness", f"http://127.0.0.1:{self.liveness_port}/healthz", "--verbose",
            "--log-format", "plain", "--clock-offset-file", str(self.clock_file),
            *self.extra_args,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["POD_NAME"] = self.name
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()

    def kill(self) -> None:
        """SIGKILL: an operator that dies mid-run, with no chance to clean up."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def log(self, tail: int = 120) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-tail:])


@dataclass
class Env:
    cluster: E2eCluster
    api: ApiClient
    namespace: str
    operator: OperatorProcess
    account: OperatorAccount | None = None
    others: list[OperatorProcess] = field(default_factory=list)

    def replicas(self, count: int) -> list[OperatorProcess]:
        """`count` operator processes electing a leader on the chart's Lease (the first is
        `self.operator`); none started."""
        assert self.account is not None and self.account.lease
        election = [
            "--leader-election",
            f"--lease-name={self.account.lease}",
            f"--lease-namespace={self.account.namespace}",
        ]
        first = self.operator
        first.extra_args, first.name = [*first.extra_args, *election], "replica-0"
        for i in range(1, count):
            log = first.log_path.with_name(f"operator-{i}.log")
            self.others.append(
                OperatorProcess(first.kubeconfig, first.namespace, log, first.clock_file,
                                extra_args=list(first.extra_args), name=f"replica-{i}")
            )  # fmt: skip
        return [first, *self.others]

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
            "labels": {"app": "sglang", "app.kubernetes.io/instance": "argo-app"},
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
            ready = any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in pod.get("status", {}).get("conditions") or []
            )
            if (
                ann.get("sps.dev/table-hash") == table_hash
                and ready
                and not pod["metadata"].get("deletionTimestamp")
            ):
                return pod
        return None

    pod = wait_for("a Ready serving pod with the table", ready_pod, timeout=60)
    ip = pod["status"]["podIP"]
    info: dict[str, Any] = httpx.get(f"http://{ip}:30000/server_info", timeout=10).json()
    return {"pod": pod, "info": info}


# ----------------------------------------------------------------------------- fixtures


@dataclass(frozen=True)
class OperatorAccount:
    """The chart's ServiceAccount and RBAC, installed in a namespace of their own."""

    namespace: str
    service_account: str
    lease: str  # the one Lease the chart's Role lets it use for leader election
    rendered: str


def install_operator_rbac(cluster: E2eCluster, helm_values: list[str]) -> OperatorAccount:
    """The CRD, and the chart's ServiceAccount + RBAC in a namespace of its own."""
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "-f",
        str(ROOT / "crds" / "sps.dev_spsprofiles.yaml"),
    )  # fmt: skip
    wait_crd_established(cluster.kubectl)
    suffix = secrets.token_hex(3)
    ns = cluster.create_namespace(f"sps-system-{suffix}")
    server = json.loads(cluster.kubectl("version", "-o", "json"))["serverVersion"]
    values = [arg for value in helm_values for arg in ("--set", value)]
    rendered = cluster.helm(
        "template", f"sps-e2e-{suffix}", str(ROOT / "charts" / "sps-operator"),
        "--kube-version", server["gitVersion"], "--namespace", ns, *values,
        "--show-only", "templates/rbac.yaml", "--show-only", "templates/serviceaccount.yaml",
    )  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=rendered)
    accounts = [
        d["metadata"]["name"]
        for d in yaml.safe_load_all(rendered)
        if d and d.get("kind") == "ServiceAccount"
    ]
    assert len(accounts) == 1, rendered
    leases = [
        name
        for d in yaml.safe_load_all(rendered)
        if d and d.get("kind") == "Role" and d["metadata"]["name"].endswith("-leader")
        for rule in d["rules"]
        for name in rule.get("resourceNames") or []
    ]
    return OperatorAccount(ns, accounts[0], leases[0] if leases else "", rendered)


def uninstall_operator_rbac(cluster: E2eCluster, account: OperatorAccount) -> None:
    cluster.kubectl("delete", "-f", "-", "--ignore-not-found", input=account.rendered, check=False)
    cluster.delete_namespace(account.namespace)


def create(env: Env, deployment: dict[str, Any], profile: dict[str, Any]) -> None:
    env.apps.create_namespaced_deployment(env.namespace, deployment)
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, profile)


def wait_ready(env: Env, timeout: float = 240.0) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        proc = env.operator.proc
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the operator exited ({proc.returncode})")
        c = env.condition("Ready")
        return c if c.get("status") == "True" else None

    try:
        return dict(wait_for("Ready=True", ready, timeout=timeout))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{env.diagnostics()}") from None

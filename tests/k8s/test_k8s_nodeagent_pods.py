"""The node agent runs pods as a kubelet would: Jobs, env and volumes, sidecars, restarts,
deletion with a grace period, probes. Against the real local control plane."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from nodeagent_helpers import apply, wait_until

from sps_operator.devcluster.nodeagent import read_container_log

pytestmark = pytest.mark.k8s


def get(kubectl: Callable[..., str], ns: str, kind: str, name: str) -> dict[str, Any]:
    out = kubectl("get", kind, name, "-n", ns, "-o", "json", check=False)
    return json.loads(out) if out.strip() else {}


def pod_phase(kubectl: Callable[..., str], ns: str, name: str) -> str:
    return str(get(kubectl, ns, "pod", name).get("status", {}).get("phase", ""))


def job(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", script]}
                    ],
                }
            },
            **extra,
        },
    }


def job_condition(kubectl: Callable[..., str], ns: str, name: str) -> dict[str, Any] | None:
    for cond in get(kubectl, ns, "job", name).get("status", {}).get("conditions") or []:
        if cond["type"] in ("Complete", "Failed") and cond["status"] == "True":
            return dict(cond)
    return None


def test_job_runs_a_local_program_and_completes(k8s_cluster, node_agent, namespace):
    kubectl = k8s_cluster.kubectl
    apply(kubectl, namespace, job("ok", "echo hello from $(hostname); exit 0"))
    cond = wait_until("job ok to finish", lambda: job_condition(kubectl, namespace, "ok"))
    assert cond["type"] == "Complete"
    status = get(kubectl, namespace, "job", "ok")["status"]
    assert status["succeeded"] == 1 and not status.get("failed")
    pods = json.loads(kubectl("get", "pods", "-n", namespace, "-l", "job-name=ok", "-o", "json"))
    (pod,) = pods["items"]
    assert pod["status"]["phase"] == "Succeeded"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    log = read_container_log(node_agent.state_dir, namespace, pod["metadata"]["name"], "main")
    assert log.strip() == f"hello from {pod['metadata']['name']}"


def test_failing_job_fails_with_its_exit_code(k8s_cluster, node_agent, namespace):
    kubectl = k8s_cluster.kubectl
    # A pod failure policy on exit code 7 makes the exit code visible in the Job's status.
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [7]}}]}
    apply(kubectl, namespace, job("bad", "echo failing; exit 7", podFailurePolicy=policy))
    cond = wait_until("job bad to finish", lambda: job_condition(kubectl, namespace, "bad"))
    assert cond["type"] == "Failed"
    assert cond["reason"] == "PodFailurePolicy"
    assert "exit code 7" in cond["message"]
    pods = json.loads(kubectl("get", "pods", "-n", namespace, "-l", "job-name=bad", "-o", "json"))
    terminated = pods["items"][0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (7, "Error")
    assert pods["items"][0]["status"]["phase"] == "Failed"


ENV_PROBE = r"""
import json, os, socket, sys


def read_only(path):
    try:
        open(path, "w").close()
    except OSError:
        return True
    return False


SA = "/var/run/secrets/kubernetes.io/serviceaccount"
files = {}
for root in ("/etc/app", "/etc/secret", "/etc/info", SA):
    for name in sorted(os.listdir(root)):
        if not name.startswith("."):
            files[f"{root}/{name}"] = open(f"{root}/{name}").read()
keys = ("POD_IP", "NODE", "POD", "NS", "FROM_CM", "FROM_SECRET", "EXPANDED", "APP_color",
        "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
print(json.dumps({
    "env": {k: os.environ.get(k) for k in keys},
    "argv": sys.argv[1:],
    "files": files,
    "cwd": os.getcwd(),
    "hostname": socket.gethostname(),
    "ro": read_only("/etc/app/x"),
}))
"""


def test_env_volumes_and_command_expansion(k8s_cluster, node_agent, namespace):
    kubectl = k8s_cluster.kubectl
    kubectl(
        "create",
        "configmap",
        "app",
        "-n",
        namespace,
        "--from-literal=color=blue",
        "--from-literal=size=xl",
    )
    kubectl(
        "create", "secret", "generic", "creds", "-n", namespace, "--from-literal=password=s3cret"
    )
    script = ENV_PROBE
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "envpod", "labels": {"tier": "test"}},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [
                {
                    "name": "app",
                    "configMap": {"name": "app", "items": [{"key": "color", "path": "colour.txt"}]},
                },
                {"name": "secret", "secret": {"secretName": "creds"}},
                {
                    "name": "info",
                    "downwardAPI": {
                        "items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]
                    },
                },
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "python:3.12-slim",
                    "command": ["python3", "-c", script],
                    "args": ["$(NODE)", "$$(NODE)", "$(UNDEFINED)"],
                    "workingDir": "/tmp/envpod-work",
                    "env": [
                        {
                            "name": "POD_IP",
                            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                        },
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {
                            "name": "NS",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                        },
                        {
                            "name": "FROM_CM",
                            "valueFrom": {"configMapKeyRef": {"name": "app", "key": "size"}},
                        },
                        {
                            "name": "FROM_SECRET",
                            "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}},
                        },
                        {"name": "EXPANDED", "value": "$(POD)-in-$(NS)"},
                    ],
                    "envFrom": [{"configMapRef": {"name": "app"}, "prefix": "APP_"}],
                    "volumeMounts": [
                        {"name": "app", "mountPath": "/etc/app"},
                        {"name": "secret", "mountPath": "/etc/secret"},
                        {"name": "info", "mountPath": "/etc/info"},
                    ],
                }
            ],
        },
    }
    apply(kubectl, namespace, pod)
    wait_until("envpod to succeed", lambda: pod_phase(kubectl, namespace, "envpod") == "Succeeded")
    obj = get(kubectl, namespace, "pod", "envpod")
    out = json.loads(read_container_log(node_agent.state_dir, namespace, "envpod", "main"))
    node = obj["spec"]["nodeName"]
    assert out["env"]["POD_IP"] == obj["status"]["podIP"]
    assert obj["status"]["podIP"].startswith("10.244.")
    assert out["env"]["NODE"] == node
    assert out["env"]["EXPANDED"] == f"envpod-in-{namespace}"
    assert out["env"]["FROM_CM"] == "xl" and out["env"]["FROM_SECRET"] == "s3cret"
    assert out["env"]["APP_color"] == "blue"
    assert out["env"]["KUBERNETES_SERVICE_HOST"] == obj["status"]["hostIP"]
    assert out["argv"] == [node, "$(NODE)", "$(UNDEFINED)"]
    assert out["files"]["/etc/app/colour.txt"] == "blue"
    assert "/etc/app/size" not in out["files"]  # items select keys
    assert out["files"]["/etc/secret/password"] == "s3cret"
    assert out["files"]["/etc/info/labels"] == 'tier="test"'
    sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert out["files"][f"{sa_dir}/namespace"] == namespace
    assert out["files"][f"{sa_dir}/token"].count(".") == 2  # a JWT
    assert "BEGIN CERTIFICATE" in out["files"][f"{sa_dir}/ca.crt"]
    assert out["cwd"] == "/tmp/envpod-work"
    assert out["hostname"] == "envpod"
    assert out["ro"] is True


def test_native_sidecar_starts_before_and_stops_after_main(k8s_cluster, node_agent, namespace):
    kubectl = k8s_cluster.kubectl
    log = "/shared/events"
    sidecar = (
        f"trap 'echo sidecar-stop >> {log}; exit 0' TERM; echo sidecar-start >> {log}; "
        "touch /shared/started; while true; do sleep 0.1; done"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sidecar"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "initContainers": [
                {  # a regular init container runs to completion first
                    "name": "init",
                    "image": "busybox",
                    "command": ["sh", "-c", f"echo init >> {log}"],
                    "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
                },
                {
                    "name": "side",
                    "image": "busybox",
                    "restartPolicy": "Always",
                    "command": ["sh", "-c", sidecar],
                    "startupProbe": {
                        "exec": {"command": ["test", "-f", "/shared/started"]},
                        "periodSeconds": 1,
                    },
                    "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
                },
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": [
                        "sh",
                        "-c",
                        f"echo main-start >> {log}; sleep 1; echo main-end >> {log}",
                    ],
                    "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
                }
            ],
        },
    }
    apply(kubectl, namespace, pod)
    wait_until(
        "the sidecar pod to succeed",
        lambda: pod_phase(kubectl, namespace, "sidecar") == "Succeeded",
    )
    obj = get(kubectl, namespace, "pod", "sidecar")
    uid = obj["metadata"]["uid"]
    events = (
        node_agent.state_dir
        / "pods"
        / f"{namespace}_sidecar_{uid}"
        / "volumes"
        / "shared"
        / "events"
    )
    expected = ["init", "sidecar-start", "main-start", "main-end", "sidecar-stop"]
    assert events.read_text().split() == expected
    init, side = obj["status"]["initContainerStatuses"]
    assert init["state"]["terminated"]["reason"] == "Completed"
    main = obj["status"]["containerStatuses"][0]
    assert side["state"]["terminated"]["exitCode"] == 0
    assert side["state"]["terminated"]["finishedAt"] >= main["state"]["terminated"]["finishedAt"]
    assert side["state"]["terminated"]["startedAt"] <= main["state"]["terminated"]["startedAt"]


def test_restart_on_failure_with_backoff(k8s_cluster, node_agent, namespace):
    kubectl = k8s_cluster.kubectl
    # Fails on the first run, succeeds on the second (the emptyDir survives restarts).
    script = (
        "if [ -f /data/ran ]; then echo second; exit 0; fi; touch /data/ran; echo first; exit 3"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "flaky"},
        "spec": {
            "restartPolicy": "OnFailure",
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["sh", "-c", script],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
        },
    }
    apply(kubectl, namespace, pod)
    wait_until("flaky to succeed", lambda: pod_phase(kubectl, namespace, "flaky") == "Succeeded")
    status = get(kubectl, namespace, "pod", "flaky")["status"]["containerStatuses"][0]
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert status["state"]["terminated"]["exitCode"] == 0
    assert read_container_log(node_agent.state_dir, namespace, "flaky", "main").strip() == "second"


def test_delete_with_grace_period_sends_sigterm_then_removes_the_pod(
    k8s_cluster, node_agent, namespace
):
    kubectl = k8s_cluster.kubectl
    pods = {
        # Handles SIGTERM: exits at once.
        "polite": "trap 'echo got-TERM; exit 0' TERM; echo up; while true; do sleep 0.1; done",
        # Ignores SIGTERM: killed when the grace period ends.
        "stubborn": "trap '' TERM; echo up; while true; do sleep 0.1; done",
    }
    for name, script in pods.items():
        apply(
            kubectl,
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "containers": [
                        {"name": "main", "image": "busybox", "command": ["sh", "-c", script]}
                    ],
                },
            },
        )
    for name in pods:
        wait_until(
            f"{name} running", lambda name=name: pod_phase(kubectl, namespace, name) == "Running"
        )
        wait_until(
            f"{name} to print 'up'",
            lambda name=name: (
                "up" in read_container_log(node_agent.state_dir, namespace, name, "main")
            ),
        )
    started = time.monotonic()
    kubectl("delete", "pod", "polite", "-n", namespace, "--wait=false")
    wait_until(
        "polite to be gone", lambda: not get(kubectl, namespace, "pod", "polite"), timeout=20
    )
    polite_s = time.monotonic() - started
    started = time.monotonic()
    kubectl("delete", "pod", "stubborn", "-n", namespace, "--wait=false")
    wait_until(
        "stubborn to be gone", lambda: not get(kubectl, namespace, "pod", "stubborn"), timeout=20
    )
    stubborn_s = time.monotonic() - started
    assert "got-TERM" in read_container_log(node_agent.state_dir, namespace, "polite", "main")
    # The stubborn one waited out its 2 s grace period; the polite one did not.
    assert stubborn_s >= 1.9 > polite_s


def test_probes_gate_readiness_and_liveness_restarts(k8s_cluster, node_agent, namespace):
    kubectl = k8s_cluster.kubectl
    server = (
        "import http.server as h; "
        "h.HTTPServer(('', 8080), h.SimpleHTTPRequestHandler).serve_forever()"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probed"},
        "spec": {
            "containers": [
                {  # ready only once the http server listens (after a 2 s delay)
                    "name": "web",
                    "image": "python:3.12",
                    "command": ["sh", "-c", f'sleep 2; exec python3 -c "{server}"'],
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "readinessProbe": {
                        "httpGet": {"path": "/", "port": "http"},
                        "periodSeconds": 1,
                    },
                },
                {  # liveness on a port nobody listens on: restarted again and again
                    "name": "doomed",
                    "image": "busybox",
                    "command": ["sh", "-c", "while true; do sleep 0.1; done"],
                    "livenessProbe": {
                        "tcpSocket": {"port": 9999},
                        "periodSeconds": 1,
                        "failureThreshold": 1,
                    },
                },
            ],
            "terminationGracePeriodSeconds": 1,
        },
    }
    apply(kubectl, namespace, pod)

    def web_ready() -> bool:
        statuses = (
            get(kubectl, namespace, "pod", "probed").get("status", {}).get("containerStatuses")
            or []
        )
        return any(s["name"] == "web" and s["ready"] for s in statuses)

    wait_until("running", lambda: pod_phase(kubectl, namespace, "probed") == "Running")
    first = {
        s["name"]: s
        for s in get(kubectl, namespace, "pod", "probed")["status"]["containerStatuses"]
    }
    assert first["web"]["ready"] is False  # not before its server listens
    wait_until("web ready", web_ready, timeout=30)

    def doomed_restarted() -> dict[str, Any] | None:
        for s in get(kubectl, namespace, "pod", "probed")["status"]["containerStatuses"]:
            if s["name"] == "doomed" and s["restartCount"] >= 1:
                return dict(s)
        return None

    doomed = wait_until("doomed restarted by its liveness probe", doomed_restarted, timeout=30)
    assert doomed["lastState"]["terminated"]["exitCode"] in (137, 143)
    assert "Liveness probe failed" in doomed["lastState"]["terminated"].get("message", "")
    events = json.loads(
        kubectl(
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector=involvedObject.name=probed",
            "-o",
            "json",
        )
    )["items"]
    reasons = {(e["reason"], e["involvedObject"].get("fieldPath")) for e in events}
    assert ("Started", "spec.containers{web}") in reasons
    assert ("Unhealthy", "spec.containers{doomed}") in reasons
    assert ("Killing", "spec.containers{doomed}") in reasons
    kubelet = [e for e in events if e.get("reportingComponent") == "kubelet"]
    assert {e["source"]["host"] for e in kubelet} == {
        get(kubectl, namespace, "pod", "probed")["spec"]["nodeName"]
    }
    ready = {
        c["type"]: c["status"]
        for c in get(kubectl, namespace, "pod", "probed")["status"]["conditions"]
    }
    assert ready["PodScheduled"] == "True" and ready["Initialized"] == "True"


def test_unknown_image_waits_with_err_image_pull(k8s_cluster, node_agent, namespace):
    kubectl = k8s_cluster.kubectl
    apply(
        kubectl,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "nope"},
            "spec": {"containers": [{"name": "main", "image": "registry.example/unknown:1"}]},
        },
    )

    def waiting_reason() -> str:
        statuses = (
            get(kubectl, namespace, "pod", "nope").get("status", {}).get("containerStatuses") or []
        )
        return str(statuses[0]["state"].get("waiting", {}).get("reason", "")) if statuses else ""

    reason = wait_until(
        "ErrImagePull",
        lambda: waiting_reason() in ("ErrImagePull", "ImagePullBackOff") and waiting_reason(),
    )
    assert reason in ("ErrImagePull", "ImagePullBackOff")
    assert pod_phase(kubectl, namespace, "nope") == "Pending"


def test_active_deadline_fails_the_pod(k8s_cluster, node_agent, namespace):
    kubectl = k8s_cluster.kubectl
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "late"},
        "spec": {
            "activeDeadlineSeconds": 2,
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "60"]}],
        },
    }
    apply(kubectl, namespace, pod)
    wait_until(
        "late to fail", lambda: pod_phase(kubectl, namespace, "late") == "Failed", timeout=30
    )
    status = get(kubectl, namespace, "pod", "late")["status"]
    assert status["reason"] == "DeadlineExceeded"
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143


def test_kubectl_logs_current_previous_and_tail(k8s_cluster, node_agent, namespace):
    kubectl = k8s_cluster.kubectl
    # Attempt 0 prints and fails; attempt 1 prints and succeeds (restartPolicy OnFailure).
    script = (
        "if [ -f /data/ran ]; then echo second-a; echo second-b; exit 0; fi; "
        "touch /data/ran; echo first; exit 1"
    )
    container = {
        "name": "main",
        "image": "busybox",
        "command": ["sh", "-c", script],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    spec = {
        "restartPolicy": "OnFailure",
        "volumes": [{"name": "data", "emptyDir": {}}],
        "containers": [container],
    }
    apply(
        kubectl,
        namespace,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "logs"}, "spec": spec},
    )
    wait_until("logs to succeed", lambda: pod_phase(kubectl, namespace, "logs") == "Succeeded")
    assert kubectl("logs", "logs", "-n", namespace) == "second-a\nsecond-b\n"
    assert kubectl("logs", "logs", "-n", namespace, "--tail=1") == "second-b\n"
    assert kubectl("logs", "logs", "-n", namespace, "--previous") == "first\n"


def test_exec_probe_runs_inside_the_container(k8s_cluster, node_agent, namespace):
    kubectl = k8s_cluster.kubectl
    # Ready once /data/ready exists in the container's mount namespace, and the probe
    # sees the container's PID namespace: its `sleep 60`, and a handful of processes, not
    # the host's hundreds.
    probe = [
        "sh",
        "-c",
        "test -f /data/ready && cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -q 'sleep 60' "
        "&& [ $(ls -d /proc/[0-9]* | wc -l) -lt 10 ]",
    ]
    container = {
        "name": "main",
        "image": "busybox",
        "command": ["sh", "-c", "sleep 1; touch /data/ready; exec sleep 60"],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "readinessProbe": {"exec": {"command": probe}, "periodSeconds": 1},
    }
    spec = {
        "terminationGracePeriodSeconds": 1,
        "volumes": [{"name": "data", "emptyDir": {}}],
        "containers": [container],
    }
    apply(
        kubectl,
        namespace,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ex"}, "spec": spec},
    )

    def ready() -> bool:
        statuses = get(kubectl, namespace, "pod", "ex").get("status", {}).get("containerStatuses")
        return bool(statuses and statuses[0]["ready"])

    wait_until("exec readiness", ready, timeout=30)


def test_failed_init_container_fails_the_pod(k8s_cluster, node_agent, namespace):
    kubectl = k8s_cluster.kubectl
    spec = {
        "restartPolicy": "Never",
        "initContainers": [{"name": "init", "image": "busybox", "command": ["sh", "-c", "exit 2"]}],
        "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
    }
    apply(
        kubectl,
        namespace,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad-init"}, "spec": spec},
    )
    wait_until("bad-init failed", lambda: pod_phase(kubectl, namespace, "bad-init") == "Failed")
    status = get(kubectl, namespace, "pod", "bad-init")["status"]
    assert status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 2
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Initialized"] == "False"


def test_host_network_pod_uses_the_node_address(k8s_cluster, node_agent, namespace):
    kubectl = k8s_cluster.kubectl
    container = {
        "name": "main",
        "image": "busybox",
        "command": ["sh", "-c", 'echo "$MY_IP"'],
        "env": [{"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
    }
    spec = {"hostNetwork": True, "restartPolicy": "Never", "containers": [container]}
    apply(
        kubectl,
        namespace,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hostnet"}, "spec": spec},
    )
    wait_until("hostnet done", lambda: pod_phase(kubectl, namespace, "hostnet") == "Succeeded")
    status = get(kubectl, namespace, "pod", "hostnet")["status"]
    assert status["podIP"] == status["hostIP"]
    log = read_container_log(node_agent.state_dir, namespace, "hostnet", "main")
    assert log.strip() == status["hostIP"]


def test_pre_stop_hook_runs_before_sigterm(k8s_cluster, node_agent, namespace):
    kubectl = k8s_cluster.kubectl
    script = "trap 'echo term >> /data/order; exit 0' TERM; while true; do sleep 0.1; done"
    pre_stop = {"exec": {"command": ["sh", "-c", "echo pre-stop >> /data/order"]}}
    main = {
        "name": "main",
        "image": "busybox",
        "command": ["sh", "-c", script],
        "lifecycle": {"preStop": pre_stop},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    spec = {
        "terminationGracePeriodSeconds": 5,
        "volumes": [{"name": "data", "emptyDir": {}}],
        "containers": [main],
    }
    apply(
        kubectl,
        namespace,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hooked"}, "spec": spec},
    )
    wait_until("hooked running", lambda: pod_phase(kubectl, namespace, "hooked") == "Running")
    uid = get(kubectl, namespace, "pod", "hooked")["metadata"]["uid"]
    kubectl("delete", "pod", "hooked", "-n", namespace, "--wait=false")
    wait_until("hooked gone", lambda: not get(kubectl, namespace, "pod", "hooked"), timeout=20)
    order = (
        node_agent.state_dir / "pods" / f"{namespace}_hooked_{uid}" / "volumes" / "data" / "order"
    )
    assert order.read_text().split() == ["pre-stop", "term"]


def test_mount_points_created_on_the_host_are_removed(k8s_cluster, node_agent, namespace):
    import os
    from pathlib import Path

    kubectl = k8s_cluster.kubectl
    top = Path(f"/sps-nodeagent-test-{os.getpid()}")
    workdir = Path(f"/tmp/sps-nodeagent-wd-{os.getpid()}")
    assert not top.exists() and not workdir.exists()
    container = {
        "name": "main",
        "image": "busybox",
        "command": ["sh", "-c", f"echo x > {top}/a/b/f && cat {top}/a/b/f && pwd"],
        "workingDir": f"{workdir}/deep",
        "volumeMounts": [{"name": "v", "mountPath": f"{top}/a/b"}],
    }
    spec = {
        "restartPolicy": "Never",
        "volumes": [{"name": "v", "emptyDir": {}}],
        "containers": [container],
    }
    apply(
        kubectl,
        namespace,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mp"}, "spec": spec},
    )
    wait_until("mp done", lambda: pod_phase(kubectl, namespace, "mp") == "Succeeded")
    log = read_container_log(node_agent.state_dir, namespace, "mp", "main")
    assert log.split() == ["x", f"{workdir}/deep"]
    wait_until("host paths removed", lambda: not top.exists() and not workdir.exists(), timeout=10)


def test_empty_dir_over_tmp_does_not_hide_other_volumes(k8s_cluster, node_agent, namespace):
    # The agent's state directory lives under /tmp in tests; a pod mounting an emptyDir at
    # /tmp (as the chart's operator pod does) must still get its other volumes.
    kubectl = k8s_cluster.kubectl
    assert str(node_agent.state_dir).startswith("/tmp/")
    kubectl("create", "configmap", "cfg", "-n", namespace, "--from-literal=k=v")
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    container = {
        "name": "main",
        "image": "busybox",
        "command": ["sh", "-c", f"cat /etc/cfg/k; echo; ls /tmp; test -s {sa}/token && echo token"],
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "cfg", "mountPath": "/etc/cfg"},
        ],
    }
    spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": True,
        "volumes": [
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
            {"name": "cfg", "configMap": {"name": "cfg"}},
        ],
        "containers": [container],
    }
    apply(
        kubectl,
        namespace,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tmpdir"}, "spec": spec},
    )
    wait_until(
        "tmpdir finished",
        lambda: pod_phase(kubectl, namespace, "tmpdir") in ("Succeeded", "Failed"),
    )
    log = read_container_log(node_agent.state_dir, namespace, "tmpdir", "main")
    assert pod_phase(kubectl, namespace, "tmpdir") == "Succeeded", log
    # /tmp is the empty volume, but for the program roots (venv, package source) the agent
    # binds back when a clone lives under /tmp, as in CI.
    from pathlib import Path

    from sps_operator.devcluster.nodeagent.runtime import covered_roots, program_roots

    kept = sorted(
        {Path(r).relative_to("/tmp").parts[0] for r in covered_roots(["/tmp"], program_roots())}
    )
    words = log.split()
    assert words[0] == "v" and words[-1] == "token", log
    assert sorted(words[1:-1]) == kept, log


def test_empty_dir_over_the_venv_keeps_the_programs(k8s_cluster, node_agent, namespace):
    # CI may clone the repo (and its venv) under a path a pod covers with a volume, e.g. an
    # emptyDir at /tmp; the project's entry points must still run.
    import sys
    from pathlib import Path

    kubectl = k8s_cluster.kubectl
    covered = str(Path(sys.prefix).parent)  # the venv's parent: holds the source tree too
    script = "import os, sps_operator, sys; print(sys.prefix); print(sorted(os.listdir('.')))"
    container = {
        "name": "main",
        "image": "ghcr.io/sps-dev/sps-operator:0.1.0",
        "command": ["sh", "-c", f'sps-operator --help > /dev/null && python -c "{script}"'],
        "workingDir": covered,
        "volumeMounts": [{"name": "cover", "mountPath": covered}],
    }
    spec = {
        "restartPolicy": "Never",
        "volumes": [{"name": "cover", "emptyDir": {}}],
        "containers": [container],
    }
    apply(
        kubectl,
        namespace,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "covered"}, "spec": spec},
    )
    wait_until(
        "covered finished",
        lambda: pod_phase(kubectl, namespace, "covered") in ("Succeeded", "Failed"),
    )
    log = read_container_log(node_agent.state_dir, namespace, "covered", "main")
    assert pod_phase(kubectl, namespace, "covered") == "Succeeded", log
    prefix, listing = log.strip().splitlines()
    assert prefix == sys.prefix
    # the volume is what the pod sees there, with only the venv and the sources bound back
    assert set(eval(listing)) <= {Path(sys.prefix).name, "operator"}

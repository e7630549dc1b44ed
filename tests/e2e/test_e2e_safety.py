"""The safety contract end to end (issue 9): what the unit tests prove against an
in-memory API, here against the real control plane and its admission."""

from __future__ import annotations

import time
from typing import Any

import pytest
from e2e_env import (
    GROUP,
    PLURAL,
    TABLE_PATH,
    VERSION,
    Env,
    create,
    rolled_to,
    server_deployment,
    serving_pod_info,
    sps_profile,
    table_for,
    wait_ready,
)

from sps_sim.costmodel import GPU_H100
from waiting import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.slow, pytest.mark.bed_shared]

RESTRICTED_POD = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
}


def target(env: Env, name: str = "server") -> dict[str, Any]:
    status = env.profile().get("status") or {}
    return next((t for t in status.get("targets") or [] if t["deployment"] == name), {})


def test_e2e_two_profiles_on_one_deployment_do_not_fight(env: Env) -> None:
    create(env, server_deployment(GPU_H100), sps_profile(name="sps"))
    env.operator.start()
    wait_ready(env)
    table = table_for(env, GPU_H100)
    assert table is not None
    wait_for("rolled", lambda: rolled_to(env, table["hash"]), timeout=90)
    generation = env.deployment()["metadata"]["generation"]
    assert env.deployment()["metadata"]["annotations"]["sps.dev/owner"] == "sps"

    # A second profile selecting the same Deployment, with another sweep (another table).
    second = sps_profile(name="sps-2")
    second["spec"]["table"]["sweep"]["batchSizes"] = [1, 2, 4]
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, second)

    def conflict() -> dict[str, Any] | None:
        ready = env.condition("Ready", "sps-2")
        return ready if ready.get("reason") == "Conflict" else None

    ready = wait_for("sps-2 reports Conflict", conflict, timeout=60)
    assert "'sps'" in ready["message"]
    time.sleep(20)  # the old operator flipped the template every ~35 s
    assert env.deployment()["metadata"]["generation"] == generation
    assert rolled_to(env, table["hash"])
    status = env.profile("sps-2").get("status") or {}
    assert not status.get("tables") and not status.get("currentRun")
    assert env.condition("Ready")["status"] == "True"


def test_e2e_foreign_and_shell_wrapped_deployments_are_never_touched(env: Env) -> None:
    not_dspark = server_deployment(GPU_H100, name="eagle")
    args = not_dspark["spec"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("DSPARK")] = "EAGLE"
    scripted = server_deployment(GPU_H100, name="scripted")
    container = scripted["spec"]["template"]["spec"]["containers"][0]
    container["command"] = ["sh", "-c", "exec python3 -m sglang.launch_server " +
                            " ".join(container.pop("args"))]  # fmt: skip
    env.apps.create_namespaced_deployment(env.namespace, not_dspark)
    env.apps.create_namespaced_deployment(env.namespace, scripted)
    create(env, server_deployment(GPU_H100), sps_profile())
    env.operator.start()

    def refused() -> bool:
        return target(env, "eagle").get("reason") == "NotADsparkServer" and (
            target(env, "scripted").get("reason") == "ShellWrappedServer"
        )

    wait_for("both refused with a reason", refused, timeout=60)
    table = wait_for("a table for the DSpark server", lambda: table_for(env, GPU_H100), timeout=120)
    wait_for("rolled", lambda: rolled_to(env, table["hash"]), timeout=90)
    for name in ("eagle", "scripted"):
        dep = env.deployment(name)
        assert dep["metadata"]["generation"] == 1, name
        assert not any(m["manager"] == "sps-operator" for m in dep["metadata"]["managedFields"])
    assert env.condition("Ready")["status"] == "False"
    assert env.condition("Degraded")["reason"] in ("NotADsparkServer", "ShellWrappedServer")


def test_e2e_profiling_runs_in_a_restricted_namespace(env: Env) -> None:
    """The API server enforces Pod Security `restricted` and the runtime enforces the
    contexts: the profiling Job's pod is admitted only if the profiler runs restricted and
    the clone keeps the server's own (non-root, no capabilities, read-only root file
    system); both run under them, and the rolled pod serves the table."""
    env.core.patch_namespace(
        env.namespace,
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    dep = server_deployment(GPU_H100)
    pod = dep["spec"]["template"]["spec"]
    pod["securityContext"] = RESTRICTED_POD
    pod["containers"][0]["securityContext"] = RESTRICTED_CONTAINER
    create(env, dep, sps_profile())
    env.operator.start()
    wait_ready(env)
    table = table_for(env, GPU_H100)
    assert table is not None
    wait_for("rolled", lambda: rolled_to(env, table["hash"]), timeout=90)
    (job,) = env.jobs()
    spec = job["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    profiler = spec["containers"][0]["securityContext"]
    assert profiler["runAsNonRoot"] and profiler["readOnlyRootFilesystem"]
    (job_pod,) = env.pods(f"job-name={job['metadata']['name']}")
    for container in job_pod["spec"].get("initContainers", []) + job_pod["spec"]["containers"]:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, container
    serving_pod_info(env, table["hash"])


def test_e2e_gitops_first_run_serves_at_once_and_profiles(env: Env) -> None:
    """AnnotateOnly with a Deployment that mounts the (not yet existing) stable ConfigMap
    under its own volume name: the operator creates it with SGLang's "no table" at once
    (the pods start), the clone never mounts it, and the measured table replaces it."""
    dep = server_deployment(GPU_H100)
    pod = dep["spec"]["template"]["spec"]
    pod["volumes"] = [{"name": "git-table", "configMap": {"name": "llama-sps"}}]
    container = pod["containers"][0]
    container["args"] += ["--speculative-dspark-sps-table-path", TABLE_PATH]
    container["volumeMounts"] = [{"name": "git-table", "mountPath": "/etc/sps/table"}]
    profile = sps_profile(rollout={"mode": "AnnotateOnly", "tableConfigMap": "llama-sps"})
    create(env, dep, profile)
    env.operator.start()
    placeholder = wait_for("the placeholder table", lambda: _config_map(env, "llama-sps"), 60)
    assert placeholder["metadata"]["annotations"]["sps.dev/placeholder"] == "true"

    def available() -> bool:
        return (env.deployment().get("status") or {}).get("availableReplicas", 0) >= 1

    wait_for("the server runs before any table exists", available, timeout=90)
    wait_ready(env)
    table = table_for(env, GPU_H100)
    assert table is not None
    stable = env.config_map("llama-sps")
    assert stable["metadata"]["annotations"]["sps.dev/table-hash"] == table["hash"]
    assert stable["metadata"]["annotations"]["sps.dev/placeholder"] == "false"


def _config_map(env: Env, name: str) -> dict[str, Any] | None:
    try:
        return env.config_map(name)
    except Exception:
        return None

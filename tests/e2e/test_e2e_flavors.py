"""The operator against SGLang's builds on the real bed (issue 20 §2/§3, docs/compatibility.md):
the stand-in image plays each build (`SPS_SIM_SGLANG_FLAVOR` in the server's env), the
operator reads the real Deployments, Jobs and pods.

* the fzyzcjy fork (`require-path`): a compact server written with `=const` runs; an
  Additive profile is refused before any Job; a Diagonal one is profiled and its table
  replaces `const`, loaded by the fork's diagonal-only loader; then an operator upgrade
  from fingerprint version 1 re-keys that table and restarts nothing;
* upstream PR #35413 (`capture-derived`): the server is reported as running a
  capture-derived table, and `kubectl sps diff log:POD PROFILE` says how far that table is
  from the profiled one.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from e2e_env import (
    GROUP,
    PLURAL,
    TABLE_PATH,
    VERSION,
    Env,
    create,
    kubectl_sps,
    rolled_to,
    server_deployment,
    serving_pod_info,
    sps_profile,
    tables,
    wait_ready,
)

from sps_operator.api import labels as L
from sps_operator.api.models import SpsProfile
from sps_operator.controller.sglang.serverconfig import (
    legacy_table_fingerprint,
    parse_server,
    server_config,
)
from sps_operator.tables.formats import SpsCostTable, load_sps_table_text
from sps_sim.costmodel import GPU_H100
from waiting import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.slow, pytest.mark.bed_shared]

TABLE_FLAG = "--speculative-dspark-sps-table-path"
FLAVOR_ENV = "SPS_SIM_SGLANG_FLAVOR"


def server_args(env: Env) -> list[str]:
    (container,) = env.deployment()["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def target(env: Env) -> dict[str, Any]:
    targets = (env.profile().get("status") or {}).get("targets") or []
    return dict(targets[0]) if targets else {}


def available(env: Env) -> bool:
    status = env.deployment().get("status") or {}
    return status.get("availableReplicas", 0) == 1 and status.get("replicas", 0) == 1


def server_info(pod: dict[str, Any]) -> dict[str, Any]:
    info: dict[str, Any] = httpx.get(f"http://{pod['status']['podIP']}:30000/server_info",
                                     timeout=10).json()  # fmt: skip
    return info


def diagnosed(env: Env, what: str, check: Any, timeout: float = 180) -> Any:
    try:
        return wait_for(what, check, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{env.diagnostics()}") from None


def test_e2e_the_fork_const_server_additive_refused_diagonal_replaces_const_upgrade_from_v1(
    env: Env,
) -> None:
    deployment = server_deployment(GPU_H100, env={FLAVOR_ENV: "require-path"})
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    container["args"].append(f"{TABLE_FLAG}=const")
    create(env, deployment, sps_profile("Additive"))
    env.operator.start()

    # The fork's compact server runs with its flat `const` table; Additive is refused
    # before any Job, and the Deployment is left alone.
    refused = diagnosed(
        env,
        "the target refused",
        lambda: target(env) if target(env).get("state") == "Refused" else None,
    )
    assert refused["reason"] == "DiagonalOnlyServer", refused
    assert "fzyzcjy" in refused["message"] and "table.kind: Diagonal" in refused["message"]
    assert refused["tableSource"] == "const"
    ready = env.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "DiagonalOnlyServer")
    assert env.jobs() == []
    assert f"{TABLE_FLAG}=const" in server_args(env)
    diagnosed(env, "the fork's server available with const", lambda: available(env), 90)
    assert "Set spec.table.kind: Diagonal" in kubectl_sps(env, "explain", "sps")

    # Diagonal: profiled (the clone runs static, which needs no table), and the table
    # replaces `const`; the fork's diagonal-only loader starts with it.
    diagonal = {"spec": {"table": {"kind": "Diagonal", "sweep": {"fracs": None}}}}
    env.custom.patch_namespaced_custom_object(
        GROUP, VERSION, env.namespace, PLURAL, "sps", diagonal
    )
    wait_ready(env)
    (table,) = tables(env)
    assert table["kind"] == "Diagonal"
    diagnosed(env, "rolled to the table", lambda: rolled_to(env, table["hash"]), 90)
    args = server_args(env)
    assert args[-2:] == [TABLE_FLAG, TABLE_PATH] and "const" not in " ".join(args), args
    served = serving_pod_info(env, table["hash"])
    info = served["info"]
    assert info["speculative_dspark_sps_table_path"] == TABLE_PATH
    assert info["sps_sim"]["sglang_flavor"] == "require-path"
    assert info["sps_table"]["source"] == "path" and info["sps_table"]["kind"] == "diagonal"
    text = env.config_map(table["configMap"])["data"][L.TABLE_KEY]
    assert isinstance(load_sps_table_text(text, diagonal_only=True), SpsCostTable)
    assert "tableSource" not in target(env)

    # The Deployment no longer shows `const`, but the operator remembers the fork: an
    # Additive profile is refused again before any Job, the Deployment left alone.
    jobs = {j["metadata"]["name"] for j in env.jobs()}
    generation = env.deployment()["metadata"]["generation"]
    additive = {"spec": {"table": {"kind": "Additive", "sweep": {"fracs": [0.25, 0.5, 1.0]}}}}
    env.custom.patch_namespaced_custom_object(
        GROUP, VERSION, env.namespace, PLURAL, "sps", additive
    )
    refused = diagnosed(
        env,
        "the target refused again",
        lambda: target(env) if target(env).get("state") == "Refused" else None,
        timeout=60,
    )
    assert refused["reason"] == "DiagonalOnlyServer" and "const" in refused["message"], refused
    assert {j["metadata"]["name"] for j in env.jobs()} == jobs
    assert env.deployment()["metadata"]["generation"] == generation
    # Back to Diagonal: its table is the one measured, still live; no new Job.
    env.custom.patch_namespaced_custom_object(
        GROUP, VERSION, env.namespace, PLURAL, "sps", diagonal
    )
    wait_ready(env, timeout=60)
    assert {j["metadata"]["name"] for j in env.jobs()} == jobs

    # An operator upgrade from fingerprint version 1: the status and the table's label as
    # the operator before issue 20 left them (its ConfigMap's data is immutable, and only
    # says what changed; that operator knew no diagonal-only servers). The new operator
    # re-keys the table, starts no run, restarts no server.
    env.operator.stop()
    pod = served["pod"]["metadata"]["uid"]
    generation = env.deployment()["metadata"]["generation"]
    jobs = {j["metadata"]["name"] for j in env.jobs()}
    (container,) = env.deployment()["spec"]["template"]["spec"]["containers"]
    spec = SpsProfile.model_validate(env.profile()).spec
    v1 = legacy_table_fingerprint(server_config(container, parse_server(container)),
                                  spec.table.to_k8s())  # fmt: skip
    assert len(v1) == 16 and v1 != table["fingerprint"]
    env.core.patch_namespaced_config_map(
        table["configMap"], env.namespace, {"metadata": {"labels": {L.LABEL_FINGERPRINT: v1}}}
    )
    status = env.profile()["status"]
    stored = {k: v for k, v in status["tables"][0].items() if k != "adoptedFrom"}
    status["tables"] = [{**stored, "fingerprint": v1}]
    status["targets"][0]["fingerprint"] = v1
    env.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, env.namespace, PLURAL, "sps",
        {"status": {"tables": status["tables"], "targets": status["targets"],
                    "diagonalOnlyServers": None}},
    )  # fmt: skip
    env.operator.start()

    def adopted() -> dict[str, Any] | None:
        (now,) = tables(env)
        return env.profile()["status"] if now.get("adoptedFrom") == v1 else None

    status = diagnosed(env, "the version-1 table adopted", adopted, 120)
    assert status["tables"][0]["fingerprint"] == table["fingerprint"]
    assert status.get("currentRun") is None
    assert {j["metadata"]["name"] for j in env.jobs()} == jobs
    assert env.deployment()["metadata"]["generation"] == generation
    assert serving_pod_info(env, table["hash"])["pod"]["metadata"]["uid"] == pod
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert (conditions["Ready"], conditions["Stale"]) == ("True", "False"), conditions


def test_e2e_a_capture_derived_server_is_reported_and_compared_with_the_profiled_table(
    env: Env,
) -> None:
    flavor = {FLAVOR_ENV: "capture-derived", "SGLANG_DSPARK_ENABLE_CAPTURE_DERIVED_SPS": "1"}
    deployment = server_deployment(GPU_H100, env=flavor)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    # A request pool and draft width whose captured graphs clear PR #35413's gates.
    args = container["args"]
    args[args.index("--speculative-dspark-block-size") + 1] = "7"
    args[args.index("--max-running-requests") + 1] = "128"
    del args[args.index("--cuda-graph-max-bs") : args.index("--cuda-graph-max-bs") + 2]
    # The PR is in no release: the profile says the build is not one; rollout off, so the
    # server keeps its derived table to compare with.
    profile = sps_profile(server={"sglangVersion": "unknown"}, rollout={"mode": "Disabled"})
    create(env, deployment, profile)
    env.operator.start()

    diagnosed(
        env, "capture-derived reported", lambda: target(env).get("tableSource") == "capture-derived"
    )
    assert "<capture-derived>" in kubectl_sps(env, "get", "sps")
    (table,) = diagnosed(env, "the profiled table", lambda: tables(env) or None, 240)

    diagnosed(env, "the server available", lambda: available(env), 60)
    (pod,) = [p for p in env.pods("deploy=server") if not p["metadata"].get("deletionTimestamp")]
    assert (pod["metadata"].get("annotations") or {}).get("sps.dev/table-hash") is None
    info = server_info(pod)
    assert info["speculative_dspark_sps_table_path"] is None
    assert info["sps_sim"]["capture_derived_sps"] == "installed"
    assert info["sps_table"]["source"] == "capture-derived"
    name = pod["metadata"]["name"]
    out = json.loads(kubectl_sps(env, "diff", f"log:{name}", "sps", "-o", "json"))
    assert out["old"] == f"log:{name} (capture-derived)"
    assert out["new"] == f"configmap/{table['configMap']}"
    assert out["summary"]["points"] > 0 and out["summary"]["meanAbsChange"] > 0
    assert target(env)["tableSource"] == "capture-derived"


def test_e2e_a_diagonal_only_loader_refuses_the_additive_seed_in_the_clone_never_in_production(
    env: Env,
) -> None:
    """Nothing in the pod spec tells this loader: phase 2's clone starts with the phase-1
    measurement in the additive format, the real kubelet keeps the refusal's words as the
    sidecar's termination message, and the run ends on them at once."""
    create(
        env, server_deployment(GPU_H100, env={FLAVOR_ENV: "diagonal-only"}), sps_profile("Additive")
    )
    env.operator.start()

    def failed() -> dict[str, Any] | None:
        status = env.profile().get("status") or {}
        return status if (status.get("lastFailure") or {}).get("reason") else None

    status = diagnosed(env, "the run failed", failed, 300)
    failure = status["lastFailure"]
    assert (failure["reason"], failure["retryable"]) == ("DiagonalOnlyServer", False), failure
    assert "Object missing required field `sample_batch_tokens`" in failure["message"]
    assert status.get("currentRun") is None and len(status["diagonalOnlyServers"]) == 1
    refused = diagnosed(
        env,
        "the target refused",
        lambda: target(env) if target(env).get("state") == "Refused" else None,
        timeout=60,
    )
    assert refused["reason"] == "DiagonalOnlyServer", refused
    # Nothing went onto the server; only the refused run's two Jobs exist.
    assert TABLE_FLAG not in " ".join(server_args(env))
    assert not (env.deployment()["spec"]["template"]["metadata"].get("annotations") or {})
    run = failure["run"]
    assert {j["metadata"]["name"] for j in env.jobs()} <= {run, f"{run}-p2"}

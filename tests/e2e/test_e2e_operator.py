"""The operator end to end on the local control plane (issue 5, "It must show"); the
test bed is in e2e_env.py and conftest.py."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from e2e_env import (
    GROUP,
    PLURAL,
    TABLE_PATH,
    VERSION,
    Env,
    create,
    rolled_to,
    running_table_hash,
    server_deployment,
    serving_pod_info,
    sps_profile,
    table_for,
    tables,
    wait_ready,
)
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families

from sps_operator.api.hashing import content_hash
from sps_operator.controller.process.faults import MARKER
from sps_operator.tables.formats import SpsAdditiveCostTable, SpsCostTable, load_sps_table_text
from sps_sim.costmodel import GPU_H100, GPU_H200
from waiting import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.slow, pytest.mark.bed_shared]

# ----------------------------------------------------------------------------- scenarios


def test_e2e_diagonal_profile_publish_and_roll(env: Env) -> None:
    """Scenario 1: Diagonal on H100 — Job (sps-sim + profiler), table ConfigMap published,
    Deployment rolled, new pods run sps-sim with the table; Ready=True."""
    create(env, server_deployment(GPU_H100), sps_profile())
    env.operator.start()
    wait_ready(env)

    status = env.profile()["status"]
    assert status["observedGeneration"] == env.profile()["metadata"]["generation"]
    (table,) = status["tables"]
    assert table["gpuProduct"] == GPU_H100 and table["kind"] == "Diagonal"
    assert status["gpuProduct"] == GPU_H100 and status["liveTable"] == table["configMap"]
    assert status.get("currentRun") is None
    types = {c["type"]: c["status"] for c in status["conditions"]}
    assert types == {
        "Ready": "True", "Profiling": "False", "TableReady": "True", "RolledOut": "True",
        "Stale": "False", "Degraded": "False", "Reconciling": "False", "Stalled": "False",
    }  # fmt: skip

    # The Job: one run, backoffLimit 0, the cloned server as a native sidecar, pinned to H100.
    (job,) = env.jobs()
    assert job["metadata"]["name"] == table["run"]
    assert job["spec"]["backoffLimit"] == 0
    assert job["status"].get("succeeded") == 1
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"]["nvidia.com/gpu.product"] == GPU_H100
    (sidecar,) = pod_spec["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    sidecar_env = {e["name"]: e.get("value") for e in sidecar["env"]}
    assert sidecar_env["SGLANG_RAGGED_VERIFY_MODE"] == "static"
    assert sidecar_env["SGLANG_DSPARK_ENABLE_SPS_RECORD"] == "1"
    assert "app.kubernetes.io/instance" not in job["metadata"]["labels"]

    # The table ConfigMap: immutable, labelled, owned, loadable by SGLang's rules.
    cm = env.config_map(table["configMap"])
    assert cm["immutable"] is True
    labels = cm["metadata"]["labels"]
    assert labels["sps.dev/gpu-product"] == GPU_H100
    # Its server's version-1 fingerprint where that is this server's alone (0.1.0 reads it).
    assert labels["sps.dev/fingerprint"] == table.get("adoptedFrom", table["fingerprint"])
    assert "app.kubernetes.io/instance" not in labels
    assert cm["metadata"]["ownerReferences"][0]["kind"] == "SpsProfile"
    loaded = load_sps_table_text(cm["data"]["table.json"])
    assert isinstance(loaded, SpsCostTable)
    # Probes are in batch tokens (bs * K, K = 3 + 1): from bs 1 to bs 8.
    assert loaded.sample_batch_tokens[0] == 4 and loaded.max_batch_tokens >= 32
    assert all(s > 0 for s in loaded.sample_steps_per_sec)

    # The Deployment: rolled under field manager sps-operator with the volume, mount and flag.
    dep = env.deployment()
    template = dep["spec"]["template"]
    assert template["metadata"]["annotations"]["sps.dev/table-hash"] == table["hash"]
    (container,) = template["spec"]["containers"]
    i = container["args"].index("--speculative-dspark-sps-table-path")
    assert container["args"][i + 1] == TABLE_PATH
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == "sps-table")
    assert volume["configMap"]["name"] == table["configMap"]
    managers = {m["manager"] for m in dep["metadata"]["managedFields"]}
    assert "sps-operator" in managers

    # The new pod serves with the table: sps-sim started with the path (compact mode loads
    # it at start-up and refuses to start on a bad table).
    served = serving_pod_info(env, table["hash"])
    assert served["info"]["speculative_dspark_sps_table_path"] == TABLE_PATH
    assert served["pod"]["spec"]["nodeName"] in env.cluster.nodes_with_product(GPU_H100)
    text_sha = content_hash(cm["data"]["table.json"])
    assert table["hash"] == text_sha
    pod_name = served["pod"]["metadata"]["name"]

    def loaded_line() -> str | None:
        logs = env.cluster.pod_logs(env.namespace)
        section = logs.split(pod_name, 1)[-1].split("==>", 1)[0] if pod_name in logs else ""
        return next((ln for ln in section.splitlines() if "SPS table from" in ln), None)

    line = wait_for("the simulator's table-load log line", loaded_line, timeout=30)
    assert f"SPS table from {TABLE_PATH} (diagonal, upstream, sha256={text_sha})" in line

    # Live as the server confirms it: the operator read the serving pod's /server_info over
    # the pod network (the table's path, and the simulator's hash of the bytes it loaded).
    def confirmed() -> str | None:
        (target,) = env.profile()["status"]["targets"]
        servers = target.get("servers") or ""
        return servers if servers.startswith("1 of 1 serving pods' servers confirm") else None

    assert wait_for("the server's confirmation", confirmed, timeout=30) == (
        "1 of 1 serving pods' servers confirm the table"
    )

    # Report: events with constant reasons, Prometheus metrics, kopf's liveness endpoint.
    events = env.core.list_namespaced_event(
        env.namespace, field_selector="involvedObject.kind=SpsProfile"
    ).items
    reasons = {e.reason for e in events}
    assert {"ProfilingStarted", "TablePublished", "RolloutApplied"} <= reasons
    text = env.operator.metrics()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    ours = {"namespace": env.namespace, "profile": "sps"}

    def metric(name: str, **labels: str) -> float | None:
        return samples.get((name, tuple(sorted({**ours, **labels}.items()))))

    assert metric("sps_profiling_runs_started_total") == 1.0
    assert metric("sps_profiling_runs_finished_total", outcome="succeeded") == 1.0
    duration = ("sps_profiling_duration_seconds_count", (("namespace", env.namespace),))
    assert samples[duration] == 1.0  # per namespace
    assert metric("sps_rollouts_total", mode="Inject") == 1.0
    profiled = metric("sps_table_profiled_timestamp_seconds", gpu_product=GPU_H100)
    assert profiled is not None and 0 <= time.time() - profiled < 600
    assert metric("sps_profile_condition", type="Ready", status="true") == 1.0
    assert samples[("sps_leader", ())] == 1.0  # no election: this replica acts
    health = env.operator.get(8080, "/healthz")
    assert health.status_code == 200


def test_e2e_gpu_change_profiles_new_product_and_reuses_old_table(env: Env) -> None:
    """Scenario 3: move to H200 → profile for H200 and roll; move back → the H100 table
    is reused with no new Job."""
    create(env, server_deployment(GPU_H100), sps_profile())
    env.operator.start()
    wait_ready(env)
    h100 = table_for(env, GPU_H100)
    assert h100 is not None
    wait_for("rolled to the H100 table", lambda: rolled_to(env, h100["hash"]), timeout=60)

    patch = {"spec": {"template": {"spec": {"nodeSelector": {"nvidia.com/gpu.product": GPU_H200}}}}}
    env.apps.patch_namespaced_deployment("server", env.namespace, patch)
    h200 = wait_for("an H200 table", lambda: table_for(env, GPU_H200), timeout=240)
    assert h200["fingerprint"] == h100["fingerprint"] and h200["hash"] != h100["hash"]
    wait_for("rolled to the H200 table", lambda: rolled_to(env, h200["hash"]), timeout=90)
    # The device plugin handed the new pod its product; the simulator's cost follows it.
    served = serving_pod_info(env, h200["hash"])
    assert served["pod"]["spec"]["nodeName"] in env.cluster.nodes_with_product(GPU_H200)
    assert served["info"]["sps_sim"]["preset"] == GPU_H200, served["info"]
    runs = {j["metadata"]["labels"]["sps.dev/run"] for j in env.jobs()}
    assert h200["run"] in runs
    job = next(j for j in env.jobs() if j["metadata"]["name"] == h200["run"])
    assert job["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == GPU_H200
    wait_ready(env, timeout=60)

    jobs_before = {j["metadata"]["name"] for j in env.jobs()}
    patch = {"spec": {"template": {"spec": {"nodeSelector": {"nvidia.com/gpu.product": GPU_H100}}}}}
    env.apps.patch_namespaced_deployment("server", env.namespace, patch)
    wait_for("rolled back to the H100 table", lambda: rolled_to(env, h100["hash"]), timeout=90)
    assert {j["metadata"]["name"] for j in env.jobs()} <= jobs_before, "a new Job was created"
    status = env.profile()["status"]
    assert status.get("currentRun") is None
    assert {t["gpuProduct"] for t in status["tables"]} == {GPU_H100, GPU_H200}
    served = serving_pod_info(env, h100["hash"])
    assert served["pod"]["spec"]["nodeName"] in env.cluster.nodes_with_product(GPU_H100)


def test_e2e_operator_restart_adopts_running_job(env: Env) -> None:
    """Scenario 6: the operator is killed while a Job runs; restarted, it adopts the Job
    and finishes; there is no second Job."""
    create(env, server_deployment(GPU_H100), sps_profile())
    env.operator.start()

    def running_job() -> str | None:
        run = (env.profile().get("status") or {}).get("currentRun") or {}
        jobs = env.jobs()
        active = [j for j in jobs if j.get("status", {}).get("active")]
        return run.get("job") if run.get("job") and active else None

    job_name = wait_for("a running profiling Job", running_job, timeout=120, interval=0.2)
    env.operator.kill()
    time.sleep(2)
    env.operator.start()
    wait_ready(env)
    jobs = env.jobs()
    assert [j["metadata"]["name"] for j in jobs] == [job_name]
    (table,) = tables(env)
    assert table["run"] == job_name


def test_e2e_killed_between_the_job_create_and_its_status_the_restart_adopts_the_job(
    env: Env,
) -> None:
    """The one window adoption serves: the operator dies after it created the Job, before
    status records the run. Restarted, it builds the same Job, finds it under the run's
    name as the API server returns it (defaulted: policies/job_adoption.py must tell its
    own Job from one it did not build) and adopts it: one Job, no NameTaken, the table
    from it."""
    create(env, server_deployment(GPU_H100), sps_profile())
    point = "status@create-job"
    env.operator.extra_args = [f"--pause-before-write={point}"]
    env.operator.start()
    env.operator.wait_log(f"{MARKER} {point} ", timeout=240)
    (job,) = env.jobs()
    assert not (env.profile().get("status") or {}).get("currentRun")  # the window itself
    env.operator.kill()
    env.operator.extra_args = []
    env.operator.upgrade()
    env.operator.start()
    wait_ready(env)
    status = env.profile()["status"]
    assert (status.get("lastFailure") or {}).get("reason") != "NameTaken", status
    assert [j["metadata"]["uid"] for j in env.jobs()] == [job["metadata"]["uid"]]
    (table,) = tables(env)
    assert table["run"] == job["metadata"]["name"]


def test_e2e_gate_failure_keeps_the_live_table(env: Env) -> None:
    """Scenario 7: a noisy re-profile fails the fit gate; the old table stays live and a
    condition says why."""
    profile = sps_profile()
    profile["spec"]["table"]["sweep"]["repeats"] = 2
    profile["spec"]["gates"] = {"maxRmsMs": 0.05}
    create(env, server_deployment(GPU_H100), profile)
    env.operator.start()
    wait_ready(env)
    first = table_for(env, GPU_H100)
    assert first is not None
    wait_for("rolled to the first table", lambda: rolled_to(env, first["hash"]), timeout=60)

    # Noise in the server (the clone copies it), then a refresh token: a new run.
    noisy = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "sglang", "env": [{"name": "SPS_SIM_NOISE_CV", "value": "0.9"}]}
                    ]
                }
            }
        }
    }
    env.apps.patch_namespaced_deployment("server", env.namespace, noisy)
    env.custom.patch_namespaced_custom_object(
        GROUP, VERSION, env.namespace, PLURAL, "sps", {"spec": {"refresh": {"token": "noisy-1"}}}
    )

    def rejected() -> dict[str, Any] | None:
        status = env.profile().get("status") or {}
        return status.get("rejectedTable")

    bad = wait_for("a rejected table", rejected, timeout=240)
    assert bad["hash"] != first["hash"]
    assert "maxRmsMs" in bad["message"]
    degraded = env.condition("Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "FitQualityGateFailed"
    assert "maxRmsMs" in degraded["message"]
    assert table_for(env, GPU_H100) == first
    wait_for("still on the first table", lambda: rolled_to(env, first["hash"]), timeout=60)
    # Kept for inspection, never rolled out.
    assert env.config_map(bad["configMap"])["data"]["table.json"]
    assert env.condition("Ready")["status"] == "True"


def test_e2e_crd_rejects_what_cannot_work(
    e2e_api: ApiClient, realnode_namespace: str, operator_namespace: str
) -> None:
    """CEL rules answer with what to fix (admission, before the operator sees anything)."""
    custom, namespace = client.CustomObjectsApi(e2e_api), realnode_namespace
    cases = [
        ({"server": {"source": "External"}}, "server.url is required"),
        ({"refresh": {"schedule": "every day"}}, "cron expression"),
        ({"selector": {}}, "selector must not be empty"),
        ({"rollout": {"mode": "AnnotateOnly"}}, "rollout.tableConfigMap is required"),
    ]
    for i, (spec, message) in enumerate(cases):
        body = sps_profile(name=f"bad-{i}", **spec)
        with pytest.raises(ApiException) as info:
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        assert info.value.status == 422
        assert message in str(info.value.body), info.value.body
    bad_fracs = sps_profile(name="bad-fracs", kind="Additive")
    bad_fracs["spec"]["table"]["sweep"]["fracs"] = [0.0, 1.5]
    with pytest.raises(ApiException) as info:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, bad_fracs)
    assert "every fraction must be in (0, 1]" in str(info.value.body)


def buggy_server_pod(env: Env) -> str:
    """A compact-mode server with no SPS table (the verify-all shortcut swallows pins),
    behind a Service (the operator's default policy admits External servers by Service
    DNS name of the profile's namespace only); returns its base URL."""
    dep = server_deployment(GPU_H100)
    pod_spec = dep["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    container["env"] += [
        {"name": "SGLANG_DSPARK_ENABLE_SPS_RECORD", "value": "1"},
        {"name": "SGLANG_SIMULATE_ACC_LEN", "value": "1.0"},
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "buggy", "labels": {"role": "buggy-profiling-server"}},
        "spec": pod_spec,
    }
    env.core.create_namespaced_pod(env.namespace, pod)

    def ready_ip() -> str | None:
        p = env.core.read_namespaced_pod("buggy", env.namespace)
        ok = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        return p.status.pod_ip if ok else None

    wait_for("the buggy server Ready", ready_ip, timeout=60)
    ports = [{"port": 30000, "targetPort": 30000}]
    spec = {"selector": {"role": "buggy-profiling-server"}, "ports": ports}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "buggy"}, "spec": spec}
    env.core.create_namespaced_service(env.namespace, service)
    return f"http://buggy.{env.namespace}.svc.cluster.local:30000"


def test_e2e_additive_two_phases_and_verify_all_failure_keeps_table(env: Env) -> None:
    """Scenario 2: Additive runs a diagonal phase, then an off-diagonal phase whose server
    has the diagonal table; a 2-D table goes live. Against a server with the verify-all
    bug and no seed table, the profile fails with the pin message and the table stays."""
    create(env, server_deployment(GPU_H100), sps_profile(kind="Additive"))
    env.operator.start()
    # Two profiling phases and a rollout: over 240 s in the shared phase on a host 2.5-3x
    # slower than usual (2026-12-05).
    wait_ready(env, timeout=600.0)
    (table,) = tables(env)
    assert table["kind"] == "Additive"
    run = table["run"]
    assert {j["metadata"]["name"] for j in env.jobs()} == {run, f"{run}-p2"}

    # Phase 2: compact mode, the phase-1 diagonal table mounted and loaded by its server.
    p2 = next(j for j in env.jobs() if j["metadata"]["name"] == f"{run}-p2")
    sidecar = p2["spec"]["template"]["spec"]["initContainers"][-1]
    assert {e["name"]: e.get("value") for e in sidecar["env"]}[
        "SGLANG_RAGGED_VERIFY_MODE"
    ] == "compact"
    i = sidecar["args"].index("--speculative-dspark-sps-table-path")
    assert sidecar["args"][i + 1] == "/etc/sps/seed/table.json"
    seed = env.config_map(f"{run}-seed")
    seed_table = load_sps_table_text(seed["data"]["table.json"])
    # Phase 1's diagonal in the additive format phase 2's table will have (a build whose
    # loader reads only diagonal tables refuses it in the clone, never in production).
    assert isinstance(seed_table, SpsAdditiveCostTable) and len(seed_table.m_probes) > 1
    seed_sha = content_hash(seed["data"]["table.json"])
    logs = env.cluster.pod_logs(env.namespace)
    assert (
        f"SPS table from /etc/sps/seed/table.json (additive, upstream, sha256={seed_sha})" in logs
    )

    live = env.config_map(table["configMap"])
    additive = load_sps_table_text(live["data"]["table.json"])
    assert isinstance(additive, SpsAdditiveCostTable)
    assert additive.bias_seconds > 0 and len(additive.m_probes) > 1
    wait_for("rolled to the additive table", lambda: rolled_to(env, table["hash"]), timeout=60)
    served = serving_pod_info(env, table["hash"])
    assert served["info"]["speculative_dspark_sps_table_path"] == TABLE_PATH

    # The same profile against a buggy External server (no seed table possible): fails.
    url = buggy_server_pod(env)
    env.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        env.namespace,
        PLURAL,
        "sps",
        {"spec": {"server": {"source": "External", "url": url}, "refresh": {"token": "bug-1"}}},
    )

    def failure() -> dict[str, Any] | None:
        return (env.profile().get("status") or {}).get("lastFailure")

    failed = wait_for("the verify-all failure", failure, timeout=180)
    assert "verify-all" in failed["message"], failed
    assert failed["reason"] == "ProfilingFailed"
    status = env.profile()["status"]
    assert [t["hash"] for t in status["tables"]] == [table["hash"]]
    assert running_table_hash(env) == table["hash"]
    degraded = env.condition("Degraded")
    assert degraded["status"] == "True" and "verify-all" in degraded["message"]
    assert env.condition("Ready")["status"] == "True"


def test_e2e_server_change_token_annotation_and_schedule_trigger_runs(env: Env) -> None:
    """Scenario 4: an image change makes the table Stale and re-profiles; a refresh token,
    the reprofile annotation and the schedule (injected clock) each trigger a run."""
    create(env, server_deployment(GPU_H100), sps_profile(refresh={"schedule": "0 3 * * *"}))
    env.operator.start()
    wait_ready(env)
    first = table_for(env, GPU_H100)
    assert first is not None
    status = env.profile()["status"]
    assert status["nextScheduleTime"].endswith("T03:00:00Z")

    patch = {
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "sglang", "image": "lmsysorg/sglang:v0.5.17"}]}
            }
        }
    }
    env.apps.patch_namespaced_deployment("server", env.namespace, patch)

    def stale() -> dict[str, Any] | None:
        c = env.condition("Stale")
        return c if c.get("status") == "True" else None

    stale_cond = wait_for("Stale=True", stale, timeout=60, interval=0.2)
    assert stale_cond["reason"] == "ServerChanged"

    def new_fingerprint() -> dict[str, Any] | None:
        return next((t for t in tables(env) if t["fingerprint"] != first["fingerprint"]), None)

    second = wait_for("a table for the new image", new_fingerprint, timeout=120)
    wait_for("rolled to it", lambda: rolled_to(env, second["hash"]), timeout=90)
    assert env.condition("Stale")["status"] == "False"

    def replaced(previous: dict[str, Any]) -> Callable[[], dict[str, Any] | None]:
        def check() -> dict[str, Any] | None:
            now = next(
                (t for t in tables(env) if t["fingerprint"] == previous["fingerprint"]), None
            )
            return now if now is not None and now["run"] != previous["run"] else None

        return check

    runs_seen: list[str] = []

    def trigger_of_current_run(expected: str) -> Callable[[], bool]:
        def check() -> bool:
            run = (env.profile().get("status") or {}).get("currentRun") or {}
            if run.get("trigger"):
                runs_seen.append(run["trigger"])
            return expected in runs_seen

        return check

    # Refresh token (GitOps).
    env.custom.patch_namespaced_custom_object(
        GROUP, VERSION, env.namespace, PLURAL, "sps", {"spec": {"refresh": {"token": "t-1"}}}
    )
    wait_for("a RefreshToken run", trigger_of_current_run("RefreshToken"), interval=0.2)
    third = wait_for("a refreshed table", replaced(second), timeout=120)

    # The reprofile annotation (`kubectl sps reprofile`), never touching the spec.
    generation = env.profile()["metadata"]["generation"]
    env.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        env.namespace,
        PLURAL,
        "sps",
        {"metadata": {"annotations": {"sps.dev/reprofile": "r-1"}}},
    )
    wait_for("a ReprofileRequested run", trigger_of_current_run("ReprofileRequested"), interval=0.2)
    fourth = wait_for("a re-profiled table", replaced(third), timeout=120)
    assert env.profile()["metadata"]["generation"] == generation

    # The schedule: move the operator's clock past the next 03:00.
    next_time = env.profile()["status"]["nextScheduleTime"]
    due = time.mktime(time.strptime(next_time, "%Y-%m-%dT%H:%M:%SZ")) - time.mktime(time.gmtime())
    env.operator.set_clock_offset(int(due) + 60)
    # The operator sleeps until the schedule by its (offset) clock; the jump happened
    # behind its back, so wake the profile with an event (a label nothing reads).
    env.custom.patch_namespaced_custom_object(
        GROUP, VERSION, env.namespace, PLURAL, "sps", {"metadata": {"labels": {"tick": "1"}}}
    )
    wait_for("a Schedule run", trigger_of_current_run("Schedule"), interval=0.2)
    fifth = wait_for("a scheduled table", replaced(fourth), timeout=120)
    status = env.profile()["status"]
    assert status["lastScheduleTime"] >= next_time
    assert status["nextScheduleTime"] > next_time

    # History: historyLimit (3) tables per GPU product, across fingerprints; the live one
    # and its rollback target (the table it replaced) are kept, then the newest: the first
    # table, of the image no Deployment runs any more, is deleted.
    assert fifth["previous"] == fourth["configMap"]
    expected = {third["configMap"], fourth["configMap"], fifth["configMap"]}

    def published() -> set[str]:
        resp = env.core.list_namespaced_config_map(
            env.namespace,
            label_selector="sps.dev/profile=sps,sps.dev/component=table",
            _preload_content=False,
        )
        return {cm["metadata"]["name"] for cm in json.loads(resp.data)["items"]}

    wait_for("history trimmed to 3", lambda: published() == expected, timeout=30)


def flatten_fields(fields: dict[str, Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for key, value in fields.items():
        if key == ".":
            continue
        path = f"{prefix}/{key}"
        if isinstance(value, dict) and value:
            out += flatten_fields(value, path)
        else:
            out.append(path)
    return out


def test_e2e_annotate_only_owns_only_the_annotation(env: Env) -> None:
    """Scenario 5: AnnotateOnly — Git mounts a stable ConfigMap; the operator writes the
    table into it and owns only the pod-template annotation; a re-apply of the Git
    manifest by another field manager does not fight."""
    dep = server_deployment(GPU_H100)
    pod_spec = dep["spec"]["template"]["spec"]
    pod_spec["volumes"] = [{"name": "table", "configMap": {"name": "sglang-sps-table"}}]
    container = pod_spec["containers"][0]
    container["args"] += ["--speculative-dspark-sps-table-path", TABLE_PATH]
    container["volumeMounts"] = [{"name": "table", "mountPath": "/etc/sps/table"}]
    git_cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "sglang-sps-table", "namespace": env.namespace},
    }
    dep["metadata"]["namespace"] = env.namespace
    manifest = yaml.safe_dump_all([git_cm, dep])

    def git_apply() -> str:
        return env.cluster.kubectl(
            "apply", "--server-side", "--field-manager=gitops", "-f", "-", input=manifest
        )

    git_apply()
    profile = sps_profile(rollout={"mode": "AnnotateOnly", "tableConfigMap": "sglang-sps-table"})
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, profile)
    env.operator.start()
    wait_ready(env)
    table = table_for(env, GPU_H100)
    assert table is not None
    wait_for("rolled", lambda: rolled_to(env, table["hash"]), timeout=90)

    stable = env.config_map("sglang-sps-table")
    published = env.config_map(table["configMap"])
    assert stable["data"]["table.json"] == published["data"]["table.json"]

    live = env.deployment()
    entries = {
        m["operation"]: flatten_fields(m["fieldsV1"])
        for m in live["metadata"]["managedFields"]
        if m["manager"] == "sps-operator"
    }
    assert sorted(entries["Apply"]) == [
        "/f:spec/f:template/f:metadata/f:annotations/f:sps.dev/table",
        "/f:spec/f:template/f:metadata/f:annotations/f:sps.dev/table-hash",
    ]
    # The one record of which profile serves it (a merge patch, not part of the apply).
    assert entries["Update"] == ["/f:metadata/f:annotations/f:sps.dev/owner"]
    assert set(entries) == {"Apply", "Update"}
    # Git's fields are untouched: same args, same volume, no injected volume.
    (c,) = live["spec"]["template"]["spec"]["containers"]
    assert c["args"] == container["args"]
    assert [v["name"] for v in live["spec"]["template"]["spec"]["volumes"]] == ["table"]

    # Git re-applies the original manifest (another field manager, no force): no conflict,
    # no change, the operator's annotation stays.
    generation = live["metadata"]["generation"]
    git_apply()
    time.sleep(3)
    after = env.deployment()
    assert after["metadata"]["generation"] == generation
    assert running_table_hash(env) == table["hash"]
    served = serving_pod_info(env, table["hash"])
    assert served["info"]["speculative_dspark_sps_table_path"] == TABLE_PATH


def test_e2e_delete_profile_cleans_up_and_leaves_deployment_serving(env: Env) -> None:
    """Scenario 8: deleting the SpsProfile removes what it owns (Jobs, results, RBAC,
    history), releases the live table, and leaves the Deployment serving untouched."""
    create(env, server_deployment(GPU_H100), sps_profile())
    env.operator.start()
    wait_ready(env)
    table = table_for(env, GPU_H100)
    assert table is not None
    wait_for("rolled", lambda: rolled_to(env, table["hash"]), timeout=90)
    template = env.deployment()["spec"]["template"]
    assert env.jobs()

    env.delete_profile(timeout=60)

    def owned_left() -> list[str]:
        names = [j["metadata"]["name"] for j in env.jobs()]
        resp = env.core.list_namespaced_config_map(
            env.namespace, label_selector="sps.dev/profile=sps", _preload_content=False
        )
        for cm in json.loads(resp.data)["items"]:
            if cm["metadata"]["name"] != table["configMap"]:
                names.append(cm["metadata"]["name"])
        return names

    wait_for("owned objects collected", lambda: not owned_left(), timeout=90)
    released = env.config_map(table["configMap"])
    dep = env.deployment()
    # Released, held only by the Deployment that mounts it (issue 36 §1): the collector keeps
    # it while the Deployment exists, and takes it with the Deployment.
    owners = released["metadata"].get("ownerReferences") or []
    assert [(o["kind"], o["uid"], o.get("controller")) for o in owners] == [
        ("Deployment", dep["metadata"]["uid"], None)
    ], owners
    assert released["metadata"]["labels"]["sps.dev/released"] == "true"
    # Untouched: the same template (the ownership record leaves the metadata, which bumps
    # a Deployment's generation but restarts nothing).
    assert dep["spec"]["template"] == template
    assert "sps.dev/owner" not in (dep["metadata"].get("annotations") or {})
    assert running_table_hash(env) == table["hash"]
    serving_pod_info(env, table["hash"])


def test_e2e_namespace_mode_rbac_is_enough_and_no_more(env: Env) -> None:
    """The chart in namespaces mode (every e2e test's operator: a Role in the watched
    namespace + the cluster-scoped ClusterRole) runs the whole flow; the operator's account
    can do nothing elsewhere, and kopf leaves no annotations on the Deployment or Nodes."""
    namespace, op_ns = env.namespace, env.operator.namespace
    # The same server and profile in a namespace it does not watch, created first: by the
    # time the watched profile is Ready, an operator that saw this one would have acted.
    other = env.cluster.create_namespace(f"{namespace[:50]}-unwatched")
    apps, custom = env.apps, env.custom
    apps.create_namespaced_deployment(other, server_deployment(GPU_H100))
    custom.create_namespaced_custom_object(GROUP, VERSION, other, PLURAL, sps_profile())
    create(env, server_deployment(GPU_H100), sps_profile())
    env.operator.start()
    manifest = env.cluster.helm("get", "manifest", env.operator.name, "--namespace", op_ns)
    objects = [d for d in yaml.safe_load_all(manifest) if d]
    kinds = {(d["kind"], d["metadata"].get("namespace")) for d in objects}
    assert ("Role", namespace) in kinds and ("ClusterRole", None) in kinds
    (account,) = [d["metadata"]["name"] for d in objects if d["kind"] == "ServiceAccount"]
    as_operator = f"--as=system:serviceaccount:{op_ns}:{account}"
    for verb, resource, where, allowed in [
        ("create", "jobs", namespace, "yes"),
        ("patch", "deployments", namespace, "yes"),
        ("list", "nodes", namespace, "yes"),
        ("create", "jobs", op_ns, "no"),
        ("list", "deployments", other, "no"),
        ("patch", "deployments", other, "no"),
        ("create", "jobs", other, "no"),
        ("list", "pods", "default", "no"),
        ("patch", "deployments", "default", "no"),
        ("get", "secrets", namespace, "no"),
        ("update", "spsprofiles", namespace, "no"),
    ]:
        out = env.cluster.kubectl(
            "auth", "can-i", verb, resource, "-n", where, as_operator, check=False
        )
        assert out.strip() == allowed, (verb, resource, where)

    wait_ready(env)
    (table,) = tables(env)
    wait_for("rolled", lambda: rolled_to(env, table["hash"]), timeout=90)
    dep_annotations = env.deployment()["metadata"].get("annotations") or {}
    assert not [k for k in dep_annotations if "kopf" in k or k.startswith("sps.dev/last")]
    try:
        unwatched = custom.get_namespaced_custom_object(GROUP, VERSION, other, PLURAL, "sps")
        assert not unwatched.get("status") and not unwatched["metadata"].get("finalizers")
        assert not env.batch.list_namespaced_job(other).items
        template = apps.read_namespaced_deployment("server", other).spec.template
        assert "sps.dev/table-hash" not in (template.metadata.annotations or {})
    finally:
        env.cluster.delete_namespace(other)
    for node in env.core.list_node().items:
        assert not [k for k in (node.metadata.annotations or {}) if "kopf" in k or "sps.dev" in k]


def test_e2e_mixed_gpu_products_give_a_condition_not_a_table(env: Env) -> None:
    """Pods of one Deployment on two GPU products: a clear condition, no profiling run."""
    dep = server_deployment(GPU_H100)
    dep["spec"]["replicas"] = 2
    pod_spec = dep["spec"]["template"]["spec"]
    del pod_spec["nodeSelector"]
    # H100 or H200, one pod each (the spread); never the third product's pool, which the
    # capacity tests fill beside this one (e2e_pool.POOL).
    products = [GPU_H100, GPU_H200]
    pod_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": products},
        ]}],
    }}}  # fmt: skip
    pod_spec["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "nvidia.com/gpu.product",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"deploy": "server"}},
        }
    ]
    create(env, dep, sps_profile())
    env.operator.start()

    def degraded() -> dict[str, Any] | None:
        c = env.condition("Degraded")
        return c if c.get("status") == "True" else None

    cond = wait_for("Degraded=True", degraded, timeout=90)
    assert cond["reason"] == "MixedGpuProducts"
    assert "several GPU products" in cond["message"] and "nodeSelector" in cond["message"]
    placed = {p["spec"].get("nodeName") for p in env.pods("deploy=server")}
    assert placed & set(env.cluster.nodes_with_product(GPU_H100))
    assert placed & set(env.cluster.nodes_with_product(GPU_H200))
    time.sleep(3)
    status = env.profile()["status"]
    assert status.get("currentRun") is None and not status.get("tables")
    assert env.jobs() == []
    assert env.condition("Ready")["status"] == "False"

"""The safety contract (issue 9), one test per case: no wrong table ever reaches a
server, and every failure says why. Each test failed on the operator before the fix."""

from __future__ import annotations

import base64
import contextlib
import copy
import gzip
import json
import math

import pytest
from controller_harness import (
    H100,
    H200,
    NS,
    SERVER_ARGS,
    Harness,
    additive_rounds,
    deployment,
    profile_body,
    rounds,
)
from kubernetes.client.rest import ApiException

from sps_operator.api import labels as L
from sps_operator.api.kinds import RunPhase
from sps_operator.api.result import build_patch
from sps_operator.controller.finalizer import nothing_to_release, release
from sps_operator.controller.passes.state import Settings
from sps_operator.controller.policies.job_policy import JobPolicy


def live_harness(**spec: object) -> Harness:
    """One Deployment on H100 with a live table."""
    h = Harness.one_target(**spec)
    status = h.profile_once()
    assert status["tables"] and h.condition("Ready")[0] == "True", status
    return h


def applied_to(h: Harness, deployment: str) -> list[dict]:
    return [b for b in h.kube.applied if b["metadata"]["name"] == deployment]


def writes_to(h: Harness, deployment: str) -> int:
    patches = [p for p in h.kube.metadata_patches if p[0] == "Deployment" and p[1] == deployment]
    return len(applied_to(h, deployment)) + len(patches)


# --------------------------------------------------------------------------- 1. foreign servers


def test_a_table_never_lands_on_a_server_it_was_not_measured_for() -> None:
    h = live_harness()
    other_model = [a if a != "org/model-8b" else "org/other-70b" for a in SERVER_ARGS]
    h.add(deployment("other", args=other_model))
    h.add(deployment("vllm", command=["python3", "-m", "vllm.entrypoints.openai.api_server"]))
    h.place("other")
    h.place("vllm")
    status = h.settle()
    # The vLLM Deployment is refused by name and never touched.
    vllm = next(t for t in status["targets"] if t["deployment"] == "vllm")
    assert vllm["state"] == "Refused" and vllm["reason"] == "NotAnSglangServer"
    assert writes_to(h, "vllm") == 0
    assert h.running_hash("vllm") is None
    # The other model does not get the first model's table: it gets its own run.
    assert h.running_hash("other") is None
    assert status["currentRun"]["target"] == "other"
    assert status["currentRun"]["trigger"] == "NoTable"
    assert h.condition("Ready")[:2] == ("False", "Profiling")
    h.finish()
    status = h.settle()
    measured_for = {(t["fingerprint"], t["configMap"]) for t in status["tables"]}
    for target in status["targets"]:
        if target["deployment"] == "vllm":
            continue
        assert target["state"] == "Live"
        assert (target["fingerprint"], target["table"]) in measured_for
        template = h.template(target["deployment"])["metadata"]["annotations"]
        assert template[L.ANNOTATION_TABLE] == target["table"]
    assert h.template("other") != h.template("server")


def test_a_stale_table_stays_where_it_runs_but_is_never_newly_rolled() -> None:
    h = live_harness()
    live = h.running_hash()
    dep = h.kube.obj("Deployment", "server")
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = "lmsysorg/sglang:v2"
    applies = len(h.kube.applied)
    status = h.settle()
    (target,) = status["targets"]
    assert target["state"] == "Stale" and "a new table is being profiled" in target["message"]
    assert h.running_hash() == live and len(h.kube.applied) == applies
    assert status["currentRun"]["trigger"] == "ServerChanged"
    assert h.condition("Stale")[:2] == ("True", "ServerChanged")
    assert h.condition("Ready")[0] == "False"


# --------------------------------------------------------------------------- 2. two profiles


def test_two_profiles_selecting_one_deployment_never_fight() -> None:
    h = Harness()
    h.add(deployment())
    h.add(profile_body("older"))
    h.place()
    h.profile_once("older")
    h.tick()
    h.add(profile_body("newer", table={"kind": "Diagonal", "sweep": {"batchSizes": [1, 2, 4, 8],
                                                                     "repeats": 2}}))  # fmt: skip
    generation = h.kube.obj("Deployment", "server")["metadata"]["generation"]
    owner = h.kube.obj("Deployment", "server")["metadata"]["annotations"][L.ANNOTATION_OWNER]
    assert owner == "older"
    writes_before = writes_to(h, "server")
    for _ in range(10):
        h.tick(5)
        h.run_pass("newer")
        h.run_pass("older")
    assert h.kube.obj("Deployment", "server")["metadata"]["generation"] == generation
    assert writes_to(h, "server") == writes_before
    newer = h.status("newer")
    assert newer.get("currentRun") is None and not newer.get("tables")
    (target,) = newer["targets"]
    assert target["reason"] == "Conflict" and target["owner"] == "older"
    assert h.condition("Degraded", "newer")[:2] == ("True", "Conflict")
    assert h.condition("Ready", "newer")[:2] == ("False", "Conflict")
    assert "'older'" in h.condition("Ready", "newer")[2]
    assert h.condition("Ready", "older")[0] == "True"


def test_the_recorded_owner_keeps_its_deployment_and_a_deleted_one_hands_it_over() -> None:
    h = Harness()
    h.add(deployment())
    h.add(profile_body("b"))  # created first, so older
    h.add(profile_body("a"))
    h.place()
    h.profile_once("b")
    assert h.kube.obj("Deployment", "server")["metadata"]["annotations"][L.ANNOTATION_OWNER] == "b"
    # b is deleted: its release removes the record, and a takes over.
    released = release(h.kube, NS, "b", h.kube.obj("SpsProfile", "b")["metadata"]["uid"])
    assert released == [h.status("b")["tables"][0]["configMap"]]
    del h.kube.objects[("SpsProfile", NS, "b")]
    status = h.profile_once("a")
    assert status["targets"][0]["owner"] == "a" and status["targets"][0]["state"] == "Live"


def test_a_claim_on_a_changed_deployment_is_retried_not_forced() -> None:
    h = Harness.with_finished_job()
    h.kube.fail["patch_Deployment"] = ApiException(status=409, reason="Conflict")
    h.tick()
    status = h.run_pass()
    assert "retrying" in status["targets"][0]["message"] and not applied_to(h, "server")
    assert h.settle()["targets"][0]["state"] == "Live"


# --------------------------------------------------------------------------- 3. shell scripts


def test_a_shell_wrapped_server_is_never_reported_live_under_inject() -> None:
    h = Harness()
    script = "exec python3 -m sglang.launch_server " + " ".join(SERVER_ARGS)
    h.add(deployment(command=["sh", "-c", script], args=None))
    h.add(profile_body())
    h.place()
    status = h.settle()
    (target,) = status["targets"]
    assert target["reason"] == "ShellWrappedServer" and not target["rolledOut"]
    assert "AnnotateOnly" in target["message"]
    assert status.get("currentRun") is None and writes_to(h, "server") == 0
    assert h.condition("RolledOut")[0] == "False" and h.condition("Ready")[0] == "False"


def annotate_only_deployment(script: str | None = None) -> dict:
    flag = ["--speculative-dspark-sps-table-path", "/etc/sps/table/table.json"]
    dep = (
        deployment(command=["sh", "-c", script], args=None)
        if script
        else deployment(args=[*SERVER_ARGS, *flag])
    )
    pod = dep["spec"]["template"]["spec"]
    pod["volumes"] = [{"name": "git-table", "configMap": {"name": "llama-sps"}}]
    pod["containers"][0]["volumeMounts"] = [{"name": "git-table", "mountPath": "/etc/sps/table"}]
    return dep


ANNOTATE_ONLY = {"rollout": {"mode": "AnnotateOnly", "tableConfigMap": "llama-sps"}}


def test_annotate_only_serves_a_plain_shell_script_that_reads_the_table() -> None:
    script = (
        "exec python3 -m sglang.launch_server "
        + " ".join(SERVER_ARGS)
        + " --speculative-dspark-sps-table-path /etc/sps/table/table.json"
    )
    h = Harness()
    h.add(annotate_only_deployment(script))
    h.add(profile_body(**ANNOTATE_ONLY))
    h.place()
    status = h.profile_once()
    (table,) = status["tables"]
    assert status["targets"][0]["state"] == "Live"
    stable = h.kube.obj("ConfigMap", "llama-sps")
    assert stable["metadata"]["annotations"][L.ANNOTATION_TABLE_HASH] == table["hash"]
    assert stable["data"]["table.json"] == json.dumps(h.table_json(table["configMap"]),
                                                      separators=(",", ":"))  # fmt: skip
    # The clone ran the script's command line in exec form, without the stable table.
    job = h.kube.kinds("Job")[0]["spec"]["template"]["spec"]
    sidecar = job["initContainers"][-1]
    assert sidecar["command"] == ["python3", "-m", "sglang.launch_server"]
    assert "--speculative-dspark-sps-table-path" not in sidecar["args"]
    assert all(v["name"] != "git-table" for v in job["volumes"])


def test_annotate_only_refuses_a_deployment_that_does_not_read_the_table() -> None:
    h = Harness()
    dep = annotate_only_deployment()
    dep["spec"]["template"]["spec"]["containers"][0]["args"] = list(SERVER_ARGS)  # no flag
    h.add(dep)
    h.add(profile_body(**ANNOTATE_ONLY))
    h.place()
    target = h.settle()["targets"][0]
    assert (
        target["reason"] == "TableNotMounted"
        and "reads its table from nowhere" in target["message"]
    )


# --------------------------------------------------------------------------- 4. the Job's result


def raw_result(lines: list[dict]) -> dict:
    text = "".join(json.dumps(r, allow_nan=True) + "\n" for r in lines)
    return {"data": {"status": "succeeded", "rounds.jsonl": text}}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"steps_per_sec": 1e8}, "ResultRefused"),
        ({"steps_per_sec": 1e-9}, "ResultRefused"),  # a step of 1e12 ms
        ({"steps_per_sec": 0.0}, "ResultRefused"),
        ({"steps_per_sec": math.inf}, "ResultRefused"),
        ({"steps_per_sec": math.nan}, "ResultRefused"),
        ({"batch_size_per_rank": 64, "batch_size": 64, "batch_tokens": 256}, "SweepMismatch"),
    ],
)
def test_an_implausible_result_never_becomes_a_table(change: dict, reason: str) -> None:
    h = live_harness(refresh={"token": "a"})
    live = h.running_hash()
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.tick()
    h.run_pass()
    bad = rounds()
    bad[3] = {**bad[3], **change}
    h.finish(result=raw_result(bad))
    status = h.settle()
    assert status["lastFailure"]["reason"] == reason, status["lastFailure"]
    assert len(status["tables"]) == 1 and h.running_hash() == live
    assert h.condition("Degraded")[:2] == ("True", reason)


def _rerun(h: Harness) -> None:
    """A new run on a profile with a live table (its refresh token changed)."""
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.tick()
    h.run_pass()


def test_a_result_that_covers_part_of_the_sweep_never_becomes_the_live_table() -> None:
    # Issue 18 #7: bs 1 and 2 of a sweep of bs 1, 2, 4 (x 2 repeats) became the live table.
    h = live_harness(refresh={"token": "a"})
    live = h.running_hash()
    _rerun(h)
    h.finish(result=build_patch(status="succeeded", rounds=rounds()[:2]))
    status = h.settle()
    assert status["lastFailure"]["reason"] == "IncompleteSweep", status["lastFailure"]
    assert "cover 2 of the 6 cells" in status["lastFailure"]["message"]
    assert len(status["tables"]) == 1 and h.running_hash() == live
    assert h.condition("Degraded")[:2] == ("True", "IncompleteSweep")


def test_a_short_first_phase_is_refused_like_a_short_table_not_retried() -> None:
    # An Additive run's diagonal phase is judged on its own before phase 2 is seeded with it:
    # a short one ends the run, and like any sweep that is not the asked one it waits for a
    # new trigger instead of re-running the same Job on backoff.
    h = Harness.one_target(table={"kind": "Additive", "sweep": {"batchSizes": [1, 2, 4]}})
    h.tick()
    first = h.run_pass()["currentRun"]["name"]
    h.finish(result=build_patch(status="succeeded", rounds=rounds()[:2]))
    status = h.settle()
    assert status["lastFailure"]["reason"] == "IncompleteSweep"
    assert status["lastFailure"]["message"].startswith("phase 1 (diagonal): ")
    for _ in range(5):
        h.tick(3600)
        h.run_pass()
    assert h.status().get("currentRun") is None, "the same sweep was run again"
    assert len(h.kube.kinds("Job")) == 1 and h.kube.kinds("Job")[0]["metadata"]["name"] == first


def test_copies_of_one_round_never_outvote_the_real_repeats() -> None:
    # Issue 18 #8: the (repeat 0, bs 4) cell reported five times, four of them 11 % fast
    # (still slower than bs 2, so nothing looks doubtful): they outvoted the two real
    # repeats of bs 4, and the table said 12.5 ms where the GPU takes 14.
    h = live_harness(refresh={"token": "a"})
    live = h.running_hash()
    _rerun(h)
    honest = rounds()
    forged = {**honest[2], "steps_per_sec": 1 / 0.0125}
    h.finish(result=build_patch(status="succeeded", rounds=[*honest, *[forged] * 4]))
    status = h.settle()
    assert status["lastFailure"]["reason"] == "SweepMismatch"
    assert "repeat 0 bs 4 5 times" in status["lastFailure"]["message"]
    assert len(status["tables"]) == 1 and h.running_hash() == live


def test_a_huge_integer_in_a_running_jobs_result_does_not_end_the_run() -> None:
    # Issue 18 #23: a 5000-digit integer raised a bare ValueError out of the result's
    # reader; the run ended while its Job still ran.
    h = Harness.one_target()
    h.tick()
    run = h.run_pass()["currentRun"]
    cm = h.kube.obj("ConfigMap", run["name"] + "-result", NS)
    huge = '{"batch_size_per_rank":1,"batch_tokens":4,"steps_per_sec":' + "9" * 5000 + "}\n"
    cm["data"] = {"status": "succeeded", "rounds.jsonl": huge, "manifest.json": "{}"}
    status = h.settle()
    assert status["currentRun"]["name"] == run["name"] and not status.get("lastFailure")
    h.finish(result={"data": cm["data"]})  # the Job ends: now the result is judged
    status = h.settle()
    assert status["lastFailure"]["reason"] == "ResultRefused"
    assert "more than 4300 digits" in status["lastFailure"]["message"]


def test_a_result_that_claims_faster_steps_at_more_tokens_is_doubtful() -> None:
    h = live_harness(refresh={"token": "a"})
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.tick()
    h.run_pass()
    lying = rounds()
    for r in lying:
        if r["batch_size_per_rank"] == 4:
            r["steps_per_sec"] *= 3  # 4 requests 3x faster than 2
    h.finish(result=build_patch(status="succeeded", rounds=lying))
    status = h.settle()
    assert status["lastFailure"]["reason"] == "DoubtfulMeasurement"
    assert "cannot be that much faster" in status["lastFailure"]["message"]


def test_an_additive_fit_predicting_negative_steps_is_refused() -> None:
    h = Harness()
    h.add(deployment())
    spec = {
        "table": {"kind": "Additive", "sweep": {"batchSizes": [1, 2, 4], "fracs": [0.25, 0.5, 1.0]}}
    }
    h.add(profile_body(**spec))  # fmt: skip
    h.place()
    h.tick()
    h.run_pass()
    h.finish(result=build_patch(status="succeeded", rounds=rounds(batch_sizes=(1, 2, 4))[:3]))
    h.tick()
    run = h.run_pass()["currentRun"]
    assert run["phase"] == "OffDiagonal"
    # Steps that get (implausibly) cheaper with the budget make theta fall below -bias.
    cells = additive_rounds()
    for r in cells:
        r["steps_per_sec"] = 1.0 / (0.02 - 0.0019 * r["batch_tokens"] / r["batch_size_per_rank"])
    h.finish(result=build_patch(status="succeeded", rounds=cells), phase=RunPhase.OFF_DIAGONAL)
    status = h.settle()
    assert not status.get("tables")
    assert status["lastFailure"]["reason"] in ("SelfCheckFailed", "DoubtfulMeasurement")
    assert h.running_hash() is None


def test_a_decompression_bomb_is_refused_without_being_expanded() -> None:
    h = Harness.one_target()
    h.tick()
    h.run_pass()
    bomb = base64.b64encode(gzip.compress(b"\n" * (10 * 1024 * 1024))).decode()
    h.finish(result={"data": {"status": "succeeded"}, "binaryData": {"rounds.jsonl.gz": bomb}})
    status = h.settle()
    assert status["lastFailure"]["reason"] == "ResultRefused"
    assert "expands beyond" in status["lastFailure"]["message"]


# --------------------------------------------------------------------------- 5. quality


def test_a_one_probe_measurement_is_refused() -> None:
    h = Harness.one_target()
    h.tick()
    h.run_pass()
    one = [r for r in rounds() if r["batch_size_per_rank"] == 1]
    h.finish(result=build_patch(status="succeeded", rounds=one))
    status = h.settle()
    assert not status.get("tables") and h.running_hash() is None
    # The sweep asked for three batch sizes twice: the one probe is an incomplete sweep
    # (the self-check's one-probe refusal stays behind it:
    # `test_tables_selfcheck.py::test_a_one_probe_table_is_sglangs_verify_all`).
    assert status["lastFailure"]["reason"] == "IncompleteSweep"
    assert "cover 2 of the 6 cells" in status["lastFailure"]["message"]


def test_quality_reports_the_largest_absolute_error() -> None:
    h = live_harness()
    quality = h.status()["tables"][0]["quality"]
    assert quality["maxRelErr"] >= 0


# --------------------------------------------------------------------------- 6. no silent wedge


@pytest.mark.parametrize(
    ("method", "status"),
    [
        ("create_ConfigMap", 422),
        ("list_jobs", 500),
        ("list_profiles", 403),
        ("apply_Deployment", 422),
        ("patch_Deployment", 400),
    ],
)
def test_an_api_error_anywhere_in_a_pass_becomes_status(method: str, status: int) -> None:
    h = Harness.with_finished_job()
    h.kube.fail[method] = ApiException(status=status, reason="Boom")
    for _ in range(6):
        h.tick(60)
        h.run_pass()
        if method not in h.kube.fail:
            break
    seen = [e for e in h.kube.events if e[0] in ("ReconcileError", "ProfilingFailed")]
    assert seen and h.status().get("lastFailure"), "the failure left no trace"
    # The profile recovers once the API does (a failed run is retried after its backoff).
    for _ in range(20):
        h.tick(120)
        status = h.run_pass()
        run = status.get("currentRun")
        if run and not h.kube.obj("Job", run["job"]).get("status"):
            h.finish()
        if h.condition("Ready")[0] == "True":
            break
    assert h.status().get("tables") and h.condition("Ready")[0] == "True", h.status()


def test_an_exception_inside_a_step_ends_the_run_with_a_reason() -> None:
    h = Harness.with_finished_job()
    h.kube.fail["create_ConfigMap"] = ApiException(status=422, reason="Invalid")
    h.tick()
    status = h.run_pass()
    assert status["lastFailure"]["reason"] == "ReconcileError"
    assert (
        "publish" in status["lastFailure"]["message"] or "run" in status["lastFailure"]["message"]
    )
    assert "API error 422" in status["lastFailure"]["message"]
    assert status.get("currentRun") is None  # ended, retried with backoff
    assert h.condition("Degraded")[:2] == ("True", "ReconcileError")


def test_a_huge_progress_string_cannot_wedge_the_status() -> None:
    h = Harness.one_target()
    h.tick()
    h.run_pass()
    run = h.status()["currentRun"]
    h.kube.obj("ConfigMap", run["name"] + "-result")["data"] = {
        "status": "running",
        "progress": "x" * 32768,
    }
    h.tick()
    status = h.run_pass()
    assert len(status["currentRun"]["progress"]) <= 256


def test_a_status_the_api_refuses_is_replaced_by_one_that_says_so() -> None:
    h = Harness.one_target()
    h.kube.reject_status = ApiException(status=422, reason="Invalid")
    h.tick()
    h.run_pass()
    last = h.kube.status_patches[-1]
    assert last["lastFailure"]["reason"] == "StatusWriteFailed"
    degraded = next(c for c in last["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "StatusWriteFailed"


# --------------------------------------------------------------------------- 8. GitOps day one


def test_annotate_only_creates_sglangs_no_table_form_at_once() -> None:
    h = Harness()
    h.add(annotate_only_deployment())
    h.add(profile_body(**ANNOTATE_ONLY))
    h.place()
    h.tick()
    h.run_pass()
    stable = h.kube.obj("ConfigMap", "llama-sps")
    assert json.loads(stable["data"]["table.json"]) == {
        "sample_batch_tokens": [1],
        "sample_steps_per_sec": [1.0],
        "max_batch_tokens": 1,
    }
    assert stable["metadata"]["annotations"][L.ANNOTATION_PLACEHOLDER] == "true"
    assert "ownerReferences" not in stable["metadata"]  # outlives the profile
    h.finish()
    h.settle()
    assert (
        h.kube.obj("ConfigMap", "llama-sps")["metadata"]["annotations"][L.ANNOTATION_PLACEHOLDER]
        == "false"
    )


def test_annotate_only_with_deployments_needing_different_tables_is_refused() -> None:
    h = Harness()
    h.add(annotate_only_deployment())
    second = annotate_only_deployment()
    second["metadata"]["name"] = "second"
    second["spec"]["selector"]["matchLabels"]["deploy"] = "second"
    second["spec"]["template"]["metadata"]["labels"]["deploy"] = "second"
    h.add(second)
    h.add(profile_body(**ANNOTATE_ONLY))
    h.place("server", "n1")
    h.place("second", "n2")
    status = h.settle()
    assert {t["reason"] for t in status["targets"]} == {"OneTableConfigMapManyServers"}
    assert status.get("currentRun") is None


# --------------------------------------------------------------------------- 9. release


def test_deletion_releases_exactly_the_tables_a_template_mounts() -> None:
    h = live_harness(refresh={"token": "a"})
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.profile_once(result=build_patch(status="succeeded", rounds=rounds(scale=1.2)))
    status = h.status()
    mounted = status["targets"][0]["table"]
    older = status["tables"][0]["previous"]
    uid = h.kube.obj("SpsProfile", "p")["metadata"]["uid"]
    assert release(h.kube, NS, "p", uid) == [mounted]
    server = h.kube.obj("Deployment", "server")["metadata"]
    # The profile lets it go; the Deployment that mounts it holds it (goes with it).
    assert h.kube.obj("ConfigMap", mounted)["metadata"]["ownerReferences"] == [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "server", "uid": server["uid"]}
    ]
    assert h.kube.obj("ConfigMap", mounted)["metadata"]["labels"][L.LABEL_RELEASED] == "true"
    assert h.kube.obj("ConfigMap", older)["metadata"]["ownerReferences"]  # goes with the profile
    assert L.ANNOTATION_OWNER not in (h.kube.obj("Deployment", "server")["metadata"].get(
        "annotations") or {})  # fmt: skip


def test_release_that_fails_keeps_the_finalizer() -> None:
    import kopf

    from sps_operator.controller.handlers import release_or_retry
    from sps_operator.controller.reconcile.reconciler import Reconciler

    h = live_harness()
    h.kube.fail["patch_ConfigMap"] = ApiException(status=500, reason="Boom")
    meta = h.kube.obj("SpsProfile", "p")["metadata"]
    with pytest.raises(kopf.TemporaryError, match="could not release"):
        release_or_retry(Reconciler(h.kube, Settings()), NS, "p", meta["uid"])
    # Retried, it succeeds: the mounted table is released.
    release_or_retry(Reconciler(h.kube, Settings()), NS, "p", meta["uid"])
    mounted = h.status()["targets"][0]["table"]
    assert h.kube.obj("ConfigMap", mounted)["metadata"]["labels"][L.LABEL_RELEASED] == "true"


# --------------------------------------------------------------------------- 10. honest state


def test_a_completed_reprofile_is_not_stale_because_of_another_gpus_table() -> None:
    h = Harness()
    h.add(deployment())
    h.add(profile_body(refresh={"token": "a"}))
    for node in ("n2", "n1"):
        h.place(node=node)
        h.profile_once()
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.profile_once()
    assert h.condition("Stale")[:2] == ("False", "Current")
    assert {t["gpuProduct"] for t in h.status()["tables"]} == {H100, H200}


def test_an_identical_remeasurement_never_becomes_its_own_previous() -> None:
    h = live_harness(refresh={"token": "a"})
    (first,) = h.status()["tables"]
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    (again,) = h.profile_once()["tables"]
    assert again["hash"] == first["hash"] and again.get("previous") != again["configMap"]
    assert again.get("previous") == first.get("previous")
    assert "TableUnchanged" in [e[0] for e in h.kube.events]
    assert h.status().get("rejectedTable") is None


def annotate_reprofile(h: Harness, value: str) -> None:
    meta = h.kube.obj("SpsProfile", "p")["metadata"]
    meta["annotations"] = {**(meta.get("annotations") or {}), "sps.dev/reprofile": value}


def triggers_over(h: Harness, passes: int) -> list[str]:
    seen: list[str] = []
    for _ in range(passes):
        h.tick()
        run = h.run_pass().get("currentRun") or {}
        if run.get("trigger") and run["trigger"] not in seen[-1:]:
            seen.append(run["trigger"])
        if run:
            with contextlib.suppress(KeyError):
                h.finish()
    return seen


def test_a_reprofile_asked_in_the_second_a_table_was_published_is_not_lost() -> None:
    """Seen in CI: `kubectl sps reprofile` right after a table was published, in the same
    second, was recorded (observedReprofile) and never run: timestamps of one-second
    resolution said the table was not older than the request."""
    h = Harness.one_target()
    h.tick()
    h.run_pass()
    h.finish()
    assert h.run_pass()["tables"]  # published at this very second
    annotate_reprofile(h, "r-1")
    h.run_pass()  # the same second
    assert "ReprofileRequested" in triggers_over(h, 6)


def test_a_refresh_asked_while_a_run_measures_is_not_answered_by_that_run() -> None:
    """A run that started before a request measured the server as it was before it: its
    table does not answer the request, another run does."""
    h = live_harness(refresh={"token": "a"})
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.tick()
    assert h.run_pass()["currentRun"]["trigger"] == "RefreshToken"
    h.tick()
    annotate_reprofile(h, "r-1")
    h.run_pass()
    h.finish()
    assert "ReprofileRequested" in triggers_over(h, 6)
    assert h.condition("Stale")[:2] == ("False", "Current")


# --------------------------------------------------------------------------- 11. names


def test_an_object_under_a_derived_name_that_is_not_ours_is_never_adopted() -> None:
    h = Harness.one_target()
    h.tick()
    h.run_pass()
    run = h.status()["currentRun"]
    # Someone else's Job under the same name: simulate by stripping our ownership.
    job = h.kube.obj("Job", run["job"])
    foreign = copy.deepcopy(job)
    foreign["metadata"]["ownerReferences"] = [{"uid": "someone-else", "controller": True}]
    h.kube.objects[("SpsProfile", NS, "p")]["status"]["currentRun"] = None
    h.kube.objects[("Job", NS, run["job"])] = foreign
    h.reconciler = type(h.reconciler)(h.kube, h.settings, clock=lambda: h.now)  # restart
    h.tick()
    status = h.run_pass()
    assert status["lastFailure"]["reason"] == "NameTaken"
    assert "does not belong to SpsProfile p" in status["lastFailure"]["message"]
    assert status.get("currentRun") is None


# --------------------------------------------------------------------------- 17. job policy


@pytest.mark.parametrize(
    ("job", "allowed", "ok"),
    [
        ({"image": "evil/miner:1"}, Settings(gpu_debounce_seconds=0), False),
        ({"serviceAccountName": "admin"}, Settings(gpu_debounce_seconds=0), False),
        (
            {"image": "registry.example.com/sps/profiler:2"},
            Settings(
                gpu_debounce_seconds=0,
                policy=JobPolicy(allowed_images=("registry.example.com/sps/*",)),
            ),
            True,
        ),
    ],
)
def test_job_image_and_service_account_are_an_operator_level_decision(
    job: dict, allowed: Settings, ok: bool
) -> None:
    h = Harness(settings=allowed)
    h.add(deployment())
    h.add(profile_body(job=job))
    h.place()
    h.tick()
    status = h.run_pass()
    if ok:
        assert status["currentRun"] and h.kube.kinds("Job")
        return
    assert not h.kube.kinds("Job") and status["lastFailure"]["reason"] == "JobPolicy"
    assert "ask the cluster admin" in status["lastFailure"]["message"]


def test_release_skips_a_deployment_deleted_meanwhile() -> None:
    """A Deployment deleted between the list and the patch (deleted with its profile, as a
    GitOps prune does) mounts nothing any more: release goes on, the finalizer goes."""
    h = live_harness()
    h.kube.fail["patch_Deployment"] = ApiException(status=404, reason="Not Found")
    h.kube.fail["patch_ConfigMap"] = ApiException(status=404, reason="Not Found")
    meta = h.kube.obj("SpsProfile", "p")["metadata"]
    assert release(h.kube, NS, "p", meta["uid"]) == []
    assert not h.kube.fail  # both the table's and the Deployment's patch met the 404


def test_an_idle_profile_is_released_without_a_call_and_a_serving_one_never_is() -> None:
    """Deleting an idle profile costs no API call; a profile whose table, ownership record or
    ConfigMap is known to either its status or the caches always goes through `release`."""
    h = live_harness()
    meta = h.kube.obj("SpsProfile", "p")["metadata"]
    name, uid = meta["name"], meta["uid"]
    deployments = h.kube.list_deployments(NS, "")
    config_maps = h.kube.list_config_maps(NS, "")
    assert not nothing_to_release(name, uid, h.status(), deployments, config_maps)
    # Status forgotten (a crash before the write): the caches still say there is work.
    assert not nothing_to_release(name, uid, {}, deployments, config_maps)
    assert not nothing_to_release(name, uid, {}, deployments, [])  # the owner record
    assert not nothing_to_release(name, uid, {}, [], config_maps)  # the tables
    # Caches empty (very new objects): the status says there is work.
    assert not nothing_to_release(name, uid, h.status(), [], [])
    assert nothing_to_release(name, uid, {"targets": [], "tables": []}, [], [])
    assert nothing_to_release("other", "uid-other", {}, deployments, config_maps)


def test_a_pass_that_starts_or_ends_a_run_asks_for_another_at_once() -> None:
    """Status writes wake nobody: a pass that starts or ends a run asks for the next pass
    now, so a request that came while the run was busy (a reprofile annotation) is not left
    to the resync minutes later."""
    from api_snapshot import api_snapshot
    from controller_harness import NODES

    h = Harness.one_target()

    def one_pass() -> float | None:
        h.tick()
        body = copy.deepcopy(h.kube.obj("SpsProfile", "p", NS))
        assert h.reconciler is not None
        return h.reconciler.reconcile(body, api_snapshot(h.kube, body, list(h.pods), NODES))

    assert one_pass() == 0  # started a run
    assert h.status().get("currentRun")
    h.finish()
    woke = [one_pass() for _ in range(4)]
    assert not h.status().get("currentRun")
    assert 0 in woke  # the pass that ended it
    assert woke[-1] != 0  # and nothing more once it rests

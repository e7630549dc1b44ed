"""Whole passes over the builds SGLang ships (issue 20 §2) and the fingerprint's upgrade
(§1): a table goes only onto a server that can load it, a refusal says why before any
Job, a clone that refuses to start ends its run at once, an operator upgrade reprofiles
nothing that did not change, and a server change says what changed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from controller_harness import NS, SERVER_ARGS, Harness, container, deployment, rounds
from controller_harness import profile_body as body

from sps_operator.api import labels as L
from sps_operator.api import limits
from sps_operator.api.hashing import content_hash
from sps_operator.api.legacy_tables import without_v1_twins
from sps_operator.api.models import SpsProfile
from sps_operator.api.reason_registry import FAILURE_ADVICE, TARGET_ADVICE
from sps_operator.api.reasons import (
    DIAGONAL_ONLY_SERVER,
    LORA_NEEDS_STATIC_MODE,
    LORA_UNSUPPORTED,
    SERVER_REFUSED_TO_START,
)
from sps_operator.api.result import build_patch
from sps_operator.controller.kube import names
from sps_operator.controller.policies import compat
from sps_operator.controller.policies.placement import MAX_EXIT_MESSAGE, PodInfo, pod_info
from sps_operator.controller.sglang.serverconfig import (
    TABLE_PATH_FLAG,
    legacy_table_fingerprint,
    parse_server,
    server_config,
)
from sps_operator.plugin.explain import explain, render_explain
from sps_operator.plugin.view import get_row
from sps_sim import flavors

TABLE_PATH = "/etc/sps/table/table.json"
COMPACT = [{"name": "SGLANG_RAGGED_VERIFY_MODE", "value": "compact"}]


def harness(profile: dict[str, Any] | None = None, **server: Any) -> Harness:
    h = Harness()
    h.add(deployment(**server))
    h.add(profile or body())
    h.place()
    return h


def additive() -> dict[str, Any]:
    return body(table={"kind": "Additive", "sweep": {"batchSizes": [1, 2, 4], "repeats": 2}})


def server_args(h: Harness) -> list[str]:
    return list(h.template()["spec"]["containers"][0]["args"])


def findings(h: Harness) -> list[dict[str, str]]:
    return list(explain(h.kube.obj("SpsProfile", "p", NS))["findings"])


# --------------------------------------------------------------------------- the fork's const


def test_a_const_deployment_is_profiled_and_gets_its_table_in_place_of_const() -> None:
    for spelling in ([TABLE_PATH_FLAG, "const"], [f"{TABLE_PATH_FLAG}=const"]):
        h = harness(args=[*SERVER_ARGS, *spelling], env=COMPACT)
        h.tick()
        status = h.run_pass()
        assert status["targets"][0]["tableSource"] == compat.SOURCE_CONST
        job = h.kube.obj("Job", status["currentRun"]["job"])
        clone = job["spec"]["template"]["spec"]["initContainers"][-1]
        # Phase 1 runs static, which needs no table: the clone starts without the flag.
        assert not any(a.startswith(TABLE_PATH_FLAG) for a in clone["args"])
        assert clone["terminationMessagePolicy"] == "FallbackToLogsOnError"
        h.finish()
        status = h.settle()
        assert status["targets"][0]["state"] == "Live", status
        args = server_args(h)
        assert args[-2:] == [TABLE_PATH_FLAG, TABLE_PATH] and "const" not in " ".join(args)
        assert "tableSource" not in status["targets"][0]  # its own table now


def test_an_additive_profile_against_the_fork_is_refused_before_any_job() -> None:
    h = harness(additive(), args=[*SERVER_ARGS, f"{TABLE_PATH_FLAG}=const"], env=COMPACT)
    status = h.settle()
    (target,) = status["targets"]
    assert (target["state"], target["reason"]) == ("Refused", DIAGONAL_ONLY_SERVER)
    assert "fzyzcjy" in target["message"] and "table.kind: Diagonal" in target["message"]
    assert not h.kube.kinds("Job") and status.get("currentRun") is None
    assert f"{TABLE_PATH_FLAG}=const" in server_args(h)  # untouched
    assert h.condition("Ready")[:2] == ("False", DIAGONAL_ONLY_SERVER)
    assert DIAGONAL_ONLY_SERVER in TARGET_ADVICE
    assert any("Diagonal" in f["next"] for f in findings(h))


def test_the_fork_stays_known_after_its_table_replaced_const() -> None:
    """Once Inject replaced `const` by the table's path, nothing in the Deployment says it
    is the fork; Additive is still refused before any Job (not after a wasted phase 1)."""
    h = harness(args=[*SERVER_ARGS, f"{TABLE_PATH_FLAG}=const"], env=COMPACT)
    assert h.profile_once()["targets"][0]["state"] == "Live"
    assert "const" not in " ".join(server_args(h))
    jobs = len(h.kube.kinds("Job"))
    h.kube.edit("SpsProfile", "p", lambda p: p["spec"].update(table=additive()["spec"]["table"]))
    status = h.settle()
    (target,) = status["targets"]
    assert (target["state"], target["reason"]) == ("Refused", DIAGONAL_ONLY_SERVER), target
    assert "const" in target["message"] and "table.kind: Diagonal" in target["message"]
    assert len(h.kube.kinds("Job")) == jobs and status.get("currentRun") is None


def test_diagonal_only_servers_are_remembered_once_and_bounded() -> None:
    c = container()
    config = server_config(c, parse_server(c))
    server = config.fingerprint()
    assert compat.remembered([], config) == [server]
    assert compat.remembered(["a", server, "b"], config) == ["a", server, "b"]
    full = [f"s{i}" for i in range(40)]
    learned = compat.remembered(full, config)
    assert len(learned) == limits.MAX_REPORT_LINES and learned[-1] == server


# --------------------------------------------------------------------------- the clone's refusal


def refuse_in_clone(h: Harness, words: str) -> None:
    """The run's profiling pod: its server sidecar exited with `words` as its last log."""
    run = h.status()["currentRun"]["name"]
    labels = {L.LABEL_RUN: run, L.LABEL_COMPONENT: L.COMPONENT_POD,
              L.LABEL_MANAGED_BY: L.MANAGED_BY}  # fmt: skip
    exits = (("sglang-server", f"Traceback ...\nmsgspec.ValidationError: {words}\n"),)
    h.pods.append(PodInfo(f"{run}-p2-x", labels, "n1", phase="Pending", controller="Job",
                          exits=exits))  # fmt: skip


def test_a_diagonal_only_loader_refuses_the_additive_seed_in_the_clone_never_in_production() -> (
    None
):
    h = harness(additive(), env=COMPACT)
    h.tick()
    h.run_pass()
    h.finish()
    h.tick()
    status = h.run_pass()
    run = status["currentRun"]
    assert run["phase"] == "OffDiagonal"
    # Phase 2's seed is the phase-1 measurement in the additive format: a loader that
    # reads only diagonal tables refuses it here, in the clone.
    seed = h.kube.obj("ConfigMap", run["diagonalTable"])
    assert '"bias_seconds"' in seed["data"]["table.json"]
    refuse_in_clone(h, compat.ADDITIVE_REFUSED)
    h.tick()
    status = h.run_pass()
    failure = status["lastFailure"]
    assert status.get("currentRun") is None  # at once, not after the 30-minute server wait
    assert (failure["reason"], failure["retryable"]) == (DIAGONAL_ONLY_SERVER, False)
    assert compat.ADDITIVE_REFUSED in failure["message"]
    assert len(status["diagonalOnlyServers"]) == 1
    status = h.settle()
    (target,) = status["targets"]
    assert (target["state"], target["reason"]) == ("Refused", DIAGONAL_ONLY_SERVER)
    assert "clone refused an additive table" in target["message"]
    assert h.running_hash() is None and TABLE_PATH_FLAG not in " ".join(server_args(h))
    # No other run started: only the refused run's two Jobs, kept for inspection.
    assert {j["metadata"]["name"] for j in h.kube.kinds("Job")} <= {
        run["job"],
        run["job"].removesuffix("-p2"),
    }
    assert DIAGONAL_ONLY_SERVER in FAILURE_ADVICE
    # The same server with a Diagonal profile is profiled as usual.
    h.kube.edit("SpsProfile", "p", lambda p: p["spec"].update(table=body()["spec"]["table"]))
    assert h.profile_once()["targets"][0]["state"] == "Live"


def test_the_pod_index_keeps_a_profiling_pod_s_last_words_only() -> None:
    """What the kubelet reports for a native sidecar that exited and restarts: its
    termination message (the log's tail under FallbackToLogsOnError) in lastState."""
    words = "x" * 5000 + compat.ADDITIVE_REFUSED
    sidecar = {
        "name": "sglang-server",
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "message": words}},
    }
    done = {"name": "profiler", "state": {"terminated": {"exitCode": 0, "message": "ok"}}}
    status = {"initContainerStatuses": [sidecar], "containerStatuses": [done]}
    run = {L.LABEL_RUN: "r1"}
    ((container_name, last_words),) = pod_info("r1-x", run, {}, status, {}).exits
    assert container_name == "sglang-server" and last_words.endswith(compat.ADDITIVE_REFUSED)
    assert len(last_words) == MAX_EXIT_MESSAGE
    assert pod_info("server-x", {"app": "sglang"}, {}, status, {}).exits == ()


def test_a_crash_the_operator_does_not_know_keeps_the_run_waiting() -> None:
    h = harness(env=COMPACT)
    h.tick()
    h.run_pass()
    refuse_in_clone(h, "CUDA error: an illegal memory access was encountered")
    h.tick()
    assert h.run_pass().get("currentRun") is not None  # may be transient: the Job decides


@pytest.mark.parametrize(
    ("words", "reason"),
    [
        (flavors.REQUIRE_PATH_MESSAGE, SERVER_REFUSED_TO_START),
        (flavors.lora_refusal("compact"), LORA_NEEDS_STATIC_MODE),
        ("Currently LoRA is only compatible with NGRAM speculative decoding.",
         LORA_NEEDS_STATIC_MODE),
        (f"msgspec.ValidationError: {compat.ADDITIVE_REFUSED}", DIAGONAL_ONLY_SERVER),
    ],
)  # fmt: skip
def test_the_clone_s_start_up_refusals_end_the_run_with_their_reason(
    words: str, reason: str
) -> None:
    """SGLang's words as the simulator plays them verbatim: each ends the run at once."""
    h = harness(env=COMPACT)
    h.tick()
    h.run_pass()
    refuse_in_clone(h, words)
    h.tick()
    status = h.run_pass()
    assert status.get("currentRun") is None
    failure = status["lastFailure"]
    assert (failure["reason"], failure["retryable"]) == (reason, False)
    assert reason in FAILURE_ADVICE
    if reason == SERVER_REFUSED_TO_START:
        assert f"{TABLE_PATH_FLAG}=const" in failure["message"]


# --------------------------------------------------------------------------- LoRA


def test_dspark_with_lora_outside_static_mode_gets_no_table_and_no_job() -> None:
    h = harness(args=[*SERVER_ARGS, "--lora-paths", "a=/lora/a"], env=COMPACT)
    status = h.settle()
    (target,) = status["targets"]
    assert (target["state"], target["reason"]) == ("Refused", LORA_NEEDS_STATIC_MODE)
    assert "#34337" in target["message"] and not h.kube.kinds("Job")


def test_dspark_with_lora_in_static_mode_is_profiled_diagonal_and_refused_additive() -> None:
    lora = [*SERVER_ARGS, "--enable-lora"]
    h = harness(additive(), args=lora)
    status = h.settle()
    assert status["targets"][0]["reason"] == LORA_NEEDS_STATIC_MODE
    assert "table.kind: Diagonal" in status["targets"][0]["message"]
    assert not h.kube.kinds("Job")
    h = harness(args=lora)
    h.tick()
    assert h.run_pass().get("currentRun") is not None


def test_releases_up_to_0_5_17_refuse_dspark_with_lora() -> None:
    h = harness(args=[*SERVER_ARGS, "--enable-lora"], image="lmsysorg/sglang:v0.5.17")
    (target,) = h.settle()["targets"]
    assert target["reason"] == LORA_UNSUPPORTED and "NGRAM" in target["message"]


# --------------------------------------------------------------------------- capture-derived


def test_a_capture_derived_server_is_reported_until_its_profiled_table_is_live() -> None:
    env = [*COMPACT, {"name": "SGLANG_DSPARK_ENABLE_CAPTURE_DERIVED_SPS", "value": "1"}]
    h = harness(env=env)
    h.tick()
    status = h.run_pass()
    assert status["targets"][0]["tableSource"] == compat.SOURCE_CAPTURE_DERIVED
    row = get_row(h.kube.obj("SpsProfile", "p", NS), h.now)
    assert row["table"] == "<capture-derived>"
    h.finish()
    status = h.settle()
    assert status["targets"][0]["state"] == "Live" and "tableSource" not in status["targets"][0]
    # A release without PR #35413 ignores the switch: the flat start, nothing to report.
    released = harness(env=env, image="lmsysorg/sglang:v0.5.17")
    assert "tableSource" not in released.settle()["targets"][0]


# --------------------------------------------------------------------------- what changed


def test_a_server_change_says_what_changed_in_the_run_the_condition_and_explain() -> None:
    h = harness()
    assert h.profile_once()["targets"][0]["state"] == "Live"
    h.kube.edit("Deployment", "server", lambda d: d["spec"]["template"]["spec"]["containers"][0][
        "args"].extend(["--page-size", "16", "--max-running", "64"]))  # fmt: skip
    h.tick()
    status = h.run_pass()
    run = status["currentRun"]
    assert run["trigger"] == "ServerChanged"
    assert run["changes"] == ["--max-running-requests: unset -> 64", "--page-size: unset -> 16"]
    stale = h.condition("Stale")
    assert stale[0] == "True" and "changed: --max-running-requests: unset -> 64" in stale[2]
    report = explain(h.kube.obj("SpsProfile", "p", NS))
    assert report["run"]["changes"] == "; ".join(run["changes"])
    assert "the server changed: --max-running-requests" in render_explain(report)


def test_inputs_outside_the_fingerprint_are_in_status_and_explained() -> None:
    h = harness(args=[*SERVER_ARGS, "--speculative-dspark-new-knob", "1"])
    status = h.profile_once()
    (target,) = status["targets"]
    assert target["state"] == "Live"
    assert target["unfingerprinted"] == [
        "--speculative-dspark-new-knob (args): looks like a cost input, not in the fingerprint"
    ]
    assert "unknown" in target["sglangVersion"]
    assert any("not in the fingerprint" in f["what"] for f in findings(h))


# --------------------------------------------------------------------------- upgrade


def as_version_1(h: Harness) -> tuple[str, str]:
    """Rewrite the profile's status and table as the operator before issue 20 left them:
    fingerprints of version 1, the ConfigMap labelled so, its meta.json of version 1.
    Returns (v1 fingerprint, the current one)."""
    c = container()
    config = server_config(c, parse_server(c))
    spec = SpsProfile.model_validate(h.kube.obj("SpsProfile", "p", NS)).spec
    v1 = legacy_table_fingerprint(config, spec.table.to_k8s())
    status = h.status()
    current = status["tables"][0]["fingerprint"]
    cm_name = status["tables"][0]["configMap"]

    def old_status(p: dict[str, Any]) -> None:
        (table,) = without_v1_twins(p["status"]["tables"])
        table.pop("adoptedFrom", None)
        p["status"]["tables"] = [{**table, "fingerprint": v1}]
        p["status"]["targets"][0]["fingerprint"] = v1

    def old_table(cm: dict[str, Any]) -> None:
        cm["metadata"]["labels"][L.LABEL_FINGERPRINT] = v1
        meta = json.loads(cm["data"][L.META_KEY])
        meta["fingerprint"] = v1
        meta["server"] = {**config.legacy, "port": 30000, "table_path": None}
        cm["data"][L.META_KEY] = json.dumps(meta)

    h.kube.edit("SpsProfile", "p", old_status)
    h.kube.edit("ConfigMap", cm_name, old_table)
    return v1, current


def test_an_operator_upgrade_reprofiles_no_server_that_did_not_change() -> None:
    h = harness()
    assert h.profile_once()["targets"][0]["state"] == "Live"
    jobs = len(h.kube.kinds("Job"))
    v1, current = as_version_1(h)
    status = h.settle()
    assert status.get("currentRun") is None and len(h.kube.kinds("Job")) == jobs
    (table,) = without_v1_twins(status["tables"])
    assert (table["fingerprint"], table["adoptedFrom"]) == (current, v1)
    assert status["targets"][0]["state"] == "Live"
    assert h.condition("Stale")[0] == "False"
    # 0.1.0, rolled back to, still finds that table under its own key and may roll it.
    assert v1_finds(h, table["gpuProduct"], v1) == (table["configMap"], table["hash"])
    # From now on it is a version-2 table: an input version 1 did not read reprofiles.
    h.kube.edit("Deployment", "server", lambda d: d["spec"]["template"]["spec"]["containers"][0]
                .setdefault("env", []).append({"name": "SGLANG_SCHEDULER_SKIP_ALL_GATHER",
                                               "value": "1"}))  # fmt: skip
    h.tick()
    run = h.run_pass()["currentRun"]
    assert run["trigger"] == "ServerChanged"
    # The table's record is of version 1, which did not read that input: said so.
    assert run["changes"] == [
        "an input that fingerprint version 1 did not record changed (the table was measured "
        "before the upgrade): `sps-operator fingerprint` lists the server's inputs now"
    ]


def v1_finds(h: Harness, gpu: str, v1: str) -> tuple[str, str] | None:
    """The table 0.1.0 (18c8f3b) would keep on a server of fingerprint `v1` on `gpu`, as
    (ConfigMap, hash), from the status as stored: its `triggers.table_for` (the first
    status.tables entry of that GPU product and fingerprint; none means it profiles the
    server again) and its `rollout.eligible_table` (the profile's ConfigMap labelled with
    that GPU product, fingerprint and hash, whose bytes hash to it)."""
    entry = next(
        (
            t
            for t in h.stored_status().get("tables") or []
            if (t["gpuProduct"], t["fingerprint"]) == (gpu, v1)
        ),
        None,
    )
    if entry is None:
        return None
    cm = h.kube.obj("ConfigMap", entry["configMap"])
    labels = cm["metadata"]["labels"]
    if (labels[L.LABEL_GPU], labels[L.LABEL_FINGERPRINT], labels[L.LABEL_TABLE_HASH]) != (
        names.label_value(gpu), v1, entry["hash"],
    ):  # fmt: skip
        return None
    if content_hash(cm["data"][L.TABLE_KEY]) != entry["hash"]:
        return None
    return entry["configMap"], entry["hash"]


def as_0_1_0_rewrote(h: Harness) -> None:
    """0.1.0's status write: every entry kept, only the fields it knows (it drops
    `adoptedFrom`, `previousHash`, ...)."""
    known = {"gpuProduct", "fingerprint", "kind", "configMap", "hash", "quality", "profiledAt",
             "run", "refreshCount", "previous", "message"}  # fmt: skip

    def rewrite(p: dict[str, Any]) -> None:
        p["status"]["tables"] = [
            {k: v for k, v in t.items() if k in known} for t in p["status"]["tables"]
        ]

    h.kube.edit("SpsProfile", "p", rewrite)


def test_a_rollback_to_0_1_0_finds_the_re_keyed_table_and_a_new_upgrade_adopts_it_again() -> None:
    """The table an upgrade re-keyed is written under its version-1 key too, so 0.1.0
    after a rollback does not profile the server again (nor restart it onto a new
    table); 0.1.0's own status write drops `adoptedFrom`, which the next upgrade reads
    back from the version-1 entry. A table measured after the upgrade is listed so too."""
    h = harness(body(refresh={"token": "a"}))
    h.profile_once()
    v1, current = as_version_1(h)
    status = h.settle()
    gpu = status["tables"][0]["gpuProduct"]
    assert [t["fingerprint"] for t in h.stored_status()["tables"]] == [current, v1]
    assert v1_finds(h, gpu, v1) is not None
    # A status an earlier build left without the twin gets it at the next pass, idle or not.
    stored = h.stored_status()
    h.kube.edit("SpsProfile", "p", lambda p: p["status"].update(
        tables=without_v1_twins(p["status"]["tables"])))  # fmt: skip
    assert h.settle() == status and h.stored_status() == stored
    # An idle pass writes nothing more: the twin is part of what is stored.
    rv = h.kube.obj("SpsProfile", "p")["metadata"].get("resourceVersion")
    assert h.settle() == status
    assert h.kube.obj("SpsProfile", "p")["metadata"].get("resourceVersion") == rv

    as_0_1_0_rewrote(h)
    jobs = len(h.kube.kinds("Job"))
    again = h.settle()
    assert again.get("currentRun") is None and len(h.kube.kinds("Job")) == jobs
    (table,) = again["tables"]
    assert (table["fingerprint"], table["adoptedFrom"]) == (current, v1)
    assert again["targets"][0]["state"] == "Live"

    # A new measurement replaces the adopted table, and 0.1.0 finds it under its key.
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.tick()
    assert h.run_pass().get("currentRun")
    h.finish(result=build_patch(status="succeeded", rounds=rounds(scale=1.5)))
    (newest,) = h.settle()["tables"]
    assert newest["hash"] != table["hash"] and h.running_hash() == newest["hash"]
    assert v1_finds(h, gpu, v1) == (newest["configMap"], newest["hash"])


def test_a_table_this_version_measured_is_kept_by_0_1_0_after_a_rollback() -> None:
    """A table measured by this version (no 0.1.0 before it) is labelled with its server's
    version-1 fingerprint and listed under it, so 0.1.0, rolled back to, finds it for the
    server it runs on (no run) and sees it serving there (no rollout). The operator's own
    reading is unchanged: the entry keeps its current fingerprint, the ConfigMap's
    meta.json too, and its status write after 0.1.0's (which drops `adoptedFrom`) reads
    it back from the version-1 entry. (Before: a version-2 label, no entry; 0.1.0 measured
    the server again and restarted it onto its own table.)"""
    h = harness()
    (table,) = h.profile_once()["tables"]
    assert table["fingerprint"].startswith("v2-")
    c = container()
    spec = SpsProfile.model_validate(h.kube.obj("SpsProfile", "p", NS)).spec
    v1 = legacy_table_fingerprint(server_config(c, parse_server(c)), spec.table.to_k8s())
    assert table["adoptedFrom"] == v1
    cm = h.kube.obj("ConfigMap", table["configMap"])
    assert json.loads(cm["data"][L.META_KEY])["fingerprint"] == table["fingerprint"]
    assert v1_finds(h, table["gpuProduct"], v1) == (table["configMap"], table["hash"])
    # What 0.1.0's rollout checks on the template (`inject_serves`): it mounts that very
    # ConfigMap, under the table's hash, so 0.1.0 writes nothing to it.
    template = h.template()
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes["sps-table"]["configMap"]["name"] == table["configMap"]
    assert template["metadata"]["annotations"][L.ANNOTATION_TABLE_HASH] == table["hash"]

    as_0_1_0_rewrote(h)
    generation = h.kube.obj("Deployment", "server")["metadata"]["generation"]
    jobs = len(h.kube.kinds("Job"))
    (again,) = h.settle()["tables"]
    key = ("fingerprint", "adoptedFrom", "configMap", "hash", "profiledAt")
    assert [again[k] for k in key] == [table[k] for k in key]
    assert len(h.kube.kinds("Job")) == jobs
    assert h.kube.obj("Deployment", "server")["metadata"]["generation"] == generation


def two_servers_of_one_v1_key() -> Harness:
    """`server` and `other`: the same to fingerprint version 1, two servers to the current
    one (an input version 1 did not read: an env var SGLang reads)."""
    h = harness()
    skip = [{"name": "SGLANG_SCHEDULER_SKIP_ALL_GATHER", "value": "1"}]
    h.add(deployment(name="other", env=skip))
    h.place("other", node="n1")
    return h


def test_no_version_1_entry_gives_a_table_to_a_server_it_was_not_measured_for() -> None:
    """Two servers that version 1 cannot tell apart: 0.1.0 would give either's table to
    both, so neither table is labelled with or listed under that key (0.1.0 measures
    them again after a rollback, once, as it must)."""
    h = two_servers_of_one_v1_key()
    for _ in range(6):  # one run per server, one at a time
        h.tick()
        if h.run_pass().get("currentRun"):
            h.finish()
    status = h.settle()
    targets = {t["deployment"]: t for t in status["targets"]}
    assert {t["state"] for t in targets.values()} == {"Live"}, status["targets"]
    assert len({t["fingerprint"] for t in targets.values()}) == 2
    assert len(status["tables"]) == 2 and not any(t.get("adoptedFrom") for t in status["tables"])
    for table in status["tables"]:
        labels = h.kube.obj("ConfigMap", table["configMap"])["metadata"]["labels"]
        assert labels[L.LABEL_FINGERPRINT] == table["fingerprint"]
    assert h.stored_status()["tables"] == status["tables"]


def test_a_version_1_entry_is_withdrawn_while_another_server_shares_its_key() -> None:
    """A table listed under its server's version-1 key while that key was the server's
    alone: once another server with the same key is selected, the entry is withdrawn (the
    table keeps serving its own server), and written again when that server goes."""
    h = harness()
    (table,) = h.profile_once()["tables"]
    v1 = table["adoptedFrom"]
    assert v1_finds(h, table["gpuProduct"], v1) is not None
    skip = [{"name": "SGLANG_SCHEDULER_SKIP_ALL_GATHER", "value": "1"}]
    h.add(deployment(name="other", env=skip))
    h.place("other", node="n1")
    h.tick()
    status = h.run_pass()
    assert v1_finds(h, table["gpuProduct"], v1) is None
    server = next(t for t in status["targets"] if t["deployment"] == "server")
    assert (server["state"], server["hash"]) == ("Live", table["hash"])
    h.kube.objects.pop(("Deployment", NS, "other"))
    h.pods = [p for p in h.pods if p.labels.get("deploy") != "other"]
    h.tick()
    h.run_pass()
    assert v1_finds(h, table["gpuProduct"], v1) == (table["configMap"], table["hash"])


def test_after_an_upgrade_a_server_that_changed_under_version_1_too_is_profiled() -> None:
    h = harness()
    h.profile_once()
    as_version_1(h)
    h.kube.edit("Deployment", "server", lambda d: d["spec"]["template"]["spec"]["containers"][0][
        "args"].extend(["--tp-size", "2"]))  # fmt: skip
    h.tick()
    status = h.run_pass()
    assert status["currentRun"]["trigger"] == "ServerChanged"
    # Compared on what version 1 read, in its words.
    assert status["currentRun"]["changes"] == ["tp: unset -> 2"]
    assert "adoptedFrom" not in status["tables"][0]


def test_a_run_started_before_the_upgrade_finishes_under_the_new_key() -> None:
    h = harness()
    h.tick()
    run = h.run_pass()["currentRun"]
    c = container()
    spec = SpsProfile.model_validate(h.kube.obj("SpsProfile", "p", NS)).spec
    v1 = legacy_table_fingerprint(server_config(c, parse_server(c)), spec.table.to_k8s())
    h.kube.edit("SpsProfile", "p", lambda p: p["status"]["currentRun"].update(fingerprint=v1))
    h.finish(result=build_patch(status="succeeded", rounds=rounds()))
    status = h.settle()
    assert status["tables"][0]["fingerprint"] == run["fingerprint"]
    assert status["targets"][0]["state"] == "Live"


def test_a_failed_rollout_returns_to_a_table_adopted_from_version_1() -> None:
    """The table a failed rollout replaced still carries its version-1 label: the
    rollback vouches for it the same way (`adoptedFrom`), or the Deployment would stay on
    the table that failed."""
    h = harness(body(refresh={"token": "a"}))
    h.profile_once()
    v1, _ = as_version_1(h)
    (first,) = without_v1_twins(h.settle()["tables"])
    assert first["adoptedFrom"] == v1
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.kube.instant_rollout = False
    h.tick()
    assert h.run_pass().get("currentRun")
    h.finish(result=build_patch(status="succeeded", rounds=rounds(scale=1.5)))
    (second,) = without_v1_twins(h.settle()["tables"])
    assert second["previous"] == first["configMap"] and h.running_hash() == second["hash"]
    dep = h.kube.obj("Deployment", "server")
    dep["status"]["observedGeneration"] = dep["metadata"]["generation"]
    dep["status"]["conditions"] = [
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
    ]
    h.tick()
    status = h.run_pass()
    assert "rolled back to" in status["lastFailure"]["message"], status["lastFailure"]
    (restored,) = without_v1_twins(status["tables"])
    assert (restored["hash"], restored["adoptedFrom"]) == (first["hash"], v1)
    assert h.running_hash() == first["hash"]


def test_a_table_0_1_0_measured_after_a_rollback_wins_over_this_versions_older_one() -> None:
    """Upgrade, rollback, upgrade again: 0.1.0 measured the server again after the
    rollback (a refresh under 0.1.0) and rolled it onto that table. Back on this version,
    that newer table is adopted in place of this version's older one for the same server:
    no run, and the server stays on the table it runs (before, this version rolled it back
    onto its own older table)."""
    h = harness(body(refresh={"token": "a"}))
    (older,) = h.profile_once()["tables"]
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.tick(60)
    assert h.run_pass().get("currentRun")
    h.finish(result=build_patch(status="succeeded", rounds=rounds(scale=1.5)))
    (newer,) = h.settle()["tables"]
    assert h.running_hash() == newer["hash"] and newer["profiledAt"] > older["profiledAt"]
    # As 0.1.0 leaves it: the newer table stored under version 1 (entry and label), this
    # version's older one still listed under its version-2 key.
    c = container()
    spec = SpsProfile.model_validate(h.kube.obj("SpsProfile", "p", NS)).spec
    v1 = legacy_table_fingerprint(server_config(c, parse_server(c)), spec.table.to_k8s())
    known = ("gpuProduct", "kind", "configMap", "hash", "profiledAt", "run", "refreshCount")
    stored_by_0_1_0 = {**{k: v for k, v in newer.items() if k in known}, "fingerprint": v1}
    h.kube.edit("SpsProfile", "p", lambda p: p["status"].update(tables=[older, stored_by_0_1_0]))
    h.kube.edit("ConfigMap", newer["configMap"],
                lambda cm: cm["metadata"]["labels"].update({L.LABEL_FINGERPRINT: v1}))  # fmt: skip
    assert h.kube.obj("ConfigMap", older["configMap"])  # history keeps it
    jobs = len(h.kube.kinds("Job"))
    generation = h.kube.obj("Deployment", "server")["metadata"]["generation"]
    status = h.settle()
    assert status.get("currentRun") is None and len(h.kube.kinds("Job")) == jobs
    # The template never changed: not rolled onto the older table and back.
    assert h.kube.obj("Deployment", "server")["metadata"]["generation"] == generation
    assert h.running_hash() == newer["hash"]
    (table,) = without_v1_twins(status["tables"])
    assert (table["configMap"], table["fingerprint"], table["adoptedFrom"]) == (
        newer["configMap"], older["fingerprint"], v1,
    )  # fmt: skip
    assert status["targets"][0]["state"] == "Live"

"""A table is its bytes (issue 33 §1, §3): a tenant with `edit` in its namespace can delete
and recreate any table ConfigMap there (they are immutable, not undeletable), with the
operator's labels and an ownerReference to its profile. The operator believes only the
hash it recorded in status when it published the table, checked against the bytes at
every use (rollout, rollback, reuse), and refuses a server whose own mounts shadow the
table it injects.

Each case is played in-process against the real reconciler and the unit tests' fake API;
tests/e2e/test_e2e_tenants_tables.py plays the same attacks on the bed as a client-cert
user with `edit` in one namespace."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from controller_harness import NS, Harness, deployment, profile_body, rounds
from test_controller_reconcile import started

from sps_operator.api import labels as L
from sps_operator.api.hashing import content_hash
from sps_operator.api.result import build_patch


def forge(h: Harness, name: str, speedup: float = 3.0) -> str:
    """Play the tenant: delete the table ConfigMap `name` and recreate it under the same
    name with `speedup` times the steps/s, labels consistent with the new bytes, the
    ownerReference and everything else copied. Returns the forged bytes' hash."""
    key = ("ConfigMap", NS, name)
    cm = copy.deepcopy(h.kube.objects[key])
    table = json.loads(cm["data"][L.TABLE_KEY])
    table["sample_steps_per_sec"] = [v * speedup for v in table["sample_steps_per_sec"]]
    text = json.dumps(table)
    forged_hash = content_hash(text)
    cm["data"][L.TABLE_KEY] = text
    cm["metadata"]["labels"][L.LABEL_TABLE_HASH] = forged_hash
    cm["metadata"]["uid"] = cm["metadata"].get("uid", "") + "-recreated"
    h.kube.objects[key] = cm
    return forged_hash


def fail_rollout(h: Harness) -> None:
    dep = h.kube.obj("Deployment", "server")
    dep["status"]["observedGeneration"] = dep["metadata"]["generation"]
    dep["status"]["conditions"] = [
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
    ]


def two_tables(h: Harness) -> tuple[dict[str, Any], dict[str, Any]]:
    """A first table live, then a second one rolling out (its pods not ready yet)."""
    h.add(deployment())
    h.add(profile_body(refresh={"token": "a"}))
    h.place()
    (first,) = h.profile_once()["tables"]
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.kube.instant_rollout = False
    started(h)
    h.finish(result=build_patch(status="succeeded", rounds=rounds(scale=1.5)))
    (second,) = h.settle()["tables"]
    assert second["previous"] == first["configMap"]
    return first, second


def test_a_recreated_previous_table_never_goes_live_on_a_rollback() -> None:
    """Reproduced (issue 33 §1): team-b deleted its immutable previous table, recreated
    it under the same name with 3x the steps/s, consistent labels and an ownerReference
    to its profile; after a failed rollout the forged table went live (Ready=True
    TableLive). The rollback now checks the bytes against the hash status recorded."""
    h = Harness()
    first, second = two_tables(h)
    forged = forge(h, first["configMap"])
    fail_rollout(h)
    h.tick()
    status = h.run_pass()
    assert h.running_hash() == second["hash"], "the forged previous table was rolled"
    assert h.running_hash() != forged
    assert [t["hash"] for t in status["tables"]] == [second["hash"]]
    failure = status["lastFailure"]
    assert failure["reason"] == "RolloutFailed"
    assert f"not rolled back to {first['configMap']}" in failure["message"]
    assert "does not hold the table the operator published" in failure["message"]
    assert "TableModified" in [e[0] for e in h.kube.events]
    for _ in range(3):
        h.tick()
        status = h.run_pass()
    assert h.condition("Ready")[:2] != ("True", "TableLive")
    assert h.running_hash() != forged
    assert second["previousHash"] == first["hash"]  # what the rollback was checked against


def test_the_previous_table_untouched_is_still_rolled_back_to() -> None:
    """The check refuses forged bytes only: the genuine previous table is returned to."""
    h = Harness()
    first, _ = two_tables(h)
    fail_rollout(h)
    h.tick()
    status = h.run_pass()
    assert h.running_hash() == first["hash"]
    assert status["tables"][0]["hash"] == first["hash"]


def test_a_modified_live_table_is_refused_measured_again_and_republished() -> None:
    """The live table's ConfigMap replaced under its name: never rolled (reason and
    event), dropped from status.tables so its run is repeated, and the repeated run's
    publish replaces the forged object with the measured bytes."""
    h = Harness()
    h.add(deployment())
    h.add(profile_body())
    h.place()
    (table,) = h.profile_once()["tables"]
    forge(h, table["configMap"])
    h.tick()
    status = h.run_pass()
    target = status["targets"][0]
    assert target["reason"] == "TableModified", target
    assert "TableModified" in [e[0] for e in h.kube.events]
    assert not status.get("tables")
    status = h.profile_once()
    (again,) = status["tables"]
    assert again["configMap"] == table["configMap"]  # the same measurement, the same name
    cm = h.kube.obj("ConfigMap", table["configMap"])
    assert content_hash(cm["data"][L.TABLE_KEY]) == table["hash"]
    h.settle()
    assert h.running_hash() == table["hash"]
    assert h.condition("Ready")[:2] == ("True", "TableLive")


def test_a_table_modified_while_another_gpus_table_runs_is_not_reused_on_moving_back() -> None:
    """Reuse after a GPU move is a use too: the H100 table recreated while the Deployment
    ran on H200 is refused when it moves back (TableModified), and measured again. (The
    bytes check held here before issue 33 too; this guards it and the new remedy.)"""
    from controller_harness import H100

    h = Harness()
    h.add(deployment())
    h.add(profile_body())
    for node in ("n1", "n2"):
        h.place(node=node)
        status = h.profile_once()
    h100 = next(t for t in status["tables"] if t["gpuProduct"] == H100)
    forged = forge(h, h100["configMap"])
    h.place(node="n1")
    h.tick(60)
    status = h.settle()
    assert h.running_hash() != forged
    assert "TableModified" in [e[0] for e in h.kube.events]
    assert status.get("currentRun") or all(t["hash"] != forged for t in status["tables"])


# --------------------------------------------------------------------------- §3 what servers run


def shadowed_deployment(mount_path: str = "/etc/sps/table/table.json") -> dict[str, Any]:
    """The tenant's own file mounted over the table the operator injects (subPath)."""
    dep = deployment()
    pod = dep["spec"]["template"]["spec"]
    pod["volumes"] = [{"name": "mine", "configMap": {"name": "my-fast-table"}}]
    pod["containers"][0]["volumeMounts"] = [
        {"name": "mine", "mountPath": mount_path, "subPath": "table.json"}
    ]
    return dep


def test_a_mount_of_the_tenants_own_over_the_table_path_is_refused() -> None:
    """Reproduced (issue 33 §3): a subPath mount of the tenant's own file at
    /etc/sps/table/table.json shadowed the injected table while status said TableLive."""
    for path in ("/etc/sps/table/table.json", "/etc/sps/table", "/etc//sps/table/x/../table.json"):
        h = Harness()
        h.add(shadowed_deployment(path))
        h.add(profile_body())
        h.place()
        status = h.settle()
        target = status["targets"][0]
        assert target["reason"] == "TableMountShadowed", (path, target)
        assert "/etc/sps/table" in target["message"]
        assert h.condition("Ready")[:2] != ("True", "TableLive")
        assert not h.kube.kinds("Job"), "a refused target is never profiled"


def test_a_mount_beside_the_table_directory_is_fine() -> None:
    h = Harness()
    h.add(shadowed_deployment("/etc/sps/other.json"))
    h.add(profile_body())
    h.place()
    h.profile_once()
    assert h.condition("Ready")[:2] == ("True", "TableLive")


def test_annotate_only_refuses_a_second_mount_under_the_table_directory() -> None:
    from test_controller_safety import ANNOTATE_ONLY, annotate_only_deployment

    h = Harness()
    dep = annotate_only_deployment()
    pod = dep["spec"]["template"]["spec"]
    pod["volumes"].append({"name": "mine", "configMap": {"name": "my-fast-table"}})
    pod["containers"][0]["volumeMounts"].append(
        {"name": "mine", "mountPath": "/etc/sps/table/table.json", "subPath": "table.json"}
    )
    h.add(dep)
    h.add(profile_body(**ANNOTATE_ONLY))
    h.place()
    assert h.settle()["targets"][0]["reason"] == "TableMountShadowed"


# --------------------------------------------------------------------------- §2 bounded parsing


def test_a_huge_target_is_refused_with_the_limit_before_it_is_parsed() -> None:
    """Reproduced (issue 33 §2): a 1.4 MB target with 110,000 unknown flags cost 2.5 CPU s
    per pass. Beyond the limit it is refused, and the message says the limit."""
    from sps_operator.api import limits

    h = Harness()
    dep = deployment()
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    args += [f"--unknown-flag-{i}" for i in range(110_000)]
    h.add(dep)
    h.add(profile_body())
    h.place()
    target = h.settle()["targets"][0]
    assert target["reason"] == "TargetTooLarge", target
    assert str(limits.MAX_SERVER_ARGS) in target["message"]


def test_a_deeply_nested_borrow_record_never_fails_a_pass_nor_its_error_path() -> None:
    """Reproduced (issue 33 §2): 4,000 bytes of brackets in the borrow record (written
    under the operator's field-manager name) raised RecursionError out of reconcile();
    the error path read the record again and raised again: no status, the replica never
    given back. Now the record is unreadable (not a borrow of this run), and the pass
    writes its status."""
    from capacity_harness import BORROW, harness, start_waiting

    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    dep = h.kube.obj("Deployment", "server")
    dep["metadata"]["annotations"][L.ANNOTATION_BORROWED] = "[" * 2000 + "]" * 2000
    writes = len(h.kube.status_patches)
    h.tick()
    status = h.run_pass()  # raised RecursionError before
    assert len(h.kube.status_patches) > writes
    assert status.get("conditions")


def test_the_error_path_writes_status_even_when_ending_the_run_fails_too() -> None:
    """A step raises, and ending its run (which reads the same objects) raises as well:
    the pass still records the failure in status instead of raising."""
    import sps_operator.controller.profiling.reconciler as profiling_module

    h = Harness.one_target()
    h.tick()
    h.run_pass()
    assert h.status()["currentRun"]

    def boom(*_: Any, **__: Any) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    original_progress, original_fail = profiling_module.progress_run, profiling_module.fail_run
    profiling_module.progress_run, profiling_module.fail_run = boom, boom
    try:
        h.tick()
        status = h.run_pass()
    finally:
        profiling_module.progress_run, profiling_module.fail_run = original_progress, original_fail
    failure = status["lastFailure"]
    assert failure["reason"] == "ReconcileError"
    assert "ending the run failed too" in failure["message"]


# ------------------------------------------------------------------------- §2 the stable ConfigMap


def test_kube_root_ca_is_refused_up_front_with_a_validation_message() -> None:
    """Reproduced (issue 33 §2): AnnotateOnly with tableConfigMap kube-root-ca.crt fought
    kube-controller-manager's root-CA publisher (50 reverts, 50 applies, no backoff)."""
    from pydantic import ValidationError

    from sps_operator.api.spec import RolloutSpec

    for name in ("kube-root-ca.crt", "kube-proxy", "cluster-info"):
        with pytest.raises(ValidationError, match="the cluster writes itself"):
            RolloutSpec.model_validate({"mode": "AnnotateOnly", "tableConfigMap": name})
    RolloutSpec.model_validate({"mode": "AnnotateOnly", "tableConfigMap": "llama-sps"})


def annotate_only_live() -> Harness:
    from test_controller_safety import ANNOTATE_ONLY, annotate_only_deployment

    h = Harness()
    h.add(annotate_only_deployment())
    h.add(profile_body(**ANNOTATE_ONLY))
    h.place()
    h.profile_once()
    assert h.condition("Ready")[:2] == ("True", "TableLive")
    return h


@pytest.mark.parametrize("consistent_annotation", [False, True])
def test_a_second_writer_of_the_stable_configmap_stops_the_profile_naming_it(
    consistent_annotation: bool,
) -> None:
    """Another writer puts its own data back into the stable ConfigMap: the operator
    writes it back at most once, then stops with its own reason naming the writer. Also
    when the writer sets the hash annotation to its own bytes' hash: the annotation is a
    claim, the bytes are checked against the hashes in status."""
    h = annotate_only_live()
    stable = h.kube.obj("ConfigMap", "llama-sps")
    for revert in range(5):
        stable["data"] = {"table.json": f'{{"forged": {revert}}}'}
        if consistent_annotation:
            stable["metadata"]["annotations"][L.ANNOTATION_TABLE_HASH] = content_hash(
                stable["data"]["table.json"]
            )
        stable["metadata"].setdefault("managedFields", []).append(
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "time": f"2030-01-01T00:00:0{revert}Z",
                "fieldsV1": {"f:data": {"f:table.json": {}}},
            }
        )
        h.tick()
        status = h.run_pass()
    target = status["targets"][0]
    assert target["reason"] == "StableTableContested", target
    assert "kube-controller-manager" in target["message"]
    assert "forged" in h.kube.obj("ConfigMap", "llama-sps")["data"]["table.json"]  # not rewritten
    assert h.condition("Ready")[:2] != ("True", "TableLive")


@pytest.mark.parametrize("undo", ["replace", "delete"])
def test_a_stable_configmap_undone_at_every_pass_is_written_back_with_a_backoff(
    undo: str,
) -> None:
    """Hole found and fixed: a writer that replaces the stable ConfigMap whole, without the
    operator's annotation (a `kubectl replace`, a GitOps tool forcing its copy), or deletes
    it, looked like a ConfigMap nobody had written yet: the operator wrote the table back
    at every pass, one write per revert, with no reason. Now each write back of the same
    table waits twice as long as the one before (capped), and status says so."""
    h = annotate_only_live()
    live = h.kube.obj("ConfigMap", "llama-sps")["data"]["table.json"]
    writes = 0
    for _ in range(10):
        if undo == "delete":
            h.kube.objects.pop(("ConfigMap", NS, "llama-sps"), None)
        else:
            stable = h.kube.obj("ConfigMap", "llama-sps")
            stable["data"] = {"table.json": '{"theirs": 1}'}
            stable["metadata"]["annotations"] = {}
        before = len(h.kube.applied)
        h.tick(60)
        h.run_pass()
        writes += sum(
            1 for body in h.kube.applied[before:] if body["metadata"]["name"] == "llama-sps"
        )
    assert 1 <= writes <= 4, f"{writes} writes for 10 reverts"
    degraded = h.condition("Degraded")
    assert degraded[:2] == ("True", "StableTableContested"), degraded
    assert "backoff" in degraded[2]
    assert "StableTableContested" in [e[0] for e in h.kube.events]
    assert h.condition("Ready")[:2] != ("True", "TableLive")  # the servers would read theirs
    # Left alone, the table is written back once and the contest is over.
    h.tick(3600)
    h.run_pass()
    assert h.kube.obj("ConfigMap", "llama-sps")["data"]["table.json"] == live
    h.tick(60)
    h.run_pass()
    assert h.condition("Degraded")[:2] == ("False", "AsExpected")
    assert h.condition("Ready")[:2] == ("True", "TableLive")


def test_a_system_configmap_is_never_written() -> None:
    """An existing ConfigMap the cluster marks as its own (a kubernetes.io/ annotation)
    named in tableConfigMap is never written, whatever its name."""
    from test_controller_safety import ANNOTATE_ONLY, annotate_only_deployment

    h = Harness()
    h.add(annotate_only_deployment())
    h.add(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "llama-sps",
                "namespace": NS,
                "annotations": {"kubernetes.io/description": "published by the cluster"},
            },
            "data": {"ca.crt": "x"},
        }
    )
    h.add(profile_body(**ANNOTATE_ONLY))
    h.place()
    status = h.settle()
    assert status["targets"][0]["reason"] == "StableTableContested"
    assert h.kube.obj("ConfigMap", "llama-sps")["data"] == {"ca.crt": "x"}


def test_a_pass_that_fails_outside_its_steps_still_writes_status_and_never_raises() -> None:
    """What escapes the pass's own handling (here: reading the world itself raises
    RecursionError, as a nested record once did) is written as Degraded ReconcileError,
    and the daemon's call returns a retry instead of raising."""
    import sps_operator.controller.reconcile.reconciler as reconcile_module

    h = Harness.one_target()

    def boom(*_: Any, **__: Any) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    original = reconcile_module.report
    reconcile_module.report = boom  # the pass's own error path calls report too
    original_write = reconcile_module.Reconciler._write_status
    reconcile_module.Reconciler._write_status = boom  # type: ignore[method-assign]
    try:
        h.tick()
        h.run_pass()
    finally:
        reconcile_module.report = original
        reconcile_module.Reconciler._write_status = original_write  # type: ignore[method-assign]
    degraded = h.condition("Degraded")
    assert degraded[:2] == ("True", "ReconcileError"), degraded
    assert "RecursionError" in degraded[2]

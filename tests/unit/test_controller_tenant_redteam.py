"""What issue 33 and issue 36 §1 built, attacked afresh by a tenant with `edit` in one
namespace (team-b) against another (team-a, the harness's namespace NS), with cases the
issue text does not list. Each attack is played in-process against the real reconciler
and the unit tests' fake API (or the pure function it reaches). A handled attack is a
regression guard; a hole found is asserted safe and marked xfail(strict) until fixed."""

from __future__ import annotations

import copy
import json
import resource
import subprocess
import sys
from typing import Any

import pytest
from controller_harness import NS, Harness, deployment, profile_body
from hypothesis import given, settings
from hypothesis import strategies as st

from sps_operator.api import labels as L
from sps_operator.api.untrusted_json import _TOKENS, Unreadable, nesting_depth, read_json
from sps_operator.controller.finalizer import release

TEAM_B = "team-b"

# --------------------------------------------------------------------------- the bounded parser


def test_an_unterminated_string_of_escaped_quotes_is_scanned_once() -> None:
    """Hole found and fixed: the depth scan's string token needed a closing quote, so a
    text of `"` then `\\"` repeated failed to match from every quote and rescanned the
    rest of the text each time (quadratic). A table ConfigMap's meta.json (256 KiB, which
    a tenant can delete and recreate with its own bytes) read on every pass took ~4 min
    of CPU under the GIL (16 KB: 0.84 s, before the fix), stalling every tenant's pass.
    Now the unterminated string is one token that runs to the end: one scan."""
    small = '"' + '\\"' * 2000
    assert [m.span() for m in _TOKENS.finditer(small)] == [(0, len(small))]
    assert nesting_depth(small, 32) == 0
    # At the bound the operator reads meta.json with: refused as JSON, not rescanned.
    text = '"' + '\\"' * ((L.MAX_META_BYTES - 1) // 2)
    value = read_json(text, max_bytes=L.MAX_META_BYTES)
    assert isinstance(value, Unreadable) and "Unterminated string" in value.why


def test_brackets_after_an_unterminated_string_never_reach_json_loads_deeply() -> None:
    # The brackets that follow an unterminated quote are inside the string for the scan;
    # json.loads stops at the string anyway, so no recursion is reached.
    text = '["' + "[" * 100_000
    assert isinstance(read_json(text, max_bytes=200_000), Unreadable)
    text = "[" * 40 + '"'
    value = read_json(text, max_bytes=1000)
    assert isinstance(value, Unreadable) and "nests" in value.why


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='"\\[]{}a,:0 ', max_size=60))
def test_the_bounded_parser_agrees_with_json_or_refuses(text: str) -> None:
    value = read_json(text, max_bytes=1000)
    try:
        expected: Any = json.loads(text)
    except ValueError:
        assert isinstance(value, Unreadable)
        return
    if nesting_depth(text, 32) <= 32:
        assert value == expected


# --------------------------------------------------------------------------- shadowing mounts


def _shadowed(mount_path: str) -> dict[str, Any]:
    dep = deployment()
    pod = dep["spec"]["template"]["spec"]
    pod["volumes"] = [{"name": "mine", "configMap": {"name": "my-fast-table"}}]
    pod["containers"][0]["volumeMounts"] = [
        {"name": "mine", "mountPath": mount_path, "subPath": "table.json"}
    ]
    return dep


def test_a_shadowing_mount_spelled_with_a_leading_double_slash_is_refused() -> None:
    """Hole found and fixed: posixpath.normpath keeps a leading `//` (POSIX allows it),
    the container runtime does not: `//etc/sps/table/table.json` escaped the check and
    shadowed the injected table while status said TableLive."""
    for path in ("//etc/sps/table/table.json", "//etc/sps/table", "//etc//sps/./table/"):
        h = Harness()
        h.add(_shadowed(path))
        h.add(profile_body())
        h.place()
        target = h.settle()["targets"][0]
        assert target.get("reason") == "TableMountShadowed", (path, target)
        assert h.condition("Ready")[:2] != ("True", "TableLive")
        assert not h.kube.kinds("Job")


def test_the_operators_own_volume_name_does_not_excuse_a_tenant_mount() -> None:
    """A tenant names its own volume like the operator's (`sps-table`) and mounts it at
    the table file with subPath: only the operator's mount of the directory is excused."""
    dep = _shadowed("/etc/sps/table/table.json")
    pod = dep["spec"]["template"]["spec"]
    pod["volumes"][0]["name"] = "sps-table"
    pod["containers"][0]["volumeMounts"][0]["name"] = "sps-table"
    h = Harness()
    h.add(dep)
    h.add(profile_body())
    h.place()
    assert h.settle()["targets"][0].get("reason") == "TableMountShadowed"


# --------------------------------------------------------------------------- adoption


def _precreated_job(change: str) -> Harness:
    """A run's Job name is derived from the profile's UID (no secret): someone who may
    create Jobs in the namespace creates one under it first, with the profile as its
    controller ownerReference, before the operator's pass (played as a crash between the
    operator's create and its status write, the one case adoption is for)."""
    h = Harness.one_target()
    h.tick()
    run = h.run_pass()["currentRun"]
    job = copy.deepcopy(h.kube.obj("Job", run["job"]))
    pod = job["spec"]["template"]["spec"]
    if change == "labels":
        job["metadata"]["labels"] = {}
    elif change == "priority":
        pod["priorityClassName"] = "team-high"
    elif change == "image":
        pod["containers"][0]["image"] = "registry.example/mine:latest"
    elif change == "account":
        pod["serviceAccountName"] = "default"
    h.kube.objects[("SpsProfile", NS, "p")]["status"]["currentRun"] = None
    h.kube.objects[("Job", NS, run["job"])] = job
    h.reconciler = type(h.reconciler)(h.kube, h.settings, clock=lambda: h.now)  # restart
    h.tick()
    h.run_pass()
    return h


@pytest.mark.parametrize("change", ["labels", "priority", "image", "account"])
def test_a_job_created_ahead_of_the_run_under_its_name_is_never_adopted(change: str) -> None:
    """Hole found and fixed: a Job under the run's name whose controller ownerReference
    named the profile was adopted whatever it ran: its own image, account, or a
    PriorityClass beyond the admin's jobPolicy (which also placed it ahead of others in the
    GPU pool's line). Now only the Job the operator would create is adopted."""
    h = _precreated_job(change)
    status = h.status()
    assert status.get("currentRun") is None, status.get("currentRun")
    failure = status["lastFailure"]
    assert failure["reason"] == "NameTaken", failure
    assert "kubectl delete job" in failure["message"], failure["message"]


def test_the_operators_own_job_found_after_a_crash_is_adopted() -> None:
    h = _precreated_job("none")
    status = h.status()
    assert status["currentRun"]["job"] and "lastFailure" not in status, status


def test_a_job_deleted_and_created_again_under_its_name_mid_run_is_not_followed() -> None:
    """Hole found and fixed: each pass took the run's Job by name (among the Jobs that name
    the profile as controller) and recorded its UID afresh, so a Job deleted and created
    again under the run's name, with its own pod template, became the run's Job: followed,
    its result read, its PriorityClass its place in the GPU pool's line."""
    h = Harness.one_target()
    h.tick()
    run = h.run_pass()["currentRun"]
    h.tick()
    assert h.run_pass()["currentRun"]["jobUid"]
    job = copy.deepcopy(h.kube.obj("Job", run["job"]))
    job["metadata"]["uid"] = "uid-recreated"
    job["spec"]["template"]["spec"]["priorityClassName"] = "team-high"
    h.kube.objects[("Job", NS, run["job"])] = job
    h.tick()
    status = h.run_pass()
    assert status.get("currentRun") is None or status["currentRun"]["name"] != run["name"]
    failure = status["lastFailure"]
    assert failure["reason"] == "JobMissing" and "uid-recreated" in failure["message"], failure


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
_fields = st.sampled_from(["metadata", "spec", "template", "labels", "ownerReferences", "uid",
                           "controller", "containers", "image", "name", "kind"])  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_fields, _json | st.dictionaries(_fields, _json, max_size=4), max_size=4))
def test_adoption_reads_any_object_without_raising(existing: dict[str, Any]) -> None:
    from sps_operator.controller.policies.ownership import adoption_refusal

    container = {"name": "c", "image": "i"}
    built = {"kind": "Job", "metadata": {"labels": {"a": "b"}},
             "spec": {"template": {"spec": {"containers": [container]}}}}  # fmt: skip
    try:
        refusal = adoption_refusal(existing, built, "uid")
    except (AttributeError, TypeError):
        pytest.fail("adoption_refusal raised on an object someone else wrote")
    assert refusal is not None  # none of these names the profile as its controller


# --------------------------------------------------------------------------- table holders


def _team_b_deployment(table: str) -> dict[str, Any]:
    """team-b's Deployment, labelled like team-a's servers, mounting a ConfigMap of its
    own namespace named like team-a's table."""
    dep = copy.deepcopy(deployment())
    dep["metadata"].update(name="server", namespace=TEAM_B, uid="uid-b-server")
    dep["spec"]["template"]["spec"]["volumes"] = [
        {"name": "t", "configMap": {"name": table}},
        {"name": "p", "projected": {"sources": [{"configMap": {"name": table}}]}},
    ]
    return dep


def _refs(h: Harness, name: str, namespace: str = NS) -> list[dict[str, Any]]:
    return list(h.kube.obj("ConfigMap", name, namespace)["metadata"].get("ownerReferences") or [])


def test_a_deployment_of_another_namespace_never_becomes_a_holder_of_a_table() -> None:
    """team-b mounts a ConfigMap named like team-a's table and carries team-a's labels;
    team-a's passes (on the operator's cluster-wide caches) and its finalizer never add
    team-b's Deployment as an owner of team-a's table, nor drop team-a's holder."""
    h = Harness()
    h.add(deployment())
    h.add(profile_body())
    h.place()
    (table,) = h.profile_once()["tables"]
    name = table["configMap"]
    before = _refs(h, name)
    h.add(_team_b_deployment(name))
    for _ in range(3):
        h.tick()
        h.run_cached_pass()
    after = _refs(h, name)
    assert after == before
    assert all(r.get("uid") != "uid-b-server" for r in after)
    profile = h.kube.obj("SpsProfile", "p", NS)
    release(h.kube, NS, "p", profile["metadata"]["uid"])
    assert all(r.get("uid") != "uid-b-server" for r in _refs(h, name))


def test_a_config_map_of_another_namespace_with_team_as_labels_is_not_team_as() -> None:
    """team-b creates, in its own namespace, a ConfigMap with team-a's profile UID label,
    the table component label, an ownerReference to team-a's profile and forged bytes:
    team-a's passes and finalizer neither list it as a table nor write to it."""
    h = Harness()
    h.add(deployment())
    h.add(profile_body())
    h.place()
    (table,) = h.profile_once()["tables"]
    real = h.kube.obj("ConfigMap", table["configMap"], NS)
    forged = copy.deepcopy(real)
    forged["metadata"]["namespace"] = TEAM_B
    forged["metadata"]["name"] = "p-forged"
    forged["metadata"]["uid"] = "uid-forged"
    forged["metadata"]["resourceVersion"] = "1"
    h.add(forged)
    snapshot = copy.deepcopy(h.kube.obj("ConfigMap", "p-forged", TEAM_B))
    for _ in range(3):
        h.tick()
        status = h.run_cached_pass()
    assert "p-forged" not in {t["configMap"] for t in status["tables"]}
    uid = h.kube.obj("SpsProfile", "p", NS)["metadata"]["uid"]
    assert "p-forged" not in release(h.kube, NS, "p", uid)
    assert h.kube.obj("ConfigMap", "p-forged", TEAM_B) == snapshot
    assert L.LABEL_RELEASED not in (snapshot["metadata"].get("labels") or {})


# --------------------------------------------------------------------------- check, then apply


def test_a_table_recreated_between_its_check_and_the_rollout_is_caught_next_pass() -> None:
    """The race: the tenant recreates the table ConfigMap (forged bytes, same name and
    labels) after the pass checked its bytes and before the Deployment's apply names it,
    so the pods mount the forged bytes. The check cannot close that window inside one
    pass (the kubelet reads the ConfigMap later anyway), but the next pass re-checks the
    live table's bytes: it is refused (TableModified), never stays TableLive, and the
    measured bytes are published again."""
    from test_controller_tenant_tables import forge

    from sps_operator.api.hashing import content_hash

    h = Harness()
    h.add(deployment())
    h.add(profile_body())
    h.place()
    h.tick()
    h.run_pass()
    h.finish()
    real_apply = h.kube.apply
    forged: list[str] = []

    def racing_apply(body: dict[str, Any]) -> None:
        annotations = (body.get("spec", {}).get("template", {}).get("metadata") or {}).get(
            "annotations"
        ) or {}
        table = annotations.get(L.ANNOTATION_TABLE)
        if body["kind"] == "Deployment" and table and not forged:
            forged.append(forge(h, table))
        real_apply(body)

    h.kube.apply = racing_apply  # type: ignore[method-assign]
    for _ in range(3):
        h.tick()
        h.run_pass()
        if forged:
            break
    assert forged, "the rollout never named a table: the race was not played"
    h.kube.apply = real_apply  # type: ignore[method-assign]
    h.tick()
    status = h.run_pass()
    assert "TableModified" in [e[0] for e in h.kube.events]
    assert h.condition("Ready")[:2] != ("True", "TableLive")
    assert all(t["hash"] != forged[0] for t in status.get("tables") or [])
    status = h.profile_once()
    (table,) = status["tables"]
    cm = h.kube.obj("ConfigMap", table["configMap"])
    assert content_hash(cm["data"][L.TABLE_KEY]) == table["hash"] == h.running_hash()


# --------------------------------------------------------------------------- the API budget


def test_a_contested_holder_reference_is_not_rewritten_every_pass() -> None:
    """Hole found and fixed: a tenant stripping its Deployment's holder reference from its
    own table after every pass got one operator write per strip, with no backoff and no
    reason. Now each write back waits twice as long as the one before (capped)."""
    h = Harness()
    h.add(deployment())
    h.add(profile_body())
    h.place()
    (table,) = h.profile_once()["tables"]
    name = table["configMap"]
    dep_uid = h.kube.obj("Deployment", "server")["metadata"]["uid"]
    assert any(r.get("uid") == dep_uid for r in _refs(h, name)), "the Deployment holds it"

    def strip(cm: dict[str, Any]) -> None:
        refs = cm["metadata"]["ownerReferences"]
        cm["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != dep_uid]

    writes = 0
    for _ in range(10):
        h.kube.edit("ConfigMap", name, strip)
        before = len(h.kube.metadata_patches)
        h.tick(60)
        h.run_pass()
        writes += sum(1 for kind, n, _ in h.kube.metadata_patches[before:] if n == name)
    assert 1 <= writes <= 4, f"{writes} writes for 10 strips"
    # Said, with its reason: in status (Degraded) and in an event at each write back.
    degraded = h.condition("Degraded")
    assert degraded[:2] == ("True", "HolderReferenceContested"), degraded
    assert name in degraded[2] and "backoff" in degraded[2]
    assert "HolderReferenceContested" in [e[0] for e in h.kube.events]
    # Left alone, the reference is written back once and the contest is over.
    h.tick(3600)
    h.run_pass()
    assert any(r.get("uid") == dep_uid for r in _refs(h, name))
    h.tick(60)
    h.run_pass()
    assert h.condition("Degraded")[:2] == ("False", "AsExpected")


# --------------------------------------------------------------------------- the pool's queue


def test_a_long_wait_does_not_put_a_run_behind_every_younger_run() -> None:
    from datetime import timedelta

    from test_controller_tenant_capacity import cached_pass, other_namespace_run, waiting_to_borrow

    from sps_operator.controller.policies.job_policy import BORROW_BOUNDS

    # team-a's run waits from 12:00 behind team-b's earlier bid (which then takes the pool).
    h, waiting = waiting_to_borrow(other_namespace_run(0, "2026-03-01T11:59:00Z"), 86400)
    assert waiting.get("poolTurn") is True and not h.kube.scales
    # Past the bound, team-b's second profile bids afresh, at the same priority, an hour
    # after team-a: it goes first, and so does every next fresh bid of team-b.
    h.tick(BORROW_BOUNDS.max_pool_turn_seconds + 60)
    fresh = (h.now - timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ")
    waiting = cached_pass(h, other_namespace_run(0, fresh))["currentRun"].get("waiting") or {}
    assert h.kube.scales == [("server", 1)], waiting


# --------------------------------------------------------------------------- $(VAR) expansion


def _doubling_env(steps: int) -> list[dict[str, str]]:
    """E0 = x; E1 = $(E0)$(E0); ... each variable twice the one before (and its "where
    from" twice as long): a few hundred bytes of env, 2**steps characters expanded."""
    env = [{"name": "E0", "value": "x"}]
    env += [{"name": f"E{i}", "value": f"$(E{i - 1})$(E{i - 1})"} for i in range(1, steps)]
    return env


def test_a_doubling_env_chain_is_bounded_and_refused() -> None:
    """Hole found and fixed: the operator expands `$(VAR)` in env values as the kubelet
    does, with no bound: 40 variables of a team-b server doubling each other (600 bytes
    of env, far below TargetTooLarge's limits) grew a value of 2**40 characters and a
    "where from" as large in the pass, which ran out of memory (or ran for hours, holding
    the GIL every other tenant's pass needs). A value longer than MAX_EXPANDED_CHARS once
    expanded is one the operator does not know; a command line whose expansion exceeds
    the limit is TargetTooLarge."""
    from sps_operator.api import limits
    from sps_operator.controller.sglang.podenv import MAX_EXPANDED_CHARS, MAX_SOURCE_CHARS

    # In a child under a 1 GiB address-space limit and a time limit: should the bound ever
    # go, this test fails with MemoryError there instead of taking the machine's memory.
    probe = (
        "import json, sys\n"
        "from sps_operator.controller.sglang.podenv import resolve_env\n"
        "env = resolve_env({'env': json.loads(sys.argv[1])}, sys.argv[2], {})\n"
        "values = [env.lookup(f'E{i}') for i in range(60)]\n"
        "print(json.dumps([None if v is None else [v.hidden, len(v.value or ''), "
        "len(v.source), 'longer than' in v.source] for v in values]))\n"
    )

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    child = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(_doubling_env(60)), NS],
        capture_output=True, text=True, timeout=120, preexec_fn=limit_memory, check=False,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr[-2000:]
    values = json.loads(child.stdout)
    assert all(v is not None for v in values)
    known = [v for v in values if not v[0]]
    assert known and all(length <= MAX_EXPANDED_CHARS for _, length, _, _ in known)
    assert all(source <= MAX_SOURCE_CHARS for _, _, source, _ in values)
    first = next(i for i, v in enumerate(values) if v[0])  # E15: 32 Ki characters
    assert first == 15 and values[15][3]
    assert all(v[0] for v in values[15:])
    # In the server's args, through a pass: refused with the limit, never profiled.
    h = Harness()
    dep = deployment()
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["env"] = _doubling_env(14)  # 8 Ki characters, under the value bound
    container["args"] += ["--served-model-name", "$(E13)" * 40]  # 320 Ki expanded
    h.add(dep)
    h.add(profile_body())
    h.place()
    target = h.settle()["targets"][0]
    assert target["reason"] == "TargetTooLarge", target
    assert str(limits.MAX_SERVER_ARGS_CHARS) in target["message"]
    assert not h.kube.kinds("Job")


# --------------------------------------------------------------------------- the test-only hooks


def test_the_test_only_hooks_are_not_reachable_from_production_arguments() -> None:
    """The clock offset, the write pauses and the Kueue recheck interval are flags of the
    test entry point only: the production command refuses them (a tenant can reach neither
    the operator's arguments nor its namespace; nothing a profile says switches them on)."""
    from sps_operator.controller.main import parse_args
    from sps_operator.controller.policies.kueue import KUEUE_RECHECK_SECONDS

    for flag in (
        "--clock-offset-file=/tmp/x",
        "--pause-before-write=apply-deployment",
        "--kueue-recheck-seconds=3",
    ):
        with pytest.raises(SystemExit):
            parse_args([flag])
        assert parse_args([flag], testing=True) is not None
    production = parse_args([])
    assert production.clock_offset_file is None and production.pause_before_write is None
    assert production.kueue_recheck_seconds == KUEUE_RECHECK_SECONDS

"""This stop's new read paths (the operator's GET of /server_info to confirm Live),
attacked by a tenant with `edit` in team-b only against team-a and against what every
tenant shares (the read pool). Played on the operator's own functions (`ServerReads`,
`serving_pods`, `judge_pod`) with a fetch in place of the network. A handled attack is a
regression guard; a hole found is asserted safe and marked xfail(strict) until fixed."""

from __future__ import annotations

import json
import threading

import pytest

from sps_operator.api import labels as L
from sps_operator.constants import FIELD_MANAGER
from sps_operator.controller.kube.serverinfo import ServerReads
from sps_operator.controller.policies import borrow as B
from sps_operator.controller.policies import confirm as C
from sps_operator.controller.policies import workloads
from sps_operator.controller.policies.placement import PodInfo

TABLE_HASH = "a" * 16
TABLE_PATH = "/etc/sps/table/table.json"
CONFIRMING = C.ServerReport(table_path_reported=True, table_path=TABLE_PATH)


def _pod(name: str, uid: str, ip: str, host_network: bool = False) -> PodInfo:
    return PodInfo(name=name, labels={}, node="n1", ready=True, table_hash=TABLE_HASH,
                   uid=uid, ip=ip, host_network=host_network)  # fmt: skip


def _readable(name: str, uid: str, ip: str) -> C.Readable:
    return C.Readable(name, uid, ip, 30000)


@pytest.mark.parametrize(
    "ip",
    ["kubernetes.default.svc", "metadata.google.internal", "localhost", "10.0.0.7:6443"],
)
def test_a_pod_ip_that_is_no_ip_address_is_never_read(ip: str) -> None:
    """status.podIP is read from the pod as it is. `forbidden_url_address` lets through
    whatever is not an IP address (it was written for URLs), so a pod whose podIP said
    `kubernetes.default.svc` or `metadata.google.internal` would have the operator resolve
    a name and GET that host (the API server, the cloud's metadata) from its own network.
    Only an IP address is a pod's address: anything else is skipped with why."""
    readable, skipped = C.serving_pods([_pod("srv-0", "u1", ip)], TABLE_HASH, 30000)
    assert readable == []
    assert skipped and "not an IP address" in skipped[0][1]


def test_link_local_loopback_and_host_network_pods_are_never_read() -> None:
    """Guard: the addresses a pod may not lead the operator to stay refused."""
    pods = [
        _pod("meta", "u1", "169.254.169.254"),
        _pod("lo", "u2", "127.0.0.1"),
        _pod("lo6", "u3", "::1"),
        _pod("host", "u4", "10.0.0.9", host_network=True),
    ]
    readable, skipped = C.serving_pods(pods, TABLE_HASH, 30000)
    assert readable == []
    assert [name for name, _ in skipped] == ["meta", "lo", "lo6", "host"]


def test_a_team_b_answer_never_confirms_a_team_a_pod_of_the_same_name_and_ip() -> None:
    """Guard: answers are kept by pod UID (which the API server assigns), never by name
    or IP: team-b's pod named like team-a's, on the IP team-a's pod had before, answering
    "I run the table", does not confirm team-a's pod whose own server is silent."""
    answers: dict[str, C.Answer] = {"b-uid": CONFIRMING, "a-uid": C.NoReport("did not answer")}
    by_ip = {"10.0.0.5": "b-uid"}
    current = {"uid": ""}

    def fetch(ip: str, port: int) -> C.Answer:
        return answers[current["uid"] or by_ip[ip]]

    reads = ServerReads(enabled=True, fetch=fetch)
    reads.read([_readable("srv-0", "b-uid", "10.0.0.5")], wait_seconds=5.0)
    current["uid"] = "a-uid"
    got = reads.read([_readable("srv-0", "a-uid", "10.0.0.5")], wait_seconds=5.0)
    verdict = C.judge_pod("srv-0", got["a-uid"], TABLE_PATH, TABLE_HASH, None)
    assert verdict.outcome == C.UNCONFIRMED


def test_team_b_silent_servers_cannot_take_every_read_from_team_a() -> None:
    """team-b's servers accept the connection and say nothing (each holds a read for its
    2 s, or 4 with a slow connect; with ~240 cheap ready pods, each asked again every
    120 s, and two or three profiles asking 4 per 5 s pass, team-b keeps the 8 reads busy
    all the time). team-a's pass then starts no read at all: its servers stay "not
    answered yet" and a table shadowed on team-a's pods is never found. Safe: a namespace
    has a share of the reads (e.g. at most READS_PER_PASS in flight per namespace), so
    team-a's pod is asked in its pass whatever team-b does."""
    release = threading.Event()
    asked: list[str] = []

    def fetch(ip: str, port: int) -> C.Answer:
        asked.append(ip)
        if ip.startswith("10.2."):  # team-b's tarpits
            release.wait(10)
            return C.NoReport("did not answer /server_info within 2 s")
        return CONFIRMING

    reads = ServerReads(enabled=True, fetch=fetch)
    try:
        for profile in range(2):  # two team-b profiles, 4 reads each per pass
            tarpits = [_readable(f"b{profile}-{i}", f"b{profile}-{i}", f"10.2.{profile}.{i}")
                       for i in range(C.READS_PER_PASS)]  # fmt: skip
            reads.read(tarpits, wait_seconds=0.01, namespace="team-b")
        got = reads.read([_readable("srv-0", "a-uid", "10.1.0.5")], 0.5, namespace="team-a")
        assert "10.1.0.5" in asked
        assert got.get("a-uid") == CONFIRMING
    finally:
        release.set()


def _lender(kind: str, namespace: str, name: str, tag: B.BorrowTag) -> dict[str, object]:
    annotations = {L.ANNOTATION_BORROWED: tag.to_annotation()}
    # The field manager's name any client may pass: no proof, and not read for a new claim.
    owned: dict[str, object] = {"f:metadata": {"f:annotations": {f"f:{L.ANNOTATION_BORROWED}": {}}}}
    managed = [{"manager": FIELD_MANAGER, "operation": "Apply", "fieldsV1": owned}]
    meta = {"name": name, "namespace": namespace, "annotations": annotations,
            "managedFields": managed}  # fmt: skip
    return {"kind": kind, "metadata": meta, "spec": {"replicas": 1}}


@pytest.mark.parametrize("old_claim", [False, True])
def test_a_team_b_borrow_copy_naming_team_a_run_is_never_acted_on(old_claim: bool) -> None:
    """Guard: team-a's run borrows a replica of its StatefulSet `srv` (the pool Lease, in
    the operator's namespace, records it). team-b copies team-a's record (profile UID and
    run: no secrets) onto its own StatefulSet `srv`, and team-a's own Deployment, also
    named `srv`, is annotated the same by a team-a user; with the operator's field
    manager's name, and against a claim of the previous version (no replicas in it) too.
    Only the lender the Lease names, of the kind it names, is the borrow."""
    claim = B.PoolClaim(namespace="team-a", profile="p", profile_uid="a-uid", run="p-run-1",
                        deployment="srv", product="H100", at="t",
                        replicas=None if old_claim else 3,
                        kind=workloads.STATEFUL_SET)  # fmt: skip
    tag = B.BorrowTag("a-uid", "p", "p-run-1", 9, "H100", "t")
    assert B.confirmed_tag(claim, _lender("StatefulSet", "team-b", "srv", tag)) is None
    assert B.confirmed_tag(claim, _lender("Deployment", "team-a", "srv", tag)) is None
    assert B.confirmed_tag(claim, _lender("LeaderWorkerSet", "team-a", "srv", tag)) is None
    real = B.confirmed_tag(claim, _lender("StatefulSet", "team-a", "srv", tag))
    assert real is not None and real.replicas == (9 if old_claim else 3)


_M = C.MAX_SERVER_INFO_BYTES
HOSTILE_ANSWERS = {
    "nested": "[" * (_M // 2) + "]" * (_M // 2),
    "huge integer": '{"world_size": ' + "9" * (_M - 40) + "}",
    "many keys": json.dumps({f"k{i}": i for i in range(50_000)}),
    "many states": '{"internal_states": [' + ",".join(["{}"] * 200_000) + "]}",
    "long path": json.dumps({C.TABLE_PATH_FIELD: "x" * (_M - 100)}),
    "large environment": json.dumps(
        {"environ": {f"SGLANG_{i}": "v" * 200 for i in range(4_000)}, "world_size": 1}
    ),
    "not finite": '{"sps_table": {"sha256": 1e999, "loaded": NaN}}',
    "not utf-8 text": "\udcff" * 1000,
}


@pytest.mark.parametrize("body", HOSTILE_ANSWERS.values(), ids=HOSTILE_ANSWERS.keys())
def test_a_hostile_server_info_is_read_into_a_few_kib_or_refused_never_raised(body: str) -> None:
    """Guard: team-b's server answers within the 1 MiB the operator reads, with what costs
    the most to keep or to parse. What the operator keeps (by pod UID, 2048 of them for
    every tenant) stays a few KiB per pod, and nothing raises out of the read."""
    answer = C.parse_server_info(body)
    assert len(repr(answer)) < 4 * 1024

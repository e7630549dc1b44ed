"""Live, as the serving servers confirm it (issue 33 §3, issue 34 §4): the bounded read of
a serving pod's /server_info, what the operator makes of the answer, and the rollout's use
of it. The HTTP server here is a fake on loopback; the passes run the real reconciler on
the fake API (controller_harness)."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from controller_harness import Harness, rounds
from hypothesis import given, settings
from hypothesis import strategies as st

from sps_operator.api.result import build_patch
from sps_operator.controller.kube.serverinfo import ServerReads, fetch_server_info
from sps_operator.controller.policies import confirm as C
from sps_operator.controller.policies.placement import PodInfo, pod_info
from sps_operator.plugin.explain import explain

TABLE_PATH = "/etc/sps/table/table.json"
RESOLVED = {"world_size": 8, "disaggregation_mode": "null",
            "env": {"SGLANG_SPEC_TP_SYNC": "all"}}  # fmt: skip


def server_info(**top: Any) -> dict[str, Any]:
    state = {"tp_size": 8, "env_vars": {"SGLANG_SPEC_TP_SYNC": "all"}}
    state.update(top.pop("state", {}))
    return {
        "speculative_algorithm": "DSPARK",
        "speculative_dspark_sps_table_path": TABLE_PATH,
        "world_size": 8,
        "disaggregation_mode": "null",
        "internal_states": [state],
        **top,
    }


# --------------------------------------------------------------------------- the parser


def test_sglang_reports_the_table_path_and_what_it_resolved() -> None:
    report = C.parse_server_info(json.dumps(server_info()))
    assert report == C.ServerReport(
        table_path_reported=True, table_path=TABLE_PATH, resolved=RESOLVED
    )
    # The simulator also reports the hash of the bytes it loaded.
    sim = C.parse_server_info(json.dumps(server_info(sps_table={"loaded": True, "sha256": "ab"})))
    assert isinstance(sim, C.ServerReport) and (sim.table_loaded, sim.table_hash) == (True, "ab")
    # An older SGLang: the path lives in the rank's state only; null: no table.
    older = {"internal_states": [{"speculative_dspark_sps_table_path": None}]}
    assert C.parse_server_info(json.dumps(older)) == C.ServerReport(table_path_reported=True)


def test_an_unreadable_answer_is_no_report_with_why() -> None:
    assert C.parse_server_info("[" * 4000) == C.NoReport(
        "answered /server_info with a body that nests arrays and objects more than 32 deep"
    )
    assert isinstance(C.parse_server_info("<html>"), C.NoReport)
    assert isinstance(C.parse_server_info("[1, 2]"), C.NoReport)
    huge = json.dumps({"x": "a" * C.MAX_SERVER_INFO_BYTES})
    assert "larger than" in str(C.parse_server_info(huge))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)
KEYS = st.sampled_from(["speculative_dspark_sps_table_path", "sps_table", "world_size",
                        "disaggregation_mode", "internal_states", "env_vars", "loaded",
                        "sha256", "SGLANG_SPEC_TP_SYNC"])  # fmt: skip
SHAPED = st.recursive(
    JSON, lambda inner: st.dictionaries(KEYS, inner, max_size=5) | st.lists(inner, max_size=3),
    max_leaves=40,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), SHAPED.map(json.dumps)))
def test_any_answer_parses_to_bounded_fields_and_never_raises(text: str) -> None:
    answer = C.parse_server_info(text)
    if isinstance(answer, C.NoReport):
        assert len(answer.why) <= C.MAX_WHY_CHARS
        return
    assert answer.table_path is None or len(answer.table_path) <= C.MAX_PATH_CHARS
    assert answer.table_hash is None or len(answer.table_hash) <= C.MAX_HASH_CHARS
    assert answer.table_loaded in (None, True, False)
    assert set(answer.resolved) <= {"world_size", "disaggregation_mode", "env"}
    # Whatever it says, judging it never raises either.
    verdict = C.judge_pod("p", answer, TABLE_PATH, "h", RESOLVED)
    assert verdict.outcome in (C.CONFIRMED, C.OTHER_TABLE, C.DRIFT, C.UNCONFIRMED)


# --------------------------------------------------------------------------- the verdict


def judge(info: dict[str, Any], recorded: Any = RESOLVED, digest: str = "h") -> C.PodVerdict:
    return C.judge_pod("server-0", C.parse_server_info(json.dumps(info)), TABLE_PATH, digest,
                       recorded)  # fmt: skip


def test_a_server_that_reads_the_table_and_resolved_alike_confirms() -> None:
    assert judge(server_info()).outcome == C.CONFIRMED
    assert judge(server_info(speculative_dspark_sps_table_path="/etc/sps/table//table.json"),
                 ).outcome == C.CONFIRMED  # fmt: skip
    assert judge(server_info(sps_table={"loaded": True, "sha256": "h"})).outcome == C.CONFIRMED


def test_a_server_on_another_table_is_named_with_what_it_said() -> None:
    other = judge(server_info(speculative_dspark_sps_table_path="/opt/mine.json"))
    assert other == C.PodVerdict(
        "server-0", C.OTHER_TABLE,
        "its server reports table path '/opt/mine.json', not '/etc/sps/table/table.json'",
    )  # fmt: skip
    assert judge(server_info(speculative_dspark_sps_table_path=None)).outcome == C.OTHER_TABLE
    # The subPath case (issue 33 §3): the path is right, the bytes are the tenant's.
    shadowed = judge(server_info(sps_table={"loaded": True, "sha256": "f00"}))
    assert shadowed.outcome == C.OTHER_TABLE and "'f00', not h" in shadowed.words
    assert judge(server_info(sps_table={"loaded": False})).outcome == C.OTHER_TABLE


def test_a_setting_resolved_otherwise_than_the_clone_is_drift() -> None:
    drifted = judge(
        server_info(
            world_size=16,
            state={"env_vars": {"SGL_SPEC_TP_SYNC": "x", "SGLANG_SPEC_TP_SYNC": "one"}},
        )
    )
    assert drifted.outcome == C.DRIFT
    assert drifted.words == (
        "world_size: 8 -> 16 (reported by the server); SGLANG_SPEC_TP_SYNC: unset -> one (the "
        "server's own environment, as it resolved it)"
    )
    # No record (a table measured on an older SGLang): nothing to compare with.
    assert judge(server_info(world_size=16), recorded=None).outcome == C.CONFIRMED


def test_a_server_that_says_nothing_of_its_table_does_not_confirm() -> None:
    bare = {"internal_states": [{}]}
    assert judge(bare) == C.PodVerdict("server-0", C.UNCONFIRMED,
                                       "its /server_info reports no table path")  # fmt: skip


def test_the_summary_refuses_for_another_table_before_drift_and_names_at_most_three() -> None:
    v = [C.PodVerdict(f"s{i}", C.OTHER_TABLE, "x") for i in range(5)]
    v += [C.PodVerdict("d", C.DRIFT, "y"), C.PodVerdict("ok", C.CONFIRMED)]
    summary = C.summarise(v, [], 0)
    assert summary.refusal is not None and summary.refusal[0] == C.OTHER_TABLE
    assert summary.refusal[1] == "pod s0: x; pod s1: x; pod s2: x (and 2 more)"
    quiet = C.summarise([C.PodVerdict("a", C.CONFIRMED), C.PodVerdict("b", C.UNCONFIRMED, "z")],
                        [("c", "has no pod IP yet")], 2)  # fmt: skip
    assert quiet == C.Confirmation(
        "1 of 5 serving pods' servers confirm the table; could not confirm (judged by its pods "
        "alone): pod b: z; pod c: has no pod IP yet; 2 not answered yet",
        None,
        pending=True,
        retry=True,
    )


def pod(name: str, **changes: Any) -> PodInfo:
    base = PodInfo(name, {}, "n1", ready=True, table_hash="h", uid=f"uid-{name}", ip="10.1.0.7")
    return dataclasses.replace(base, **changes)


def test_which_pods_are_asked() -> None:
    pods = [
        pod("ok"),
        pod("old", table_hash="g"),  # not this table's pod
        pod("starting", ready=False),
        pod("worker", labels={C.LWS_WORKER_INDEX: "1"}),  # the leader answers for it
        pod("leader", labels={C.LWS_WORKER_INDEX: "0"}),
        pod("host", host_network=True),
        pod("no-ip", ip=None),
        pod("meta", ip="169.254.169.254"),
    ]
    readable, skipped = C.serving_pods(pods, "h", 30000)
    assert [p.pod for p in readable] == ["ok", "leader"]
    assert readable[0] == C.Readable("ok", "uid-ok", "10.1.0.7", 30000)
    assert [name for name, _ in skipped] == ["host", "no-ip", "meta"]
    assert "link-local" in skipped[2][1]
    # At most the budget, never one already answered or on its way.
    known = {"uid-ok": C.NoReport("x")}
    assert C.to_read(readable, known, frozenset(), 4) == [readable[1]]
    assert C.to_read(readable, {}, frozenset({"uid-ok"}), 4) == [readable[1]]
    assert C.to_read(readable, {}, frozenset(), 1) == [readable[0]]


def test_the_pod_index_keeps_uid_ip_and_host_network() -> None:
    info = pod_info("p", {}, {"hostNetwork": True}, {"podIP": "10.2.3.4"}, {"uid": "u-1"})
    assert (info.uid, info.ip, info.host_network) == ("u-1", "10.2.3.4", True)
    assert pod_info("p", {}, {}, {}, {}).ip is None


def test_the_record_is_read_from_the_tables_meta() -> None:
    meta = {"manifest": {"server": {"resolved": {"world_size": 8, "junk": 1}}}}
    assert C.recorded_resolved(meta) == {"world_size": 8}
    assert C.recorded_resolved({"manifest": "x"}) is None
    assert C.recorded_resolved({}) is None


# --------------------------------------------------------------------------- the read


@contextmanager
def fake_server(handle: Callable[[BaseHTTPRequestHandler], None]) -> Iterator[int]:
    """An HTTP server on loopback answering every GET with `handle`; yields its port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            handle(self)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def answer(body: bytes, status: int = 200) -> Callable[[BaseHTTPRequestHandler], None]:
    def handle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return handle


def test_the_read_gets_server_info_over_http() -> None:
    paths: list[str] = []

    def handle(h: BaseHTTPRequestHandler) -> None:
        paths.append(h.path)
        answer(json.dumps(server_info()).encode())(h)

    with fake_server(handle) as port:
        got = fetch_server_info("127.0.0.1", port)
    assert paths == ["/server_info"]
    assert isinstance(got, C.ServerReport) and got.table_path == TABLE_PATH


def test_an_error_status_a_huge_answer_and_a_closed_port_are_no_reports() -> None:
    with fake_server(answer(b"{}", status=503)) as port:
        assert fetch_server_info("127.0.0.1", port) == C.NoReport(
            "answered /server_info with HTTP 503"
        )
    with fake_server(answer(b" " * 5000)) as port:
        assert fetch_server_info("127.0.0.1", port, max_bytes=4096) == C.NoReport(
            "answered /server_info with more than 4096 bytes"
        )

    def chunked(h: BaseHTTPRequestHandler) -> None:  # no Content-Length: read, then cut
        h.send_response(200)
        h.end_headers()
        h.wfile.write(b" " * 5000)

    with fake_server(chunked) as port:
        assert "more than 4096 bytes" in str(fetch_server_info("127.0.0.1", port, max_bytes=4096))
    with fake_server(answer(b"{}")) as port:
        pass  # closed now
    refused = fetch_server_info("127.0.0.1", port)
    assert isinstance(refused, C.NoReport) and "could not be reached" in refused.why


def test_a_server_that_drips_its_answer_is_cut_off_at_the_timeout() -> None:
    stop = threading.Event()

    def drip(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "100000")
        h.end_headers()
        for _ in range(200):  # a byte every 50 ms: each receive is well within the timeout
            if stop.is_set():
                return
            try:
                h.wfile.write(b" ")
                h.wfile.flush()
            except OSError:
                return
            time.sleep(0.05)

    with fake_server(drip) as port:
        started = time.monotonic()
        got = fetch_server_info("127.0.0.1", port, timeout=0.5)
        took = time.monotonic() - started
        stop.set()
    assert got == C.NoReport("did not answer /server_info within 0.5 s")
    assert took < 3.0  # not 200 × 50 ms


def test_answers_are_kept_by_pod_uid_and_a_silent_server_is_asked_again_later() -> None:
    calls: list[str] = []
    clock = [0.0]

    def fetch(ip: str, port: int) -> C.Answer:
        calls.append(ip)
        return C.ServerReport() if ip == "10.0.0.1" else C.NoReport("silent")

    reads = ServerReads(enabled=True, fetch=fetch, clock=lambda: clock[0])
    a, b = C.Readable("a", "ua", "10.0.0.1", 1), C.Readable("b", "ub", "10.0.0.2", 1)
    assert set(reads.read([a, b], 5.0)) == {"ua", "ub"}
    assert reads.known(["ua", "ub"]) == {"ua": C.ServerReport(), "ub": C.NoReport("silent")}
    clock[0] += C.RETRY_UNCONFIRMED_SECONDS
    assert reads.known(["ua", "ub"]) == {"ua": C.ServerReport()}  # b is due again
    assert sorted(calls) == ["10.0.0.1", "10.0.0.2"]
    # The memory is bounded: the answers read longest ago are forgotten first.
    small = ServerReads(enabled=True, fetch=fetch, max_kept=2)
    for i in range(5):
        small.read([C.Readable(f"p{i}", f"u{i}", "10.0.0.1", 1)], 5.0)
    assert set(small.known(f"u{i}" for i in range(5))) == {"u3", "u4"}


def test_at_most_the_process_bound_of_reads_are_on_their_way() -> None:
    release = threading.Event()
    started: list[str] = []

    def fetch(ip: str, port: int) -> C.Answer:
        started.append(ip)
        release.wait(5)
        return C.ServerReport()

    reads = ServerReads(enabled=True, fetch=fetch, workers=2)
    pods = [C.Readable(f"p{i}", f"u{i}", f"10.0.0.{i}", 1) for i in range(5)]
    assert reads.read(pods, 0.2) == {}  # still on their way: kept for a later pass
    assert len(reads.in_flight()) == 2 and len(started) <= 2
    release.set()
    deadline = time.monotonic() + 5
    while reads.in_flight() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert set(reads.known(f"u{i}" for i in range(5))) == {"u0", "u1"}


# --------------------------------------------------------------------------- the rollout

MANIFEST = {"server": {"resolved": RESOLVED}}


def live_harness(
    fetch: Callable[[str, int], C.Answer],
    clock: Callable[[], float] = time.monotonic,
    reads: type[ServerReads] = ServerReads,
) -> Harness:
    h = Harness.one_target()
    assert h.reconciler is not None
    h.reconciler.servers = reads(enabled=True, fetch=fetch, clock=clock)
    h.pods = [
        dataclasses.replace(p, uid=f"uid-{i}", ip=f"10.1.0.{i + 1}")
        for i, p in enumerate(PodInfo(f"server-{i}", {"app": "sglang", "deploy": "server"}, "n1",
                                      ready=True) for i in range(1))
    ]  # fmt: skip
    h.profile_once(result=build_patch(status="succeeded", rounds=rounds(), manifest=MANIFEST))
    return h


def test_a_live_target_says_its_servers_confirm_the_table() -> None:
    asked: list[tuple[str, int]] = []

    def fetch(ip: str, port: int) -> C.Answer:
        asked.append((ip, port))
        return C.parse_server_info(json.dumps(server_info()))

    h = live_harness(fetch)
    target = h.status()["targets"][0]
    assert target["state"] == "Live"
    assert target["servers"] == "1 of 1 serving pods' servers confirm the table"
    assert h.condition("Ready")[:2] == ("True", "TableLive")
    h.settle()
    assert asked == [("10.1.0.1", 30000)]  # a steady server is asked once, at its port


def test_a_server_that_resolved_otherwise_is_not_live_and_says_what() -> None:
    drifted = server_info(world_size=16)
    h = live_harness(lambda ip, port: C.parse_server_info(json.dumps(drifted)))
    target = h.status()["targets"][0]
    assert (target["state"], target["reason"]) == ("Refused", "ServerResolvedDrift")
    assert "world_size: 8 -> 16 (reported by the server)" in target["message"]
    assert h.condition("Ready")[:2] == ("False", "ServerResolvedDrift")
    assert h.condition("Degraded")[:2] == ("True", "ServerResolvedDrift")


def test_a_server_that_reads_another_table_is_not_live() -> None:
    mine = server_info(speculative_dspark_sps_table_path="/models/mine.json")
    h = live_harness(lambda ip, port: C.parse_server_info(json.dumps(mine)))
    target = h.status()["targets"][0]
    assert (target["state"], target["reason"]) == ("Refused", "ServerRunsOtherTable")
    assert target["rolledOut"] is False
    assert "pod server-0: its server reports table path '/models/mine.json'" in target["message"]


def test_other_bytes_at_the_right_path_are_seen_where_the_server_reports_their_hash() -> None:
    """Issue 33 §3 without a mount: an image whose entrypoint writes its own file at the
    table's path. The pod spec shows nothing; the simulator reports the bytes' hash."""
    forged = server_info(sps_table={"loaded": True, "sha256": "0123456789abcdef"})
    h = live_harness(lambda ip, port: C.parse_server_info(json.dumps(forged)))
    target = h.status()["targets"][0]
    assert (target["state"], target["reason"]) == ("Refused", "ServerRunsOtherTable")
    assert f"hash '0123456789abcdef', not {target['hash']}" in target["message"]
    assert h.condition("Ready")[:2] != ("True", "TableLive")


def test_an_unreachable_server_leaves_live_as_the_pods_say_and_status_says_so() -> None:
    clock, asked = [0.0], []

    def fetch(ip: str, port: int) -> C.Answer:
        asked.append(ip)
        if len(asked) == 1:
            return C.NoReport("could not be reached on port 30000 (refused)")
        return C.parse_server_info(json.dumps(server_info()))

    h = live_harness(fetch, clock=lambda: clock[0])
    target = h.status()["targets"][0]
    assert target["state"] == "Live"
    assert target["servers"] == (
        "0 of 1 serving pods' servers confirm the table; could not confirm (judged by its pods "
        "alone): pod server-0: could not be reached on port 30000 (refused)"
    )
    assert h.condition("Ready")[:2] == ("True", "TableLive")
    h.settle()
    assert len(asked) == 1  # not at every pass
    clock[0] += C.RETRY_UNCONFIRMED_SECONDS
    h.settle(passes=1)
    assert h.status()["targets"][0]["servers"] == "1 of 1 serving pods' servers confirm the table"


def test_a_pass_asks_at_most_its_budget_and_the_rest_in_later_passes() -> None:
    asked: list[str] = []

    def fetch(ip: str, port: int) -> C.Answer:
        asked.append(ip)
        return C.parse_server_info(json.dumps(server_info()))

    h = Harness.one_target()
    assert h.reconciler is not None
    h.reconciler.servers = ServerReads(enabled=True, fetch=fetch)
    dep = h.kube.obj("Deployment", "server", "serving")
    dep["spec"]["replicas"] = 10
    dep["status"].update(replicas=10, updatedReplicas=10, availableReplicas=10)
    h.pods = [PodInfo(f"server-{i}", {"app": "sglang", "deploy": "server"}, "n1", ready=True,
                      uid=f"u{i}", ip=f"10.1.0.{i + 1}") for i in range(10)]  # fmt: skip
    h.tick()
    h.run_pass()
    h.finish()
    h.tick()
    h.run_pass()  # publishes and rolls
    passes = 0
    while len(asked) < 10 and passes < 10:
        before = len(asked)
        h.tick()
        h.run_pass()
        assert len(asked) - before <= C.READS_PER_PASS
        passes += 1
    assert sorted(asked) == sorted(f"10.1.0.{i + 1}" for i in range(10))
    assert h.status()["targets"][0]["servers"] == "10 of 10 serving pods' servers confirm the table"


class RecordedWaits(ServerReads):
    waits: ClassVar[list[float]] = []

    def read(
        self, pods: Sequence[C.Readable], wait_seconds: float, namespace: str = ""
    ) -> dict[str, C.Answer]:
        self.waits.append(wait_seconds)
        return super().read(pods, wait_seconds, namespace)


def test_a_pass_does_not_wait_for_a_slow_server_its_answer_serves_the_next_pass() -> None:
    release = threading.Event()

    def fetch(ip: str, port: int) -> C.Answer:
        release.wait(10)  # a server that cannot be reached, until the test says
        return C.parse_server_info(json.dumps(server_info()))

    RecordedWaits.waits = []
    h = live_harness(fetch, reads=RecordedWaits)
    # A pass waits at most its budget in all (1 s), not a read's timeout per target.
    assert RecordedWaits.waits and sum(RecordedWaits.waits) <= C.WAIT_PER_PASS_SECONDS
    target = h.status()["targets"][0]
    assert target["state"] == "Live"  # judged by its pods meanwhile
    assert target["servers"] == (
        "0 of 1 serving pods' servers confirm the table; 1 not answered yet"
    )
    release.set()
    assert h.reconciler is not None
    deadline = time.monotonic() + 5
    while h.reconciler.servers.in_flight() and time.monotonic() < deadline:
        time.sleep(0.01)
    h.settle(passes=1)
    assert h.status()["targets"][0]["servers"] == "1 of 1 serving pods' servers confirm the table"


def test_the_real_read_through_a_pass_against_a_loopback_server() -> None:
    """The whole path once with HTTP: the pass's reader fetches from a server on loopback
    (the pod's IP is mapped there: the operator never calls loopback itself)."""
    with fake_server(answer(json.dumps(server_info(world_size=4)).encode())) as port:
        h = live_harness(lambda ip, _: fetch_server_info("127.0.0.1", port))
    target = h.status()["targets"][0]
    assert (target["state"], target["reason"]) == ("Refused", "ServerResolvedDrift")


def test_no_server_is_asked_unless_the_operator_was_started_to() -> None:
    h = Harness.one_target()  # Settings.confirm_servers is off; the flag's default is on
    assert h.reconciler is not None and not h.reconciler.servers.enabled
    h.pods = [dataclasses.replace(p, uid="u", ip="10.1.0.1") for p in h.pods]
    target = h.profile_once()["targets"][0]
    assert target["state"] == "Live" and "servers" not in target


# --------------------------------------------------------------------------- explain


def test_explain_says_what_a_server_reported_and_when_none_could_confirm() -> None:
    h = live_harness(lambda ip, port: C.parse_server_info(json.dumps(server_info(world_size=2))))
    report = explain(h.kube.obj("SpsProfile", "p", "serving"))
    (finding,) = [f for f in report["findings"] if "ServerResolvedDrift" in f["why"]]
    assert finding["what"] == (
        "A server resolved a cost setting otherwise than the profiling clone did "
        "(Deployment server)"
    )
    assert "world_size: 8 -> 2" in finding["why"] and "kubectl sps reprofile p" in finding["next"]

    quiet = live_harness(lambda ip, port: C.NoReport("could not be reached on port 30000"))
    report = explain(quiet.kube.obj("SpsProfile", "p", "serving"))
    (finding,) = report["findings"]
    assert finding["what"] == (
        "Live by its pods; its servers did not confirm the table (Deployment server)"
    )
    assert "could not be reached on port 30000" in finding["why"]

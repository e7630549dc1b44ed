"""Every request the operator, `kubectl sps` and the publisher send is bounded in time
(`sps_operator/kube_rest.py`): against real sockets on 127.0.0.1 and a real `ApiClient`, a
server that accepts and never answers is given up on after one attempt, one that trickles
its body a byte at a time is cut at the whole-answer deadline, and what they raise is what
the operator already takes for a transient API failure (the Lease's round among them)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import urllib3
from controller_harness import Harness
from kubernetes.client import ApiClient, Configuration

from sps_operator.controller.kube.client import api_error_detail, is_transient
from sps_operator.controller.kube.rest import request
from sps_operator.controller.main import _renew
from sps_operator.controller.process.leader import LeaseElector, Timing
from sps_operator.kube_rest import AnswerTooSlow, send, whole_deadline
from sps_operator.profiler import publish

PATH = "/api/v1/namespaces/ns/configmaps/x"
# How long a test's server holds a connection at most: old code (no timeout) ends then too.
HOLD_SECONDS = 3.0


Serve = Callable[[socket.socket, threading.Event], None]


class Server:
    """A listening socket on 127.0.0.1; `serve(conn, stop)` handles each connection."""

    def __init__(self, serve: Serve) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.stop = threading.Event()
        self._serve = serve
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self.listener.settimeout(0.05)
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            self._serve(conn, self.stop)

    def api(self) -> ApiClient:
        return ApiClient(Configuration(host=f"http://127.0.0.1:{self.port}"))

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        self._thread.join(2)


def silent(conn: socket.socket, stop: threading.Event) -> None:
    """Accept, read the request, never answer."""
    conn.recv(65536)
    stop.wait(HOLD_SECONDS)


def trickle(head: bytes, byte: bytes) -> Serve:
    """Send `head`, then `byte` every 20 ms until HOLD_SECONDS: each read off the socket
    gets a byte long before a read timeout."""

    def serve(conn: socket.socket, stop: threading.Event) -> None:
        conn.recv(65536)
        conn.sendall(head)
        ends = time.monotonic() + HOLD_SECONDS
        while not stop.is_set() and time.monotonic() < ends:
            try:
                conn.sendall(byte)
            except OSError:
                return
            stop.wait(0.02)

    return serve


# A 1000-byte body, 20 s in all at that pace.
trickling = trickle(
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n", b" "
)
# A status line, then a header that never ends.
trickling_headers = trickle(b"HTTP/1.1 200 OK\r\nX-Slow: ", b"a")
Start = Callable[[Serve], Server]


@pytest.fixture
def serving() -> Iterator[Start]:
    started: list[Server] = []

    def start(serve: Serve) -> Server:
        started.append(Server(serve))
        return started[-1]

    yield start
    for server in started:
        server.close()


def test_a_server_that_never_answers_is_given_up_on_after_one_attempt(serving: Start) -> None:
    server = serving(silent)
    began = time.monotonic()
    with pytest.raises(urllib3.exceptions.HTTPError) as raised:
        send(server.api(), "GET", PATH, timeout=(0.5, 0.3))
    took = time.monotonic() - began
    # One attempt: urllib3's default would have retried the GET three more times.
    assert server.accepted == 1
    assert took < HOLD_SECONDS, took
    exc = raised.value
    assert isinstance(exc, urllib3.exceptions.MaxRetryError)
    assert isinstance(exc.reason, urllib3.exceptions.ReadTimeoutError)
    assert is_transient(exc)
    assert api_error_detail(exc).startswith("no answer from the API server: ReadTimeoutError")


def test_a_trickled_answer_is_cut_at_the_whole_answer_deadline(serving: Start) -> None:
    server = serving(trickling)
    began = time.monotonic()
    with pytest.raises(AnswerTooSlow) as raised:
        send(server.api(), "GET", PATH, timeout=(0.5, 0.5), deadline=0.6)
    took = time.monotonic() - began
    assert took < HOLD_SECONDS, took
    exc = raised.value
    assert str(exc) == f"{PATH}: the API server's answer did not end within 0.6 s (cut off)"
    # What every caller already takes for a timeout: urllib3's, transient.
    assert isinstance(exc, urllib3.exceptions.ReadTimeoutError) and isinstance(
        exc, urllib3.exceptions.TimeoutError
    )
    assert is_transient(exc)
    assert api_error_detail(exc) == f"no answer from the API server: AnswerTooSlow: {exc}"


def test_trickled_headers_are_cut_at_the_whole_answer_deadline(serving: Start) -> None:
    server = serving(trickling_headers)
    began = time.monotonic()
    with pytest.raises(AnswerTooSlow) as raised:
        send(server.api(), "GET", PATH, timeout=(0.5, 0.5), deadline=0.6)
    assert time.monotonic() - began < HOLD_SECONDS
    assert server.accepted == 1
    assert is_transient(raised.value)


def test_the_operators_request_is_bounded_by_its_timeout(serving: Start) -> None:
    server = serving(trickling)
    with pytest.raises(AnswerTooSlow) as raised:
        request(server.api(), "GET", PATH, timeout=(0.3, 0.3))
    assert raised.value.seconds == 0.6  # the whole answer: connect and read together


def test_the_whole_deadline_follows_from_the_callers_timeout() -> None:
    assert whole_deadline((5.0, 30.0)) == 35.0  # the publisher's
    assert whole_deadline(12.0) == 12.0  # kubectl sps --request-timeout=12s
    assert whole_deadline(None) is None  # --request-timeout=0: as kubectl, no limit


def test_a_lease_round_without_an_answer_is_a_lost_round_not_a_crash(serving: Start) -> None:
    server = serving(silent)
    timing = Timing(lease_duration=1.0, renew_deadline=0.6, retry_period=0.2)
    assert sum(timing.request_timeout) == pytest.approx(timing.renew_deadline)
    elector = LeaseElector("sps", "ns", "me", api=server.api(), timing=timing)
    began = time.monotonic()
    assert elector.try_once() is False  # raised, it would end the renewing task
    assert time.monotonic() - began < HOLD_SECONDS
    assert not elector.is_leader()


async def test_leadership_lapses_by_the_clock_while_a_renewal_round_hangs() -> None:
    """The renewing task stops the operator at the renew deadline even while a round still
    waits for the API server (before: only once the round returned)."""
    timing = Timing(lease_duration=1.0, renew_deadline=0.6, retry_period=0.05)
    release = threading.Event()

    class Hung(LeaseElector):
        def try_once(self) -> bool:
            release.wait(5)
            return False

    elector = Hung("sps", "ns", "me", api=ApiClient(), timing=timing)
    elector._renewed_at = time.monotonic()  # a leader that has just renewed
    stop, state = asyncio.Event(), dict[str, bool]()
    began = time.monotonic()
    try:
        await asyncio.wait_for(_renew(elector, stop, state), timeout=3)
    finally:
        release.set()
    assert state == {"lost": True} and stop.is_set()
    assert time.monotonic() - began < timing.renew_deadline + 0.5


def test_a_lease_request_may_take_seconds_and_is_still_bounded() -> None:
    connect, read = Timing().request_timeout
    assert 0 < connect <= read and connect + read == Timing().renew_deadline


def test_a_timeout_in_a_pass_is_a_transient_failure_in_status_and_the_run_goes_on() -> None:
    h = Harness.with_finished_job()
    h.kube.fail["create_ConfigMap"] = AnswerTooSlow(PATH, 80.0)
    h.tick()
    status = h.run_pass()
    failure = status["lastFailure"]
    assert failure["reason"] == "ReconcileError"
    assert "no answer from the API server: AnswerTooSlow" in failure["message"], failure
    assert any(e[0] == "ReconcileError" for e in h.kube.events)
    # Transient: the run is followed again after the backoff, not ended as a 422 ends it.
    assert status.get("currentRun") is not None
    for _ in range(10):
        h.tick(120)
        h.run_pass()
        if h.condition("Ready")[0] == "True":
            break
    assert h.status().get("tables") and h.condition("Ready")[0] == "True", h.status()


def test_the_publisher_tries_a_connect_again_but_never_a_timed_out_write(
    serving: Start, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serving(trickling)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.port}"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setattr(publish, "REQUEST_TIMEOUT", (0.2, 0.3))
    publisher = publish.ConfigMapPublisher("result", "ns")
    with pytest.raises(AnswerTooSlow) as raised:
        publisher.publish(status="running", message="starting", progress="0/?")
    # Its deadline counts every connect it may make: 3 x 0.2 s, and the 0.3 s read.
    assert raised.value.seconds == pytest.approx(0.9)
    assert server.accepted == 1
    retries = publisher._api.configuration.retries
    assert (retries.connect, retries.read) == (2, 0)


async def test_the_renewing_task_ends_at_stop_and_never_amid_a_round() -> None:
    """At shutdown the Lease is released after the renewing task ends; a round still in
    flight then would take it again (the next leader waiting out the lease duration)."""
    timing = Timing(lease_duration=10.0, renew_deadline=7.0, retry_period=5.0)
    elector = LeaseElector("sps", "ns", "me", api=ApiClient(), timing=timing)
    elector._renewed_at = time.monotonic()
    stop = asyncio.Event()
    renewing = asyncio.ensure_future(_renew(elector, stop, {}))
    await asyncio.sleep(0.1)
    began = time.monotonic()
    stop.set()
    await asyncio.wait_for(renewing, timeout=2)  # not after its 5 s retry period
    assert time.monotonic() - began < 1

    rounds: list[str] = []
    release = threading.Event()

    class Slow(LeaseElector):
        def try_once(self) -> bool:
            rounds.append("began")
            release.wait(0.5)
            rounds.append("ended")
            return True

    slow = Slow("sps", "ns", "me", api=ApiClient(), timing=Timing(retry_period=0.05))
    slow._renewed_at = time.monotonic()
    stop = asyncio.Event()
    renewing = asyncio.ensure_future(_renew(slow, stop, {}))
    while not rounds:
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(renewing, timeout=3)
    assert rounds == ["began", "ended"]  # the round in flight ended first; none after

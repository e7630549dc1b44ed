"""One deadline bounds a `/server_info` read (issue 34 follow-up): a server slow to take
the connection and then slow to answer holds its read slot at most the timeout, not the
connect's timeout and then the answer's. The servers are plain sockets on loopback."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from sps_operator.controller.kube.serverinfo import fetch_server_info
from sps_operator.controller.policies import confirm as C

TIMEOUT = 2.0


@dataclass
class SlowServer:
    """What the server saw: when it took the read's connection, and its request."""

    port: int
    accepted_at: float | None = None
    request: bytes = b""
    stop: threading.Event = field(default_factory=threading.Event)


def _connect_stalls(port: int) -> bool:
    """A connect to the port does not complete now (its accept queue is full: Linux drops
    the SYN, and the client sends it again after its 1 s retransmission timeout)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return False
    except TimeoutError:
        return True


@contextlib.contextmanager
def slow_to_accept_then_silent(free_queue_after: float) -> Iterator[SlowServer]:
    """A listener whose accept queue (backlog 0) is held full by a first connection, so the
    read's connect stalls; after `free_queue_after` s the server takes that connection and
    the queue has room, the read's connect completes on its SYN's next retransmission, and
    the server reads the request and never answers."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    filler = socket.create_connection(listener.getsockname(), timeout=1.0)
    server = SlowServer(listener.getsockname()[1])
    assert _connect_stalls(server.port), "the kernel took a connection past a full backlog"

    def serve() -> None:
        time.sleep(free_queue_after)
        first, _ = listener.accept()  # the filler: the queue has room again
        first.close()
        conn, _ = listener.accept()
        server.accepted_at = time.monotonic()
        with conn:
            conn.settimeout(0.1)
            while not server.stop.is_set():
                with contextlib.suppress(TimeoutError):
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    server.request += chunk

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop.set()
        thread.join(timeout=5)
        filler.close()
        listener.close()


def test_a_slow_accept_and_a_slow_answer_share_one_deadline() -> None:
    with slow_to_accept_then_silent(free_queue_after=0.3) as server:
        started = time.monotonic()
        got = fetch_server_info("127.0.0.1", server.port, timeout=TIMEOUT)
        took = time.monotonic() - started
    assert got == C.NoReport(f"did not answer /server_info within {TIMEOUT:g} s")
    # The read's connect was slow (a SYN retransmission, about 1 s), then it asked and
    # waited for an answer that never came...
    assert server.accepted_at is not None and server.accepted_at - started > 0.5
    assert server.request.startswith(b"GET /server_info ")
    # ...and all of it within the one deadline (before: about 1 s of connect + 2 s).
    assert took < TIMEOUT + 0.6, took

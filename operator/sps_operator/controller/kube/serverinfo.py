"""The operator's one HTTP call to serving pods: a bounded read of `/server_info`.

What a server answers is the tenant's (`policies/confirm.py` parses and judges it); this
module only fetches it, bounded in time (`READ_TIMEOUT_SECONDS` from the connect to the
answer's last byte, one deadline for all of it), in size (`MAX_SERVER_INFO_BYTES`, read no
further), and in number: a process-wide pool of `MAX_CONCURRENT_READS` threads does every
read, at most that many are on their way at once, and each answer is kept by pod UID (a
server's table and settings are fixed for its pod's life) in a bounded memory, so a steady
server is asked once. An answer that says nothing is asked again after
`RETRY_UNCONFIRMED_SECONDS`. A read never raises: a failure is a `NoReport` with why.

Reads are off unless the operator is started with them (`--confirm-servers`, the chart's
`confirmServers`); an operator whose NetworkPolicy forbids egress to tenant pods gets
NoReports, and Live is judged from the pods alone (docs/operator.md).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_for

from sps_operator.controller.policies.confirm import (
    MAX_CONCURRENT_READS,
    MAX_READS_PER_NAMESPACE,
    MAX_SERVER_INFO_BYTES,
    READ_TIMEOUT_SECONDS,
    RETRY_UNCONFIRMED_SECONDS,
    Answer,
    NoReport,
    Readable,
    cut,
    parse_server_info,
)

# Answers kept, by pod UID: each a few KiB at most (`ServerReport` keeps bounded fields:
# the path cut at 1 KiB, the ~20 compared variables at 256 characters), so a few MiB.
MAX_KEPT = 2048
CHUNK = 64 * 1024
PATH = "/server_info"


def fetch_server_info(
    ip: str,
    port: int,
    timeout: float = READ_TIMEOUT_SECONDS,
    max_bytes: int = MAX_SERVER_INFO_BYTES,
) -> Answer:
    """GET http://ip:port/server_info, bounded; the parsed answer or why there is none.
    One deadline, `timeout` from the call, bounds it all: the connect may take all of it,
    the answer only what the connect left (a slow connect then a slow answer hold a read
    slot `timeout`, not twice that). A server that drips its answer byte by byte is cut off at the
    deadline all the same: a timer shuts the socket down (which wakes a blocked receive)."""
    deadline = time.monotonic() + timeout
    conn = http.client.HTTPConnection(ip, port, timeout=timeout)
    late = NoReport(f"did not answer /server_info within {timeout:g} s")
    timer: threading.Timer | None = None
    fired = threading.Event()
    try:
        conn.connect()
        left = deadline - time.monotonic()
        if left <= 0 or conn.sock is None:
            return late
        conn.sock.settimeout(left)  # no single receive outlives the deadline either
        timer = threading.Timer(left, _shut, (conn.sock, fired))
        timer.daemon = True
        timer.start()
        conn.request("GET", PATH, headers={"Accept": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            return NoReport(f"answered /server_info with HTTP {response.status}")
        length = response.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            return NoReport(f"answered /server_info with more than {max_bytes} bytes")
        body = bytearray()
        while len(body) <= max_bytes:
            chunk = response.read1(min(CHUNK, max_bytes + 1 - len(body)))
            if not chunk:
                break
            body += chunk
        if fired.is_set():
            return late
        if len(body) > max_bytes:
            return NoReport(f"answered /server_info with more than {max_bytes} bytes")
        return parse_server_info(body.decode("utf-8", errors="replace"))
    except TimeoutError:
        return late
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if fired.is_set():
            return late
        return NoReport(cut(f"could not be reached on port {port} ({type(exc).__name__}: {exc})"))
    finally:
        if timer is not None:
            timer.cancel()
        conn.close()


def _shut(sock: socket.socket | None, fired: threading.Event) -> None:
    fired.set()  # before the shutdown: the reader, woken by it, must see why
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


Fetch = Callable[[str, int], Answer]


class ServerReads:
    """Process-wide, thread-safe: the answers kept by pod UID and the pool that reads."""

    def __init__(
        self,
        enabled: bool = False,
        fetch: Fetch = fetch_server_info,
        clock: Callable[[], float] = time.monotonic,
        workers: int = MAX_CONCURRENT_READS,
        max_kept: int = MAX_KEPT,
    ) -> None:
        self.enabled = enabled
        self._fetch = fetch
        self._clock = clock
        self._workers = workers
        self._max_kept = max_kept
        self._kept: OrderedDict[str, tuple[Answer, float]] = OrderedDict()
        self._in_flight: dict[str, str] = {}  # pod UID -> the namespace that asked
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def known(self, uids: Iterable[str]) -> dict[str, Answer]:
        """The answers kept for these pods (a NoReport only until it is due again)."""
        now = self._clock()
        out: dict[str, Answer] = {}
        with self._lock:
            for uid in uids:
                kept = self._kept.get(uid)
                if kept is None:
                    continue
                answer, at = kept
                if isinstance(answer, NoReport) and now - at >= RETRY_UNCONFIRMED_SECONDS:
                    continue
                out[uid] = answer
        return out

    def in_flight(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._in_flight)

    def read(
        self, pods: Sequence[Readable], wait_seconds: float, namespace: str = ""
    ) -> dict[str, Answer]:
        """Ask these pods' servers (at most `MAX_CONCURRENT_READS` on their way in the
        whole process, and `MAX_READS_PER_NAMESPACE` for the `namespace` that asks: the
        others wait for a later pass) and wait up to `wait_seconds` for their answers; a
        read still going then keeps its answer for a later pass. Returns the answers kept
        for `pods`."""
        started = []
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="sps-serverinfo")
            own = sum(1 for asker in self._in_flight.values() if asker == namespace)
            for pod in pods:
                if len(self._in_flight) >= self._workers or own >= MAX_READS_PER_NAMESPACE:
                    break
                if pod.uid in self._in_flight:
                    continue
                self._in_flight[pod.uid] = namespace
                own += 1
                started.append(self._pool.submit(self._read_one, pod))
        wait_for(started, timeout=wait_seconds)
        return self.known(pod.uid for pod in pods)

    def _read_one(self, pod: Readable) -> None:
        try:
            answer = self._fetch(pod.ip, pod.port)
        except Exception as exc:  # a fetch never raises; a bug here is a NoReport too
            answer = NoReport(cut(f"could not be read ({type(exc).__name__})"))
        with self._lock:
            self._in_flight.pop(pod.uid, None)
            self._kept[pod.uid] = (answer, self._clock())
            self._kept.move_to_end(pod.uid)
            while len(self._kept) > self._max_kept:
                self._kept.popitem(last=False)

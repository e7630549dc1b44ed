"""HTTP client of a DSpark server in profiling mode (requests, keep-alive).

`requests`, as SGLang's own profiler (measured against httpx: at the profiler's 4 polls a
second httpx's 0.4–0.7 ms less per call is noise). Every call is bounded: by
`--http-timeout`, and inside a round by the time left before `--round-timeout`, so a server
that accepts and never answers holds a round for at most its timeout.

The URL may be a profile author's (`server.source: External`) and what a profiler says
lands in the profile's status and in the pod's log, both of which that author reads. So an
answer is described, never quoted: its HTTP status, media type and size, never its body
(a URL pointing at a service the author cannot reach must not become a way to read it).
And no connection is kept whose peer is a metadata or link-local address, whatever name
led there (`api/endpoints.py`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter

from sps_operator.api.endpoints import forbidden_peer

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 600.0  # SGLang's DEFAULT_TIMEOUT, for every call
# How long the load's POST may outlive its round's deadline (the abort lands first).
LOAD_GRACE_SECONDS = 60.0


class ServerUnavailableError(RuntimeError):
    """The server cannot be reached or stopped answering."""


class ServerResponseError(RuntimeError):
    """The server answered with something a DSpark server would not send."""


class ForbiddenPeerError(RuntimeError):
    """The connection reached an address a profiler never talks to. Not an OSError, so
    urllib3 neither retries nor wraps it."""


class _CheckedPeer:
    """Mixed into urllib3's connections: checks the address actually connected to (after
    DNS, so a name that resolves differently at connect time changes nothing)."""

    def _new_conn(self) -> socket.socket:
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        try:
            peer = str(sock.getpeername()[0])
        except (OSError, IndexError):
            return sock
        why = forbidden_peer(peer)
        if why:
            sock.close()
            raise ForbiddenPeerError(f"refused to talk to {why}")
        return sock


class _CheckedHTTPConnection(_CheckedPeer, urllib3.connection.HTTPConnection):
    pass


class _CheckedHTTPSConnection(_CheckedPeer, urllib3.connection.HTTPSConnection):
    pass


class _CheckedHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _CheckedHTTPConnection


class _CheckedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _CheckedHTTPSConnection


class _CheckedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _CheckedHTTPPool,
            "https": _CheckedHTTPSPool,
        }


def checked_session() -> requests.Session:
    """A session whose connections never reach a forbidden peer."""
    session = requests.Session()
    for scheme in ("http://", "https://"):
        session.mount(scheme, _CheckedAdapter())
    return session


# Media types a message may name; any other is "another media type" (a header is the
# server's text too).
KNOWN_MEDIA_TYPES = frozenset(
    {"application/json", "application/xml", "application/octet-stream", "text/html",
     "text/plain", "text/xml", "text/event-stream"}
)  # fmt: skip


def describe(response: requests.Response) -> str:
    """An answer as a message may show it: HTTP status, media type, size; never the body."""
    media = (response.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if media not in KNOWN_MEDIA_TYPES:
        media = "another media type" if media else "no media type"
    return f"HTTP {response.status_code}, {media}, {len(response.content)} bytes"


def _root_cause(exc: BaseException) -> str:
    """The innermost reason of a connection failure (urllib3 wraps it twice)."""
    found = re.search(r"\[Errno -?\d+\][^'\")]*", str(exc))
    return found.group(0).strip() if found else type(exc).__name__


class DsparkClient:
    """One keep-alive session to the server; the load runs on its own session."""

    def __init__(self, base_url: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        if not base_url:
            raise ValueError(
                "pass --base-url of an already-running DSpark server (the profiler never "
                "launches one), e.g. http://localhost:30000"
            )
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"--base-url must start with http:// or https://, got {base_url!r}")
        if not timeout > 0:
            raise ValueError(f"--http-timeout must be > 0, got {timeout}.")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._http = checked_session()
        # The load gets its own keep-alive session, created once: a new connection per round
        # costs tens of ms, during which the GPU idles and its clocks may drop.
        self._load_http = checked_session()
        self._deadline: float | None = None
        self._deadline_what = ""

    def close(self) -> None:
        self._http.close()
        self._load_http.close()

    def __enter__(self) -> DsparkClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def deadline(self, at: float, what: str) -> Iterator[None]:
        """Bound every call inside the block by the time left until `at` (monotonic)."""
        saved = self._deadline, self._deadline_what
        self._deadline, self._deadline_what = at, what
        try:
            yield
        finally:
            self._deadline, self._deadline_what = saved

    def seconds_left(self, cap: float | None = None) -> float:
        """The timeout of the next call; raises ServerUnavailableError past the deadline."""
        limit = self.timeout if cap is None else min(cap, self.timeout)
        if self._deadline is None:
            return limit
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise ServerUnavailableError(
                f"{self._deadline_what}: out of time (--round-timeout) waiting for {self.base_url}"
            )
        return min(limit, left)

    def _request(
        self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any
    ) -> requests.Response:
        seconds = self.seconds_left(timeout)
        try:
            return self._http.request(method, self.base_url + path, timeout=seconds, **kwargs)
        except ForbiddenPeerError as exc:
            raise ServerUnavailableError(f"{self.base_url}{path}: {exc}") from exc
        except requests.Timeout as exc:
            raise ServerUnavailableError(
                f"{self.base_url}{path} did not answer within {seconds:.1f} s"
                + (" (the round's time left before --round-timeout)" if self._deadline else "")
            ) from exc
        except requests.ConnectionError as exc:
            raise ServerUnavailableError(
                f"{self.base_url}{path}: cannot connect ({_root_cause(exc)}); is the server up "
                "and --base-url right?"
            ) from exc
        except requests.RequestException as exc:
            raise ServerUnavailableError(
                f"{self.base_url}{path}: {type(exc).__name__}: {exc or 'no response'}"
            ) from exc

    def _json(self, response: requests.Response, what: str) -> Any:
        try:
            return response.json()
        except ValueError as exc:  # requests' JSONDecodeError, or undecodable bytes
            raise ServerResponseError(
                f"{what} answered with a body that is not JSON ({describe(response)}); is "
                "this a DSpark server?"
            ) from exc

    def health(self) -> bool:
        try:
            return self._request("GET", "/health", timeout=5.0).status_code == 200
        except ServerUnavailableError:
            return False

    def wait_until_healthy(self, seconds: float, poll: float = 1.0) -> None:
        """Poll /health until 200 (the Job's profiler starts beside a server still loading)."""
        deadline = time.monotonic() + seconds
        while True:
            if self.health():
                return
            if time.monotonic() >= deadline:
                raise ServerUnavailableError(
                    f"{self.base_url}/health did not answer 200 within {seconds:.0f} s; is the "
                    "server up (model loading, CUDA graph capture) and the URL right?"
                )
            time.sleep(poll)

    def server_info(self) -> Any:
        response = self._request("GET", "/server_info")
        if response.status_code != 200:
            raise ServerResponseError(f"GET /server_info answered {describe(response)}")
        return self._json(response, "GET /server_info")

    def set_internal_state(self, server_args: dict[str, Any]) -> tuple[bool, str]:
        """(accepted on every rank, what the server answered, described). Accepts the
        `[bool]` and `{"updated": bool}` forms; the description shows each rank's yes or
        no, nothing else of the body."""
        response = self._request("POST", "/set_internal_state", json={"server_args": server_args})
        try:
            body = response.json()
        except ValueError:
            return False, f"{describe(response)}, not JSON"
        if response.status_code != 200:
            return False, describe(response)
        outs = body if isinstance(body, list) else [body]

        def ok(out: Any) -> bool:
            return bool(out.get("updated")) if isinstance(out, dict) else bool(out)

        answers = [ok(o) for o in outs]
        shown = ", ".join("yes" if a else "no" for a in answers[:16])
        more = f" and {len(answers) - 16} more" if len(answers) > 16 else ""
        return bool(outs) and all(answers), f"accepted per rank: {shown or 'none'}{more}"

    def flush_cache(self) -> None:
        # Advisory, as in the reference: a busy server answers 400; only unreachability counts.
        self._request("POST", "/flush_cache")

    def abort_all(self) -> None:
        response = self._request("POST", "/abort_request", json={"abort_all": True})
        if response.status_code >= 400:
            raise ServerResponseError(f"POST /abort_request answered {describe(response)}")

    def start_load(self, payload: dict[str, Any], deadline: float | None = None) -> LoadThread:
        """POST /generate in a thread (one load at a time shares the load session); it gives
        up `LOAD_GRACE_SECONDS` after `deadline` (the round ends and aborts it before)."""
        timeout = self.timeout
        if deadline is not None:
            timeout = min(timeout, max(0.0, deadline - time.monotonic()) + LOAD_GRACE_SECONDS)
        thread = LoadThread(self._load_http, self.base_url + "/generate", payload, timeout)
        thread.start()
        return thread


class LoadThread(threading.Thread):
    """One POST /generate carrying the whole batch; the answer is ignored, errors kept."""

    def __init__(
        self, http: requests.Session, url: str, payload: dict[str, Any], timeout: float
    ) -> None:
        super().__init__(daemon=True, name="sps-load")
        self._http = http
        self._url = url
        self._payload = payload
        self._timeout = timeout
        self.error: str | None = None
        self.status_code: int | None = None

    def run(self) -> None:
        try:
            response = self._http.post(self._url, json=self._payload, timeout=self._timeout)
            self.status_code = response.status_code
        except Exception as exc:  # aborted batches may end with an error; only record it
            self.error = f"{type(exc).__name__}: {exc}"

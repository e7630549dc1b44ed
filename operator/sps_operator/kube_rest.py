"""One request to the Kubernetes API server on a bare `kubernetes.client.ApiClient`, shared
by the operator (`controller/kube/rest.py`), `kubectl sps` (`plugin/client.py`) and the
profiler's publisher (`profiler/publish.py`).

Not the typed APIs (`CoreV1Api`, ...): in client version 37 each imports and builds a few
hundred pydantic models and a validator per method (about 1.3 CPU-s of an operator start,
most of a plugin command's). Here: a path segment quoted, the URL built, a JSON body with
its content type, the caller's timeout, the answer read with a size cap (an API server, or
a proxy in front of it, is untrusted input), and one exception type for every answer
refused: `ApiException` (the typed subclass for a non-2xx status, as the typed client
raised it), `AnswerRefused` for a 2xx answer too large or not a JSON object. Each caller
keeps its own timeouts, caps and wording.

Bounded in time as in size: urllib3's timeouts bound the connect and each read off the
socket, and one deadline (`whole_deadline`: by default what the timeouts add up to) bounds
the answer from the call to its last byte, headers and body, so a server that trickles
either a byte at a time is cut off (`AnswerTooSlow`, a urllib3 `ReadTimeoutError`: what
callers already take for a transient network failure). A timer shuts the request's socket
down at the deadline, which wakes a blocked read (the project's way: `kube/serverinfo.py`);
the client's pools make connections that hand their socket to it (`_watch_sockets`).

One attempt per call: urllib3 would retry a timed-out GET, PUT or DELETE three more times
(its `Retry.DEFAULT`), four times the deadline; the callers retry by themselves (kopf's
backoff, the elector's next round, a user's command). A client whose configuration sets
`retries` keeps them, and passes a deadline that counts them (the profiler's publisher).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import HTTPError, ReadTimeoutError
from urllib3.util.retry import Retry

JSON = "application/json"
APPLY = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
# What the typed CoreV1Api sent for a patch given as an object (kubernetes.client.rest).
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

MIB = 1 << 20
# One object: etcd refuses a value over 1.5 MiB by default and the API server a request
# over 3 MiB, so 4 MiB is above anything a real server sends for one object.
OBJECT_CAP = 4 * MIB
# A list (events, ConfigMaps, pods of a namespace): large namespaces run to tens of MiB;
# above 64 MiB the client would hold several times that in parsed dicts.
LIST_CAP = 64 * MIB
# The body of a non-2xx answer: a Status is a few hundred bytes; what is over this is cut
# (the status code is what callers act on), never read whole.
ERROR_BODY_CAP = 64 * 1024


# One attempt, no retry (see the module doc); a redirect is answered as it came (a 3xx is
# an ApiException), never followed: an API server does not redirect its API paths.
ONE_ATTEMPT = Retry(total=0, raise_on_redirect=False)

Timeout = float | tuple[float, float]


class AnswerTooSlow(ReadTimeoutError):
    """The answer did not end within the whole-answer deadline: cut off, the connection
    dropped. A urllib3 `ReadTimeoutError` (its `TimeoutError`, an `HTTPError`), so every
    caller takes it as the timeout it is: transient, the request may be sent again."""

    def __init__(self, path: str, seconds: float) -> None:
        super().__init__(None, path, f"no whole answer within {seconds:g} s")  # type: ignore[arg-type]
        self.path, self.seconds = path, seconds

    def __str__(self) -> str:
        return (
            f"{self.path}: the API server's answer did not end within {self.seconds:g} s (cut off)"
        )


def whole_deadline(timeout: Timeout | None) -> float | None:
    """The whole answer's deadline a caller's urllib3 timeout implies: seconds in all as
    they are, (connect, read) their sum (a connect that took all its time leaves the answer
    its read timeout), None (no timeout) none."""
    if timeout is None:
        return None
    if isinstance(timeout, tuple):
        return timeout[0] + timeout[1]
    return timeout


class AnswerRefused(ApiException):
    """A 2xx answer this client will not take: over its size cap, or not a JSON object.
    `status` is the status received (a 2xx: no caller's 404/409 branch takes it for one),
    `reason` says what is wrong, `path` where it came from."""

    def __init__(self, status: int, reason: str, path: str) -> None:
        super().__init__(status=status, reason=reason)
        self.path = path

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def segment(value: object) -> str:
    """One path segment, everything escaped, as the typed client escapes its path
    parameters: a name from a spec or a command line is never a path (`/`, `?`, `%`)."""
    return quote(str(value), safe="")


def _size_text(cap: int) -> str:
    return f"{cap // MIB} MiB" if cap >= MIB and cap % MIB == 0 else f"{cap} bytes"


class _Watch:
    """One request's deadline: at `seconds` a timer shuts the socket the request uses down
    (attached when the answer is awaited), which wakes whatever read blocks on it."""

    def __init__(self, seconds: float) -> None:
        self.fired = threading.Event()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def __enter__(self) -> _Watch:
        _current.watch = self
        self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._timer.cancel()
        _current.watch = None

    def attach(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            if self.fired.is_set():
                _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired.set()  # before the shutdown: the reader, woken by it, must see why
            _shut(self._sock)


def _shut(sock: socket.socket | None) -> None:
    if sock is not None:
        with contextlib.suppress(OSError):  # closed already: nothing blocks on it
            sock.shutdown(socket.SHUT_RDWR)


# The request under way in this thread (the client is synchronous: one at a time).
_current = threading.local()


def _hand_over(sock: socket.socket | None) -> None:
    """The socket about to be read for the answer, to this thread's request deadline."""
    watch: _Watch | None = getattr(_current, "watch", None)
    if watch is not None:
        watch.attach(sock)


class _WatchedHTTP(HTTPConnection):
    def getresponse(self) -> Any:
        _hand_over(self.sock)
        return super().getresponse()


class _WatchedHTTPS(HTTPSConnection):
    def getresponse(self) -> Any:
        _hand_over(self.sock)
        return super().getresponse()


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTP


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPS


STOCK_POOLS = {"http": HTTPConnectionPool, "https": HTTPSConnectionPool}
WATCHED_POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


def _read_at_most(response: Any, limit: int) -> bytes:
    """At most `limit` bytes of the answer's body (decoded), never more read off the
    socket. The client's REST layer streams (`preload_content=False`); one that preloaded
    (a test's, an older client's) holds the body already and is only cut."""
    raw = getattr(response, "response", None)
    chunk = raw.read(limit, decode_content=True) if raw is not None else None
    if chunk is None:
        chunk = bytes(response.read() or b"")[:limit]
    return bytes(chunk)


def _prepare(api: Any) -> None:
    """Once per client, before its first request: its pools make one attempt per request
    (`ONE_ATTEMPT`; a client configured with retries of its own keeps them: the
    publisher's connects, which its deadline counts) and connections whose socket a
    deadline can shut (`_watch_sockets`)."""
    manager = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    if manager is None or getattr(manager, "_sps_prepared", False):
        return
    if getattr(getattr(api, "configuration", None), "retries", None) is None:
        manager.connection_pool_kw["retries"] = ONE_ATTEMPT
    _watch_sockets(manager)
    manager.clear()  # a pool made before (the client used elsewhere) has the old settings
    manager._sps_prepared = True


def _watch_sockets(manager: Any) -> None:
    """Connections that hand their socket to the request's deadline (`_Watch`). Only in
    place of urllib3's own pool classes: a SOCKS proxy's keep theirs (the deadline then
    only refuses an answer that ended past it; the timeouts bound each read)."""
    if manager.pool_classes_by_scheme == STOCK_POOLS:
        manager.pool_classes_by_scheme = WATCHED_POOLS


def _drop(response: Any) -> None:
    """Close a connection whose answer was not read to its end (it cannot be reused)."""
    raw = getattr(response, "response", None)
    if raw is not None:
        raw.close()
        raw.release_conn()


def send(
    api: Any,
    method: str,
    path: str,
    *,
    query: Iterable[tuple[str, Any]] = (),
    body: Any = None,
    content_type: str | None = None,
    timeout: Timeout | None = None,
    cap: int = OBJECT_CAP,
    deadline: float | None = None,
) -> bytes:
    """One request; the answer's body (at most `cap` bytes). A non-2xx answer raises
    `ApiException` (NotFoundException for a 404, ...) with its status, reason and body (cut
    at ERROR_BODY_CAP); a 2xx one over `cap` raises `AnswerRefused`. `timeout`: urllib3's
    (seconds in all, or (connect, read)); None waits as long as the socket does.
    `deadline`: seconds from the call to the answer's last byte (default
    `whole_deadline(timeout)`); past it, `AnswerTooSlow`. A timeout or a dropped connection
    raises urllib3's error (`MaxRetryError` wrapping it: one attempt, never retried here)."""
    seconds = deadline if deadline is not None else whole_deadline(timeout)
    _prepare(api)
    if seconds is None:
        return _send(api, method, path, query, body, content_type, timeout, cap)
    with _Watch(seconds) as watch:
        try:
            data = _send(api, method, path, query, body, content_type, timeout, cap)
        except (HTTPError, OSError) as exc:
            if watch.fired.is_set():
                raise AnswerTooSlow(path, seconds) from exc
            raise
        # Shut at the deadline, a body read to its close may look whole: refused too.
        if watch.fired.is_set():
            raise AnswerTooSlow(path, seconds)
        return data


def _send(
    api: Any,
    method: str,
    path: str,
    query: Iterable[tuple[str, Any]],
    body: Any,
    content_type: str | None,
    timeout: Timeout | None,
    cap: int,
) -> bytes:
    headers = {"Accept": JSON}
    if content_type is not None:
        headers["Content-Type"] = content_type
    serialized = api.param_serialize(
        method, path, query_params=list(query) or None, header_params=headers, body=body,
        auth_settings=["BearerToken"],
    )  # fmt: skip
    if timeout is not None:
        response = api.call_api(*serialized, _request_timeout=timeout)
    else:
        response = api.call_api(*serialized)
    ok = 200 <= response.status <= 299
    limit = cap if ok else ERROR_BODY_CAP
    data = _read_at_most(response, limit + 1)
    if len(data) > limit:
        _drop(response)
        data = data[:limit]
        if ok:
            refused = f"the API server's answer is over the {_size_text(cap)} cap (refused)"
            raise AnswerRefused(response.status, refused, path)
    if not ok:
        response.data = data  # what ApiException reads its body from
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return data


def parse_object(
    raw: bytes,
    path: str,
    *,
    object_hook: Callable[[dict[str, Any]], Any] | None = None,
    status: int = 200,
) -> dict[str, Any]:
    """The answer's JSON object; `AnswerRefused` when it is none (no JSON, too deep, not
    UTF-8, an array or a scalar)."""
    try:
        parsed = json.loads(raw, object_hook=object_hook)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise AnswerRefused(status, "the API server answered no JSON", path) from None
    if not isinstance(parsed, dict):
        raise AnswerRefused(status, "the API server answered no JSON object", path)
    return parsed

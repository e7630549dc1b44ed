"""A small HTTP/1.1 server on asyncio streams: what sps-sim's routes need, and no more.

Why not aiohttp: importing it cost a simulated server ~0.25 of its ~0.4 CPU-s start (its
client builds an SSL context at import), and `make test` starts ~430 servers on its beds'
two cores (docs/dev-cluster.md, "Cutting CPU-seconds"). The server side of SGLang's HTTP
that clients see is kept: keep-alive, pipelining, `Content-Length` and chunked request
bodies, `Expect: 100-continue`, HEAD on every GET route, a streamed (chunked) answer for
`text/event-stream`, and a handler cancelled when its client goes away (SGLang aborts the
requests of a closed connection; the simulator does the same).

Everything a client sends is bounded: the head's size and the body's, a request's whole
time from its first byte to its last (60 s; a client trickling bytes gets a 408), the wait
for its next bytes (30 s) and between two requests on one connection (75 s). A request this
server cannot read gets a 4xx/5xx answer that names what was wrong, and its connection is
closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, unquote

log = logging.getLogger("sps_sim")

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 256 * 1024 * 1024
MAX_HEADERS = 100
# Between two requests on one connection (aiohttp's and uvicorn's keep-alive are 75 s and
# 5 s); while a request arrives, the longest wait for its next bytes.
IDLE_TIMEOUT_S = 75.0
READ_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 60.0
READ_CHUNK = 64 * 1024
# What a client may send ahead while its request is handled (pipelining) before the server
# stops reading until the answer is out.
MAX_READ_AHEAD = MAX_HEAD_BYTES

_TOKEN_CHARS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


class BadRequest(Exception):
    """A request this server will not read; answered with `status` and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class RequestHead:
    method: str
    path: str
    query: Mapping[str, str]
    version: str  # "1.0" or "1.1"
    headers: Mapping[str, str]  # names lower-cased; repeated headers joined with ", "
    content_length: int | None
    chunked: bool

    @property
    def keep_alive(self) -> bool:
        connection = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version == "1.0":
            return "keep-alive" in connection
        return "close" not in connection

    @property
    def expects_continue(self) -> bool:
        return self.headers.get("expect", "").strip().lower() == "100-continue"


@dataclass(frozen=True)
class HttpRequest:
    head: RequestHead
    body: bytes

    @property
    def query(self) -> Mapping[str, str]:
        return self.head.query


@dataclass(frozen=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str | None = None
    # A streamed answer: each part one chunk of the chunked transfer coding (SSE events).
    chunks: tuple[bytes, ...] | None = None
    headers: tuple[tuple[str, str], ...] = field(default=())


Handler = Callable[[HttpRequest], Awaitable[Response]]


def json_response(
    obj: Any, status: int = 200, *, dumps: Callable[[Any], str] = json.dumps
) -> Response:
    return Response(status, dumps(obj).encode(), "application/json; charset=utf-8")


def text_response(text: str, status: int = 200) -> Response:
    return Response(status, text.encode(), "text/plain; charset=utf-8")


def _is_token(text: str) -> bool:
    return bool(text) and all(c in _TOKEN_CHARS for c in text)


def parse_head(raw: bytes) -> RequestHead:
    """The request line and header fields (the bytes before the blank line), or BadRequest."""
    if len(raw) > MAX_HEAD_BYTES:
        raise BadRequest(431, f"request head over {MAX_HEAD_BYTES} bytes")
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise BadRequest(400, "request line is not 'METHOD TARGET HTTP/1.1'")
    method, target, protocol = parts
    if not _is_token(method):
        raise BadRequest(400, "request method is not a token")
    if protocol not in ("HTTP/1.1", "HTTP/1.0"):
        if protocol.startswith("HTTP/") and len(protocol) == 8:
            raise BadRequest(505, f"{protocol} is not served: HTTP/1.1 or HTTP/1.0")
        raise BadRequest(400, "request line does not end in HTTP/1.1")
    if not target.startswith("/") or any(c <= " " or c == "\x7f" for c in target):
        raise BadRequest(400, "request target is not a path (origin form)")
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest(431, f"over {MAX_HEADERS} header fields")
    headers: dict[str, str] = {}
    lengths: set[str] = set()
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not _is_token(name):
            raise BadRequest(400, f"header field is not 'name: value': {line[:80]!r}")
        if any(c in value for c in "\r\n\x00"):
            raise BadRequest(400, f"header field {name!r} holds a control character")
        key, value = name.lower(), value.strip(" \t")
        if key == "content-length":
            lengths.update(v.strip() for v in value.split(","))
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    content_length = _content_length(lengths)
    codings = [
        c.strip().lower() for c in headers.get("transfer-encoding", "").split(",") if c.strip()
    ]
    if codings:
        if content_length is not None:
            raise BadRequest(400, "both Content-Length and Transfer-Encoding")
        if codings != ["chunked"]:
            raise BadRequest(501, f"transfer coding {', '.join(codings)!r}: only chunked is read")
    path, _, query = target.partition("?")
    query_map: dict[str, str] = {}
    for key_q, value_q in parse_qsl(query, keep_blank_values=True):
        query_map.setdefault(key_q, value_q)
    return RequestHead(
        method=method,
        path=unquote(path),
        query=query_map,
        version=protocol[5:],
        headers=headers,
        content_length=content_length,
        chunked=bool(codings),
    )


def _content_length(values: set[str]) -> int | None:
    if not values:
        return None
    if len(values) > 1:
        raise BadRequest(400, "Content-Length given twice with different values")
    (value,) = values
    if not value.isdigit() or not value.isascii():
        raise BadRequest(400, f"Content-Length {value[:40]!r} is not a number")
    length = int(value)
    if length > MAX_BODY_BYTES:
        raise BadRequest(413, f"request body of {length} bytes: at most {MAX_BODY_BYTES}")
    return length


def parse_chunk_size(line: bytes) -> int:
    """The size of a chunk from its size line (extensions ignored), or BadRequest."""
    size = line.split(b";", 1)[0].strip(b" \t")
    if not size or len(size) > 16 or any(c not in b"0123456789abcdefABCDEF" for c in size):
        raise BadRequest(400, "chunk size is not a hexadecimal number")
    return int(size, 16)


def render_head(response: Response, *, keep_alive: bool) -> bytes:
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {response.status} {reason}"]
    lines.append("Date: " + time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime()))
    if response.content_type is not None:
        lines.append(f"Content-Type: {response.content_type}")
    if response.chunks is not None:
        lines.append("Transfer-Encoding: chunked")
    else:
        lines.append(f"Content-Length: {len(response.body)}")
    lines.extend(f"{name}: {value}" for name, value in response.headers)
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def render_chunks(chunks: tuple[bytes, ...]) -> bytes:
    out = [b"%x\r\n%s\r\n" % (len(c), c) for c in chunks if c]
    return b"".join(out) + b"0\r\n\r\n"


class _PeerGone(Exception):
    """The client closed its side."""


class _Connection:
    """One client connection: reads requests from a buffer of its own, one at a time."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        route: Callable[[RequestHead], Handler | Response],
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.route = route
        self.buf = bytearray()
        # When the request being read must be whole (its first byte + REQUEST_TIMEOUT_S).
        self.deadline: float | None = None

    async def _fill(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        if self.deadline is not None:
            timeout = min(timeout, self.deadline - loop.time())
        try:
            if timeout <= 0:
                raise TimeoutError
            data = await asyncio.wait_for(self.reader.read(READ_CHUNK), timeout)
        except (TimeoutError, ConnectionError) as exc:
            if self.deadline is not None and loop.time() >= self.deadline:
                raise BadRequest(
                    408, f"request not received within {REQUEST_TIMEOUT_S:g} s"
                ) from exc
            raise _PeerGone from exc
        if not data:
            raise _PeerGone
        self.buf += data

    async def _read_head(self) -> bytes | None:
        """The next request's head, or None when the client closed or idled between requests."""
        while True:
            while self.buf[:2] == b"\r\n":  # empty lines before a request line are allowed
                del self.buf[:2]
            if self.buf and self.deadline is None:
                self.deadline = asyncio.get_running_loop().time() + REQUEST_TIMEOUT_S
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(self.buf[:end])
                del self.buf[: end + 4]
                return head
            if len(self.buf) > MAX_HEAD_BYTES:
                raise BadRequest(431, f"request head over {MAX_HEAD_BYTES} bytes")
            try:
                await self._fill(READ_TIMEOUT_S if self.buf else IDLE_TIMEOUT_S)
            except _PeerGone:
                if self.buf:
                    raise
                return None

    async def _read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            await self._fill(READ_TIMEOUT_S)
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    async def _read_line(self, limit: int) -> bytes:
        while (end := self.buf.find(b"\r\n")) < 0:
            if len(self.buf) > limit:
                raise BadRequest(400, "chunk line too long")
            await self._fill(READ_TIMEOUT_S)
        line = bytes(self.buf[:end])
        del self.buf[: end + 2]
        return line

    async def _read_body(self, head: RequestHead) -> bytes:
        if head.expects_continue and (head.chunked or head.content_length):
            self.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await self.writer.drain()
        if not head.chunked:
            return await self._read_exact(head.content_length or 0)
        parts: list[bytes] = []
        total = 0
        while True:
            size = parse_chunk_size(await self._read_line(1024))
            total += size
            if total > MAX_BODY_BYTES:
                raise BadRequest(413, f"request body over {MAX_BODY_BYTES} bytes")
            if size == 0:
                break
            parts.append(await self._read_exact(size))
            if await self._read_exact(2) != b"\r\n":
                raise BadRequest(400, "chunk data does not end in CRLF")
        while await self._read_line(MAX_HEAD_BYTES):  # trailer fields, read and dropped
            pass
        return b"".join(parts)

    async def _handle_watching_peer(
        self, handler: Handler, request: HttpRequest
    ) -> Response | None:
        """The handler's answer, or None (the handler cancelled) if the client closed first."""
        task = asyncio.ensure_future(handler(request))
        while True:
            if len(self.buf) > MAX_READ_AHEAD:
                return await task
            watch = asyncio.ensure_future(self.reader.read(READ_CHUNK))
            done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
            if watch not in done:
                # Cancelled before it resumed, a read consumes nothing from the stream.
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                    await watch
                return task.result()
            try:
                data = watch.result()
            except ConnectionError:
                data = b""
            if not data:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return None
            self.buf += data
            if task in done:
                return task.result()

    async def _answer(self, response: Response, *, keep_alive: bool, head_only: bool) -> None:
        out = render_head(response, keep_alive=keep_alive)
        if not head_only:
            out += render_chunks(response.chunks) if response.chunks is not None else response.body
        self.writer.write(out)
        await self.writer.drain()

    async def serve(self) -> None:
        while True:
            try:
                raw = await self._read_head()
                if raw is None:
                    return
                head = parse_head(raw)
                target = self.route(head)
                if isinstance(target, Response):
                    # A body left unread would be taken for the next request: close instead.
                    keep_alive = head.keep_alive and not (head.chunked or head.content_length)
                    await self._answer(
                        target, keep_alive=keep_alive, head_only=head.method == "HEAD"
                    )
                    if not keep_alive:
                        return
                    self.deadline = None
                    continue
                request = HttpRequest(head, await self._read_body(head))
                self.deadline = None
            except BadRequest as exc:
                await self._answer(
                    text_response(f"{exc.status}: {exc.message}\n", exc.status),
                    keep_alive=False,
                    head_only=False,
                )
                return
            except _PeerGone:
                return
            try:
                response = await self._handle_watching_peer(target, request)
            except Exception:
                log.exception("sps-sim: %s %s failed", head.method, head.path)
                response = text_response("500: Internal Server Error\n", 500)
            if response is None:
                return
            keep_alive = head.keep_alive
            await self._answer(response, keep_alive=keep_alive, head_only=head.method == "HEAD")
            if not keep_alive:
                return


class HttpServer:
    """Routes (method, path) → handler; HEAD is served wherever GET is."""

    def __init__(self, routes: Mapping[tuple[str, str], Handler]) -> None:
        self.routes = dict(routes)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self.port: int | None = None

    def route(self, head: RequestHead) -> Handler | Response:
        method = "GET" if head.method == "HEAD" else head.method
        handler = self.routes.get((method, head.path))
        if handler is not None:
            return handler
        allowed = sorted({m for m, p in self.routes if p == head.path})
        if not allowed:
            return text_response("404: Not Found", 404)
        if "GET" in allowed:
            allowed.append("HEAD")
        return Response(
            405,
            b"405: Method Not Allowed",
            "text/plain; charset=utf-8",
            headers=(("Allow", ", ".join(sorted(allowed))),),
        )

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            await _Connection(reader, writer, self.route).serve()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(
            self._on_connection, host, port, reuse_address=True, limit=READ_CHUNK
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

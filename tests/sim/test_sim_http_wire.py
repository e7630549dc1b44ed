"""sps-sim's HTTP/1.1 server (sps_sim.http_wire): what it reads, how it answers, its bounds.

The parser gets arbitrary bytes from whoever reaches a simulated server's port: property
tests hold it to "a RequestHead or a BadRequest, never anything else". The server tests
speak raw HTTP over a loopback socket, the way curl, requests and kubelet probes do.
"""

from __future__ import annotations

import socket
import string
import time
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sps_sim import http_wire
from sps_sim.http_wire import (
    MAX_BODY_BYTES,
    BadRequest,
    parse_chunk_size,
    parse_head,
    render_chunks,
)
from sps_sim.testing import running_sim

TOKEN = st.text(alphabet=string.ascii_letters + string.digits + "-_.", min_size=1, max_size=20)
VALUE = st.text(alphabet=string.ascii_letters + string.digits + " -_./=;,", max_size=40).map(
    str.strip
)


@given(st.binary(max_size=2000))
def test_any_bytes_parse_to_a_head_or_a_bad_request(raw: bytes) -> None:
    try:
        head = parse_head(raw)
    except BadRequest as exc:
        assert 400 <= exc.status < 600 and exc.message
    else:
        assert head.path.startswith("/")


@given(
    method=st.sampled_from(["GET", "POST", "PUT", "HEAD"]),
    path=st.lists(TOKEN, max_size=4).map(lambda parts: "/" + "/".join(parts)),
    query=st.dictionaries(TOKEN, TOKEN, max_size=3),
    headers=st.dictionaries(TOKEN.filter(lambda n: n.lower() not in _FRAMING), VALUE, max_size=8),
    version=st.sampled_from(["1.0", "1.1"]),
)
def test_a_well_formed_head_reads_back_as_sent(
    method: str, path: str, query: dict[str, str], headers: dict[str, str], version: str
) -> None:
    target = path + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
    lines = [f"{method} {target} HTTP/{version}"] + [f"{n}: {v}" for n, v in headers.items()]
    head = parse_head("\r\n".join(lines).encode())
    assert (head.method, head.path, head.version) == (method, path, version)
    assert dict(head.query) == query
    expected: dict[str, str] = {}
    for name, value in headers.items():  # names differing only in case are one field
        key = name.lower()
        expected[key] = f"{expected[key]}, {value}" if key in expected else value
    assert dict(head.headers) == expected
    assert head.content_length is None and not head.chunked


_FRAMING = {"content-length", "transfer-encoding", "connection", "expect"}


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /health", 400),  # no protocol
        (b"GET /health HTTP/2.0", 505),
        (b"GET health HTTP/1.1", 400),  # not a path
        (b"GET /a b HTTP/1.1", 400),
        (b"G(T /health HTTP/1.1", 400),
        (b"POST /generate HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4", 400),
        (b"POST /generate HTTP/1.1\r\nContent-Length: -1", 400),
        (b"POST /generate HTTP/1.1\r\nContent-Length: 0x10", 400),
        (b"POST /generate HTTP/1.1\r\nContent-Length: %d" % (MAX_BODY_BYTES + 1), 413),
        (b"POST /generate HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked", 400),
        (b"POST /generate HTTP/1.1\r\nTransfer-Encoding: gzip, chunked", 501),
        (b"GET /health HTTP/1.1\r\nno colon here", 400),
        (b"GET /health HTTP/1.1\r\n folded: value", 400),
        (b"GET /health HTTP/1.1\r\nname : value", 400),
    ],
)
def test_a_head_it_will_not_read_gets_the_status_that_says_why(raw: bytes, status: int) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_head(raw)
    assert caught.value.status == status


def test_repeated_equal_content_lengths_are_one() -> None:
    head = parse_head(b"POST /generate HTTP/1.1\r\nContent-Length: 3\r\ncontent-length: 3")
    assert head.content_length == 3


def test_keep_alive_follows_the_version_and_connection_header() -> None:
    assert parse_head(b"GET / HTTP/1.1").keep_alive
    assert not parse_head(b"GET / HTTP/1.1\r\nConnection: close").keep_alive
    assert not parse_head(b"GET / HTTP/1.0").keep_alive
    assert parse_head(b"GET / HTTP/1.0\r\nConnection: Keep-Alive").keep_alive


@given(st.integers(min_value=0, max_value=2**60), st.sampled_from(["", ";ext=1", " ; x"]))
def test_a_chunk_size_reads_back(size: int, extension: str) -> None:
    assert parse_chunk_size(f"{size:x}{extension}".encode()) == size


@given(st.binary(max_size=30))
def test_a_chunk_size_line_is_a_size_or_a_bad_request(line: bytes) -> None:
    try:
        size = parse_chunk_size(line)
    except BadRequest as exc:
        assert exc.status == 400
    else:
        assert size >= 0


def test_chunks_render_as_the_chunked_coding() -> None:
    assert (
        render_chunks((b"data: 1\n\n", b"", b"xy")) == b"9\r\ndata: 1\n\n\r\n2\r\nxy\r\n0\r\n\r\n"
    )


# ---------------------------------------------------------------- over a socket


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with running_sim() as url:
        yield url


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def _read_answers(sock: socket.socket, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """`count` answers with a Content-Length body, read off one connection."""
    buf = b""
    answers = []
    while len(answers) < count:
        while b"\r\n\r\n" not in buf:
            data = sock.recv(65536)
            assert data, f"connection closed after {len(answers)} answers: {buf!r}"
            buf += data
        head, _, buf = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
        if status == 100:
            continue
        length = int(headers["content-length"])
        while len(buf) < length:
            buf += sock.recv(65536)
        answers.append((status, headers, buf[:length]))
        buf = buf[length:]
    return answers


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    return sock.recv(1) == b""


def test_keep_alive_serves_requests_one_after_another_on_one_connection(sim_url: str) -> None:
    with _connect(sim_url) as sock:
        for _ in range(3):
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            [(status, headers, body)] = _read_answers(sock, 1)
            assert (status, body) == (200, b"") and "connection" not in headers


def test_pipelined_requests_are_answered_in_order(sim_url: str) -> None:
    with _connect(sim_url) as sock:
        sock.sendall(
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        answers = _read_answers(sock, 3)
        assert [status for status, _, _ in answers] == [200, 404, 200]
        assert answers[0][1]["content-type"] == "application/json; charset=utf-8"
        assert answers[2][1]["connection"] == "close" and _closed(sock)


def test_a_chunked_body_with_expect_continue_is_read(sim_url: str) -> None:
    body = b'{"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}'
    with _connect(sim_url) as sock:
        sock.sendall(
            b"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Expect: 100-continue\r\n\r\n"
        )
        sock.settimeout(10)
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(render_chunks((body[:10], body[10:])))
        [(status, _, answer)] = _read_answers(sock, 1)
    assert status == 200 and b'"completion_tokens":2' in answer


def test_head_is_served_where_get_is_and_a_wrong_method_names_the_allowed(sim_url: str) -> None:
    with _connect(sim_url) as sock:
        sock.sendall(b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nDELETE /health HTTP/1.1\r\n\r\n")
        sock.settimeout(10)
        data = b""
        while data.count(b"\r\n\r\n") < 2 or not data.endswith(b"Not Allowed"):
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
    first, second = data.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"200 OK") and first.endswith(b"\r\n\r\n")
    assert second.startswith(b"405 ") and b"Allow: GET, HEAD\r\n" in second


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"POST /generate HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1), 413),
        (b"GET /health HTTP/1.1\r\nbroken header\r\n\r\n", 400),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 431),
        (b"POST /generate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    ],
)
def test_an_unreadable_request_is_refused_and_its_connection_closed(
    sim_url: str, request_bytes: bytes, status: int
) -> None:
    with _connect(sim_url) as sock:
        sock.sendall(request_bytes)
        [(got, headers, body)] = _read_answers(sock, 1)
        assert got == status and headers["connection"] == "close"
        assert body.startswith(f"{status}: ".encode())
        assert _closed(sock)
    with httpx.Client() as client:  # and the server still serves
        assert client.get(sim_url + "/health").status_code == 200


def test_a_streamed_generate_is_chunked_server_sent_events(sim_url: str) -> None:
    payload = {"input_ids": [[1, 2]] * 2, "sampling_params": {"max_new_tokens": 2}, "stream": True}
    with httpx.stream("POST", sim_url + "/generate", json=payload, timeout=30) as resp:
        assert resp.headers["content-type"] == "text/event-stream"
        assert resp.headers["transfer-encoding"] == "chunked"
        events = [line for line in resp.iter_lines() if line]
    assert len(events) == 3 and events[-1] == "data: [DONE]"


def test_a_request_trickled_past_its_deadline_gets_a_408_and_is_closed(
    sim_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each read waits 30 s at most; a client sending a byte every 29 s held its connection.
    # Here a byte every 50 ms for 0.4 s, then nothing: without the request's deadline the
    # server waits 30 s for the next byte and answers nothing (the read below times out).
    monkeypatch.setattr(http_wire, "REQUEST_TIMEOUT_S", 0.5)
    with _connect(sim_url) as sock:
        for byte in b"GET /health HTTP/1.1\r\nX-Slow: "[:8]:
            sock.sendall(bytes([byte]))
            time.sleep(0.05)
        [(status, headers, body)] = _read_answers(sock, 1)
        assert status == 408 and headers["connection"] == "close" and b"0.5 s" in body
        assert _closed(sock)
    with httpx.Client() as client:
        assert client.get(sim_url + "/health").status_code == 200

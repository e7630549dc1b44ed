"""RealNodeCluster.api: the harness's raw admin reads (no kubectl process per read)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from sps_testbed.cluster import RealNodeCluster, TestbedError

SEEN: list[tuple[str, str, Any]] = []


class Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        SEEN.append((self.command, self.path, body))
        status = 404 if "missing" in self.path else 500 if "broken" in self.path else 200
        data = json.dumps({"path": self.path, "status": status}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def bed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RealNodeCluster]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    configuration = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    made: list[int] = []

    def api_client() -> client.ApiClient:
        made.append(1)
        return client.ApiClient(configuration)

    cluster = RealNodeCluster(tmp_path)
    monkeypatch.setattr(cluster, "api_client", api_client)
    SEEN.clear()
    yield cluster
    server.shutdown()
    assert len(made) <= 1  # one client kept for every request


def test_api_returns_the_json_and_sends_the_body(bed: RealNodeCluster) -> None:
    assert bed.api("GET", "/api/v1/namespaces/a") == {"path": "/api/v1/namespaces/a", "status": 200}
    bed.api("POST", "/api/v1/namespaces", {"metadata": {"name": "b"}})
    assert SEEN[-1] == ("POST", "/api/v1/namespaces", {"metadata": {"name": "b"}})


def test_api_says_none_for_404_and_raises_for_other_failures(bed: RealNodeCluster) -> None:
    assert bed.api("GET", "/missing") is None
    with pytest.raises(TestbedError, match="GET /broken: 500"):
        bed.api("GET", "/broken")


def test_create_namespace_waits_for_its_service_account(bed: RealNodeCluster) -> None:
    assert bed.create_namespace("t1") == "t1"
    assert SEEN == [
        ("POST", "/api/v1/namespaces", {"metadata": {"name": "t1"}}),
        ("GET", "/api/v1/namespaces/t1/serviceaccounts/default", None),
    ]


def test_delete_namespace_never_raises(
    bed: RealNodeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    bed.delete_namespace("t1")
    bed.delete_namespace("missing")
    assert [s[:2] for s in SEEN] == [
        ("DELETE", "/api/v1/namespaces/t1"), ("DELETE", "/api/v1/namespaces/missing"),
    ]  # fmt: skip
    bed.delete_namespace("broken")  # a failure is only printed: the cleanup goes on
    assert (
        "deleting namespace broken: DELETE /api/v1/namespaces/broken: 500"
        in capsys.readouterr().err
    )

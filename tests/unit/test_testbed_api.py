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
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# What the fake API server lists: no CRD unless a test says otherwise.
CRD_LIST: list[dict[str, Any]] = []
HELD: list[dict[str, Any]] = []


class Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        SEEN.append((self.command, self.path, body))
        status = 404 if "missing" in self.path else 500 if "broken" in self.path else 200
        answer = {"path": self.path, "status": status}
        if self.path == CRDS and self.command == "GET":
            answer = {"items": CRD_LIST}
        elif self.path.startswith("/apis/x.dev/v2/namespaces/") and self.path.endswith("/holders"):
            answer = {"items": HELD}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PATCH = _answer

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
    CRD_LIST.clear()
    HELD.clear()
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
    assert [s[:2] for s in SEEN if s[0] != "GET"] == [
        ("DELETE", "/api/v1/namespaces/t1"), ("DELETE", "/api/v1/namespaces/missing"),
    ]  # fmt: skip
    bed.delete_namespace("broken")  # a failure is only printed: the cleanup goes on
    assert (
        "deleting namespace broken: DELETE /api/v1/namespaces/broken: 500"
        in capsys.readouterr().err
    )


def crd(group: str, plural: str, scope: str, versions: list[tuple[str, bool]]) -> dict[str, Any]:
    return {
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"plural": plural},
            "versions": [{"name": name, "served": served} for name, served in versions],
        }
    }


def test_a_deleted_namespace_first_loses_its_custom_objects_finalizers(
    bed: RealNodeCluster,
) -> None:
    CRD_LIST.extend([
        crd("x.dev", "holders", "Namespaced", [("v1", False), ("v2", True)]),
        crd("x.dev", "clusterwide", "Cluster", [("v1", True)]),
    ])  # fmt: skip
    HELD.extend([
        {"metadata": {"name": "held", "finalizers": ["x.dev/never"]}},
        {"metadata": {"name": "free"}},
    ])  # fmt: skip
    bed.delete_namespace("t1")
    # Only the namespaced kind is listed (at its served version), only the held object
    # patched (its finalizers removed), and then the namespace deleted.
    assert SEEN == [
        ("GET", CRDS, None),
        ("GET", "/apis/x.dev/v2/namespaces/t1/holders", None),
        ("PATCH", "/apis/x.dev/v2/namespaces/t1/holders/held", {"metadata": {"finalizers": None}}),
        ("DELETE", "/api/v1/namespaces/t1", None),
    ]


def test_a_failure_to_drop_finalizers_still_deletes_the_namespace(
    bed: RealNodeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    CRD_LIST.append(crd("x.dev", "broken", "Namespaced", [("v1", True)]))
    bed.delete_namespace("t1")
    assert SEEN[-1][:2] == ("DELETE", "/api/v1/namespaces/t1")
    assert "dropping the finalizers in namespace t1" in capsys.readouterr().err

"""`kubectl sps` talks to the API server through the bare ApiClient (plugin/client.py):
what it sends, how it reads each answer, how a failure reads, and that a command loads
none of the typed APIs (their models and validators were most of a command's CPU time).

The server here is a small local HTTP server answering canned JSON; the real API server
is in tests/ship/test_ship_plugin_k8s.py (`-m k8s`)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sps_operator.api import labels as L
from sps_operator.plugin.client import Cluster, event_time_key, parse_json
from sps_operator.plugin.kubeflags import ConnectionFlags
from sps_operator.plugin.view import PluginError

NS = "team-a"
PROFILE = {
    "apiVersion": "sps.dev/v1alpha1",
    "kind": "SpsProfile",
    "metadata": {"name": "llama", "namespace": NS, "uid": "u1"},
    "spec": {"selector": {"matchLabels": {"app": "llama"}}},
    "status": {"currentRun": {"name": "llama-1", "job": "llama-1-job"}},
}
PENDING_POD = {
    "metadata": {"name": "llama-1-job-x", "namespace": NS, "creationTimestamp": None},
    "status": {
        "phase": "Pending",
        "containerStatuses": [
            {
                "name": "profiler",
                "image": "registry.invalid/profiler:1",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                # A null the typed client dropped: `.get("message", "")` reads "" still.
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": None}},
            }
        ],
    },
}


def event(name: str, reason: str, last: str | None, event_time: str | None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS},
        "involvedObject": {"kind": "SpsProfile", "name": "llama", "uid": "u1"},
        "type": "Warning",
        "reason": reason,
        "message": f"{reason} happened",
        "lastTimestamp": last,
        "eventTime": event_time,
    }


ROUTES: dict[str, tuple[int, Any]] = {
    f"/apis/sps.dev/v1alpha1/namespaces/{NS}/spsprofiles/llama": (200, PROFILE),
    f"/apis/batch/v1/namespaces/{NS}/jobs/llama-1-job": (200, {"metadata": {"name": "j"}}),
    f"/api/v1/namespaces/{NS}/pods": (200, {"items": [PENDING_POD]}),
    f"/api/v1/namespaces/{NS}/events": (
        200,
        {
            # Within one second, as the typed client ordered them (datetime.isoformat:
            # "…01+00:00" < "…01.5…"), so "Later" is the newest; as raw text ("…01Z" >
            # "…01.5…Z") it would not be.
            "items": [
                event("a", "Later", None, "2026-12-07T06:00:01.500000Z"),
                event("b", "Sooner", "2026-12-07T06:00:01Z", None),
            ]
        },
    ),
    f"/api/v1/namespaces/{NS}/pods/server-0/log": (200, "line one\nline two\n"),
    f"/api/v1/namespaces/{NS}/configmaps/forbidden": (403, {"kind": "Status"}),
    f"/api/v1/namespaces/{NS}/configmaps/broken": (500, {"kind": "Status"}),
    f"/api/v1/namespaces/{NS}/configmaps/html": (200, "<html>a proxy</html>"),
    f"/api/v1/namespaces/{NS}/configmaps/slow": (
        200,
        {"metadata": {"name": "slow"}, "data": {"slow": "yes"}},
    ),
}


SLOW_SECONDS = 1.0


class Recorded:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []


class Handler(BaseHTTPRequestHandler):
    recorded: Recorded

    def _answer(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        self.recorded.requests.append(
            {
                "method": self.command,
                "path": url.path,
                "query": parse_qs(url.query),
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": self.rfile.read(length).decode() if length else "",
            }
        )
        status, answer = ROUTES.get(url.path, (404, {"kind": "Status"}))
        if self.command == "PATCH":
            status, answer = 200, PROFILE
        if url.path.endswith("/slow"):
            time.sleep(SLOW_SECONDS)
        body = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
        self.send_response(status)
        self.send_header(
            "Content-Type", "text/plain" if isinstance(answer, str) else "application/json"
        )
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PATCH = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, Recorded]]:
    recorded = Recorded()
    handler = type("H", (Handler,), {"recorded": recorded})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.block_on_close = False  # a request the client gave up on may still sleep
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", recorded
    finally:
        httpd.shutdown()
        httpd.server_close()


def cluster(url: str, tmp_path: Path, timeout: float | None = None) -> Cluster:
    return Cluster(
        ConnectionFlags(
            kubeconfig=str(tmp_path / "none"),
            server=url,
            token="t0k",
            impersonate="alice",
            request_timeout=timeout,
        )
    )


PROBE = (
    "import json, sys\n"
    "from sps_operator.plugin import cli\n"
    "rc = cli.main(sys.argv[1:])\n"
    "typed = sorted(m for m in sys.modules if m.startswith('kubernetes.client.api.'))\n"
    "print(json.dumps({'rc': rc, 'typed': typed}), file=sys.stderr)\n"
)


def test_a_command_loads_no_typed_api(server: tuple[str, Recorded], tmp_path: Path) -> None:
    """`kubectl sps explain` reads a profile, its Job, pods and events: through the bare
    client only, so no `kubernetes.client.api.*` module is ever imported."""
    url, recorded = server
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "explain", "llama", "-n", NS, "--server", url,
         "--token", "t0k", "--kubeconfig", str(tmp_path / "none")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    probe = json.loads(done.stderr.strip().splitlines()[-1])
    assert probe == {"rc": 0, "typed": []}, done.stderr
    assert [r["path"].rsplit("/", 1)[-1] for r in recorded.requests] == [
        "llama", "llama-1-job", "pods", "events"
    ]  # fmt: skip
    assert "cannot pull its image" in done.stdout
    assert "ImagePullBackOff: \n" in done.stdout  # the null message reads as nothing


def test_requests_carry_the_flags_and_the_right_query(
    server: tuple[str, Recorded], tmp_path: Path
) -> None:
    url, recorded = server
    c = cluster(url, tmp_path)
    assert c.list_pods(NS, "job-name=llama-1-job")[0]["metadata"] == {
        "name": "llama-1-job-x",
        "namespace": NS,
    }
    assert c.pod_log(NS, "server-0/sglang", 4096) == "line one\nline two\n"
    c.annotate_reprofile(NS, "llama", "tok")
    assert [e["reason"] for e in c.list_events(NS, "llama")] == ["Sooner", "Later"]
    pods, log, patch, events = recorded.requests
    assert pods["query"] == {"labelSelector": ["job-name=llama-1-job"]}
    assert log["query"] == {"container": ["sglang"], "limitBytes": ["4096"]}
    assert events["query"] == {
        "fieldSelector": ["involvedObject.name=llama,involvedObject.kind=SpsProfile"]
    }
    for request in recorded.requests:
        assert request["headers"]["authorization"] == "Bearer t0k"
        assert request["headers"]["impersonate-user"] == "alice"
        assert request["headers"]["accept"] == "application/json"
    assert patch["method"] == "PATCH"
    assert patch["headers"]["content-type"] == "application/merge-patch+json"
    assert json.loads(patch["body"]) == {
        "metadata": {"annotations": {L.ANNOTATION_REPROFILE: "tok"}}
    }


def test_a_name_is_one_path_segment(server: tuple[str, Recorded], tmp_path: Path) -> None:
    url, recorded = server
    with pytest.raises(PluginError, match="not found"):
        cluster(url, tmp_path).get_config_map(NS, "../../../apis/x")
    assert (
        recorded.requests[0]["path"]
        == f"/api/v1/namespaces/{NS}/configmaps/..%2F..%2F..%2Fapis%2Fx"
    )


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing", f"ConfigMap {NS}/missing not found"),
        ("forbidden", f"forbidden: ConfigMap {NS}/forbidden (Forbidden)"),
        ("broken", f"ConfigMap {NS}/broken: 500 Internal Server Error"),
        ("html", f"ConfigMap {NS}/html: the API server answered no JSON"),
    ],
)
def test_failures_read_as_before(
    server: tuple[str, Recorded], tmp_path: Path, name: str, message: str
) -> None:
    url, _ = server
    with pytest.raises(PluginError) as caught:
        cluster(url, tmp_path).get_config_map(NS, name)
    assert str(caught.value) == message


def test_the_request_timeout_bounds_each_request(
    server: tuple[str, Recorded], tmp_path: Path
) -> None:
    url, _ = server
    with pytest.raises(PluginError, match=f"ConfigMap {NS}/slow: cannot reach the API server"):
        cluster(url, tmp_path, timeout=0.2).get_config_map(NS, "slow")
    # Without the flag the answer is waited for.
    assert cluster(url, tmp_path).get_config_map(NS, "slow")["data"] == {"slow": "yes"}


def test_an_unreachable_server_says_so(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="SpsProfiles in x: cannot reach the API server"):
        cluster("http://127.0.0.1:9", tmp_path, timeout=5).list_profiles("x")


def test_a_job_that_is_not_there_is_none(server: tuple[str, Recorded], tmp_path: Path) -> None:
    url, _ = server
    assert cluster(url, tmp_path).get_job(NS, "gone") is None


def test_events_sort_by_time_as_the_typed_client_sorted_them() -> None:
    events = [
        event("m", "M", None, "2026-12-07T06:00:01.500000Z"),
        event("z", "Z", "2026-12-07T06:00:01Z", None),
        event("n", "N", None, None),
        event("a", "A", "2026-12-07T05:59:59Z", None),
        event("x", "X", "not a time", None),
    ]
    assert [e["reason"] for e in sorted(events, key=event_time_key)] == ["N", "A", "Z", "M", "X"]


@given(st.binary(max_size=200))
def test_any_answer_parses_to_an_object_or_a_plugin_error(raw: bytes) -> None:
    try:
        parsed = parse_json(raw, "x", drop_nulls=True)
    except PluginError as exc:
        assert str(exc).startswith("x: the API server answered no JSON")
    else:
        assert isinstance(parsed, dict) and None not in parsed.values()


def test_a_deeply_nested_answer_is_a_plugin_error() -> None:
    for deep in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000):
        with pytest.raises(PluginError, match="no JSON"):
            parse_json(deep, "x", drop_nulls=True)


def test_only_a_built_in_kinds_nulls_go() -> None:
    raw = b'{"a": null, "b": {"c": null, "d": [null, {"e": null}]}}'
    assert parse_json(raw, "x", drop_nulls=True) == {"b": {"d": [None, {}]}}
    assert parse_json(raw, "x") == json.loads(raw)


def test_an_answer_over_its_cap_is_a_one_line_error(
    server: tuple[str, Recorded],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An API server (or a proxy in front of it) is untrusted: its answer is read up to a
    cap, never whole. `kubectl sps` says which read was refused and why, exits 1, and
    prints no traceback."""
    from sps_operator import kube_rest
    from sps_operator.plugin import cli

    url, _ = server
    monkeypatch.setattr(kube_rest, "LIST_CAP", 1 << 20)
    many = {"items": [PROFILE] * 8000}  # about 2 MiB
    monkeypatch.setitem(ROUTES, f"/apis/sps.dev/v1alpha1/namespaces/{NS}/spsprofiles", (200, many))
    rc = cli.main(["get", "-n", NS, "--server", url, "--token", "t0k",
                   "--kubeconfig", str(tmp_path / "none")])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 1
    assert err == (
        f"error: SpsProfiles in {NS}: the API server's answer is over the 1 MiB cap (refused)\n"
    )
    huge = {"metadata": {"name": "huge"}, "data": {"x": "y" * kube_rest.OBJECT_CAP}}
    monkeypatch.setitem(ROUTES, f"/api/v1/namespaces/{NS}/configmaps/huge", (200, huge))
    with pytest.raises(PluginError) as caught:
        cluster(url, tmp_path).get_config_map(NS, "huge")
    assert str(caught.value) == (
        f"ConfigMap {NS}/huge: the API server's answer is over the 4 MiB cap (refused)"
    )


def test_a_log_may_run_a_little_over_its_limit_and_no_further(
    server: tuple[str, Recorded], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sps_operator.plugin.client import LOG_SLACK

    url, _ = server
    path = f"/api/v1/namespaces/{NS}/pods/server-0/log"
    monkeypatch.setitem(ROUTES, path, (200, "x" * (100 + LOG_SLACK)))
    assert len(cluster(url, tmp_path).pod_log(NS, "server-0", 100)) == 100 + LOG_SLACK
    with pytest.raises(PluginError, match=f"log of pod {NS}/server-0: .* over the"):
        cluster(url, tmp_path).pod_log(NS, "server-0", 99)

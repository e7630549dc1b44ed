"""Artifacts and the offline fit (the result ConfigMap format: tests/unit/test_api_result.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from round_lines import round_line
from sps_operator.api.kinds import TableKind
from sps_operator.profiler import artifacts, fitting, publish
from sps_operator.profiler.cli import main
from sps_operator.profiler.fitting import FitError, fit_profile
from sps_operator.tables import selfcheck
from sps_operator.tables.formats import SpsAdditiveCostTable, SpsCostTable, load_sps_table_text


def test_read_jsonl_drops_only_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "x.rounds.jsonl"
    artifacts.append_lines(path, [{"a": 1}, {"a": 2}])
    with path.open("a") as handle:
        handle.write('{"a": 3')  # crash mid-append
    assert artifacts.read_jsonl(path) == [{"a": 1}, {"a": 2}]
    path.write_text('{"a":1}\n{bad\n{"a":3}\n')
    with pytest.raises(ValueError, match=":2 is not valid JSON"):
        artifacts.read_jsonl(path)


def test_set_aside_keeps_previous_measurements(tmp_path: Path) -> None:
    paths = artifacts.OutPaths.for_out(tmp_path / "sps.json")
    assert paths.rounds.name == "sps.rounds.jsonl"
    assert paths.manifest.name == "sps.json.manifest.json"
    assert paths.plot.name == "sps.plot.png"
    artifacts.append_lines(paths.rounds, [{"a": 1}])
    moved = artifacts.set_aside(paths.raw_files())
    assert len(moved) == 1 and json.loads(moved[0].read_text()) == {"a": 1}
    assert not paths.rounds.exists()


def test_offline_fit_diagonal_writes_loadable_table_plot_and_manifest(tmp_path: Path) -> None:
    out = tmp_path / "sps.json"
    paths = artifacts.OutPaths.for_out(out)
    artifacts.append_lines(
        paths.rounds,
        [
            round_line(1, 8, 95.0),
            round_line(2, 16, 93.0),
            round_line(4, 32, 90.0, repeat=0),
            round_line(4, 32, 80.0, repeat=1),
            round_line(4, 32, 70.0, repeat=2),
        ],
    )
    result = fit_profile(str(out), plot=True)
    table = load_sps_table_text(out.read_text())
    assert isinstance(table, SpsCostTable)
    assert table.sample_steps_per_sec == (95.0, 93.0, 80.0)
    assert result.kind == TableKind.DIAGONAL
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["fit"]["table_sha256"] == artifacts.sha256_file(out)
    assert manifest["fit"]["quality"]["num_cells"] == 5
    assert paths.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_offline_fit_additive_via_cli(tmp_path: Path) -> None:
    out = tmp_path / "sps.json"
    lines = []
    for bs in (1, 2, 4, 8):
        for frac in (0.25, 0.5, 1.0):
            m = min(bs + int(frac * (bs * 7)), bs * 8)
            lines.append(round_line(bs, m, 1 / (0.01 + 40e-6 * bs + 5e-6 * m), frac))
    artifacts.append_lines(artifacts.OutPaths.for_out(out).rounds, lines)
    assert main(["fit", "--out", str(out), "--no-plot"]) == 0
    table = load_sps_table_text(out.read_text())
    assert isinstance(table, SpsAdditiveCostTable)
    assert table.step_time(num_reqs=4, budget=14) == pytest.approx(0.01 + 160e-6 + 90e-6, rel=0.01)


def test_fit_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(FitError, match="run `sps-profiler run` first"):
        fit_profile(str(tmp_path / "none.json"))
    assert main(["fit", "--out", str(tmp_path / "none.json")]) == 1
    assert "run `sps-profiler run` first" in capsys.readouterr().err
    out = tmp_path / "few.json"
    artifacts.append_lines(artifacts.OutPaths.for_out(out).rounds, [round_line(1, 2, 90.0, 0.25)])
    with pytest.raises(FitError, match="at least 4 distinct"):
        fit_profile(str(out), plot=False)


def test_the_profiler_checks_a_fit_with_the_operators_self_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One self-check: what `sps-profiler fit` writes passes the check a published table
    must pass (tables/selfcheck.py); a table failing it is not written."""
    assert fitting.self_check is selfcheck.self_check
    out = tmp_path / "sps.json"
    rows = [round_line(bs, 8 * bs, 1 / (0.0105 * (1 + 0.01 * bs))) for bs in (1, 2, 4, 8)]
    artifacts.append_lines(artifacts.OutPaths.for_out(out).rounds, rows)
    monkeypatch.setattr(fitting, "self_check", lambda table: ["a probe SGLang would refuse"])
    with pytest.raises(FitError, match="fails its self-check: a probe SGLang would refuse"):
        fitting.fit_profile(str(out), plot=False)
    assert not out.exists()
    fitting.fit_profile(str(out), plot=False, run_self_check=False)  # physics only
    assert out.exists()


def test_a_fit_of_steps_recorded_in_seconds_writes_no_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 18 #8: a server writing step_cpu_ms in seconds (0.0105 for a 10.5 ms step) gave
    # `sps-profiler all` a table of 95,000 steps/s. Refused even with --no-self-check.
    out = tmp_path / "sps.json"
    seconds = [round_line(bs, 8 * bs, 1 / (0.0105e-3 * (1 + 0.01 * bs))) for bs in (1, 2, 4, 8)]
    artifacts.append_lines(artifacts.OutPaths.for_out(out).rounds, seconds)
    assert main(["fit", "--out", str(out), "--no-plot", "--no-self-check"]) == 1
    err = capsys.readouterr().err
    assert "not a decode step of a real model" in err and "batch_tokens=8 is 0.0106" in err
    assert "seconds where SGLang writes milliseconds" in err
    assert not out.exists()


@pytest.fixture
def silent_api_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A kubeconfig whose server drops every new connection, as a NetworkPolicy that denies
    the profiler's egress does: a loopback socket whose accept queue is full, so the kernel
    drops each further SYN and a connect waits (here on 127.0.0.1 only)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    queued = []
    while True:  # fill the accept queue: the first connect that times out is dropped
        client = socket.socket()
        client.settimeout(0.3)
        try:
            client.connect(("127.0.0.1", port))
        except TimeoutError:
            client.close()
            break
        queued.append(client)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}",
                                                "insecure-skip-tls-verify": True}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    try:
        yield
    finally:
        for client in queued:
            client.close()
        server.close()


@pytest.mark.timeout(60)
def test_a_write_to_an_api_server_that_never_answers_fails_within_its_bound(
    silent_api_server: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unbounded, the write waited out TCP's SYN retries (minutes) on each of urllib3's
    attempts and the pytest timeout ended it; bounded, it fails with a connect timeout."""
    monkeypatch.setattr(publish, "REQUEST_TIMEOUT", (0.5, 0.5))
    publisher = publish.ConfigMapPublisher("result", "ns")
    with pytest.raises(Exception, match=r"(?i)time"):
        publisher.publish(status="running", message="starting", progress="0/?")


def test_the_publisher_loads_none_of_the_clients_typed_apis_or_models(tmp_path: Path) -> None:
    """Every profiling Job starts one: the typed CoreV1Api imports and builds a few hundred
    pydantic models (0.7 CPU-s against 0.25 for a start and twenty writes)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))  # fmt: skip
    script = (
        "import sys\n"
        "from sps_operator.profiler.publish import ConfigMapPublisher\n"
        "p = ConfigMapPublisher('result', 'ns')\n"
        "print(p._path)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('kubernetes.client.api.',"
        " 'kubernetes.client.models.'))))\n"
    )
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env
    ).stdout.splitlines()
    assert out == ["/api/v1/namespaces/ns/configmaps/result", "[]"]

"""Faults the profiler must end cleanly on, with a message that says what to fix."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from sps_operator.profiler.artifacts import OutPaths, drop_torn_tail, read_jsonl
from sps_operator.profiler.cli import main
from sps_operator.tables.formats import SpsCostTable, load_sps_table_text
from sps_sim.testing import running_sim

FAST = ["--vocab-size", "32000", "--poll-interval", "0.02", "--max-steady-steps", "120"]


def profile(url: str, out: Path, *args: str, command: str = "all") -> int:
    return main([command, "--base-url", url, "--out", str(out), *FAST, *args])


def test_resume_after_a_torn_line_drops_it_and_continues(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "torn.json"
    paths = OutPaths.for_out(out)
    with running_sim(seed=21, time_scale=100.0) as url:
        assert profile(url, out, "--batch-size", "1", "2", command="run") == 0
        kept = read_jsonl(paths.rounds)
        with paths.rounds.open("a") as handle:
            handle.write('{"repeat": 0, "batch_size_per_rank": 4, "steps_')  # the crash
        with paths.records.open("a") as handle:
            handle.write('{"forward_ct": 12')
        assert profile(url, out, "--batch-size", "1", "2", "4", "8", "--resume") == 0
    assert "torn line" in caplog.text
    rounds = read_jsonl(paths.rounds)
    assert rounds[:2] == kept
    assert sorted(r["batch_size_per_rank"] for r in rounds) == [1, 2, 4, 8]
    assert all(line.endswith("}") for line in paths.rounds.read_text().splitlines())
    read_jsonl(paths.records)  # every line parses
    assert isinstance(load_sps_table_text(out.read_text()), SpsCostTable)
    assert main(["fit", "--out", str(out), "--no-plot"]) == 0


def test_drop_torn_tail_keeps_clean_files_and_cuts_unparseable_last_lines(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n{"b": 2}\n')
    assert drop_torn_tail(path) == 0
    path.write_text('{"a": 1}\n{"b": ')
    assert drop_torn_tail(path) == len('{"b": ')
    assert path.read_text() == '{"a": 1}\n'
    path.write_text('{"a": 1}\n{"b": 2\n')  # torn, then a newline from the next writer
    assert drop_torn_tail(path) > 0 and path.read_text() == '{"a": 1}\n'
    assert drop_torn_tail(tmp_path / "absent.jsonl") == 0


class _AnswersOnceThenHangs(http.server.BaseHTTPRequestHandler):
    """Proxies the first GET /server_info to a real simulator, then accepts and never answers."""

    upstream = ""
    answered = threading.Event()
    release = threading.Event()

    def do_GET(self) -> None:
        if self.path == "/server_info" and not self.answered.is_set():
            self.answered.set()
            body = requests.get(self.upstream + self.path, timeout=30).content
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.release.wait(120)

    do_POST = do_GET

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def hanging_url() -> Iterator[str]:
    with running_sim(seed=22) as upstream:
        _AnswersOnceThenHangs.upstream = upstream
        _AnswersOnceThenHangs.answered.clear()
        _AnswersOnceThenHangs.release.clear()
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AnswersOnceThenHangs)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            _AnswersOnceThenHangs.release.set()
            server.shutdown()
            server.server_close()


# Hanging for --http-timeout (600 s) would trip this; the round's 2 s never does.
@pytest.mark.timeout(180)
def test_a_server_that_never_answers_holds_a_round_for_its_timeout_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hanging_url: str
) -> None:
    rc = profile(
        hanging_url,
        tmp_path / "hang.json",
        *("--batch-size", "1", "--round-timeout", "2", "--http-timeout", "600"),
        command="run",
    )
    assert rc == 1
    err = capsys.readouterr().err
    assert "did not answer within" in err or "out of time (--round-timeout)" in err


def test_a_record_ring_smaller_than_a_round_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Time scale 4: a round of ≈ 134 steps lasts ≈ 0.36 s, several polls even on a loaded
    # host. At 20 (71 ms) a late poll saw the whole round at once, and a ring that filled
    # before the first poll reads as "never stabilized" (RingWatch needs two polls).
    with running_sim(["--record-ring-size", "40"], seed=23, time_scale=4.0) as url:
        rc = profile(url, tmp_path / "ring.json", "--batch-size", "1", command="run")
    assert rc == 1
    err = capsys.readouterr().err
    assert "ring too small" in err and "--record-ring-size" in err

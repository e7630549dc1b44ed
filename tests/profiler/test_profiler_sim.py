"""sps-profiler against the simulated DSpark server (sps-sim), end to end over HTTP."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopback import serving
from sps_operator.profiler.artifacts import OutPaths, read_jsonl, sha256_file
from sps_operator.profiler.cli import main
from sps_operator.tables.clockramp import stranded_rounds
from sps_operator.tables.formats import SpsAdditiveCostTable, SpsCostTable, load_sps_table_text
from sps_sim.costmodel import EFFECTS_OFF, PRESETS
from sps_sim.testing import running_sim
from sps_testbed.processes import free_port
from waiting import wait_for

K = 8
COMPACT = {"SGLANG_RAGGED_VERIFY_MODE": "compact"}
FAST = ["--vocab-size", "32000", "--poll-interval", "0.02", "--max-steady-steps", "200"]
H100 = PRESETS["NVIDIA-H100-80GB-HBM3"]


def quiet_h100(path: Path, **effects: float) -> str:
    """An H100 preset file with 3 % noise and only `effects` on; returns its path."""
    fields = {"base": H100.name, **EFFECTS_OFF, "noise_cv": 0.03, **effects}
    # Only the cold start ramps. The simulator re-arms the ramp after this much idle model
    # time, and its model time is wall time × the time scale: at the default 1 s, 0.1 s of
    # this process's own latency between two rounds (a loaded machine) re-armed it mid-run,
    # in about one run in four, and a cell came out +14 % (a real GPU idles tens of ms there).
    fields["warmup_idle_threshold_s"] = 1e6
    path.write_text(json.dumps(fields))
    return str(path)


def profile(url: str, out: Path, *args: str, command: str = "all") -> int:
    return main([command, "--base-url", url, "--out", str(out), *FAST, *args])


def test_diagonal_static_sweep_writes_a_loadable_table(tmp_path: Path) -> None:
    out = tmp_path / "diag.json"
    with running_sim(seed=1) as url:
        assert profile(url, out, "--batch-size", "1", "4", "8", "--progress") == 0
    table = load_sps_table_text(out.read_text())
    assert isinstance(table, SpsCostTable)
    # A step per captured tier between the measured ones (8..64 tokens: bs 1..8).
    assert table.sample_batch_tokens == (8, 9, 17, 25, 33, 41, 49, 57)
    for bs in range(1, 9):
        truth = H100.decode_seconds(bs, bs * K)
        # Within the simulator's noise and clock warm-up drift of the truth.
        assert table.step_seconds(bs * K) == pytest.approx(truth, rel=0.08)
    paths = OutPaths.for_out(out)
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["status"] == "succeeded"
    assert manifest["verify_num_draft_tokens"] == K
    assert len(manifest["fingerprint"]) == 16
    assert manifest["server"]["mode"] == "static"
    assert manifest["fit"]["table_sha256"] == sha256_file(out)
    assert manifest["artifacts_sha256"][paths.rounds.name] == sha256_file(paths.rounds)
    assert manifest["stopping_rule"]["ci_rel_width"] == 0.02
    rounds = read_jsonl(paths.rounds)
    # Sorted: a round measured again (a rise, a clock cap) comes after the others.
    assert sorted(r["batch_size_per_rank"] for r in rounds) == [1, 4, 8]
    for r in rounds:  # measured probes are in the table as measured
        assert table.lookup(r["batch_tokens"]) == pytest.approx(r["steps_per_sec"])
    assert main(["fit", "--out", str(out), "--diagonal-probes", "measured", "--no-plot"]) == 0
    measured = load_sps_table_text(out.read_text())
    assert isinstance(measured, SpsCostTable)
    assert measured.sample_batch_tokens == (8, 32, 64)
    assert all(r["graph_tier"] == r["batch_tokens"] for r in rounds)
    records = read_jsonl(paths.records)
    assert {r["batch_size_per_rank"] for r in records} == {1, 4, 8}
    # The ring was cleared between rounds: each round's records start after its own prefill.
    assert all(r["num_running_reqs"] <= r["batch_size_per_rank"] for r in records)
    assert paths.plot.read_bytes()[:4] == b"\x89PNG"


def test_compact_with_verify_all_bug_fails_with_the_pin_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bug.json"
    with running_sim(env=COMPACT, seed=2, verify_all_bug="on") as url:
        rc = profile(url, out, "--batch-size", "2", "4", "--fracs", "0.25", "1.0")
    assert rc == 1
    err = capsys.readouterr().err
    assert "verify-all shortcut" in err
    assert "non-flat table" in err
    assert "Pre-flight probe failed" in err
    assert not out.exists()  # no table from a sweep that cannot be trusted
    manifest = json.loads(OutPaths.for_out(out).manifest.read_text())
    assert manifest["status"] == "failed"
    assert "verify-all" in manifest["error"]


def test_bug_is_caught_per_round_without_the_preflight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bug2.json"
    with running_sim(env=COMPACT, seed=3, verify_all_bug="on") as url:
        rc = profile(url, out, "--batch-size", "4", "--fracs", "0.25", "--no-preflight")
    assert rc == 1
    assert "full width (4x8)" in capsys.readouterr().err


def _assert_additive_tracks_truth(table: SpsAdditiveCostTable, bss: list[int]) -> None:
    assert table.bs_probes == tuple(bss)
    for bs in bss:
        low = table.step_time(num_reqs=bs, budget=0)
        high = table.step_time(num_reqs=bs, budget=bs * (K - 1))
        truth_low = H100.decode_seconds(bs, 8 * ((bs + 7) // 8))
        truth_high = H100.decode_seconds(bs, bs * K)
        assert high == pytest.approx(truth_high, rel=0.1)
        if truth_high > 1.03 * truth_low:  # big enough to stand out of the step noise
            assert high > 1.01 * low  # theta is not flat: trimming pays


def test_fixed_server_off_diagonal_succeeds(tmp_path: Path) -> None:
    out = tmp_path / "fixed.json"
    with running_sim(env=COMPACT, seed=4, verify_all_bug="off") as url:
        assert profile(url, out, "--batch-size", "2", "8", "16", "--fracs", "0.25", "1.0") == 0
    table = load_sps_table_text(out.read_text())
    assert isinstance(table, SpsAdditiveCostTable)
    _assert_additive_tracks_truth(table, [2, 8, 16])
    rounds = read_jsonl(OutPaths.for_out(out).rounds)
    by_cell = {(r["batch_size_per_rank"], r["frac"]): r for r in rounds}
    # bs=16 frac 0.25: M = 16 + int(0.25*112) = 44 → tier 48 (§2 example).
    assert by_cell[(16, 0.25)]["batch_tokens"] == 44
    assert by_cell[(16, 0.25)]["graph_tier"] == 48


TWO_PROBE_SEED = (
    '{"sample_batch_tokens":[1,2],"sample_steps_per_sec":[1.0,1.0],"max_batch_tokens":2}'
)


@pytest.mark.parametrize(
    ("server", "flavor", "extra_env"),
    [
        # Any non-flat table turns the shortcut off (the operator's phase-2 seed).
        ("seeded", "upstream", {}),
        # PR #35413 installs its own table at start-up: no path, yet not flat.
        (
            "capture-derived",
            "capture-derived",
            {"SGLANG_DSPARK_ENABLE_CAPTURE_DERIVED_SPS": "1"},
        ),
    ],
    ids=["seeded", "capture-derived"],
)
def test_bug_server_that_is_not_flat_honours_the_pin(
    tmp_path: Path, server: str, flavor: str, extra_env: dict[str, str]
) -> None:
    args = ["--max-running-requests", "128"]
    if server == "seeded":
        seed_table = tmp_path / "two-probe.json"
        seed_table.write_text(TWO_PROBE_SEED)
        args += ["--speculative-dspark-sps-table-path", str(seed_table)]
    out = tmp_path / f"{server}.json"
    with running_sim(
        args, env={**COMPACT, **extra_env}, seed=5, verify_all_bug="on", sglang_flavor=flavor
    ) as url:
        assert profile(url, out, "--batch-size", "2", "16", "--fracs", "0.25", "1.0") == 0
    table = load_sps_table_text(out.read_text())
    assert isinstance(table, SpsAdditiveCostTable)
    _assert_additive_tracks_truth(table, [2, 16])


def test_dp_attention_two_ranks(tmp_path: Path) -> None:
    out = tmp_path / "dp2.json"
    with running_sim(
        ["--dp-size", "2", "--enable-dp-attention", "--enable-dp-lm-head"], seed=6
    ) as url:
        assert profile(url, out, "--batch-size", "2", "4") == 0
    rounds = read_jsonl(OutPaths.for_out(out).rounds)
    assert [r["batch_size"] for r in rounds] == [4, 8]
    assert all(len(r["per_rank_median_step_time"]) == 2 for r in rounds)


@pytest.mark.parametrize(
    ("sim_args", "env", "profiling_env", "run_args", "message"),
    [
        (["--speculative-algorithm", "EAGLE"], {}, True, [], "speculative_algorithm='EAGLE'"),
        ([], COMPACT, True, [], "SGLANG_RAGGED_VERIFY_MODE=static"),
        ([], {}, True, ["--fracs", "0.5"], "SGLANG_RAGGED_VERIFY_MODE=compact"),
        ([], {"SGLANG_SIMULATE_ACC_LEN": "1.0"}, False, [], "no dspark_info_record"),
        (
            [],
            {"SGLANG_SIMULATE_ACC_LEN": "1.0", "SGLANG_DSPARK_DEBUG_DUMP": "core"},
            False,
            [],
            "missing component",
        ),
        ([], {"SGLANG_DSPARK_ENABLE_SPS_RECORD": "1"}, False, [], "simulate_acc_len=None"),
        (["--disable-cuda-graph"], {}, True, [], "disable-cuda-graph"),
        (
            ["--cuda-graph-config", '{"decode": {"backend": "disabled"}}'],
            {},
            True,
            [],
            "backend is 'disabled'",
        ),
        (["--cuda-graph-max-bs", "4"], {}, True, [], "only up to bs=4"),
        (["--max-running-requests", "4"], {}, True, [], "at most 4 per rank"),
    ],
)
def test_bad_servers_fail_before_any_load(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    sim_args: list[str],
    env: dict[str, str],
    profiling_env: bool,
    run_args: list[str],
    message: str,
) -> None:
    out = tmp_path / "bad.json"
    with running_sim(sim_args, env=env, profiling_env=profiling_env) as url:
        rc = profile(url, out, "--batch-size", "1", "8", *run_args, command="run")
    assert rc == 1
    assert message in capsys.readouterr().err
    assert not OutPaths.for_out(out).rounds.exists()


def test_unreachable_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert profile(url, tmp_path / "x.json", "--batch-size", "1", command="run") == 1
    assert "cannot connect ([Errno 111] Connection refused)" in capsys.readouterr().err
    assert profile(url, tmp_path / "x.json", "--wait-for-server", "0.5", command="run") == 1
    assert "/health did not answer 200 within" in capsys.readouterr().err


class _Garbage(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html>not json</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def garbage_url() -> Iterator[str]:
    with serving(_Garbage) as url:
        yield url


def test_garbage_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], garbage_url: str) -> None:
    assert profile(garbage_url, tmp_path / "g.json", "--batch-size", "1", command="run") == 1
    assert "not JSON" in capsys.readouterr().err


def cut_after_first_round(out: Path, args: list[str], time_scale: float = 10.0, **sim: Any) -> int:
    """Profile `args` on a simulator that is stopped (under the profiler's feet) once the
    first round is written; the run's exit code."""
    paths = OutPaths.for_out(out)
    result: dict[str, int] = {}
    with running_sim(time_scale=time_scale, **sim) as url:
        worker = threading.Thread(
            target=lambda: result.setdefault("rc", profile(url, out, *args, command="run"))
        )
        worker.start()
        for _ in range(1200):
            if paths.rounds.exists() and read_jsonl(paths.rounds):
                break
            worker.join(0.05)
    worker.join(60)
    return result["rc"]


def test_server_dies_mid_sweep_then_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "resume.json"
    paths = OutPaths.for_out(out)
    args = ["--batch-size", "1", "2", "4", "8", "--max-steady-steps", "400"]
    assert cut_after_first_round(out, args, seed=7) == 1
    err = capsys.readouterr().err
    assert "stopped answering" in err
    kept = read_jsonl(paths.rounds)
    assert 1 <= len(kept) < 4
    assert json.loads(paths.manifest.read_text())["status"] == "failed"
    with running_sim(seed=8) as url:
        assert profile(url, out, *args, "--resume") == 0
    rounds = read_jsonl(paths.rounds)
    assert sorted(r["batch_size_per_rank"] for r in rounds) == [1, 2, 4, 8]
    assert rounds[: len(kept)] == kept  # nothing measured was redone or lost
    assert isinstance(load_sps_table_text(out.read_text()), SpsCostTable)


def test_rounds_on_a_ramp_whose_run_was_cut_before_its_anchor_are_measured_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A GPU whose clocks ramp up over seconds: the warm-up ends on the ramp and the sweep
    # starts, to be corrected by the anchor at its end. The run is cut before the anchor:
    # its rounds are slow by the ramp and nothing can correct them.
    preset = quiet_h100(tmp_path / "ramp.json", warmup_amplitude=0.3, warmup_tau_s=5.0)
    out = tmp_path / "ramp-sps.json"
    paths = OutPaths.for_out(out)
    args = ["--batch-size", "1", "2", "4", "8", "16"]
    # Time scale 2, not 10: the simulator's clocks keep ramping while this process waits for
    # the CPU between rounds, a gap the profiler's ramp axis (its own steps' time) does not
    # count; at 10, 0.1 s of such a wait on a loaded machine is 1 s of a 5 s ramp, and the
    # correction came out 8 % short on one CI run (load 12-16).
    assert cut_after_first_round(out, args, time_scale=2.0, seed=3, preset=preset) == 1
    kept = read_jsonl(paths.rounds)
    assert kept and all(r.get("clock_on_ramp") is True for r in kept)
    assert not any("clock_ramp" in r for r in kept)
    caplog.clear()
    with running_sim(seed=4, time_scale=2.0, preset=preset) as url:
        assert profile(url, out, *args, "--resume") == 0
    assert "measured again" in caplog.text
    rounds = read_jsonl(paths.rounds)
    assert rounds[: len(kept)] == kept
    stranded = stranded_rounds(rounds)
    assert stranded == list(range(len(kept)))
    used = [r["batch_size_per_rank"] for i, r in enumerate(rounds) if i not in stranded]
    assert sorted(used) == [1, 2, 4, 8, 16]  # every cell once, from the resumed run
    table = load_sps_table_text(out.read_text())
    assert isinstance(table, SpsCostTable)
    for bs in (2, 4, 8, 16):
        truth = H100.decode_seconds(bs, bs * K)
        assert 1 / table.lookup(bs * K) == pytest.approx(truth, rel=0.05)


def test_a_server_recording_seconds_as_milliseconds_gets_no_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 18 #8: records whose step_cpu_ms is 1000x too small (0.0105 for an H100's
    # 10.5 ms step) gave `sps-profiler all` a table of 95,000 steps/s. Simulated as a GPU
    # whose every cost is 1000x smaller, run slow enough (time scale 0.02) that its 10 µs
    # steps take 0.5 ms of real time.
    costs = [
        "bias_s", "per_request_s", "per_token_s", "per_token_above_knee_s", "interaction_s",
        "prefill_base_s", "prefill_per_token_s", "prefill_per_request_s", "eager_overhead_s",
    ]  # fmt: skip
    preset = tmp_path / "seconds.json"
    scaled = {name: getattr(H100, name) / 1000 for name in costs}
    preset.write_text(json.dumps({"base": H100.name, **EFFECTS_OFF, **scaled}))
    out = tmp_path / "seconds-sps.json"
    with running_sim(seed=5, time_scale=0.02, preset=str(preset)) as url:
        assert profile(url, out, "--batch-size", "1", "4") == 1
    err = capsys.readouterr().err
    assert "below the 0.1 ms" in err and "not in milliseconds (seconds?)" in err
    assert not out.exists()


def test_fresh_run_sets_old_rounds_aside(tmp_path: Path) -> None:
    out = tmp_path / "again.json"
    paths = OutPaths.for_out(out)
    paths.rounds.write_text('{"old": true}\n')
    with running_sim(seed=9) as url:
        assert profile(url, out, "--batch-size", "1", command="run") == 0
    backups = list(tmp_path.glob("again.rounds.jsonl.*.bak"))
    assert len(backups) == 1 and backups[0].read_text() == '{"old": true}\n'


def test_sigterm_keeps_rounds_and_marks_the_run_failed(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    out = tmp_path / "term.json"
    paths = OutPaths.for_out(out)
    exe = Path(sys.executable).with_name("sps-profiler")
    assert exe.exists(), f"{exe} missing: install the package (pip install -e .)"
    with running_sim(seed=13, time_scale=5.0) as url:
        proc = subprocess.Popen(
            [
                *(str(exe), "run", "--base-url", url, "--out", str(out), *FAST),
                *("--batch-size", "1", "2", "4", "8", "16", "--max-steady-steps", "2000"),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for("a first measured round", lambda: read_jsonl(paths.rounds), 60, 0.05)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 1
    assert "interrupted" in err
    assert 1 <= len(read_jsonl(paths.rounds)) < 5
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["status"] == "failed"


def test_a_round_that_straddles_a_clock_cap_is_measured_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A GPU capped 30 % slower for 0.3 s of every 1 s: nearly every round (about 1 s each)
    # sees the cap set in. One whose steps rise mid-round is not recorded but measured again
    # (with caps every 2 s, one run in three had no round that saw one set in).
    preset = quiet_h100(
        tmp_path / "throttle.json",
        throttle_amplitude=0.3,
        throttle_period_s=1.0,
        throttle_duration_s=0.3,
    )
    out = tmp_path / "throttle-sps.json"
    with running_sim(seed=5, time_scale=10.0, preset=preset) as url:
        assert profile(url, out, "--batch-size", "1", "2", "4", "8", "16") == 0
    assert "mid-round beyond KV growth" in caplog.text
    assert "measured again" in caplog.text
    rounds = read_jsonl(OutPaths.for_out(out).rounds)
    # Every cell once: a round measured again replaces the one that rose, never joins it.
    assert sorted(r["batch_size_per_rank"] for r in rounds) == [1, 2, 4, 8, 16]


@pytest.mark.parametrize(
    ("capped_bs", "capped_rounds"),
    [((4,), 1), ((8, 16), 1), ((4,), 2)],
    ids=["one round", "two in a row", "measured again inside a cap too"],
)
def test_a_round_entirely_inside_a_clock_cap_is_measured_again(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    capped_bs: tuple[int, ...],
    capped_rounds: int,
) -> None:
    # The first `capped_rounds` rounds at each of `capped_bs` run entirely under a cap 25 %
    # slower (the simulator's step factor while that round's load runs): its steps are
    # steady, only all slow, so no rise shows. Against its neighbours' lines it reads far
    # slower: measured again at the end of the sweep, and the faster round replaces it. Two
    # in a row (the last cell among them): the second shows once the first is replaced. A
    # round measured again inside a cap too reads as slow, the first stands, and the cell
    # still stands out: measured a second time (before: the capped round was kept, +25 %).
    from sps_operator.profiler import client as profiler_client
    from sps_sim import costmodel

    capped = threading.Event()
    seen: list[int] = []
    start_load = profiler_client.DsparkClient.start_load

    def start_load_capping(
        self: profiler_client.DsparkClient, payload: dict[str, Any], deadline: float | None = None
    ) -> profiler_client.LoadThread:
        requests = len(payload["input_ids"])
        if requests in capped_bs and seen.count(requests) < capped_rounds:
            capped.set()
        else:
            capped.clear()
        seen.append(requests)
        return start_load(self, payload, deadline)

    monkeypatch.setattr(profiler_client.DsparkClient, "start_load", start_load_capping)
    monkeypatch.setattr(
        costmodel, "throttle_factor", lambda _p, _now: 1.25 if capped.is_set() else 1.0
    )
    preset = quiet_h100(tmp_path / "quiet.json")
    out = tmp_path / "capped-sps.json"
    with running_sim(seed=3, time_scale=10.0, preset=preset) as url:
        assert profile(url, out, "--batch-size", "1", "2", "4", "8", "16") == 0
    for bs in capped_bs:
        assert seen.count(bs) == capped_rounds + 1  # the capped rounds, then an uncapped one
    assert "out of line with the others" in caplog.text
    rounds = read_jsonl(OutPaths.for_out(out).rounds)
    assert sorted(r["batch_size_per_rank"] for r in rounds) == [1, 2, 4, 8, 16]
    for r in rounds:
        truth = H100.decode_seconds(r["batch_size_per_rank"], r["batch_size_per_rank"] * K)
        assert r["median_step_time"] == pytest.approx(truth, rel=0.05)


def _capping_rounds(
    monkeypatch: pytest.MonkeyPatch, caps: Any, factor: float
) -> tuple[list[int], threading.Event]:
    """Cap (the simulator's step factor `factor`) every round whose load `caps(requests,
    seen)` picks, `seen` the request counts of the rounds started before it."""
    from sps_operator.profiler import client as profiler_client
    from sps_sim import costmodel

    capped = threading.Event()
    seen: list[int] = []
    start_load = profiler_client.DsparkClient.start_load

    def start_load_capping(
        self: profiler_client.DsparkClient, payload: dict[str, Any], deadline: float | None = None
    ) -> profiler_client.LoadThread:
        requests = len(payload["input_ids"])
        if caps(requests, seen):
            capped.set()
        else:
            capped.clear()
        seen.append(requests)
        return start_load(self, payload, deadline)

    monkeypatch.setattr(profiler_client.DsparkClient, "start_load", start_load_capping)
    monkeypatch.setattr(
        costmodel, "throttle_factor", lambda _p, _now: factor if capped.is_set() else 1.0
    )
    return seen, capped


def test_three_rounds_in_a_row_inside_one_cap_are_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 37: a cap over three neighbouring rounds (bs 4, 8, 16) bends every line through
    # two neighbours, so none stands out against them (before: all three kept, +25 %). But
    # each is slower than a round of more tokens after the cap (bs 16 than bs 24), and once
    # that one is replaced the next one down shows: measured again until all are in line.
    seen, _ = _capping_rounds(
        monkeypatch, lambda requests, seen: requests in (4, 8, 16) and requests not in seen, 1.25
    )
    preset = quiet_h100(tmp_path / "quiet.json")
    out = tmp_path / "capped-sps.json"
    with running_sim(seed=3, time_scale=10.0, preset=preset) as url:
        assert profile(url, out, "--batch-size", "1", "2", "4", "8", "16", "24", "32") == 0
    for bs in (4, 8, 16):
        assert seen.count(bs) >= 2
    paths = OutPaths.for_out(out)
    rounds = read_jsonl(paths.rounds)
    assert sorted(r["batch_size_per_rank"] for r in rounds) == [1, 2, 4, 8, 16, 24, 32]
    for r in rounds:
        truth = H100.decode_seconds(r["batch_size_per_rank"], r["batch_size_per_rank"] * K)
        assert r["median_step_time"] == pytest.approx(truth, rel=0.05)
    remeasured = json.loads(paths.manifest.read_text())["remeasured"]
    # Each capped cell measured again: replaced once a neighbour showed it, or, when the
    # cap's start fell inside its round (the load thread's timing on a loaded host: a rise
    # of 3.5 % in bs 4's round, seen once in `make test`), not recorded at all.
    again = {e["bs"] for e in remeasured if e.get("replaced") or "rose" in e["reason"]}
    assert again >= {4, 8, 16}
    assert any("cannot fall as the batch grows" in e["reason"] for e in remeasured)


def test_a_cell_still_out_of_line_after_its_rechecks_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every round of bs 4 is capped: its rechecks never read faster beyond noise, and a
    # table with it would be non-monotone. The run fails (no table) and says which cell and
    # why; the manifest lists the rounds measured again.
    seen, _ = _capping_rounds(monkeypatch, lambda requests, _seen: requests == 4, 1.25)
    preset = quiet_h100(tmp_path / "quiet.json")
    out = tmp_path / "always-capped-sps.json"
    with running_sim(seed=3, time_scale=10.0, preset=preset) as url:
        assert profile(url, out, "--batch-size", "1", "2", "4", "8", "16") == 1
    assert "out of line with the others after measuring them again" in capsys.readouterr().err
    assert not out.exists()
    manifest = json.loads(OutPaths.for_out(out).manifest.read_text())
    assert manifest["status"] == "failed"
    rechecks = [e for e in manifest["remeasured"] if e["bs"] == 4 and "after_s" in e]
    assert 2 <= len(rechecks) <= 4
    # Not asserted: whether a recheck replaced the first round. Every round of bs 4 is capped
    # alike, so which of them reads faster is the host's noise (on a loaded CI host one
    # recheck did); what matters is that none brought the cell in line, so the run fails.
    assert seen.count(4) == 1 + len(rechecks)


def test_an_anchor_inside_a_cap_is_measured_again_as_the_anchor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 37's cause: on a GPU whose clocks ramp up, every round of the sweep is measured
    # on the ramp and the warm-up's cell is measured last, as the anchor that corrects them.
    # Rounds on the ramp and the anchor were left out of the check across rounds, so an
    # anchor inside a cap (here +15 %) went into the table as its cell (before: bs 1 +15 %).
    # Judged as the fit reads the rounds, it is slower than cells of more tokens: measured
    # again, as the anchor, and the faster round replaces it.
    def caps(requests: int, seen: list[int]) -> bool:
        # the first bs-1 round after the sweep's last cell (bs 16) started: the anchor
        return requests == 1 and 16 in seen and 1 not in seen[seen.index(16) :]

    _capping_rounds(monkeypatch, caps, 1.15)
    preset = quiet_h100(tmp_path / "ramp.json", warmup_amplitude=0.3, warmup_tau_s=5.0)
    out = tmp_path / "ramp-sps.json"
    with running_sim(seed=3, time_scale=2.0, preset=preset) as url:
        assert profile(url, out, "--batch-size", "1", "2", "4", "8", "16") == 0
    paths = OutPaths.for_out(out)
    rounds = read_jsonl(paths.rounds)
    assert sorted(r["batch_size_per_rank"] for r in rounds) == [1, 2, 4, 8, 16]
    (first,) = [r for r in rounds if r["batch_size_per_rank"] == 1]
    assert "clock_ramp" in first  # the run was on a ramp and bs 1 is its anchor
    assert first["median_step_time"] == pytest.approx(H100.decode_seconds(1, K), rel=0.05)
    table = load_sps_table_text(out.read_text())
    assert isinstance(table, SpsCostTable)
    for bs in (1, 2, 4, 8, 16):
        truth = H100.decode_seconds(bs, bs * K)
        assert 1 / table.lookup(bs * K) == pytest.approx(truth, rel=0.05)
    remeasured = json.loads(paths.manifest.read_text())["remeasured"]
    assert any(e["bs"] == 1 and e.get("replaced") for e in remeasured)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_short_ramp_that_is_over_ends_the_warm_up_early(tmp_path: Path, seed: int) -> None:
    # +30 % decaying over 0.5 s under 10 % noise: the ramp is over after ≈ 2 s, but it keeps
    # the first third of the series slow, and the thirds alone waited 3-5 warm-up rounds
    # (≈ 2.2 s each here) before calling the clocks settled. The model places the ramp at
    # the start (`clockramp.ramp_over_from`): the warm-up ends in its second or third round.
    preset = quiet_h100(
        tmp_path / "short-ramp.json", noise_cv=0.10, warmup_amplitude=0.3, warmup_tau_s=0.5
    )
    out = tmp_path / "short-ramp-sps.json"
    with running_sim(seed=seed, time_scale=10.0, preset=preset) as url:
        assert profile(url, out, "--batch-size", "1", "2") == 0
    rounds = read_jsonl(OutPaths.for_out(out).rounds)
    first = next(r for r in rounds if r["batch_size_per_rank"] == 1)
    # Its measured window ends within the third warm-up round (≈ 6.9 s on the run clock; a
    # fourth round ends at ≈ 9.2 s, the thirds alone at 11.4 s on both seeds).
    assert first["clock_s"][1] <= 8.0

"""Start-up configuration, the sglang command-line shim, `sps-sim truth`, cost presets."""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from sps_sim import costmodel
from sps_sim.costmodel import GPU_H100, GPU_H200, GPU_RTX_PRO_6000
from sps_sim.settings import ConfigError, build_settings
from sps_sim.truth import truth_grid
from sps_testbed.processes import free_port
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / "sim" / "sps_sim" / "sglang_shim"
PY = sys.executable
DSPARK = ["--speculative-algorithm", "DSPARK"]


def test_defaults_follow_the_real_server() -> None:
    s = build_settings(DSPARK, {})
    assert s.engine.gamma == 7 and s.engine.verify_num_draft_tokens == 8
    assert s.server_args["max_running_requests"] == 48
    assert s.engine.max_running_per_dp == 48
    assert s.engine.mode == "static"
    assert s.engine.components == frozenset()
    assert s.engine.simulate_acc_len is None
    assert s.server_args["cuda_graph_config"]["decode"]["max_bs"] == 256
    assert s.preset.name == GPU_H100
    assert s.time_scale == 1.0


def test_launch_server_flags_and_ignored_ones() -> None:
    argv = [
        *DSPARK,
        "--model-path", "m", "--tp", "4", "--dp-size", "4", "--enable-dp-attention",
        "--speculative-num-draft-tokens", "6", "--cuda-graph-max-bs", "192",
        "--max-running-requests", "1024", "--mem-fraction-static", "0.8", "--trust-remote-code",
    ]  # fmt: skip
    s = build_settings(argv, {"SGLANG_RAGGED_VERIFY_MODE": "compact"})
    assert s.engine.gamma == 5
    assert s.engine.max_running_per_dp == 256
    assert s.server_args["cuda_graph_config"]["decode"]["bs"][-1] == 192
    assert s.ignored_args == ["--mem-fraction-static", "0.8", "--trust-remote-code"]
    s2 = build_settings([*DSPARK, "--cuda-graph-bs-decode", "1", "2", "4", "16"], {})
    assert s2.server_args["cuda_graph_config"]["decode"]["bs"] == [1, 2, 4, 16]
    # ServerArgs has no cuda_graph_max_bs field: the deprecated flag sets the per-phase one,
    # reported as given; the resolved values live in cuda_graph_config.
    assert "cuda_graph_max_bs" not in s.server_args and "cuda_graph_bs" not in s.server_args
    assert s.server_args["cuda_graph_max_bs_decode"] == 192
    assert s2.server_args["cuda_graph_bs_decode"] == [1, 2, 4, 16]
    assert s2.server_args["cuda_graph_max_bs_decode"] is None


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (
            [*DSPARK, "--speculative-dspark-block-size", "7", "--speculative-num-draft-tokens=6"],
            {},
            "must equal",
        ),
        (DSPARK, {"SGLANG_RAGGED_VERIFY_MODE": "fast"}, "SGLANG_RAGGED_VERIFY_MODE"),
        (DSPARK, {"SGLANG_DSPARK_DEBUG_DUMP": "core,bogus"}, "bogus"),
        (DSPARK, {"SGLANG_SIMULATE_ACC_METHOD": "guess"}, "SGLANG_SIMULATE_ACC_METHOD"),
        (
            DSPARK,
            {"SGLANG_SIMULATE_ACC_LEN": "0.8", "SGLANG_RAGGED_VERIFY_MODE": "cap-accept"},
            "verify-all",
        ),
        ([*DSPARK, "--preset", "NVIDIA-A100"], {}, "unknown preset"),
        ([*DSPARK, "--time-scale", "0"], {}, "time-scale"),
        ([*DSPARK, "--port", "abc"], {}, "invalid int"),
        (DSPARK, {"SPS_SIM_VERIFY_ALL_BUG": "maybe"}, "SPS_SIM_VERIFY_ALL_BUG"),
    ],
)  # fmt: skip
def test_bad_startup_configuration(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_settings(argv, env)


def test_bad_table_fails_with_the_loader_message(tmp_path: Path) -> None:
    table = tmp_path / "t.json"
    table.write_text(
        '{"sample_batch_tokens":[8.0,16],"sample_steps_per_sec":[1,2],"max_batch_tokens":16}'
    )
    env = {"SGLANG_RAGGED_VERIFY_MODE": "compact"}
    with pytest.raises(ConfigError, match="Expected `int`, got `float`"):
        build_settings([*DSPARK, "--speculative-dspark-sps-table-path", str(table)], env)
    table.write_text(
        '{"sample_batch_tokens":[16,8],"sample_steps_per_sec":[1,2],"max_batch_tokens":16}'
    )
    with pytest.raises(ConfigError, match="strictly increasing"):
        build_settings([*DSPARK, "--speculative-dspark-sps-table-path", str(table)], env)
    with pytest.raises(ConfigError, match="No such file"):
        build_settings([*DSPARK, "--speculative-dspark-sps-table-path", str(tmp_path / "x")], env)
    # static mode has no planner: the table is not loaded (a warning, as on the real server)
    s = build_settings([*DSPARK, "--speculative-dspark-sps-table-path", str(table)], {})
    assert s.engine.table is None and s.warnings


def test_env_selects_preset_and_flags_win() -> None:
    assert build_settings(DSPARK, {"SPS_SIM_GPU_PRODUCT": GPU_H200}).preset.name == GPU_H200
    env = {"SPS_SIM_GPU_PRODUCT": GPU_H200, "SPS_SIM_PRESET": GPU_RTX_PRO_6000}
    assert build_settings(DSPARK, env).preset.name == GPU_RTX_PRO_6000
    assert build_settings([*DSPARK, "--preset", GPU_H100], env).preset.name == GPU_H100
    env2 = {"SPS_SIM_TIME_SCALE": "30", "SPS_SIM_SEED": "7", "SPS_SIM_VERIFY_ALL_BUG": "off"}
    s = build_settings(DSPARK, env2)
    assert (s.time_scale, s.seed, s.engine.verify_all_bug) == (30.0, 7, False)


def test_preset_from_file(tmp_path: Path) -> None:
    path = tmp_path / "slow.yaml"
    path.write_text("base: NVIDIA-H200\nbias_s: 0.05\nname: slow-gpu\n")
    preset = costmodel.load_preset(str(path))
    assert preset.name == "slow-gpu" and preset.bias_s == 0.05
    assert preset.per_token_s == costmodel.PRESETS[GPU_H200].per_token_s
    bad = tmp_path / "bad.json"
    bad.write_text('{"base": "NVIDIA-H200", "bias": 1}')
    with pytest.raises(ValueError, match="unknown preset field"):
        costmodel.load_preset(str(bad))
    bad.write_text('{"bias_s": 0.01}')
    with pytest.raises(ValueError, match="missing preset field"):
        costmodel.load_preset(str(bad))


def test_presets_differ_and_costs_grow() -> None:
    h100, h200, rtx = (costmodel.PRESETS[p] for p in (GPU_H100, GPU_H200, GPU_RTX_PRO_6000))
    for bs in (1, 16, 48):
        costs = sorted(p.decode_seconds(bs, bs * 8) for p in (h100, h200, rtx))
        assert costs[1] / costs[0] > 1.1 and costs[2] / costs[1] > 1.1
    assert h100.decode_seconds(16, 64) < h100.decode_seconds(16, 128) < h100.decode_seconds(32, 128)


def test_noise_median_is_one() -> None:
    noise = costmodel.NoiseSource(costmodel.PRESETS[GPU_H100], seed=3)
    samples = sorted(noise.factor(1e9) for _ in range(20001))
    assert abs(samples[10000] - 1) < 0.005
    assert samples[-1] > 1.4  # outliers exist


def test_truth_grid_and_cli(tmp_path: Path) -> None:
    preset = costmodel.PRESETS[GPU_H100]
    rows = truth_grid(
        preset, gamma=7, batch_sizes=[16], capture_bs=list(range(1, 17)), max_running_per_dp=48
    )
    by_m = {r["M"]: r for r in rows}
    assert min(by_m) == 16 and max(by_m) == 128
    assert by_m[44]["tier"] == 48 and by_m[128]["diagonal"]
    assert by_m[44]["seconds"] == pytest.approx(preset.decode_seconds(16, 48))
    out = tmp_path / "truth.csv"
    truth_cmd = [PY, "-m", "sps_sim", "truth", "--preset", GPU_H200, "--max-bs", "4"]
    subprocess.run([*truth_cmd, "--out", str(out)], check=True)
    with out.open() as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == sum(b * 7 + 1 for b in range(1, 5))
    jout = tmp_path / "truth.json"
    subprocess.run([PY, "-m", "sps_sim", "truth", "--out", str(jout), "--max-bs", "2"], check=True)
    assert json.loads(jout.read_text())["preset"] == GPU_H100


def _get_json(port: int, path: str) -> Any:
    """The server's answer at `path`, or None while it does not answer yet."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).json()
    except httpx.HTTPError:
        return None


def test_python_m_sglang_launch_server_starts_the_simulator() -> None:
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SHIM)
    env.update({"SGLANG_DSPARK_ENABLE_SPS_RECORD": "1", "SPS_SIM_TIME_SCALE": "100"})
    cmd = [PY, "-m", "sglang.launch_server", *DSPARK, "--port", str(port), "--trust-remote-code"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = wait_for(
            "the shim to start the simulator", lambda: _get_json(port, "/server_info"), 30, 0.1
        )
        assert info["port"] == port and info["speculative_algorithm"] == "DSPARK"
        assert info["internal_states"][0]["dspark_info_record"]["components"] == [
            "core",
            "step_cpu_time",
        ]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert err.count("ignoring flags it does not model: --trust-remote-code") == 1


def test_bad_start_exits_non_zero_with_message(tmp_path: Path) -> None:
    table = tmp_path / "t.json"
    table.write_text(
        '{"bias_seconds": 0, "bs_probes": [1], "alpha_seconds": [0],'
        ' "m_probes": [1], "theta_seconds": [0]}'
    )
    env = dict(os.environ, SGLANG_RAGGED_VERIFY_MODE="compact")
    cmd = [PY, "-m", "sps_sim", *DSPARK, "--speculative-dspark-sps-table-path", str(table)]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "bias_seconds must be > 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_node_gpu_product_gets_a_derived_preset() -> None:
    a = build_settings(DSPARK, {"SPS_SIM_GPU_PRODUCT": "NVIDIA-A100-SXM4-80GB"})
    b = build_settings(DSPARK, {"SPS_SIM_GPU_PRODUCT": "NVIDIA-L40S"})
    again = build_settings(DSPARK, {"SPS_SIM_GPU_PRODUCT": "NVIDIA-A100-SXM4-80GB"})
    assert a.preset.name == "NVIDIA-A100-SXM4-80GB" and a.warnings
    assert a.preset == again.preset
    assert a.preset.bias_s != b.preset.bias_s
    # an explicit unknown preset is still an error
    with pytest.raises(ConfigError, match="unknown preset"):
        build_settings(DSPARK, {"SPS_SIM_PRESET": "NVIDIA-L40S"})


def test_port_in_use_and_sigterm() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cmd = [PY, "-m", "sps_sim", *DSPARK, "--port", str(port)]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert f"cannot serve on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr

    port = free_port()
    proc = subprocess.Popen(
        [PY, "-m", "sps_sim", *DSPARK, "--port", str(port), "--served-model-name", "x"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        models = wait_for("the simulator to serve", lambda: _get_json(port, "/v1/models"), 15, 0.05)
        assert models["data"][0]["id"] == "x"
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    assert proc.returncode == 0

"""The SGLang version matrix the simulator plays (--sglang-flavor, docs/compatibility.md).

Per flavor: whether it starts or refuses (with the real build's message), what its loader
accepts, what /server_info says, and whether the profiler's budget pin is honoured. The
DSpark + LoRA rule applies to every flavor.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sim_contract_helpers import run_round, server_info

from sps_operator import dspark_arith
from sps_operator.tables.formats import (
    SpsAdditiveCostTable,
    SpsCostTable,
    SpsTableError,
    load_sps_table_text,
)
from sps_sim import capture_derived, flavors
from sps_sim.capture_derived import Probe
from sps_sim.costmodel import PRESETS, without_effects
from sps_sim.engine import Engine, EngineConfig
from sps_sim.settings import ConfigError, SimSettings, build_settings
from sps_sim.tableload import built_table
from sps_sim.testing import running_sim

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / "sim" / "sps_sim" / "sglang_shim"
DSPARK = ["--speculative-algorithm", "DSPARK"]
TABLE_FLAG = "--speculative-dspark-sps-table-path"
COMPACT = {"SGLANG_RAGGED_VERIFY_MODE": "compact"}
DIAGONAL = '{"sample_batch_tokens":[8,64],"sample_steps_per_sec":[90.0,60.0],"max_batch_tokens":64}'
ADDITIVE = (
    '{"bias_seconds":0.01,"bs_probes":[1,16],"alpha_seconds":[0.0,0.001],'
    '"m_probes":[16,128],"theta_seconds":[0.0,0.004]}'
)
MISSING_DIAGONAL_FIELD = "Object missing required field `sample_batch_tokens`"
# Large enough a request pool that the capture-derived verify curve clears the PR's
# dynamic-range gate on the H100 preset (48, SGLang's DSpark default, does not: below).
DERIVABLE = ["--max-running-requests", "128"]
SCALE = 400.0
K = 8
GAMMA = 7


def settings(argv: list[str], env: dict[str, str], flavor: str | None = None) -> SimSettings:
    full = dict(env)
    if flavor is not None:
        full[flavors.FLAVOR_ENV] = flavor
    return build_settings([*DSPARK, *argv], full)


def table_file(tmp_path: Path, text: str, name: str = "t.json") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ------------------------------------------------------------------ choosing the flavor


def test_flavor_defaults_to_upstream_and_comes_from_env_or_flag() -> None:
    assert build_settings(DSPARK, {}).sglang_flavor == flavors.UPSTREAM
    env = {flavors.FLAVOR_ENV: flavors.DIAGONAL_ONLY}
    assert build_settings(DSPARK, env).sglang_flavor == flavors.DIAGONAL_ONLY
    flag = ["--sglang-flavor", flavors.CAPTURE_DERIVED]
    assert build_settings([*DSPARK, *flag], env).sglang_flavor == flavors.CAPTURE_DERIVED
    with pytest.raises(ConfigError, match="SPS_SIM_SGLANG_FLAVOR='fork'"):
        build_settings(DSPARK, {flavors.FLAVOR_ENV: "fork"})
    with pytest.raises(ConfigError, match="invalid choice"):
        build_settings([*DSPARK, "--sglang-flavor", "fork"], {})


# ------------------------------------------------------------------ upstream (today's)


def test_upstream_starts_flat_and_loads_both_formats(tmp_path: Path) -> None:
    s = settings([], COMPACT)
    assert s.engine.table is None and s.engine.is_verify_all and s.engine.verify_all_bug
    assert s.table_info is None
    additive = settings([TABLE_FLAG, table_file(tmp_path, ADDITIVE)], COMPACT)
    assert additive.engine.table is not None and additive.engine.table.kind == "additive"
    # upstream has no sentinel: `const` is a file name like any other
    with pytest.raises(ConfigError, match="No such file"):
        settings([TABLE_FLAG, "const"], COMPACT)


# ------------------------------------------------------------------ require-path (the fork)


@pytest.mark.parametrize("mode", ["compact", "cap-accept"])
def test_require_path_refuses_a_ragged_server_without_a_table(mode: str) -> None:
    env = {"SGLANG_RAGGED_VERIFY_MODE": mode}
    with pytest.raises(ConfigError) as refused:
        settings([], env, flavors.REQUIRE_PATH)
    assert str(refused.value) == flavors.REQUIRE_PATH_MESSAGE
    with pytest.raises(ConfigError, match="was not supplied"):
        settings([TABLE_FLAG, ""], env, flavors.REQUIRE_PATH)


def test_require_path_static_needs_no_table() -> None:
    s = settings([], {}, flavors.REQUIRE_PATH)
    assert s.engine.mode == "static" and s.engine.table is None


@pytest.mark.parametrize("spelling", [[TABLE_FLAG, "const"], [f"{TABLE_FLAG}=const"]])
def test_require_path_const_is_the_flat_table(spelling: list[str]) -> None:
    s = settings([*spelling, "--max-running-requests", "32"], COMPACT, flavors.REQUIRE_PATH)
    table = s.engine.table
    assert table is not None and table.uninitialized and s.engine.is_verify_all
    assert table.table == SpsCostTable([1], [1.0], 32 * K)
    assert s.server_args["speculative_dspark_sps_table_path"] == "const"
    assert s.table_info is not None
    assert (s.table_info["source"], s.table_info["kind"]) == ("const", "diagonal")


def test_require_path_loader_is_diagonal_only(tmp_path: Path) -> None:
    loaded = settings([TABLE_FLAG, table_file(tmp_path, DIAGONAL)], COMPACT, flavors.REQUIRE_PATH)
    assert loaded.engine.table is not None and loaded.engine.table.kind == "diagonal"
    with pytest.raises(ConfigError, match=MISSING_DIAGONAL_FIELD):
        settings([TABLE_FLAG, table_file(tmp_path, ADDITIVE)], COMPACT, flavors.REQUIRE_PATH)


# ------------------------------------------------------------------ diagonal-only


def test_diagonal_only_starts_flat_and_refuses_an_additive_table(tmp_path: Path) -> None:
    flat = settings([], COMPACT, flavors.DIAGONAL_ONLY)
    assert flat.engine.table is None and flat.engine.is_verify_all
    loaded = settings([TABLE_FLAG, table_file(tmp_path, DIAGONAL)], COMPACT, flavors.DIAGONAL_ONLY)
    assert loaded.table_info is not None and loaded.table_info["kind"] == "diagonal"
    path = table_file(tmp_path, ADDITIVE)
    with pytest.raises(ConfigError) as refused:
        settings([TABLE_FLAG, path], COMPACT, flavors.DIAGONAL_ONLY)
    assert str(refused.value) == f"failed to load SPS table {path}: {MISSING_DIAGONAL_FIELD}"
    # static mode never loads a table, so no flavor can fail on one there
    assert settings([TABLE_FLAG, path], {}, flavors.DIAGONAL_ONLY).engine.table is None


def test_diagonal_only_loader_rules() -> None:
    assert isinstance(load_sps_table_text(ADDITIVE), SpsAdditiveCostTable)
    with pytest.raises(SpsTableError, match=MISSING_DIAGONAL_FIELD):
        load_sps_table_text(ADDITIVE, diagonal_only=True)
    # a diagonal text that merely mentions bias_seconds is still a diagonal table there
    mentions = DIAGONAL[:-1] + ',"bias_seconds":1}'
    with pytest.raises(SpsTableError):
        load_sps_table_text(mentions)
    assert isinstance(load_sps_table_text(mentions, diagonal_only=True), SpsCostTable)


# ------------------------------------------------------------------ capture-derived (PR #35413)


def derived_env(**extra: str) -> dict[str, str]:
    return {**COMPACT, flavors.CAPTURE_DERIVED_ENV: "1", **extra}


def test_capture_derived_installs_an_additive_table_and_reports_no_path() -> None:
    s = settings(DERIVABLE, derived_env(), flavors.CAPTURE_DERIVED)
    table = s.engine.table
    assert table is not None and table.kind == "additive" and not s.engine.is_verify_all
    assert s.server_args["speculative_dspark_sps_table_path"] is None
    assert s.capture_derived_status == "installed"
    assert s.engine.min_predicted_gain == capture_derived.MIN_PREDICTED_GAIN
    assert s.table_info is not None and s.table_info["source"] == "capture-derived"
    assert s.table_info["path"] is None and s.table_info["sha256"] == table.sha256
    derived = table.table
    assert isinstance(derived, SpsAdditiveCostTable)
    assert s.table_info["table"] == derived.to_dict()
    assert derived.bias_seconds == capture_derived.DERIVED_BIAS_SECONDS
    runner = dspark_arith.runner_capture_bs(s.server_args["cuda_graph_config"]["decode"]["bs"], 128)
    assert derived.m_probes[-1] == dspark_arith.compact_tiers(runner, K)[-1]
    assert list(derived.theta_seconds) == sorted(derived.theta_seconds)
    assert any(n.startswith("DSpark SPS table derived from") for n in s.notices)


def test_capture_derived_table_is_cheaper_than_the_truth_but_close() -> None:
    """It misses the KV reads of real contexts: below the truth, within 20 % on H100."""
    s = settings([*DERIVABLE, "--seed", "5"], derived_env(), flavors.CAPTURE_DERIVED)
    assert s.engine.table is not None
    derived = s.engine.table.table
    assert isinstance(derived, SpsAdditiveCostTable)
    truth = without_effects(PRESETS["NVIDIA-H100-80GB-HBM3"])
    for bs in (32, 64, 96):
        diagonal = truth.decode_seconds(bs, bs * K)
        ratio = derived.step_seconds_at(bs, bs * K) / diagonal
        assert 0.8 < ratio < 1.0, (bs, ratio)


@pytest.mark.parametrize(
    ("flavor", "argv", "env", "status"),
    [
        (flavors.UPSTREAM, DERIVABLE, derived_env(), None),  # upstream main ignores the switch
        (flavors.CAPTURE_DERIVED, DERIVABLE, COMPACT, None),  # switch off
        (flavors.CAPTURE_DERIVED, DERIVABLE, {flavors.CAPTURE_DERIVED_ENV: "1"}, None),  # static
        (flavors.CAPTURE_DERIVED, DERIVABLE, derived_env(SGLANG_SIMULATE_ACC_LEN="2.0"), None),
        (flavors.CAPTURE_DERIVED, [*DERIVABLE, "--disable-cuda-graph"], derived_env(), "skipped"),
        (flavors.CAPTURE_DERIVED, [], derived_env(), "refused"),  # too flat a curve at pool 48
    ],
)
def test_capture_derived_only_when_the_pr_would(
    flavor: str, argv: list[str], env: dict[str, str], status: str | None
) -> None:
    s = settings(argv, env, flavor)
    assert s.capture_derived_status == status
    assert s.engine.table is None
    if status == "refused":
        assert any("could not be derived" in w for w in s.warnings)


def test_capture_derived_replaces_a_flat_table_but_never_a_profiled_one(tmp_path: Path) -> None:
    flat = '{"sample_batch_tokens":[1],"sample_steps_per_sec":[1.0],"max_batch_tokens":9}'
    over_flat = settings(
        [*DERIVABLE, TABLE_FLAG, table_file(tmp_path, flat)], derived_env(), flavors.CAPTURE_DERIVED
    )
    assert over_flat.capture_derived_status == "installed"
    assert over_flat.table_info is not None and over_flat.table_info["source"] == "capture-derived"
    path = table_file(tmp_path, DIAGONAL, "profiled.json")
    profiled = settings([*DERIVABLE, TABLE_FLAG, path], derived_env(), flavors.CAPTURE_DERIVED)
    assert profiled.capture_derived_status is None
    assert profiled.table_info is not None and profiled.table_info["source"] == "path"


def test_capture_derived_is_deterministic_per_seed() -> None:
    def derived(seed: str) -> object:
        s = settings([*DERIVABLE, "--seed", seed], derived_env(), flavors.CAPTURE_DERIVED)
        assert s.engine.table is not None
        return s.engine.table.table

    assert derived("3") == derived("3")
    assert derived("3") != derived("4")


def test_capture_derived_gates() -> None:
    one = [Probe(8, 0.010, 0.0)]
    assert capture_derived.build_capture_derived_table(one, []) is None
    flat = [Probe(8, 0.010, 0.0), Probe(64, 0.014, 0.0)]  # range 1.4 < 1.5
    assert capture_derived.build_capture_derived_table(flat, []) is None
    steep = [Probe(8, 0.010, 0.0), Probe(64, 0.020, 0.0), Probe(0, 9.0, 0.0)]
    table = capture_derived.build_capture_derived_table(steep, [Probe(4, 0.0, 0.0)])
    assert table is not None
    assert (table.m_probes, table.theta_seconds) == ((8, 64), (0.010, 0.020))
    assert (table.bs_probes, table.alpha_seconds) == ((1,), (0.0,))  # unmeasured draft ladder


def test_pooling_within_the_spread_and_never_falling() -> None:
    assert capture_derived.pool_within_resolution([1.0, 1.1, 3.0], [0.2, 0.2, 0.2]) == [
        pytest.approx(1.05),
        pytest.approx(1.05),
        3.0,
    ]
    assert capture_derived.pool_within_resolution([1.0, 2.0], [0.0, 0.0]) == [1.0, 2.0]
    assert capture_derived.monotone_non_decreasing([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]


@given(st.lists(st.floats(min_value=1e-6, max_value=1.0), min_size=1, max_size=60))
def test_pooled_adjacent_violators_never_fall_and_keep_the_mean(values: list[float]) -> None:
    out = capture_derived.monotone_non_decreasing(values)
    assert len(out) == len(values)
    assert all(a <= b * (1 + 1e-12) for a, b in itertools.pairwise(out))
    assert sum(out) == pytest.approx(sum(values))


@given(st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=200))
def test_subsample_keeps_the_widest_within_the_cap(shapes: list[int]) -> None:
    picked = capture_derived.subsample(shapes)
    assert picked == sorted(set(picked)) and set(picked) <= set(shapes)
    assert max(picked) == max(shapes)
    assert len(picked) == min(len(set(shapes)), capture_derived.MAX_PROBES)


def _budget_without_pin(table: SpsAdditiveCostTable, min_gain: float) -> int:
    preset = without_effects(PRESETS["NVIDIA-H100-80GB-HBM3"])
    cfg = EngineConfig(
        mode="compact",
        capture_bs=tuple(range(1, 9)),
        components=frozenset({"core", "step_cpu_time"}),
        simulate_acc_len=1.0,
        table=built_table(table),
    )
    engine = Engine(replace(cfg, min_predicted_gain=min_gain), preset)
    engine.submit([(None, 16, 5)] * 4, 0.0)
    while (t := engine.next_event_time()) is not None:
        engine.advance(t)
    budgets = {r["budget"] for r in engine.records(0) if "budget" in r}
    assert len(budgets) == 1
    return budgets.pop()


def test_min_predicted_gain_keeps_verify_all_for_a_small_win() -> None:
    bs = 4
    small_win = SpsAdditiveCostTable(0.01, [1], [0.0], [1, 64], [0.0, 0.0002 * 63])  # ≈1.4 %
    big_win = SpsAdditiveCostTable(0.01, [1], [0.0], [1, 64], [0.0, 0.0005 * 63])  # ≈11 %
    assert _budget_without_pin(small_win, 0.0) < bs * GAMMA
    assert _budget_without_pin(small_win, 0.05) == bs * GAMMA
    assert _budget_without_pin(big_win, 0.05) < bs * GAMMA


# ------------------------------------------------------------------ DSpark + LoRA


@pytest.mark.parametrize("flavor", flavors.FLAVORS)
@pytest.mark.parametrize(
    ("lora", "mode"),
    [(["--enable-lora"], "compact"), (["--lora-paths", "a=/adapters/a"], "cap-accept")],
)
def test_lora_outside_static_mode_is_refused(flavor: str, lora: list[str], mode: str) -> None:
    env = {"SGLANG_RAGGED_VERIFY_MODE": mode}
    with pytest.raises(ConfigError) as refused:
        settings([*lora, TABLE_FLAG, "const"], env, flavor)
    assert str(refused.value) == (
        "LoRA with EAGLE/NEXTN/EAGLE3 speculative decoding does not support "
        f"SGLANG_RAGGED_VERIFY_MODE='{mode}': the per-request verify lengths it schedules "
        "break the uniform-width LoRA segment layout."
    )


def test_lora_in_static_mode_or_without_dspark_starts() -> None:
    s = settings(["--lora-paths", "a=/adapters/a"], {})
    assert s.server_args["enable_lora"] is True
    assert s.server_args["lora_paths"] == ["a=/adapters/a"]
    plain = build_settings(["--enable-lora"], COMPACT)
    assert plain.server_args["enable_lora"] is True and not plain.engine.dspark


# ------------------------------------------------------------------ over HTTP


def test_require_path_const_server_reports_const_and_keeps_the_shortcut() -> None:
    env = {**COMPACT, flavors.FLAVOR_ENV: flavors.REQUIRE_PATH}
    with running_sim([TABLE_FLAG, "const"], env=env, time_scale=SCALE) as url:
        info = server_info(url)
        bs = 16
        rnd = run_round(url, bs_per_rank=bs, frac=0.25)
    assert info["speculative_dspark_sps_table_path"] == "const"
    assert info["sps_table"]["source"] == "const" and info["sps_table"]["uninitialized"]
    assert info["sps_sim"]["sglang_flavor"] == flavors.REQUIRE_PATH
    assert info["sps_sim"]["verify_all_shortcut_active"] is True
    rows = rnd.aligned(bs)[0]
    assert rows and {r["num_verify_tokens"] for r in rows} == {bs * K}
    assert {r["verify_tokens_local"] for r in rows} == {bs + int(0.25 * bs * GAMMA)}


def test_capture_derived_server_honours_the_pin_and_reports_no_path() -> None:
    env = {**derived_env(), flavors.FLAVOR_ENV: flavors.CAPTURE_DERIVED}
    with running_sim(DERIVABLE, env=env, time_scale=SCALE) as url:
        info = server_info(url)
        bs = 16
        unpinned = run_round(url, bs_per_rank=bs)
        pinned = run_round(url, bs_per_rank=bs, frac=0.25)
    assert info["speculative_dspark_sps_table_path"] is None
    assert info["sps_table"]["source"] == "capture-derived"
    assert info["sps_table"]["kind"] == "additive" and info["sps_table"]["path"] is None
    assert info["sps_sim"]["capture_derived_sps"] == "installed"
    assert info["sps_sim"]["verify_all_shortcut_active"] is False
    # without a pin the derived table drives the budget (predictions recorded)
    assert all("predicted_step_ms" in r for r in unpinned.aligned(bs)[0])
    rows = pinned.aligned(bs)[0]
    budget = int(0.25 * (bs * GAMMA))
    m = min(bs + budget, bs * K)
    state = info["internal_states"][0]
    runner = dspark_arith.runner_capture_bs(state["cuda_graph_config"]["decode"]["bs"], 128)
    tier = dspark_arith.round_up(dspark_arith.compact_tiers(runner, K), m)
    assert rows and {r["num_verify_tokens"] for r in rows} == {tier}
    assert tier is not None and tier < bs * K


def _launch(env: dict[str, str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, PYTHONPATH=str(SHIM), **env)
    cmd = [sys.executable, "-m", "sglang.launch_server", *DSPARK, "--port", "0", *argv]
    return subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=60)


def test_the_stand_in_image_command_refuses_like_the_fork() -> None:
    env = {**COMPACT, flavors.FLAVOR_ENV: flavors.REQUIRE_PATH}
    result = _launch(env, [])
    assert result.returncode == 2
    assert flavors.REQUIRE_PATH_MESSAGE in result.stderr
    assert "Traceback" not in result.stderr
    lora = _launch({**COMPACT}, ["--enable-lora"])
    assert lora.returncode == 2 and "does not support SGLANG_RAGGED_VERIFY_MODE" in lora.stderr

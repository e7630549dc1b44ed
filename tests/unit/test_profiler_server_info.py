"""Server-context validation from /server_info dicts, the sweep and its pre-flight checks."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from sps_operator.dspark_arith import default_decode_capture_bs
from sps_operator.profiler.runner import preflight_cell
from sps_operator.profiler.server_info import (
    ServerCheckError,
    resolve_capture_bs,
    server_context_from_info,
    validate_sweep,
)
from sps_operator.profiler.sweep import (
    RoundSettings,
    build_cells,
    build_request_count_sweep,
    round_max_new_tokens,
    validate_fracs,
)


def info(mode: str = "static", dp: int = 1, **top: Any) -> dict[str, Any]:
    payload = {
        "mode": mode,
        "gamma": 7,
        "verify_num_draft_tokens": 8,
        "components": ["core", "step_cpu_time"],
        "records": [],
        "simulate_acc_len": 1.0,
    }
    state = {
        "dp_size": dp,
        "cuda_graph_config": {
            "decode": {"backend": "full", "max_bs": 64, "bs": [1, 2, 4, 8, 16, 32, 64]}
        },
        "effective_max_running_requests_per_dp": 48,
        "memory_usage": {"token_capacity": 100_000},
        "dspark_info_record": payload,
    }
    data: dict[str, Any] = {
        "speculative_algorithm": "DSPARK",
        "disable_cuda_graph": False,
        "tp_size": 2,
        "dp_size": dp,
        "model_path": "m",
        "tokenizer_path": "/nonexistent/tok",
        "internal_states": [copy.deepcopy(state) for _ in range(dp)],
    }
    data.update(top)
    return data


def ctx(data: dict[str, Any], offdiagonal: bool = False):
    return server_context_from_info(data, base_url="http://x", offdiagonal=offdiagonal)


def test_context_from_a_good_server() -> None:
    c = ctx(info(dp=2))
    assert (c.tp_size, c.dp_size, c.gamma, c.verify_num_draft_tokens) == (2, 2, 7, 8)
    assert c.capture_bs == (1, 2, 4, 8, 16, 32, 64)
    assert c.max_running_per_dp == 48
    assert c.token_capacity == 200_000
    # pool 48 < 64: the runner adds 48 and drops 64 (§4.1).
    assert c.tiers == [8, 16, 32, 64, 128, 256, 384]
    assert len(c.fingerprint) == 16
    other = ctx(info(dp=2, model_path="other"))
    assert other.fingerprint != c.fingerprint


def _mutate(path: str, value: Any) -> dict[str, Any]:
    data = info()
    target: Any = data
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if key.isdigit() else target[key]
    target[keys[-1]] = value
    return data


@pytest.mark.parametrize(
    ("data", "offdiagonal", "message"),
    [
        (["not", "a", "dict"], False, "did not return a JSON object"),
        (info(speculative_algorithm="EAGLE"), False, "speculative_algorithm='EAGLE'"),
        (info(disable_cuda_graph=True), False, "--disable-cuda-graph"),
        (info(internal_states=[]), False, "no internal_states"),
        (
            _mutate("internal_states.0.cuda_graph_config.decode.backend", "disabled"),
            False,
            "backend is 'disabled'",
        ),
        (_mutate("internal_states.0.dspark_info_record", None), False, "SPS_RECORD=1"),
        (info(mode="compact"), False, "SGLANG_RAGGED_VERIFY_MODE=static"),
        (info(mode="static"), True, "SGLANG_RAGGED_VERIFY_MODE=compact"),
        (info(mode="cap-accept"), True, "cap-accept, whose forward is full width"),
        (
            _mutate("internal_states.0.dspark_info_record.components", ["core"]),
            False,
            r"missing component\(s\) \['step_cpu_time'\]",
        ),
        (
            _mutate("internal_states.0.dspark_info_record.simulate_acc_len", None),
            False,
            "simulate_acc_len=None",
        ),
        (
            _mutate("internal_states.0.dspark_info_record.simulate_acc_len", 2.0),
            False,
            "SGLANG_SIMULATE_ACC_LEN=1.0",
        ),
        (_mutate("internal_states.0.dp_size", 2), False, "dp_size=2 but 1 internal_states"),
    ],
)
def test_bad_servers_are_refused(data: Any, offdiagonal: bool, message: str) -> None:
    with pytest.raises(ServerCheckError, match=message):
        ctx(data, offdiagonal)


def test_ranks_must_agree_on_k() -> None:
    data = info(dp=2)
    data["internal_states"][1]["dspark_info_record"]["verify_num_draft_tokens"] = 6
    with pytest.raises(ServerCheckError, match="disagree on verify_num_draft_tokens"):
        ctx(data)


def test_sweep_checked_before_load() -> None:
    c = ctx(info())
    s = RoundSettings()
    assert validate_sweep(c, [1, 2, 4], input_len=16, max_new_tokens=round_max_new_tokens(s)) == []
    with pytest.raises(ServerCheckError, match="only up to bs=64"):
        validate_sweep(c, [1, 128], input_len=16, max_new_tokens=100)
    with pytest.raises(ServerCheckError, match="at most 48 per rank"):
        validate_sweep(c, [1, 64], input_len=16, max_new_tokens=100)
    with pytest.raises(ServerCheckError, match="KV tokens"):
        validate_sweep(c, [48], input_len=4000, max_new_tokens=100)
    warnings = validate_sweep(c, [3], input_len=16, max_new_tokens=100)
    assert warnings and "[3]" in warnings[0]
    no_graphs = ctx(_mutate("internal_states.0.cuda_graph_config", None))
    with pytest.raises(ServerCheckError, match="capture list"):
        validate_sweep(no_graphs, [1], input_len=16, max_new_tokens=100)


def test_capture_list_resolution() -> None:
    assert resolve_capture_bs(
        {"cuda_graph_config": {"decode": {"bs": [1, 2, 160], "max_bs": 128}}}
    ) == [
        1,
        2,
        160,
    ]
    assert resolve_capture_bs({"cuda_graph_config": {"decode": {"max_bs": 12}}}) == [
        *range(1, 9),
        10,
        12,
    ]
    assert resolve_capture_bs({}) == []
    default = default_decode_capture_bs(256)
    assert default[:9] == [1, 2, 3, 4, 5, 6, 7, 8, 10] and default[-1] == 256 and 72 in default


def test_preflight_probe_picks_smallest_bs_that_must_shrink() -> None:
    c = ctx(info(mode="compact"), offdiagonal=True)
    # bs=1: tier 8 either way; bs=2 at frac 0.25: M=2+3=5 → 8 < 16.
    cell = preflight_cell(c, [1, 2, 4], [0.5, 0.25])
    assert cell is not None and (cell.bs, cell.frac) == (2, 0.25)
    assert preflight_cell(c, [1], [0.25]) is None


def test_reference_sweep_and_cells() -> None:
    assert build_request_count_sweep(48) == [1, 2, 4, 8, 16, 24, 32, 40, 48]
    assert len(build_request_count_sweep(256)) == 19
    assert build_request_count_sweep(3) == [1, 2, 3]
    with pytest.raises(ValueError, match=">= 1"):
        build_request_count_sweep(0)
    cells = build_cells([1, 2], [0.5, 1.0], repeats=2)
    assert [c.key for c in cells[:3]] == [(0, 1, 0.5), (0, 1, 1.0), (0, 2, 0.5)]
    assert len(cells) == 8
    assert [c.frac for c in build_cells([4], None, 1)] == [None]


def test_fracs_and_settings_validation() -> None:
    assert validate_fracs([1.0, 0.25, 0.25]) == [0.25, 1.0]
    for bad in ([0.0], [1.5], [-0.1]):
        with pytest.raises(ValueError, match=r"\(0, 1\]"):
            validate_fracs(bad)
    with pytest.raises(ValueError, match="ci-rel-width"):
        RoundSettings(ci_rel_width=0)
    # Reference floors only count when given.
    assert RoundSettings().min_steps == 48
    assert RoundSettings(min_steady_steps=64).min_steps == 64
    assert RoundSettings(min_steady_seconds=10.0).step_budget == 500
    assert RoundSettings(min_steady_seconds=2.0).step_budget == 240
    # Warm-up, the untimed first steps, the budget and a small slack: no 64-step tail.
    assert round_max_new_tokens(RoundSettings(max_steady_steps=100)) == 8 + 2 + 100 + 4
    # Prompts centre a typical round on the context the table describes.
    assert RoundSettings().prompt_len == 300 - (8 + 2 + 48)
    assert RoundSettings(input_len=16).prompt_len == 16
    for bad in ({"context_len": 0}, {"max_steady_steps": 0}, {"input_len": 0}):
        with pytest.raises(ValueError, match="must be >= 1"):
            RoundSettings(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="--max-effective-steps must be > 0"):
        RoundSettings(max_effective_steps=0.0)


def test_the_effective_steps_cap_reaches_every_measuring_round_and_0_turns_it_off() -> None:
    from sps_operator.profiler.cli import _settings, build_parser
    from sps_operator.profiler.round_plans import round_plan

    def plan_for(*flags: str) -> float:
        args = build_parser().parse_args(["run", "--base-url", "http://x", *flags])
        return round_plan(_settings(args)).effective_budget

    assert plan_for() == 110.0
    assert plan_for("--max-effective-steps", "150") == 150.0
    assert plan_for("--max-effective-steps", "0") == math.inf


def test_vocab_size_resolution(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from sps_operator.profiler.runner import (
        FALLBACK_VOCAB_SIZE,
        ProfilerError,
        RunConfig,
        resolve_vocab_size,
    )

    def cfg(**kw: Any) -> RunConfig:
        return RunConfig(
            base_url="http://x",
            batch_sizes=[1],
            fracs=None,
            settings=RoundSettings(),
            out="o",
            **kw,
        )

    c = ctx(info())
    assert resolve_vocab_size(cfg(vocab_size=50000), c) == 50000
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text(
        json.dumps(
            {"model": {"vocab": {f"t{i}": i for i in range(5000)}}, "added_tokens": [{}, {}]}
        )
    )
    assert resolve_vocab_size(cfg(local_tokenizer_path=str(tok)), c) == 5002
    (tok / "config.json").write_text('{"vocab_size": 151936}')
    assert resolve_vocab_size(cfg(local_tokenizer_path=str(tok)), c) == 151936
    assert resolve_vocab_size(cfg(), ctx(info(vocab_size=129280))) == 129280
    with caplog.at_level("WARNING"):
        assert resolve_vocab_size(cfg(), c) == FALLBACK_VOCAB_SIZE
    assert "Pass --vocab-size" in caplog.text
    with pytest.raises(ProfilerError, match="too small"):
        resolve_vocab_size(cfg(vocab_size=1500), c)

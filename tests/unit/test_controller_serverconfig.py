"""Fingerprint of what the cost depends on, parsed from the server container."""

from __future__ import annotations

from typing import Any

from sps_operator.controller.serverconfig import (
    find_server_container,
    server_config,
    table_fingerprint,
)

BASE_ARGS = [
    "--model-path", "deepseek/v4", "--tp", "2", "--speculative-algorithm", "DSPARK",
    "--speculative-dspark-block-size", "7", "--cuda-graph-max-bs", "64",
    "--max-running-requests", "48", "--port", "30001", "--host", "0.0.0.0",
]  # fmt: skip


def container(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "sglang",
        "image": "lmsysorg/sglang:v0.5.16",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": list(BASE_ARGS),
        "env": [{"name": "SGLANG_RAGGED_VERIFY_MODE", "value": "compact"}],
    }
    base.update(overrides)
    return base


def fp(c: dict[str, Any]) -> str:
    return server_config(c).fingerprint()


def test_parses_port_flags_and_table_path() -> None:
    cfg = server_config(
        container(args=[*BASE_ARGS, "--speculative-dspark-sps-table-path=/etc/t.json"])
    )
    assert cfg.port == 30001
    assert cfg.table_path == "/etc/t.json"
    assert cfg.flags["tp"] == "2"
    assert cfg.flags["draft_width"] == "7"
    assert cfg.flags["cuda_graph_max_bs"] == "64"
    assert cfg.flags["max_running_requests"] == "48"
    assert cfg.env == {"SGLANG_RAGGED_VERIFY_MODE": "compact"}


def test_cost_inputs_change_the_fingerprint() -> None:
    base = fp(container())
    assert fp(container(image="lmsysorg/sglang:v0.5.17")) != base
    for flag, value in [
        ("--tp", "4"),
        ("--speculative-dspark-block-size", "5"),
        ("--cuda-graph-max-bs", "128"),
        ("--max-running-requests", "64"),
        ("--model-path", "other/model"),
    ]:
        args = list(BASE_ARGS)
        args[args.index(flag) + 1] = value
        assert fp(container(args=args)) != base, flag
    assert fp(container(args=[*BASE_ARGS, "--enable-dp-attention"])) != base
    assert fp(container(env=[{"name": "SGLANG_RAGGED_VERIFY_MODE", "value": "static"}])) != base


def test_what_the_operator_injects_or_irrelevant_flags_do_not() -> None:
    base = fp(container())
    injected = [*BASE_ARGS, "--speculative-dspark-sps-table-path", "/etc/sps/table/table.json"]
    assert fp(container(args=injected)) == base
    args = list(BASE_ARGS)
    args[args.index("--port") + 1] = "8000"
    assert fp(container(args=[*args, "--log-level", "debug"])) == base
    assert fp(container(env=[*container()["env"], {"name": "HF_HOME", "value": "/x"}])) == base


def test_flag_aliases_and_equals_form_agree() -> None:
    args = list(BASE_ARGS)
    i = args.index("--tp")
    args[i : i + 2] = ["--tp-size=2"]
    assert fp(container(args=args)) == fp(container())


def test_table_spec_is_part_of_the_table_key() -> None:
    cfg = server_config(container())
    a = table_fingerprint(cfg, {"kind": "Diagonal", "sweep": {"batchSizes": [1, 2]}})
    b = table_fingerprint(cfg, {"kind": "Additive", "sweep": {"batchSizes": [1, 2]}})
    c = table_fingerprint(cfg, {"kind": "Diagonal", "sweep": {"batchSizes": [1, 2, 4]}})
    assert len({a, b, c}) == 3
    assert a == table_fingerprint(cfg, {"sweep": {"batchSizes": [1, 2]}, "kind": "Diagonal"})


def test_server_container_by_name_or_first() -> None:
    pod = {"containers": [{"name": "proxy"}, {"name": "sglang"}]}
    assert find_server_container(pod, "sglang") == {"name": "sglang"}
    assert find_server_container(pod, None) == {"name": "proxy"}
    assert find_server_container(pod, "missing") is None

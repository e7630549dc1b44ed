"""Fingerprint of what the cost depends on, parsed from the server container."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sps_operator.api.reasons import (
    NOT_A_DSPARK_SERVER,
    NOT_AN_SGLANG_SERVER,
    UNREADABLE_SHELL_SCRIPT,
)
from sps_operator.controller.sglang.serverconfig import (
    ServerConfig,
    ServerProblem,
    find_server_container,
    parse_server,
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


def config(c: dict[str, Any]) -> ServerConfig:
    return server_config(c, parse_server(c))


def fp(c: dict[str, Any]) -> str:
    return config(c).fingerprint()


def test_parses_port_flags_and_table_path() -> None:
    cfg = config(container(args=[*BASE_ARGS, "--speculative-dspark-sps-table-path=/etc/t.json"]))
    assert cfg.port == 30001
    assert cfg.table_path == "/etc/t.json"
    assert cfg.inputs["tp_size"] == "2"
    assert cfg.inputs["speculative_dspark_block_size"] == "7"
    assert cfg.inputs["cuda_graph_max_bs_decode"] == "64"
    assert cfg.inputs["max_running_requests"] == "48"
    assert cfg.inputs["SGLANG_RAGGED_VERIFY_MODE"] == "compact"


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
    cfg = config(container())
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


# --------------------------------------------------------------------------- recognition


def test_the_launcher_may_be_in_command_or_args_or_be_sglang_serve() -> None:
    in_args = container(command=None, args=["python3", "-m", "sglang.launch_server", *BASE_ARGS])
    assert fp(in_args) == fp(container())
    serve = parse_server(container(command=["sglang", "serve"]))
    assert serve.launcher == ("sglang", "serve") and not serve.shell
    unbuffered = parse_server(container(command=["/usr/bin/python3.11", "-u", "-X", "dev", "-m",
                                                 "sglang.launch_server"]))  # fmt: skip
    assert unbuffered.args == tuple(BASE_ARGS)


@pytest.mark.parametrize(
    ("command", "args", "reason"),
    [
        (["python3", "-m", "vllm.entrypoints.openai.api_server"], BASE_ARGS, NOT_AN_SGLANG_SERVER),
        (None, BASE_ARGS, NOT_AN_SGLANG_SERVER),  # the image's entrypoint: nothing to recognise
        (["python3", "-m", "sglang.launch_server"], ["--model-path", "m"], NOT_A_DSPARK_SERVER),
        (
            ["python3", "-m", "sglang.launch_server"],
            [a if a != "DSPARK" else "EAGLE" for a in BASE_ARGS],
            NOT_A_DSPARK_SERVER,
        ),
        (["sh", "-c", "python3 -m sglang.launch_server $FLAGS"], None, UNREADABLE_SHELL_SCRIPT),
        (["bash", "-c", "cd /m; python3 -m sglang.launch_server"], None, UNREADABLE_SHELL_SCRIPT),
        (["sh", "-c", "python3 -m sglang.launch_server | tee log"], None, UNREADABLE_SHELL_SCRIPT),
        (["sh", "-c", "python3 -m sglang.launch_server `cat f`"], None, UNREADABLE_SHELL_SCRIPT),
        (
            ["sh", "-c", 'python3 -m sglang.launch_server --model "$M"'],
            None,
            UNREADABLE_SHELL_SCRIPT,
        ),
        (["sh", "-c", "python3 -m sglang.launch_server\necho done"], None, UNREADABLE_SHELL_SCRIPT),
        (["sh", "-c", "python3 -m sglang.launch_server > /log"], None, UNREADABLE_SHELL_SCRIPT),
        (["sh"], None, UNREADABLE_SHELL_SCRIPT),
    ],
)
def test_what_is_not_a_recognisable_dspark_server_is_refused_with_a_reason(
    command: list[str] | None, args: list[str] | None, reason: str
) -> None:
    with pytest.raises(ServerProblem) as info:
        parse_server(container(command=command, args=args))
    assert info.value.reason == reason and str(info.value)


def test_a_plain_shell_script_is_read_like_the_exec_form() -> None:
    script = (
        "SGLANG_RAGGED_VERIFY_MODE=static exec python3 -m sglang.launch_server "
        + " ".join(BASE_ARGS)
        + ' --cuda-graph-config \'{"decode": {"bs": [1, 2]}}\' \\\n --log-level info\n'
    )
    parsed = parse_server(container(command=["/bin/sh", "-ec", script], args=None))
    assert parsed.shell and parsed.launcher == ("python3", "-m", "sglang.launch_server")
    assert parsed.env == {"SGLANG_RAGGED_VERIFY_MODE": "static"}
    cfg = server_config(container(command=["/bin/sh", "-ec", script], args=None), parsed)
    assert cfg.inputs["cuda_graph_config"] == '{"decode": {"bs": [1, 2]}}'
    # The env assignment in the script is a cost input, like the container's env (static
    # is SGLang's default: the same server as without it).
    assert cfg.value("SGLANG_RAGGED_VERIFY_MODE") == "static"
    assert "SGLANG_RAGGED_VERIFY_MODE" not in cfg.inputs
    assert cfg.inputs["tp_size"] == "2"


def test_kubernetes_variable_references_are_expanded_like_the_kubelet() -> None:
    env = [{"name": "MODEL", "value": "org/m"}, {"name": "SECRET", "valueFrom": {}}]
    parsed = parse_server(container(args=["--model-path", "$(MODEL)", "--x", "$$(MODEL)",
                                          "--y", "$(SECRET)", "--speculative-algorithm",
                                          "DSPARK"], env=env))  # fmt: skip
    # What the server gets; and, for the clone, the same in the kubelet's form (`$` escaped,
    # an unreadable value kept as its reference, which the clone's environment resolves).
    assert parsed.argv[:6] == ("--model-path", "org/m", "--x", "$(MODEL)", "--y", "$(SECRET)")
    assert parsed.args[:6] == ("--model-path", "org/m", "--x", "$$(MODEL)", "--y", "$(SECRET)")


tokens = st.lists(
    st.one_of(
        st.sampled_from(["python3", "-m", "sglang.launch_server", "sh", "-c", "sglang", "serve",
                         "--speculative-algorithm", "DSPARK", "--port", "--tp", "exec", "$(X)"]),
        st.text(max_size=30),
    ),
    max_size=12,
)  # fmt: skip


@given(command=st.one_of(st.none(), tokens), args=st.one_of(st.none(), tokens))
def test_any_command_line_is_understood_or_refused_with_a_reason(
    command: list[str] | None, args: list[str] | None
) -> None:
    c = container(command=command, args=args)
    try:
        parsed = parse_server(c)
    except ServerProblem as exc:
        assert exc.reason in (
            NOT_AN_SGLANG_SERVER,
            NOT_A_DSPARK_SERVER,
            UNREADABLE_SHELL_SCRIPT,
        ) and str(exc)
        return
    cfg = server_config(c, parsed)
    assert cfg.inputs["speculative_algorithm"].upper() == "DSPARK"
    assert 0 < cfg.port < 65536

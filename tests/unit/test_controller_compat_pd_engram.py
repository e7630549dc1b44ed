"""Servers the operator refuses since issue 34 §4 (docs/compatibility.md): a
PD-disaggregated server, and an Engram model (DeepSeek-V4.1-Flash) whose CUDA-graph capture
a compact-mode table breaks (sglang #39173); with the reason's words in `kubectl sps
explain`."""

from __future__ import annotations

from typing import Any

import pytest
from controller_harness import NS, SERVER_ARGS, Harness, deployment
from controller_harness import profile_body as body

from sps_operator.api import labels as L
from sps_operator.api.reason_registry import FAILURE_ADVICE, TARGET_ADVICE
from sps_operator.api.reasons import ENGRAM_COMPACT_TABLE, PD_DISAGGREGATED_SERVER
from sps_operator.controller.policies import compat
from sps_operator.controller.policies.placement import PodInfo
from sps_operator.controller.sglang.serverconfig import parse_server, server_config
from sps_operator.plugin.explain import explain, render_explain

COMPACT = [{"name": "SGLANG_RAGGED_VERIFY_MODE", "value": "compact"}]
V41 = "deepseek-ai/DeepSeek-V4.1-Flash"


def harness(profile: dict[str, Any] | None = None, **server: Any) -> Harness:
    h = Harness()
    h.add(deployment(**server))
    h.add(profile or body())
    h.place()
    return h


def additive() -> dict[str, Any]:
    return body(table={"kind": "Additive", "sweep": {"batchSizes": [1, 2, 4], "repeats": 2}})


def with_model(model: str) -> list[str]:
    args = list(SERVER_ARGS)
    i = args.index("--model-path")
    args[i + 1] = model
    return args


def refusal_of(args: list[str], env: list[dict[str, str]], kind: str = "Diagonal") -> Any:
    c = {"name": "s", "image": "lmsysorg/sglang:v0.5.17", "args": args, "env": env,
         "command": ["python3", "-m", "sglang.launch_server"]}  # fmt: skip
    return compat.refusal(kind, server_config(c, parse_server(c)), ())


# --------------------------------------------------------------------------- PD


@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_a_pd_disaggregated_server_is_refused_before_any_job_saying_why(mode: str) -> None:
    h = harness(args=[*SERVER_ARGS, "--disaggregation-mode", mode])
    status = h.settle()
    (target,) = status["targets"]
    assert (target["state"], target["reason"]) == ("Refused", PD_DISAGGREGATED_SERVER)
    assert f"--disaggregation-mode {mode}" in target["message"]
    assert ("prefill peer" if mode == "decode" else "no decode steps") in target["message"]
    assert not h.kube.kinds("Job")
    text = render_explain(explain(h.kube.obj("SpsProfile", "p", NS)))
    assert TARGET_ADVICE[PD_DISAGGREGATED_SERVER].what in text


def test_a_server_with_disaggregation_mode_null_is_an_ordinary_server() -> None:
    assert refusal_of([*SERVER_ARGS, "--disaggregation-mode", "null"], []) is None
    assert refusal_of([*SERVER_ARGS, "--disaggregation-mode=decode"], [])[0] == (
        PD_DISAGGREGATED_SERVER
    )


# --------------------------------------------------------------------------- Engram


@pytest.mark.parametrize(
    "model", [V41, "/models/deepseek_v4.1_flash", "org/DeepSeek-V41-Flash-FP8"]
)
def test_deepseek_v4_1_flash_in_compact_mode_gets_no_table_and_no_job(model: str) -> None:
    h = harness(args=with_model(model), env=COMPACT)
    (target,) = h.settle()["targets"]
    assert (target["state"], target["reason"]) == ("Refused", ENGRAM_COMPACT_TABLE)
    assert "#39173" in target["message"] and not h.kube.kinds("Job")
    assert L.TABLE_KEY not in str(h.template())


def test_deepseek_v4_1_flash_in_static_mode_is_profiled_diagonal_and_refused_additive() -> None:
    assert refusal_of(with_model(V41), [], "Diagonal") is None
    reason, message = refusal_of(with_model(V41), [], "Additive")
    assert reason == ENGRAM_COMPACT_TABLE and "phase 2" in message
    cap = refusal_of(with_model(V41), [{"name": "SGL_RAGGED_VERIFY_MODE", "value": "cap-accept"}])
    assert cap[0] == ENGRAM_COMPACT_TABLE  # the SGL_ spelling is the mode SGLang runs
    assert refusal_of(with_model("deepseek-ai/DeepSeek-V4-Flash"), COMPACT) is None


def test_a_clone_that_dies_capturing_with_the_table_ends_the_run_unretried() -> None:
    """A model path that does not name the model: the clone's last words tell."""
    h = harness(additive(), env=COMPACT)
    h.tick()
    h.run_pass()
    h.finish()
    h.tick()
    status = h.run_pass()
    run = status["currentRun"]
    assert run["phase"] == "OffDiagonal"
    labels = {L.LABEL_RUN: run["name"], L.LABEL_COMPONENT: L.COMPONENT_POD,
              L.LABEL_MANAGED_BY: L.MANAGED_BY}  # fmt: skip
    words = f"AssertionError: {compat.ENGRAM_CAPTURE_FAILED}, got 42 tokens for 8 requests of 6"
    h.pods.append(PodInfo(f"{run['name']}-p2-x", labels, "n1", phase="Pending",
                          controller="Job", exits=(("sglang-server", words),)))  # fmt: skip
    h.tick()
    failure = h.run_pass()["lastFailure"]
    assert (failure["reason"], failure["retryable"]) == (ENGRAM_COMPACT_TABLE, False)
    assert compat.ENGRAM_CAPTURE_FAILED in failure["message"]
    assert ENGRAM_COMPACT_TABLE in FAILURE_ADVICE

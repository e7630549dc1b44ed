"""sps-sim reads its environment as SGLang does after 15a43983 (issue 34 §4): every `SGL_X`
is copied over `SGLANG_X` at start, and with `SGLANG_EXPOSE_OWN_ENV_VARS=1` the server
reports its own environment in /server_info, which the profiler records beside the table."""

from __future__ import annotations

import httpx

from sps_operator.api.resolved import resolved_report
from sps_operator.profiler.server_info import server_context_from_info
from sps_sim.settings import build_settings
from sps_sim.testing import running_sim

DSPARK = ["--speculative-algorithm", "DSPARK"]


def test_the_sgl_spelling_wins_as_sglang_copies_it() -> None:
    s = build_settings(DSPARK, {"SGLANG_RAGGED_VERIFY_MODE": "static",
                                "SGL_RAGGED_VERIFY_MODE": "compact"})  # fmt: skip
    assert s.engine.mode == "compact"
    assert build_settings(DSPARK, {"SGLANG_RAGGED_VERIFY_MODE": "compact"}).engine.mode == (
        "compact"
    )


def test_the_environment_is_reported_only_when_asked_for() -> None:
    assert build_settings(DSPARK, {"SGLANG_SPEC_TP_SYNC": "rng"}).own_env is None
    s = build_settings(DSPARK, {"SGLANG_EXPOSE_OWN_ENV_VARS": "1", "SGL_SPEC_TP_SYNC": "rng",
                                "HOME": "/root"})  # fmt: skip
    assert s.own_env == {"SGLANG_EXPOSE_OWN_ENV_VARS": "1", "SGLANG_SPEC_TP_SYNC": "rng"}


def test_the_profiler_records_the_environment_a_server_reports() -> None:
    env = {"SGLANG_EXPOSE_OWN_ENV_VARS": "1", "SGL_DSPARK_FAST_KERNEL": "0"}
    with running_sim(env=env) as url:
        info = httpx.get(url + "/server_info", timeout=5).json()
    assert info["internal_states"][0]["env_vars"]["SGLANG_DSPARK_FAST_KERNEL"] == "0"
    context = server_context_from_info(info, base_url=url, offdiagonal=False)
    assert context.resolved["env"] == {"SGLANG_DSPARK_FAST_KERNEL": "0"}
    with running_sim() as url:  # a server not asked: no environment, nothing recorded
        info = httpx.get(url + "/server_info", timeout=5).json()
    assert "env_vars" not in info["internal_states"][0] and "env" not in resolved_report(info)


def test_every_server_reports_the_layout_it_resolved_as_newer_sglang_does() -> None:
    """world_size and disaggregation_mode come from every server, not only a group's, so
    a serving server's report can be compared with the clone's (policies/confirm.py)."""
    with running_sim(args=["--tp-size", "2"]) as url:
        info = httpx.get(url + "/server_info", timeout=5).json()
    assert (info["world_size"], info["disaggregation_mode"]) == (2, "null")
    assert "nnodes" not in info  # a group's fields stay a group's
    context = server_context_from_info(info, base_url=url, offdiagonal=False)
    assert context.resolved == {"world_size": 2, "disaggregation_mode": "null"}

"""`sps-operator fingerprint`, the additive seed, the clone's command line for the fork, and
the capture-derived table read back from a server's log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from controller_harness import SERVER_ARGS, container, deployment, profile_body
from hypothesis import given
from hypothesis import strategies as st

from sps_operator.api.kinds import RunPhase
from sps_operator.api.spec import SpsProfileSpec
from sps_operator.cli import main as sps_operator
from sps_operator.controller.kube import builders
from sps_operator.controller.sglang.serverconfig import TABLE_PATH_FLAG, parse_server
from sps_operator.plugin import cli as plugin
from sps_operator.tables.formats import (
    SpsAdditiveCostTable,
    capture_derived_from_log,
    load_sps_table_text,
    profile_sps_table,
)

MODEL_CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "models"},
            "data": {"name": "org/model-8b"}}  # fmt: skip


def write(tmp_path: Path, name: str, *docs: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = sps_operator(["fingerprint", *args])
    out = capsys.readouterr()
    try:
        return code, json.loads(out.out), out.err
    except ValueError:
        return code, out.out, out.err


def test_the_command_prints_what_the_operator_reads_and_where_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [a if a != "org/model-8b" else "$(MODEL)" for a in SERVER_ARGS]
    env = [{"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "models", "key": "name"}}},
           {"name": "SGLANG_DSPARK_X", "value": "1"}]  # fmt: skip
    dep = deployment(args=[*args, "--tp", "2"], env=env)
    path = write(tmp_path, "d.yaml", MODEL_CM, dep, profile_body())
    code, report, _ = run(capsys, "-f", path, "-o", "json")
    assert code == 0
    inputs = {r["input"]: r for r in report["inputs"]}
    assert inputs["--model-path"]["value"] == "org/model-8b"
    assert "ConfigMap 'models' key 'name'" in inputs["--model-path"]["where"]
    assert inputs["--tp-size"]["where"] == "args --tp (abbreviation of --tp-size)"
    assert report["notFingerprinted"] == [
        "SGLANG_DSPARK_X (env): looks like a cost input, not in the fingerprint"
    ]
    # The same reading as the operator's: the key in status, and no refusal.
    assert report["tableFingerprint"].startswith("v2-") and report["refused"] == {"Diagonal": None}
    code, text, _ = run(capsys, "-f", path)
    assert code == 0 and "--tp-size = 2" in text and "Not fingerprinted" in text


def test_against_says_what_changed_and_whether_it_reprofiles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = write(tmp_path, "old.yaml", deployment())
    same = write(tmp_path, "same.yaml", deployment(args=[*SERVER_ARGS, "--log-level", "info"]))
    new = write(tmp_path, "new.yaml", deployment(args=[*SERVER_ARGS, "--page-size", "16"]))
    code, report, _ = run(capsys, "-f", same, "--against", old, "-o", "json")
    assert (code, report["changes"], report["reprofiles"]) == (0, [], False)
    code, report, _ = run(capsys, "-f", new, "--against", old, "-o", "json")
    assert (report["changes"], report["reprofiles"]) == (["--page-size: unset -> 16"], True)


def test_what_the_operator_refuses_is_said_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hidden = deployment(args=[*SERVER_ARGS, "--config", "/etc/s.yaml"])
    code, _, err = run(capsys, "-f", write(tmp_path, "c.yaml", hidden))
    assert code == 1 and "ConfigFileFlags" in err and "Traceback" not in err
    two = write(tmp_path, "two.yaml", deployment("a"), deployment("b"))
    code, _, err = run(capsys, "-f", two)
    assert code == 1 and "a, b" in err and "--name" in err
    assert run(capsys, "-f", two, "--name", "b", "-o", "json")[0] == 0
    const = deployment(args=[*SERVER_ARGS, f"{TABLE_PATH_FLAG}=const"])
    code, report, _ = run(capsys, "-f", write(tmp_path, "k.yaml", const), "-o", "json")
    assert report["tableSource"] == "const"
    assert report["refused"]["Additive"]["reason"] == "DiagonalOnlyServer"
    assert report["refused"]["Diagonal"] is None


# --------------------------------------------------------------------------- the clone


def plan(phase: RunPhase, seed: str | None, args: list[str], mode: str) -> builders.RunPlan:
    c = container(args=args, env=[{"name": "SGLANG_RAGGED_VERIFY_MODE", "value": mode}])
    spec = SpsProfileSpec.model_validate(profile_body()["spec"])
    return builders.RunPlan(
        profile=builders.ProfileRef("p", "serving", "uid"),
        spec=spec,
        run="r",
        phase=phase,
        gpu_product="H100",
        fingerprint="v2-x",
        target_pod_spec={"containers": [c]},
        server=parse_server(c),
        seed_table_config_map=seed,
    )


def test_the_fork_s_const_stays_where_the_clone_runs_compact_without_a_seed() -> None:
    const = [*SERVER_ARGS, TABLE_PATH_FLAG, "const"]
    c = container(args=const)
    compact = builders.server_sidecar(plan(RunPhase.OFF_DIAGONAL, None, const, "compact"), c, set())
    assert compact["args"][-2:] == [TABLE_PATH_FLAG, "const"]
    seeded = builders.server_sidecar(
        plan(RunPhase.OFF_DIAGONAL, "seed", const, "compact"), c, set()
    )
    assert seeded["args"].count(TABLE_PATH_FLAG) == 1 and "const" not in seeded["args"]
    static = builders.server_sidecar(plan(RunPhase.DIAGONAL, None, const, "compact"), c, set())
    assert TABLE_PATH_FLAG not in static["args"]


def test_the_additive_seed_is_the_diagonal_measurement_and_only_additive_loaders_take_it() -> None:
    diagonal = profile_sps_table([(4, 100.0), (8, 90.0), (16, 50.0)])
    seed = load_sps_table_text(builders.additive_seed(diagonal.to_json()))
    assert isinstance(seed, SpsAdditiveCostTable)
    for m, sps in zip(diagonal.sample_batch_tokens, diagonal.sample_steps_per_sec, strict=True):
        assert seed.step_time(num_reqs=0, budget=m) == pytest.approx(1.0 / sps)
    with pytest.raises(ValueError, match="missing required field `sample_batch_tokens`"):
        load_sps_table_text(seed.to_json(), diagonal_only=True)


# --------------------------------------------------------------------------- capture-derived

probes = st.lists(st.integers(1, 4096), min_size=2, max_size=8, unique=True).map(sorted)
millis = st.floats(0.01, 500.0, allow_nan=False)


@given(m=probes, bs=probes, data=st.data())
def test_the_capture_derived_table_is_read_back_from_the_log_line(
    m: list[int], bs: list[int], data: st.DataObject
) -> None:
    theta = [data.draw(millis) for _ in m]
    alpha = [data.draw(millis) for _ in bs]
    verify = ", ".join(f"{p}: {t:.2f}" for p, t in zip(m, theta, strict=True))
    draft = ", ".join(f"{p}: {a:.2f}" for p, a in zip(bs, alpha, strict=True))
    line = (
        f"[2026-08-22 10:00:00 TP0] DSpark SPS table derived from {len(m)} verify tiers and "
        f"{len(bs)} draft batch sizes in 1.23 s; the verify budget is now scheduled. Verify "
        f"cost (tokens: ms) {verify}. Draft cost (requests: ms) {draft}. Unset "
        "SGLANG_DSPARK_ENABLE_CAPTURE_DERIVED_SPS to restore verify-all."
    )
    table = capture_derived_from_log(f"noise\n{line}\nmore noise")
    assert table is not None
    assert list(table.m_probes) == m and list(table.bs_probes) == bs
    for got, want in zip(table.theta_seconds, theta, strict=True):
        assert got == pytest.approx(round(want, 2) / 1000.0)
    assert capture_derived_from_log("no such line") is None


class LogCluster:
    default_namespace = "serving"

    def __init__(self, log: str) -> None:
        self.log = log

    def pod_log(self, namespace: str, name: str, limit_bytes: int) -> str:
        return self.log


def test_kubectl_sps_diff_compares_with_the_table_a_server_derived() -> None:
    line = ("DSpark SPS table derived from 2 verify tiers and 2 draft batch sizes in 0.10 s; "
            "x. Verify cost (tokens: ms) 8: 10.00, 16: 12.00. Draft cost (requests: ms) "
            "1: 0.05, 2: 0.06. Unset it.")  # fmt: skip
    label, table = plugin.load_table_ref("log:server-abc", LogCluster(line), "serving")  # type: ignore[arg-type]
    assert label == "log:server-abc (capture-derived)"
    assert isinstance(table, SpsAdditiveCostTable) and list(table.m_probes) == [8, 16]
    with pytest.raises(plugin.PluginError, match="has no 'DSpark SPS table derived from' line"):
        plugin.load_table_ref("log:server-abc", LogCluster("started"), "serving")  # type: ignore[arg-type]


def test_the_command_reads_a_leader_worker_sets_leader_as_the_operator_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34: a LeaderWorkerSet has no spec.template; the operator fingerprints its
    leader's server (--nnodes counts, the per-rank arguments do not)."""
    group = ["--nnodes", "2", "--dist-init-addr", "$(LWS_LEADER_ADDRESS):5000"]
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "big"},
        "spec": {"leaderWorkerTemplate": {
            "size": 2,
            "leaderTemplate": {"spec": {"containers": [
                container(args=[*SERVER_ARGS, *group, "--node-rank", "0"])]}},
            "workerTemplate": {"spec": {"containers": [
                container(args=[*SERVER_ARGS, *group, "--node-rank", "1"])]}},
        }},
    }  # fmt: skip
    code, report, err = run(capsys, "-f", write(tmp_path, "lws.yaml", lws), "-o", "json")
    assert code == 0, err
    inputs = {r["input"]: r for r in report["inputs"]}
    assert inputs["--nnodes"]["value"] == "2"
    assert "--node-rank" not in inputs and "--dist-init-addr" not in inputs

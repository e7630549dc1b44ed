"""`sps-sim --nnodes N --node-rank R --dist-init-addr HOST:PORT` plays a multi-node group
(issue 34 §2): rank 0 serves HTTP once every rank joined, each rank loads its table itself,
ranks with different tables fail at start, and a step costs more on a larger group. On
loopback, every process bounded in time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sps_sim.costmodel import DEFAULT_PRESET, PRESETS
from sps_sim.group import GROUP_OVERHEAD_PER_NODE, group_preset, parse_group
from sps_sim.settings import ConfigError, build_settings
from sps_testbed.processes import free_port
from waiting import wait_for

PY = sys.executable
DSPARK = ["--speculative-algorithm", "DSPARK", "--tp", "4"]
TABLE = '{"sample_batch_tokens":[8,64],"sample_steps_per_sec":[100.0,50.0],"max_batch_tokens":64}'
OTHER = '{"sample_batch_tokens":[8,64],"sample_steps_per_sec":[90.0,40.0],"max_batch_tokens":64}'
ENV = {"SGLANG_RAGGED_VERIFY_MODE": "compact", "SGLANG_DSPARK_ENABLE_SPS_RECORD": "1",
       "SPS_SIM_TIME_SCALE": "100", "SPS_SIM_GROUP_JOIN_TIMEOUT": "20"}  # fmt: skip


def rank(rank: int, nnodes: int, addr: str, http_port: int, table: Path | None,
         extra_env: dict[str, str] | None = None) -> subprocess.Popen[str]:  # fmt: skip
    args = [*DSPARK, "--port", str(http_port), "--nnodes", str(nnodes), "--node-rank",
            str(rank), "--dist-init-addr", addr]  # fmt: skip
    if table is not None:
        args += ["--speculative-dspark-sps-table-path", str(table)]
    env = {**os.environ, **ENV, **(extra_env or {})}
    return subprocess.Popen([PY, "-m", "sps_sim", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def server_info(port: int) -> Any:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=2).json()
    except httpx.HTTPError:
        return None


def stop(*procs: subprocess.Popen[str]) -> list[tuple[int, str]]:
    out = []
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
        _, err = proc.communicate(timeout=15)
        out.append((proc.returncode, err))
    return out


def tables(tmp_path: Path, *texts: str) -> list[Path]:
    paths = []
    for i, text in enumerate(texts):
        path = tmp_path / f"node{i}" / "table.json"
        path.parent.mkdir()
        path.write_text(text)
        paths.append(path)
    return paths


def test_rank_0_serves_only_after_every_rank_joined(tmp_path: Path) -> None:
    t0, t1 = tables(tmp_path, TABLE, TABLE)
    addr, port, worker_port = f"127.0.0.1:{free_port()}", free_port(), free_port()
    leader = rank(0, 2, addr, port, t0)
    try:
        # Alone, the leader waits for its group: no HTTP yet.
        with pytest.raises(AssertionError):
            wait_for("rank 0 to serve alone", lambda: server_info(port), 2, 0.1)
        worker = rank(1, 2, addr, worker_port, t1)
        try:
            info = wait_for("the group to serve", lambda: server_info(port), 30, 0.1)
            assert (info["nnodes"], info["node_rank"], info["world_size"]) == (2, 0, 4)
            assert info["disaggregation_mode"] == "null"
            assert server_info(worker_port) is None  # only node rank 0 serves HTTP
            # ... while the worker stays in the group (it holds its connection open).
            time.sleep(1.5)
            assert worker.poll() is None, stop(worker)
        finally:
            ((code_0, _),) = stop(leader)
        # A worker whose rank 0 went exits, non-zero, saying so.
        worker.wait(timeout=15)
        ((code_1, err_1),) = stop(worker)
        assert code_0 == 0 and code_1 == 1 and "node rank 0 left the group" in err_1
    finally:
        stop(leader)


def test_a_group_whose_ranks_load_different_tables_fails_at_start(tmp_path: Path) -> None:
    t0, t1 = tables(tmp_path, TABLE, OTHER)
    addr, port = f"127.0.0.1:{free_port()}", free_port()
    leader, worker = rank(0, 2, addr, port, t0), rank(1, 2, addr, free_port(), t1)
    leader.wait(timeout=30)
    worker.wait(timeout=30)
    (code_0, err_0), (code_1, err_1) = stop(leader, worker)
    assert code_0 == code_1 == 1
    for err in (err_0, err_1):
        assert "node rank 1 loaded SPS table" in err and "same table bytes" in err
    assert server_info(port) is None


def test_rank_0_listens_on_every_interface_not_only_the_name_it_is_given(
    tmp_path: Path,
) -> None:
    # As torch's TCPStore on SGLang's rank 0: the rendezvous listens on the port on every
    # interface. Under LeaderWorkerSet, --dist-init-addr is the leader's DNS name, which
    # may not resolve yet when the leader starts; only the workers need it to.
    t0, t1 = tables(tmp_path, TABLE, TABLE)
    dist_port, port = free_port(), free_port()
    leader = rank(0, 2, f"leader.invalid:{dist_port}", port, t0)
    worker = rank(1, 2, f"127.0.0.1:{dist_port}", free_port(), t1)
    try:
        info = wait_for("the group to serve", lambda: server_info(port), 30, 0.1)
        assert info["dist_init_addr"] == f"leader.invalid:{dist_port}"
    finally:
        stop(leader, worker)


def test_a_rank_without_the_table_breaks_the_group_too(tmp_path: Path) -> None:
    (t0,) = tables(tmp_path, TABLE)
    addr, port = f"127.0.0.1:{free_port()}", free_port()
    leader, worker = rank(0, 2, addr, port, t0), rank(1, 2, addr, free_port(), None)
    leader.wait(timeout=30)
    worker.wait(timeout=30)
    (code_0, err_0), (code_1, _) = stop(leader, worker)
    assert code_0 == code_1 == 1 and "loaded SPS table none" in err_0


def test_a_rank_whose_table_file_is_missing_fails_alone_at_start(tmp_path: Path) -> None:
    addr = f"127.0.0.1:{free_port()}"
    worker = rank(1, 2, addr, free_port(), tmp_path / "absent.json")
    worker.wait(timeout=30)
    ((code, err),) = stop(worker)
    assert code == 2 and "absent.json" in err


def test_a_group_that_never_forms_fails_within_its_join_timeout(tmp_path: Path) -> None:
    (t0,) = tables(tmp_path, TABLE)
    addr, port = f"127.0.0.1:{free_port()}", free_port()
    leader = rank(0, 3, addr, port, t0, {"SPS_SIM_GROUP_JOIN_TIMEOUT": "1"})
    leader.wait(timeout=30)
    ((code, err),) = stop(leader)
    assert code == 1 and "node ranks [1, 2] did not join" in err


# --------------------------------------------------------------------------- pure


def test_a_step_costs_more_on_a_larger_group_and_the_same_on_one_node() -> None:
    base = PRESETS[DEFAULT_PRESET]
    assert group_preset(base, 1) is base
    one = base.decode_seconds(8, 64)
    two, four = (group_preset(base, n).decode_seconds(8, 64) for n in (2, 4))
    assert one < two < four
    assert two == pytest.approx(one * (1 + GROUP_OVERHEAD_PER_NODE))
    s = build_settings([*DSPARK, "--nnodes", "2", "--node-rank", "1", "--dist-init-addr",
                        "127.0.0.1:5000"], {})  # fmt: skip
    assert s.preset.decode_seconds(8, 64) == pytest.approx(two)
    assert s.group is not None and not s.group.leader and s.ignored_args == []
    # A single node keeps its server_info as it was.
    assert "nnodes" not in build_settings(DSPARK, {}).server_args


@pytest.mark.parametrize(
    ("args", "words"),
    [(["--nnodes", "2"], "--dist-init-addr"),
     (["--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "h:1"], "--node-rank"),
     (["--nnodes", "0"], "--nnodes"),
     (["--nnodes", "2", "--dist-init-addr", "no-port"], "HOST:PORT")],
)  # fmt: skip
def test_a_bad_group_command_line_is_refused(args: list[str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        build_settings([*DSPARK, *args], {})
    assert parse_group(1, 0, None, 1.0) is None

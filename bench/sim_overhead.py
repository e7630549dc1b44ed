"""sps-sim's own overhead, so the simulator never becomes what a profiler measures.

1. Decode-step bookkeeping rate of the pure engine (no HTTP), as a ratio to the modelled
   step time: real CPU seconds spent per simulated step / model seconds the step represents.
2. The same through the running HTTP server at a high time scale (driver task + asyncio).
3. ``GET /server_info`` with a full 200,000-record ring per rank: wall time and size, against
   a baseline in the same run: encoding the same records the naive way (``json.dumps`` of
   the list of dicts), which is what the pre-encoded ring avoids.

Run:  .venv/bin/python bench/sim_overhead.py [--ring 200000] [--dp 1] [--bs 64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx

from sps_operator import dspark_arith
from sps_sim.costmodel import PRESETS
from sps_sim.engine import Engine, EngineConfig
from sps_sim.testing import running_sim

PRESET = PRESETS["NVIDIA-H100-80GB-HBM3"]


def engine_rate(bs: int, steps: int) -> tuple[float, float]:
    """(simulated decode steps per real second, mean modelled step seconds)."""
    cfg = EngineConfig(
        capture_bs=tuple(dspark_arith.default_decode_capture_bs(256)),
        components=frozenset({"core", "step_cpu_time"}),
        simulate_acc_len=1.0,
        max_running_per_dp=max(bs, 48),
        mode="compact",
        verify_all_bug=False,
    )
    engine = Engine(cfg, PRESET)
    engine.set_internal_state({"dspark_force_budget_frac": 0.5}, 0.0)
    engine.submit([(None, 16, steps + 1)] * bs, 0.0)
    t = 0.0
    start = time.perf_counter()
    while True:
        nxt = engine.next_event_time()
        if nxt is None:
            break
        t = nxt
        engine.advance(t)
    wall = time.perf_counter() - start
    n = engine.ranks[0].forward_ct
    return n / wall, t / n


def http_rate(bs: int, steps: int, scale: float) -> tuple[float, float]:
    with running_sim(time_scale=scale, args=["--max-running-requests", str(max(bs, 48))]) as url:
        start = time.perf_counter()
        resp = httpx.post(
            url + "/generate",
            json={
                "input_ids": [[1000] * 16] * bs,
                "sampling_params": {"max_new_tokens": steps + 1, "ignore_eos": True},
            },
            timeout=600,
        )
        wall = time.perf_counter() - start
        resp.raise_for_status()
        rows = httpx.get(url + "/server_info", timeout=600).json()["internal_states"][0][
            "dspark_info_record"
        ]["records"]
    model_ms = statistics.fmean(r["step_cpu_ms"] for r in rows if "step_cpu_ms" in r)
    return len(rows) / wall, model_ms / 1000


def server_info_cost(ring: int, dp: int, repeats: int = 5) -> dict[str, float]:
    per_rank_steps = ring + 10
    with running_sim(
        ["--dp-size", str(dp), "--record-ring-size", str(ring)], time_scale=1e6
    ) as url:
        httpx.post(
            url + "/generate",
            json={
                "input_ids": [[1000] * 16] * (8 * dp),
                "sampling_params": {"max_new_tokens": per_rank_steps, "ignore_eos": True},
            },
            timeout=1200,
        ).raise_for_status()
        times = []
        size = 0
        body = b""
        for _ in range(repeats):
            start = time.perf_counter()
            resp = httpx.get(url + "/server_info", timeout=600)
            times.append(time.perf_counter() - start)
            body = resp.content
            size = len(body)
    info = json.loads(body)
    records = [s["dspark_info_record"]["records"] for s in info["internal_states"]]
    assert all(len(r) == ring for r in records), [len(r) for r in records]
    naive = []
    for _ in range(repeats):
        start = time.perf_counter()
        json.dumps(info, separators=(",", ":"))
        naive.append(time.perf_counter() - start)
    return {
        "server_info_s": statistics.median(times),
        "naive_encode_s": statistics.median(naive),
        "bytes": float(size),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--ring", type=int, default=200_000)
    p.add_argument("--dp", type=int, default=1)
    p.add_argument("--bs", type=int, default=64)
    p.add_argument("--steps", type=int, default=20_000)
    p.add_argument("--scale", type=float, default=1e5)
    ns = p.parse_args()

    rate, step_s = engine_rate(ns.bs, ns.steps)
    print(f"engine: {rate:,.0f} decode steps/s real (bs={ns.bs}, compact, pinned)")
    print(f"  modelled step {step_s * 1000:.2f} ms; bookkeeping per step {1e6 / rate:.1f} us")
    print(f"  overhead ratio (real per step / modelled step) = {1 / rate / step_s:.5f}")

    hrate, hstep = http_rate(ns.bs, ns.steps, ns.scale)
    print(f"http server at time scale {ns.scale:g}: {hrate:,.0f} decode steps/s real")
    print(f"  overhead ratio (real per step / modelled step) = {1 / hrate / hstep:.5f}")

    cost = server_info_cost(ns.ring, ns.dp)
    print(
        f"/server_info with a full ring ({ns.ring:,} records x {ns.dp} rank(s)): "
        f"{cost['server_info_s'] * 1000:.0f} ms, {cost['bytes'] / 1e6:.1f} MB"
    )
    print(
        f"  baseline json.dumps of the same payload: {cost['naive_encode_s'] * 1000:.0f} ms; "
        f"ratio server_info / baseline = {cost['server_info_s'] / cost['naive_encode_s']:.2f}"
    )
    print(
        f"  one /server_info = {cost['server_info_s'] / step_s:.1f} modelled steps of "
        f"{step_s * 1000:.2f} ms at time scale 1 (the engine catches up; step_cpu_ms unaffected)"
    )


if __name__ == "__main__":
    main()

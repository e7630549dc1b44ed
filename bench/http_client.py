"""httpx vs requests for the profiler's HTTP calls, against one sps-sim, in one run.

The profiler's traffic is a poll of `/server_info` every 0.25 s (the record ring cleared
each round, so a poll carries at most one round's records) plus a few POSTs per round.
Both clients keep one connection alive, as the profiler does. Reported per call: wall
time and this process's CPU time, as the ratio requests / httpx (same server, same run,
interleaved in blocks so drift in machine load hits both alike).

    .venv/bin/python bench/http_client.py [--calls 300] [--ring 300 20000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx
import requests

from sps_testbed.processes import free_port


@contextlib.contextmanager
def sim_process() -> Iterator[str]:
    """sps-sim in its own process, so this process's CPU time is the client's alone."""
    port = free_port()
    env = {**os.environ, "SGLANG_DSPARK_ENABLE_SPS_RECORD": "1", "SGLANG_SIMULATE_ACC_LEN": "1.0"}
    cmd = [sys.executable, "-m", "sps_sim", "--speculative-algorithm", "DSPARK"]
    cmd += ["--port", str(port), "--time-scale", "1e5", "--seed", "0"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                    break
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def _fill_ring(url: str, records: int) -> None:
    """Run `records` decode steps at bs 1 (fast: time scale 1e5), then keep them."""
    with httpx.Client(base_url=url, timeout=120.0) as http:
        http.post("/set_internal_state", json={"server_args": {"dspark_clear_info_records": True}})
        payload = {
            "input_ids": [[1000] * 16],
            "sampling_params": {"max_new_tokens": records + 1, "ignore_eos": True},
        }
        http.post("/generate", json=payload)


def _time_calls(call: Callable[[], Any], n: int) -> tuple[float, float]:
    """Median wall seconds and mean CPU seconds per call."""
    walls = []
    cpu0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls), (time.process_time() - cpu0) / n


def measure(url: str, calls: int, blocks: int = 5) -> dict[str, dict[str, float]]:
    hx = httpx.Client(base_url=url, timeout=60.0)
    rq = requests.Session()
    clients: dict[str, dict[str, Callable[[], Any]]] = {
        "httpx": {
            "GET /server_info": lambda: hx.get("/server_info").json(),
            "POST /set_internal_state": lambda: hx.post(
                "/set_internal_state", json={"server_args": {"dspark_force_budget_frac": 0.5}}
            ).json(),
        },
        "requests": {
            "GET /server_info": lambda: rq.get(url + "/server_info", timeout=60.0).json(),
            "POST /set_internal_state": lambda: rq.post(
                url + "/set_internal_state",
                json={"server_args": {"dspark_force_budget_frac": 0.5}},
                timeout=60.0,
            ).json(),
        },
    }
    out: dict[str, dict[str, float]] = {}
    for what in ("GET /server_info", "POST /set_internal_state"):
        samples: dict[str, list[tuple[float, float]]] = {"httpx": [], "requests": []}
        for _ in range(blocks):
            for name, calls_of in clients.items():
                calls_of[what]()  # connection up
                samples[name].append(_time_calls(calls_of[what], max(1, calls // blocks)))
        for name, pairs in samples.items():
            out[f"{name} {what}"] = {
                "wall_ms": statistics.median(w for w, _ in pairs) * 1e3,
                "cpu_ms": statistics.median(c for _, c in pairs) * 1e3,
            }
    hx.close()
    rq.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--ring", type=int, nargs="+", default=[300, 20000])
    ns = p.parse_args(argv)
    print(
        "| ring records | call | httpx wall / CPU ms | requests wall / CPU ms | ratio wall / CPU |"
    )
    print("|---|---|---|---|---|")
    for ring in ns.ring:
        with sim_process() as url:
            _fill_ring(url, ring)
            figures = measure(url, ns.calls)
        for what in ("GET /server_info", "POST /set_internal_state"):
            hx, rq = figures[f"httpx {what}"], figures[f"requests {what}"]
            print(
                f"| {ring} | {what} | {hx['wall_ms']:.2f} / {hx['cpu_ms']:.2f} | "
                f"{rq['wall_ms']:.2f} / {rq['cpu_ms']:.2f} | "
                f"{rq['wall_ms'] / hx['wall_ms']:.2f} / {rq['cpu_ms'] / hx['cpu_ms']:.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

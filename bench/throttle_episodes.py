"""Issue 37: throttling episodes that span several rounds, ours against the reference, per run.

The GPU of issue 37 (`profiler_matrix.LONG_THROTTLING` on the H200 preset at 7 % noise):
AR(1) noise (φ 0.6), 1 % outliers up to 4x, a 25 % clock ramp (τ 3 s), stalls, and a 12 %
cap for 5 s of every 40 s of model time, which covers two or three consecutive rounds of a
diagonal sweep over bs 1 2 4 8 16 24 32 40 48. Each seed runs both profilers, each on its own
fresh simulator with that seed (`profiler_matrix.run_job`), and prints per run: GPU time
(the simulator's busy model seconds), ours ÷ the reference's, the max relative cell error
against the simulator's truth over bs 1..48, our error bound, and the cells we measured
again (`r`: a rise mid-round, `o`: out of line with the others; `+`: the recheck replaced
the round). A run of ours that fails (a cell still out of line after its rechecks) is
printed as such: it published no table.

    nice .venv/bin/python bench/throttle_episodes.py --seeds 10 --time-scale 4 --jobs 1 \\
        --json /tmp/throttle.json
    .venv/bin/python bench/throttle_episodes.py --summarise /tmp/throttle.json [more.json]
        # later files win per (tool, seed): e.g. our side re-run after a change
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from profiler_matrix import LONG_THROTTLING, Job, run_job
from sps_sim.costmodel import GPU_H200

NOISE = 0.07
MAX_ERROR_GOAL = 0.05
GPU_RATIO_GOAL = 0.5


def remeasured_text(entries: Sequence[dict[str, Any]] | None) -> str:
    """`bs:r` for a rise, `bs:o` for a recheck (`+` when it replaced the round)."""
    out = []
    for e in entries or []:
        if "after_s" in e:
            out.append(f"{e['bs']}:o{'+' if e.get('replaced') else ''}")
        elif "rose" in e["reason"]:
            out.append(f"{e['bs']}:r")
    return " ".join(out) or "-"


def print_runs(results: Sequence[dict[str, Any]]) -> bool:
    """The per-run table and the totals; True when every goal is met."""
    by_seed: dict[int, dict[str, dict[str, Any]]] = {}
    for r in results:
        by_seed.setdefault(r["seed"], {})[r["tool"]] = r
    print(
        "| seed | GPU s ref | GPU s ours | ours/ref | max err ref | max err ours | our bound |"
        " measured again |"
    )
    print("|---|---|---|---|---|---|---|---|")
    ok = True
    gpu = {"ours": 0.0, "reference": 0.0}
    for seed in sorted(by_seed):
        ref, ours = by_seed[seed].get("reference"), by_seed[seed].get("ours")
        if ref is None or ours is None or "error" in ref:
            print(f"| {seed} | incomplete | | | | | | |")
            ok = False
            continue
        if "error" in ours:
            print(
                f"| {seed} | {ref['gpu_seconds']:.1f} | failed | | {ref['max_rel_error']:.1%} |"
                f" {ours['error'][:60]} | | |"
            )
            ok = False
            continue
        ratio = ours["gpu_seconds"] / ref["gpu_seconds"]
        gpu["ours"] += ours["gpu_seconds"]
        gpu["reference"] += ref["gpu_seconds"]
        bound = (ours.get("quality") or {}).get("error_bound_rel")
        ok = ok and ours["max_rel_error"] <= MAX_ERROR_GOAL
        print(
            f"| {seed} | {ref['gpu_seconds']:.1f} | {ours['gpu_seconds']:.1f} | {ratio:.2f} |"
            f" {ref['max_rel_error']:.1%} | {ours['max_rel_error']:.1%} |"
            f" {bound:.1%} | {remeasured_text(ours.get('remeasured'))} |"
            if bound is not None
            else f"| {seed} | | | | | | | |"
        )
    if gpu["reference"]:
        total = gpu["ours"] / gpu["reference"]
        ok = ok and total <= GPU_RATIO_GOAL
        print(
            f"\nGPU time, all runs: ours {gpu['ours']:.0f} s / reference {gpu['reference']:.0f} s"
            f" = {total:.3f}x (goal <= {GPU_RATIO_GOAL}x); max cell error goal <="
            f" {MAX_ERROR_GOAL:.0%} in every run: {'met' if ok else 'NOT met'}"
        )
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--seed", type=int, default=100, help="first simulator seed")
    p.add_argument("--time-scale", type=float, default=4.0)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--tools", nargs="*", default=["reference", "ours"])
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--summarise", nargs="+", type=Path, default=None, metavar="JSON")
    ns = p.parse_args(argv)
    if ns.summarise:
        runs: dict[tuple[str, int], dict[str, Any]] = {}
        for path in ns.summarise:
            for r in json.loads(path.read_text()):
                if r.get("effect") == LONG_THROTTLING:
                    runs[(r["tool"], r["seed"])] = r
        return 0 if print_runs(list(runs.values())) else 1
    jobs = [
        Job(GPU_H200, NOISE, LONG_THROTTLING, "diagonal", tool, seed, ns.time_scale, None)
        for seed in range(ns.seed, ns.seed + ns.seeds)
        for tool in ns.tools
    ]
    results: list[dict[str, Any]] = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, ns.jobs)) as pool:
        futures = {pool.submit(run_job, job): job for job in jobs}
        for future in concurrent.futures.as_completed(futures):
            job = futures[future]
            try:
                result = future.result()
            except Exception as exc:
                result = {**asdict(job), "error": f"{type(exc).__name__}: {exc}"}
            results.append(result)
            print(
                f"done seed {job.seed} {job.tool}: {result.get('max_rel_error', 'failed')}",
                flush=True,
            )
            if ns.json:
                ns.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0 if print_runs(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())

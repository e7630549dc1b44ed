"""sps-profiler vs the reference profiler's algorithm, on the same simulator preset and seed.

For a diagonal sweep (static server) and an additive sweep (compact server with the fix),
each profiler runs against a fresh simulator with the same preset and seed. Reported:

* GPU time: the simulator's busy model time (sum of every prefill and decode step's model
  duration) spent producing the table — simulated GPU seconds, not real seconds;
* table error: RMS relative error of the table's step time against the simulator's
  noise-free ground truth (`sps_operator.sim.truth.truth_grid`) over the full grid:
  every bs in 1..max and, for the additive table, every M in [bs, bs*K]; for the
  diagonal table, M = bs*K (what a diagonal table describes);
* additive fit only: both fits (ours and the reference's 64-wide M bins) on the SAME cells.

    .venv/bin/python bench/profiler_vs_reference.py [--time-scale 5] [--seed 0] [--json out.json]

Ratios, not absolute timings, are the result.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from profiler_reference_algorithm import ReferenceAlgorithm
from profiler_reference_script import run_reference_script
from sps_operator.profiler.runner import RunConfig, run_profile
from sps_operator.profiler.sweep import RoundSettings, build_request_count_sweep
from sps_operator.sim.testing import running_sim
from sps_operator.sim.truth import truth_grid
from sps_operator.tables.fit import (
    cells_from_rounds,
    fit_additive_binned_reference,
    fit_additive_cells,
    fit_from_rounds,
)
from sps_operator.tables.formats import SpsAdditiveCostTable, SpsTable, load_sps_table_text
from sps_operator.tables.quality import Cell, predicted_step_seconds


class BusyMeter:
    """The simulated GPU's busy model seconds, from /server_info `sim_stats` (never cleared)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._final: float | None = None

    def read(self) -> float:
        info = httpx.get(self.url + "/server_info", timeout=60.0).json()
        return float(info["sim_stats"]["busy_model_seconds"])

    def freeze(self) -> None:
        self._final = self.read()

    @property
    def seconds(self) -> float:
        return self._final if self._final is not None else self.read()


@contextlib.contextmanager
def simulator(argv: list[str], env: dict[str, str]) -> Iterator[tuple[str, BusyMeter]]:
    scale = float(argv[argv.index("--time-scale") + 1])
    args = [a for i, a in enumerate(argv) if a != "--time-scale" and argv[i - 1] != "--time-scale"]
    with running_sim(args, env=env, time_scale=scale) as url:
        meter = BusyMeter(url)
        try:
            yield url, meter
        finally:
            meter.freeze()


def grid_error(table: SpsTable, truth: Sequence[dict[str, Any]], diagonal_only: bool) -> float:
    errors = []
    for row in truth:
        if diagonal_only and not row["diagonal"]:
            continue
        t = row["seconds"]
        errors.append((predicted_step_seconds(table, row["bs"], row["M"]) - t) / t)
    return math.sqrt(sum(e * e for e in errors) / len(errors))


def run_ours(
    url: str, batch_sizes: list[int], fracs: list[float] | None, scale: float, out: Path
) -> list[dict[str, Any]]:
    settings = RoundSettings(
        poll_interval_seconds=0.25 / scale,  # 0.25 s on a GPU
        round_timeout_seconds=300.0 / scale,
    )
    cfg = RunConfig(
        base_url=url,
        batch_sizes=batch_sizes,
        fracs=fracs,
        settings=settings,
        out=str(out),
        vocab_size=32000,
    )
    return run_profile(cfg).rounds


def scenario(
    name: str,
    *,
    sim_args: list[str],
    env: dict[str, str],
    batch_sizes: list[int],
    fracs: list[float] | None,
    scale: float,
    truth: list[dict[str, Any]],
    workdir: Path,
    reference_script: Path | None = None,
) -> dict[str, Any]:
    kind = "additive" if fracs else "diagonal"
    result: dict[str, Any] = {"scenario": name, "kind": kind}
    script_table: SpsTable | None = None
    runs: dict[str, tuple[list[dict[str, Any]], float, float]] = {}
    for who in ("reference", "ours"):
        with simulator([*sim_args, "--time-scale", str(scale)], env) as (url, meter):
            started = time.monotonic()
            if who == "reference" and reference_script is not None:
                rounds, text = run_reference_script(
                    reference_script, url, batch_sizes, fracs, scale, workdir
                )
                script_table = load_sps_table_text(text)
            elif who == "reference":
                algo = ReferenceAlgorithm(url, scale)
                try:
                    rounds = algo.run(batch_sizes, fracs)
                finally:
                    algo.close()
            else:
                rounds = run_ours(url, batch_sizes, fracs, scale, workdir / f"{name}.json")
            runs[who] = (rounds, meter.seconds, time.monotonic() - started)
    tables: dict[str, SpsTable] = {}
    ref_rounds, ref_gpu, ref_real = runs["reference"]
    our_rounds, our_gpu, our_real = runs["ours"]
    if kind == "diagonal":
        tables["reference"] = fit_from_rounds(ref_rounds, "diagonal").table
        tables["ours"] = fit_from_rounds(our_rounds, "diagonal").table
    else:
        tables["reference"] = fit_additive_binned_reference(cells_from_rounds(ref_rounds)).table
        tables["ours"] = fit_from_rounds(our_rounds, "additive").table
    if script_table is not None:
        tables["reference"] = script_table  # the script's own fit, as it wrote it
    diag = kind == "diagonal"
    result["reference"] = {
        "gpu_seconds": ref_gpu,
        "real_seconds": ref_real,
        "rounds": len(ref_rounds),
        "rms_rel_error": grid_error(tables["reference"], truth, diag),
    }
    result["ours"] = {
        "gpu_seconds": our_gpu,
        "real_seconds": our_real,
        "rounds": len(our_rounds),
        "rms_rel_error": grid_error(tables["ours"], truth, diag),
    }
    result["gpu_time_ratio"] = ref_gpu / our_gpu
    if kind == "diagonal":
        same_diag: dict[str, dict[str, float]] = {}
        for source, rounds in (("our cells", our_rounds), ("reference cells", ref_rounds)):
            stair = fit_from_rounds(rounds, "diagonal", tiers=_tiers(our_rounds)).table
            measured = fit_from_rounds(rounds, "diagonal", diagonal_probes="measured").table
            same_diag[source] = {
                "ours_fit_error": grid_error(stair, truth, True),
                "reference_fit_error": grid_error(measured, truth, True),
            }
        result["fits_on_same_cells"] = same_diag
    if kind == "additive":
        same: dict[str, dict[str, float]] = {}
        for source, rounds in (("our cells", our_rounds), ("reference cells", ref_rounds)):
            cells: list[Cell] = cells_from_rounds(rounds)
            ours_fit = fit_additive_cells(cells, tiers=_tiers(our_rounds)).table
            ref_fit = fit_additive_binned_reference(cells).table
            same[source] = {
                "ours_fit_error": grid_error(ours_fit, truth, False),
                "reference_fit_error": grid_error(ref_fit, truth, False),
            }
        result["fits_on_same_cells"] = same
        assert isinstance(tables["ours"], SpsAdditiveCostTable)
    return result


def bug_demo(scale: float, seed: int) -> dict[str, Any]:
    """A compact server with the verify-all bug: the reference writes a flat θ; ours refuses."""
    sim_args = ["--seed", str(seed), "--verify-all-bug", "on", "--time-scale", str(scale)]
    env = {"SGLANG_RAGGED_VERIFY_MODE": "compact"}
    with simulator(sim_args, env) as (url, meter):
        algo = ReferenceAlgorithm(url, scale)
        try:
            rounds = algo.run([8, 16], [0.25, 1.0])
        finally:
            algo.close()
        ref_gpu = meter.seconds
    table = fit_additive_binned_reference(cells_from_rounds(rounds)).table
    assert isinstance(table, SpsAdditiveCostTable)
    theta_span = max(table.theta_seconds) - min(table.theta_seconds)
    with simulator(sim_args, env) as (url, meter):
        try:
            run_ours(url, [8, 16], [0.25, 1.0], scale, Path(tempfile.mkdtemp()) / "bug.json")
            ours = "wrote a table (unexpected)"
        except RuntimeError as exc:
            ours = str(exc).split(".")[0]
        our_gpu = meter.seconds
    return {
        "reference_theta_span_ms": theta_span * 1e3,
        "reference_gpu_seconds": ref_gpu,
        "ours": ours,
        "ours_gpu_seconds": our_gpu,
    }


def _print(r: dict[str, Any], seed: int) -> None:
    ref, ours = r["reference"], r["ours"]
    print(
        f"seed {seed} {r['kind']:9s} GPU time: reference {ref['gpu_seconds']:.1f} s, ours "
        f"{ours['gpu_seconds']:.1f} s ({r['gpu_time_ratio']:.1f}x less); table RMS rel error "
        f"vs truth: reference {ref['rms_rel_error']:.2%}, ours {ours['rms_rel_error']:.2%}",
        flush=True,
    )
    for source, errs in r.get("fits_on_same_cells", {}).items():
        print(
            f"          fits on {source}: ours {errs['ours_fit_error']:.2%}, reference fit "
            f"{errs['reference_fit_error']:.2%}",
            flush=True,
        )


def _tiers(rounds: list[dict[str, Any]]) -> list[int] | None:
    for r in rounds:
        if r.get("graph_tiers"):
            return [int(t) for t in r["graph_tiers"]]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="NVIDIA-H100-80GB-HBM3")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--time-scale", type=float, default=5.0)
    p.add_argument("--max-batch-size", type=int, default=48)
    p.add_argument("--fracs", type=float, nargs="+", default=[0.25, 0.5, 0.75, 1.0])
    p.add_argument("--only", choices=("diagonal", "additive"), default=None)
    p.add_argument("--json", default=None, help="write the results here too")
    p.add_argument(
        "--reference-script",
        type=Path,
        default=None,
        help="a local copy of SGLang's dspark_sps_profiler.py to run instead of the "
        "re-implementation (not part of this repo; stand-ins for its sglang imports are made)",
    )
    p.add_argument(
        "--bug-demo",
        action="store_true",
        help="also run both on a compact server with the verify-all bug",
    )
    ns = p.parse_args(argv)
    batch_sizes = build_request_count_sweep(ns.max_batch_size)
    from sps_operator.dspark_arith import default_decode_capture_bs
    from sps_operator.sim.costmodel import load_preset

    preset = load_preset(ns.preset)
    capture = default_decode_capture_bs(preset.default_cuda_graph_max_bs(1))
    truth = truth_grid(
        preset,
        gamma=7,
        batch_sizes=list(range(1, ns.max_batch_size + 1)),
        capture_bs=capture,
        max_running_per_dp=48,
    )
    results = []
    for seed in ns.seeds:
        common = ["--preset", ns.preset, "--seed", str(seed)]
        with tempfile.TemporaryDirectory() as tmp:
            # kind -> (extra sim args, verify mode, fracs)
            kinds: dict[str, tuple[list[str], str, list[float] | None]] = {
                "diagonal": ([], "static", None),
                "additive": (["--verify-all-bug", "off"], "compact", sorted(ns.fracs)),
            }
            for kind, (extra_args, verify_mode, fracs) in kinds.items():
                if ns.only not in (None, kind):
                    continue
                r = scenario(
                    kind,
                    sim_args=[*common, *extra_args],
                    env={"SGLANG_RAGGED_VERIFY_MODE": verify_mode},
                    batch_sizes=batch_sizes,
                    fracs=fracs,
                    scale=ns.time_scale,
                    truth=truth,
                    workdir=Path(tmp),
                    reference_script=ns.reference_script,
                )
                results.append({**r, "seed": seed})
                _print(r, seed)
    print("summary over seeds", ns.seeds)
    for kind in ("diagonal", "additive"):
        rs = [r for r in results if r["kind"] == kind]
        if not rs:
            continue
        ref_gpu = sum(r["reference"]["gpu_seconds"] for r in rs)
        our_gpu = sum(r["ours"]["gpu_seconds"] for r in rs)
        ref_err = sum(r["reference"]["rms_rel_error"] for r in rs) / len(rs)
        our_err = sum(r["ours"]["rms_rel_error"] for r in rs) / len(rs)
        print(
            f"  {kind:9s} GPU time {ref_gpu / our_gpu:.1f}x less ({ref_gpu:.0f} s vs "
            f"{our_gpu:.0f} s); mean RMS rel error reference {ref_err:.2%}, ours {our_err:.2%}"
        )
        for source in ("our cells", "reference cells"):
            same = [r["fits_on_same_cells"][source] for r in rs if "fits_on_same_cells" in r]
            if same:
                ours_fit = sum(x["ours_fit_error"] for x in same) / len(same)
                ref_fit = sum(x["reference_fit_error"] for x in same) / len(same)
                print(
                    f"  {'':9s} fits on {source}: ours {ours_fit:.2%}, reference fit "
                    f"{ref_fit:.2%} (ratio {ours_fit / ref_fit:.2f})"
                )
    if ns.bug_demo:
        demo = bug_demo(ns.time_scale, ns.seeds[0])
        print(
            f"verify-all bug (compact, no table), bs 8/16 x fracs 0.25/1.0: reference wrote an "
            f"additive table with a theta span of {demo['reference_theta_span_ms']:.3f} ms "
            f"after {demo['reference_gpu_seconds']:.0f} s GPU; ours stopped after "
            f"{demo['ours_gpu_seconds']:.1f} s GPU: {demo['ours']}"
        )
        results.append({"scenario": "bug-demo", "kind": "bug-demo", **demo})
    if ns.json:
        Path(ns.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

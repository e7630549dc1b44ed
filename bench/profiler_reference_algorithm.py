"""SGLang's reference profiler ALGORITHM, re-implemented for the benchmark (not its code).

What it does, from the contract (section 1) and reading the reference: one warm-up
round (bs = min(8, max sweep), largest frac, 16 steady steps, errors swallowed), then
for repeat, bs, frac: pin the frac (never reset), flush, take per-rank forward_ct
watermarks of the full record ring (never cleared), send one batch of bs*dp prompts
with max_new_tokens = 8 + max(32, ceil(10 s / 0.02 s)) + 64 = 572, poll /server_info
every 2 s until >= 32 steady aligned steps AND >= 10 s since the 8th aligned step (or a
300 s timeout), abort, join, keep the rows above the watermarks, drop 8 warm-up steps,
median of the per-step mean over ranks. Off-diagonal M = bs + int(frac*bs*(K-1)); the only
pin check is graph_tier >= M. The fit is median-per-batch_tokens (diagonal) or OLS with
one-hot bs and one-hot round(M/64)*64 bins (additive).

All wall-clock constants are in MODEL seconds and divided by the simulator's time scale,
so the algorithm behaves against the simulator as it would against a GPU.
"""

from __future__ import annotations

import contextlib
import math
import random
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

MIN_STEADY_STEPS = 32
MIN_STEADY_SECONDS = 10.0
ROUND_TIMEOUT_SECONDS = 300.0
POLL_INTERVAL_SECONDS = 2.0
WARMUP_STEPS = 8
STEP_SLACK = 64
STEP_TIME_FLOOR = 0.02
WARMUP_ROUND_STEADY_STEPS = 16
SEED = 42


@dataclass(frozen=True)
class Row:
    forward_ct: int
    num_running_reqs: int
    num_verify_tokens: int
    step_time: float


class ReferenceAlgorithm:
    def __init__(self, base_url: str, time_scale: float, vocab_size: int = 32000) -> None:
        self.base_url = base_url
        self.scale = time_scale
        self.http = httpx.Client(base_url=base_url, timeout=600.0)
        self.rng = random.Random(SEED)
        self.vocab_size = vocab_size
        info = self.http.get("/server_info").json()
        state = info["internal_states"][0]
        payload = state["dspark_info_record"]
        self.k = int(payload["verify_num_draft_tokens"])
        self.dp = int(state.get("dp_size") or 1)

    def close(self) -> None:
        self.http.close()

    def real(self, model_seconds: float) -> float:
        return model_seconds / self.scale

    def rows(self) -> list[list[Row]]:
        info = self.http.get("/server_info").json()
        out = []
        for state in info["internal_states"]:
            rows = []
            for rec in (state.get("dspark_info_record") or {}).get("records", []):
                if rec.get("step_cpu_ms") is None:
                    continue
                rows.append(
                    Row(
                        int(rec["forward_ct"]),
                        int(rec["num_running_reqs"]),
                        int(rec["num_verify_tokens"]),
                        float(rec["step_cpu_ms"]) / 1000.0,
                    )
                )
            out.append(rows)
        return out

    def max_new_tokens(self, min_steps: int, min_seconds: float) -> int:
        budget = max(min_steps, math.ceil(min_seconds / STEP_TIME_FLOOR))
        return WARMUP_STEPS + budget + STEP_SLACK

    def aligned_count(self, rank_rows: list[list[Row]], bs: int) -> int:
        if any(not rows for rows in rank_rows):
            return 0
        by_ct = [{r.forward_ct: r for r in rows} for rows in rank_rows]
        common = set(by_ct[0])
        for m in by_ct[1:]:
            common &= set(m)
        return sum(1 for ct in common if all(m[ct].num_running_reqs == bs for m in by_ct))

    def run_round(
        self, bs: int, frac: float | None, min_steps: int, min_seconds: float
    ) -> dict[str, Any]:
        if frac is not None:
            body = self.http.post(
                "/set_internal_state", json={"server_args": {"dspark_force_budget_frac": frac}}
            ).json()
            outs = body if isinstance(body, list) else [body]
            if not all(bool(o.get("updated")) if isinstance(o, dict) else bool(o) for o in outs):
                raise RuntimeError(f"pin {frac} rejected: {body}")
        with contextlib.suppress(httpx.HTTPError):
            self.http.post("/flush_cache")
        marks = [max((r.forward_ct for r in rows), default=-1) for rows in self.rows()]
        n = bs * self.dp
        mnt = self.max_new_tokens(min_steps, min_seconds)
        high = self.vocab_size - 1000
        payload = {
            "input_ids": [[self.rng.randrange(1000, high) for _ in range(16)] for _ in range(n)],
            "sampling_params": {"temperature": 1.0, "max_new_tokens": mnt, "ignore_eos": True},
            "stream": False,
        }

        def post() -> None:
            try:
                with httpx.Client(base_url=self.base_url, timeout=600.0) as c:
                    c.post("/generate", json=payload)
            except httpx.HTTPError:
                pass

        thread = threading.Thread(target=post, daemon=True)
        thread.start()
        deadline = time.monotonic() + self.real(ROUND_TIMEOUT_SECONDS)
        steady_start: float | None = None
        while time.monotonic() < deadline:
            time.sleep(self.real(POLL_INTERVAL_SECONDS))
            new = [
                [r for r in rows if r.forward_ct > m]
                for rows, m in zip(self.rows(), marks, strict=False)
            ]
            aligned = self.aligned_count(new, bs)
            if aligned >= WARMUP_STEPS and steady_start is None:
                steady_start = time.monotonic()
            steady = max(0, aligned - WARMUP_STEPS)
            secs = time.monotonic() - steady_start if steady_start else 0.0
            if steady >= min_steps and secs >= self.real(min_seconds):
                break
        self.http.post("/abort_request", json={"abort_all": True})
        thread.join(self.real(60.0) + 5)
        new = [
            [r for r in rows if r.forward_ct > m]
            for rows, m in zip(self.rows(), marks, strict=False)
        ]
        return self.postprocess(new, bs, frac, min_steps)

    def postprocess(
        self, rank_rows: list[list[Row]], bs: int, frac: float | None, min_steps: int
    ) -> dict[str, Any]:
        by_ct = [{r.forward_ct: r for r in rows} for rows in rank_rows]
        common = set(by_ct[0])
        for m in by_ct[1:]:
            common &= set(m)
        aligned = [ct for ct in sorted(common) if all(m[ct].num_running_reqs == bs for m in by_ct)]
        if len(aligned) < WARMUP_STEPS + min_steps:
            raise RuntimeError(f"bs={bs} never stabilized")
        steady = aligned[WARMUP_STEPS:]
        times = [statistics.fmean(m[ct].step_time for m in by_ct) for ct in steady]
        tiers = {m[ct].num_verify_tokens for ct in aligned for m in by_ct}
        if frac is None:
            batch_tokens = bs * self.k
        else:
            if len(tiers) != 1:
                raise RuntimeError(f"bs={bs} frac={frac}: differing tiers {sorted(tiers)}")
            batch_tokens = bs + int(frac * bs * (self.k - 1))
            if next(iter(tiers)) < batch_tokens:
                raise RuntimeError("the budget pin did not take")
        return {
            "batch_size_per_rank": bs,
            "frac": frac,
            "batch_tokens": batch_tokens,
            "steps_per_sec": 1.0 / statistics.median(times),
            "num_steady_steps": len(steady),
        }

    def run(
        self, batch_sizes: list[int], fracs: list[float] | None, repeats: int = 1
    ) -> list[dict[str, Any]]:
        frac_sweep: list[float | None] = [*sorted(fracs)] if fracs else [None]
        with contextlib.suppress(Exception):  # the reference swallows warm-up failures
            self.run_round(min(8, max(batch_sizes)), frac_sweep[-1], WARMUP_ROUND_STEADY_STEPS, 0.0)
        rounds = []
        for repeat in range(repeats):
            for bs in sorted(set(batch_sizes)):
                for frac in frac_sweep:
                    r = self.run_round(bs, frac, MIN_STEADY_STEPS, MIN_STEADY_SECONDS)
                    r["repeat"] = repeat
                    rounds.append(r)
        return rounds

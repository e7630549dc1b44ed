"""HTTP helpers for the simulator's contract tests: drive rounds like a profiler client."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import httpx

TIMEOUT = 60.0


def server_info(url: str) -> dict[str, Any]:
    resp = httpx.get(url + "/server_info", timeout=TIMEOUT)
    resp.raise_for_status()
    return resp.json()


def rank_records(url: str) -> list[list[dict[str, Any]]]:
    return [state["dspark_info_record"]["records"] for state in server_info(url)["internal_states"]]


def set_pin(url: str, frac: float | None) -> httpx.Response:
    return httpx.post(
        url + "/set_internal_state",
        json={"server_args": {"dspark_force_budget_frac": frac}},
        timeout=TIMEOUT,
    )


def generate(
    url: str, num_requests: int, max_new_tokens: int, input_len: int = 16
) -> httpx.Response:
    payload = {
        "input_ids": [[1000 + i] * input_len for i in range(num_requests)],
        "sampling_params": {
            "temperature": 1.0,
            "max_new_tokens": max_new_tokens,
            "ignore_eos": True,
        },
        "stream": False,
    }
    return httpx.post(url + "/generate", json=payload, timeout=TIMEOUT)


@dataclass
class Round:
    rows: list[list[dict[str, Any]]]  # new records per DP rank
    response: httpx.Response

    def aligned(self, bs_per_rank: int) -> list[list[dict[str, Any]]]:
        """Per rank: timed rows at the target batch on forward_cts common to every rank."""
        by_ct = [{r["forward_ct"]: r for r in rows if "step_cpu_ms" in r} for rows in self.rows]
        common = set(by_ct[0])
        for d in by_ct[1:]:
            common &= set(d)
        cts = sorted(
            ct for ct in common if all(d[ct]["num_running_reqs"] == bs_per_rank for d in by_ct)
        )
        return [[d[ct] for ct in cts] for d in by_ct]


def run_round(
    url: str,
    *,
    bs_per_rank: int,
    dp_size: int = 1,
    max_new_tokens: int = 40,
    frac: float | None = None,
) -> Round:
    """Pin (optional), flush, note watermarks, run one batch to completion, collect new rows."""
    if frac is not None:
        resp = set_pin(url, frac)
        assert resp.status_code == 200 and all(resp.json()), resp.text
    httpx.post(url + "/flush_cache", timeout=TIMEOUT)
    marks = [max((r["forward_ct"] for r in rows), default=-1) for rows in rank_records(url)]
    response = generate(url, bs_per_rank * dp_size, max_new_tokens)
    rows = [
        [r for r in rows if r["forward_ct"] > mark]
        for rows, mark in zip(rank_records(url), marks, strict=True)
    ]
    return Round(rows=rows, response=response)


def generate_in_background(
    url: str, num_requests: int, max_new_tokens: int
) -> tuple[threading.Thread, list[httpx.Response]]:
    out: list[httpx.Response] = []

    def post() -> None:
        out.append(generate(url, num_requests, max_new_tokens))

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread, out

"""Server-state engine of the simulated DSpark server (pure: no I/O, time is passed in).

The engine holds DP ranks, their queues, ``forward_ct`` counters, the record rings and the
budget pin, and advances them to a given model time. Model time is whatever the driver says
(the HTTP layer derives it from a scaled monotonic clock; tests may pass any numbers). Every
step's duration comes from the cost model, never from how fast this code runs, so simulator
overhead cannot leak into the recorded ``step_cpu_ms``.

Ranks run independently, each on its own timeline, unless dp-attention is on: then all ranks
step in lockstep (one shared timeline, the step lasts as long as the slowest rank, idle ranks
run idle batches that still advance ``forward_ct``).
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sps_operator import dspark_arith
from sps_sim.costmodel import CostPreset, NoiseSource
from sps_sim.tableload import LoadedTable

MODES = ("static", "cap-accept", "compact")
KNOWN_COMPONENTS = (
    "core",
    "step_cpu_time",
    "step_gpu_time",
    "draft_gpu_time",
    "target_verify_gpu_time",
    "reqs",
)
SET_INTERNAL_STATE_KEYS = (
    "pp_max_micro_batch_size",
    "speculative_accept_threshold_single",
    "speculative_accept_threshold_acc",
    "dspark_force_budget_frac",
    "dspark_clear_info_records",
)
# Per-draft-position survival probability the simulated confidence head reports; only used
# when a real table drives the budget argmax (no pin).
SURVIVAL_PER_POSITION = 0.75
STEP_CPU_MS_MAX_GAP_S = 1.0
# Decode steps after a prefill whose confidence relay has not resolved (no budget, full width).
# One: that step also lacks step_cpu_ms, so aligned timed rows all carry the pin; with more,
# SGLang's own profiler would see two tiers per pinned round and fail on a fixed server.
UNRESOLVED_DECODE_STEPS = 1


@dataclass(frozen=True)
class EngineConfig:
    mode: str = "static"
    gamma: int = 7
    dp_size: int = 1
    dp_attention: bool = False
    dspark: bool = True
    capture_bs: tuple[int, ...] = ()  # server-args decode list; empty when graphs are off
    max_running_per_dp: int = 48
    token_capacity_per_dp: int = 812_345
    components: frozenset[str] = frozenset()
    simulate_acc_len: float | None = None
    simulate_acc_method: str = "match-expected"
    verify_all_bug: bool = True
    table: LoadedTable | None = None
    # Smallest predicted gain over verify-all worth trimming for (PR #35413 sets 0.05 with
    # the table it derives; 0 = the plain argmax).
    min_predicted_gain: float = 0.0
    lag_steps: int = 2
    overlap_schedule: bool = True
    ring_size: int = 200_000
    seed: int = 0

    @property
    def verify_num_draft_tokens(self) -> int:
        return self.gamma + 1

    @property
    def is_verify_all(self) -> bool:
        """SGLang's ``_is_verify_all``: compact with no table or a flat (≤1 probe) one."""
        return self.mode == "compact" and (self.table is None or self.table.uninitialized)

    @property
    def records_enabled(self) -> bool:
        return self.dspark and bool(self.components)


@dataclass
class Request:
    rid: str
    rank: int
    input_ids_len: int
    max_new_tokens: int
    created_at: float
    output_ids: list[int] = field(default_factory=list)
    finish_reason: dict[str, Any] | None = None
    abort_at: float | None = None
    finished_at: float | None = None
    accepted_carry: float = 0.0
    verify_steps: int = 0

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RankStepPlan:
    kind: str  # "prefill" | "decode" | "idle"
    requests: list[Request]
    seconds: float
    record: dict[str, Any] | None = None  # decode record without step_cpu_ms


@dataclass
class GroupStep:
    start: float
    end: float
    plans: dict[int, RankStepPlan]


@dataclass
class RankState:
    index: int
    waiting: deque[Request] = field(default_factory=deque)
    running: list[Request] = field(default_factory=list)
    forward_ct: int = 0
    ring: deque[bytes] = field(default_factory=deque)
    last_kind: str = "none"
    decode_steps_since_prefill: int = 0
    pin: float | None = None
    overrides: dict[str, int | float] = field(default_factory=dict)
    spec_verify_ct: int = 0
    spec_accepted_tokens: int = 0
    # Cumulative, never cleared (not even by dspark_clear_info_records): simulated GPU use.
    busy_model_seconds: float = 0.0
    decode_steps: int = 0
    prefill_steps: int = 0


@dataclass
class Group:
    ranks: list[int]
    t: float = 0.0
    pending: GroupStep | None = None
    last_end: float = -math.inf
    warm_start: float = 0.0


class Engine:
    """The simulated scheduler state of every DP rank."""

    def __init__(self, config: EngineConfig, preset: CostPreset, *, now: float = 0.0) -> None:
        if config.mode not in MODES:
            raise ValueError(f"unknown ragged verify mode {config.mode!r}")
        self.config = config
        self.preset = preset
        self.noise = NoiseSource(preset, config.seed)
        self._token_rng_state = config.seed * 2654435761 % (2**32) or 1
        k = config.verify_num_draft_tokens
        self.runner_bs = dspark_arith.runner_capture_bs(
            config.capture_bs, config.max_running_per_dp
        )
        self.tiers = (
            dspark_arith.compact_tiers(self.runner_bs, k) if config.mode == "compact" else []
        )
        self.ranks = [RankState(index=i) for i in range(config.dp_size)]
        for rank in self.ranks:
            rank.ring = deque(maxlen=config.ring_size)
        if config.dp_attention:
            self.groups = [Group(ranks=list(range(config.dp_size)), t=now)]
        else:
            self.groups = [Group(ranks=[i], t=now) for i in range(config.dp_size)]
        self.requests: dict[str, Request] = {}
        self.finished: list[Request] = []
        self._rr_next = 0
        self._rid_counter = 0
        self._budget_cache: dict[int, tuple[int, float, float]] = {}
        self.now = now

    # ------------------------------------------------------------------ requests

    def new_rid(self) -> str:
        self._rid_counter += 1
        return f"sim-{self._rid_counter:08x}"

    def submit(self, prompts: Sequence[tuple[str | None, int, int]], now: float) -> list[Request]:
        """Queue prompts (rid or None, input length, max_new_tokens), round-robin over ranks."""
        self.advance(now)
        out: list[Request] = []
        for rid, input_len, max_new_tokens in prompts:
            rid = rid or self.new_rid()
            if rid in self.requests and not self.requests[rid].finished:
                raise ValueError(f"Duplicate request ID: {rid}")
            rank = self._rr_next % self.config.dp_size
            self._rr_next += 1
            req = Request(
                rid=rid,
                rank=rank,
                input_ids_len=input_len,
                max_new_tokens=max_new_tokens,
                created_at=now,
            )
            self.requests[rid] = req
            self.ranks[rank].waiting.append(req)
            out.append(req)
        for group in self.groups:
            if group.pending is None:
                group.t = max(group.t, now)
        return out

    def abort(self, now: float, *, rid: str | None = None, abort_all: bool = False) -> None:
        """Mark requests aborted; running ones finish after one more decode step."""
        self.advance(now)
        for rank in self.ranks:
            for req in list(rank.waiting):
                if abort_all or req.rid == rid:
                    rank.waiting.remove(req)
                    self._finish(req, _abort_reason(), now)
            for req in rank.running:
                if (abort_all or req.rid == rid) and req.abort_at is None:
                    req.abort_at = now
        for group in self.groups:
            if group.pending is not None:
                for plan in group.pending.plans.values():
                    for req in plan.requests:
                        if (abort_all or req.rid == rid) and req.abort_at is None:
                            req.abort_at = now

    def pending_work(self) -> bool:
        return any(r.waiting or r.running for r in self.ranks)

    def flush_cache(self, now: float) -> bool:
        self.advance(now)
        return not self.pending_work() and all(g.pending is None for g in self.groups)

    def drain_finished(self) -> list[Request]:
        out, self.finished = self.finished, []
        for req in out:
            self.requests.pop(req.rid, None)
        return out

    # ------------------------------------------------------------------ internal state

    def set_internal_state(self, server_args: dict[str, Any], now: float) -> list[bool]:
        """SGLang's ``Scheduler.set_internal_state`` on every rank: validate, then apply."""
        self.advance(now)
        results = []
        for rank in self.ranks:
            ok = self._validate_internal_state(server_args)
            if ok:
                self._apply_internal_state(rank, server_args)
            results.append(ok)
        return results

    def _validate_internal_state(self, server_args: dict[str, Any]) -> bool:
        for key, value in server_args.items():
            if key not in SET_INTERNAL_STATE_KEYS:
                return False
            if key == "dspark_force_budget_frac":
                if not self.config.dspark:
                    return False
                if value is not None and not 0 < float(value) <= 1:
                    return False
            if key == "dspark_clear_info_records" and not self.config.dspark:
                return False
        return True

    def _apply_internal_state(self, rank: RankState, server_args: dict[str, Any]) -> None:
        rank.spec_verify_ct = 0
        rank.spec_accepted_tokens = 0
        for key, value in server_args.items():
            if key == "dspark_force_budget_frac":
                rank.pin = None if value is None else float(value)
            elif key == "dspark_clear_info_records":
                if value:
                    rank.ring.clear()
            else:
                rank.overrides[key] = value

    def clear_records(self) -> None:
        for rank in self.ranks:
            rank.ring.clear()

    # ------------------------------------------------------------------ time

    def next_event_time(self) -> float | None:
        """Model time at which the next step completes (None when every rank is idle)."""
        times = []
        for group in self.groups:
            if group.pending is None:
                group.pending = self._plan_group(group)
            if group.pending is not None:
                times.append(group.pending.end)
        return min(times) if times else None

    def advance(self, now: float) -> int:
        """Complete every step that ends at or before ``now``; returns how many ran."""
        self.now = max(self.now, now)
        completed = 0
        for group in self.groups:
            while True:
                if group.pending is None:
                    group.pending = self._plan_group(group)
                    if group.pending is None:
                        break
                if group.pending.end > now:
                    break
                self._commit(group, group.pending)
                group.last_end = group.pending.end
                group.t = group.pending.end
                group.pending = None
                completed += 1
        return completed

    # ------------------------------------------------------------------ planning

    def _plan_group(self, group: Group) -> GroupStep | None:
        if not any(self.ranks[r].waiting or self.ranks[r].running for r in group.ranks):
            return None
        start = group.t
        if start - group.last_end > self.preset.warmup_idle_threshold_s:
            group.warm_start = start
        since_warm = start - group.warm_start
        kinds: dict[int, tuple[str, list[Request]]] = {}
        for r in group.ranks:
            kinds[r] = self._choose_batch(self.ranks[r])
        global_bs = max((len(reqs) for kind, reqs in kinds.values() if kind == "decode"), default=0)
        plans: dict[int, RankStepPlan] = {}
        for r, (kind, reqs) in kinds.items():
            record: dict[str, Any] | None = None
            if kind == "prefill":
                base = self.preset.prefill_seconds(len(reqs), sum(q.input_ids_len for q in reqs))
            elif kind == "decode":
                record, base = self._plan_decode(self.ranks[r], reqs, global_bs)
            else:
                plans[r] = RankStepPlan("idle", [], 0.0)
                continue
            seconds = base * self.noise.factor(since_warm, start, r) + self.noise.stall_seconds()
            plans[r] = RankStepPlan(kind, reqs, seconds, record)
        seconds = max(p.seconds for p in plans.values())
        return GroupStep(start=start, end=start + seconds, plans=plans)

    def _choose_batch(self, rank: RankState) -> tuple[str, list[Request]]:
        if rank.waiting and len(rank.running) < self.config.max_running_per_dp:
            used = sum(q.input_ids_len + q.max_new_tokens for q in rank.running)
            admitted: list[Request] = []
            room = self.config.max_running_per_dp - len(rank.running)
            for req in rank.waiting:
                if len(admitted) >= room:
                    break
                need = req.input_ids_len + req.max_new_tokens
                if used + need > self.config.token_capacity_per_dp and (rank.running or admitted):
                    break
                admitted.append(req)
                used += need
            if admitted:
                for _ in admitted:
                    rank.waiting.popleft()
                return "prefill", admitted
        if rank.running:
            return "decode", list(rank.running)
        return "idle", []

    def _plan_decode(
        self, rank: RankState, reqs: list[Request], global_bs: int
    ) -> tuple[dict[str, Any], float]:
        """The decode record (no ``step_cpu_ms`` yet) and the noise-free step time."""
        cfg = self.config
        k = cfg.verify_num_draft_tokens
        bs = len(reqs)
        record: dict[str, Any] = {"forward_ct": 0, "bs": bs, "mode": cfg.mode}
        budget: int | None = None
        verify_local: int | None = None
        predicted: tuple[float, float] | None = None
        graph_bs = dspark_arith.round_up(self.runner_bs, bs) if self.runner_bs else None
        if cfg.mode == "static":
            num_verify = bs * k
            replay_tokens = (graph_bs or bs) * k
            eager = graph_bs is None
        else:
            resolved = rank.decode_steps_since_prefill >= UNRESOLVED_DECODE_STEPS
            if resolved:
                if rank.pin is not None:
                    budget = dspark_arith.forced_budget(rank.pin, bs, cfg.gamma)
                elif cfg.table is not None and not cfg.table.uninitialized:
                    budget, step_ms, theta = self._table_budget(bs)
                    predicted = (step_ms, theta)
                else:
                    # A flat table looks up 1.0 everywhere, so the argmax takes every candidate.
                    budget = bs * cfg.gamma
                verify_local = dspark_arith.verify_tokens_for_budget(bs, budget, k)
            if cfg.mode == "cap-accept":
                # Scheduled sum, but the forward itself runs full width.
                num_verify = verify_local if verify_local is not None else bs * k
                replay_tokens = (graph_bs or bs) * k
                eager = graph_bs is None
            else:
                num_verify, replay_tokens, eager = self._compact_tier(
                    rank, bs, verify_local, global_bs
                )
        if budget is not None:
            record["budget"] = budget
        if cfg.mode != "static":
            record["lag_steps"] = cfg.lag_steps
        record["num_running_reqs"] = bs
        record["num_verify_tokens"] = num_verify
        if verify_local is not None and cfg.overlap_schedule:
            record["verify_tokens_local"] = verify_local
        record["verify_tokens_graph_key"] = num_verify
        if predicted is not None:
            record["predicted_step_ms"] = round(predicted[0], 4)
            record["predicted_theta"] = round(predicted[1], 6)
        context = sum(q.input_ids_len + len(q.output_ids) for q in reqs)
        seconds = self.preset.decode_seconds_at_context(bs, replay_tokens, context, eager=eager)
        return record, seconds

    def _compact_tier(
        self, rank: RankState, bs: int, verify_local: int | None, global_bs: int
    ) -> tuple[int, int, bool]:
        """(num_verify_tokens, tokens the GPU runs, eager?) for a compact step."""
        cfg = self.config
        k = cfg.verify_num_draft_tokens
        if not self.tiers:  # CUDA graphs disabled: eager ragged forward of exactly M tokens
            m = verify_local if verify_local is not None else bs * k
            return m, m, True
        if cfg.dp_attention:
            # No dynamic tier under dp-attention: the graph is full width for the global bs.
            tier = dspark_arith.round_up(self.tiers, global_bs * k)
            if global_bs > self.runner_bs[-1] or tier is None:
                return bs * k, bs * k, True
            return tier, tier, False
        if bs > self.runner_bs[-1]:
            return bs * k, bs * k, True
        shortcut = cfg.is_verify_all and (cfg.verify_all_bug or rank.pin is None)
        # The shortcut (and a step with no budget yet) replays the uniform full-width layout.
        floor = bs * k if verify_local is None or shortcut else min(verify_local, bs * k)
        tier = dspark_arith.round_up(self.tiers, floor)
        if tier is None:
            return bs * k, bs * k, True
        return tier, tier, False

    def _table_budget(self, bs: int) -> tuple[int, float, float]:
        """Budget argmax over ``tau_star / step_time`` as the planner does with a real table."""
        cached = self._budget_cache.get(bs)
        if cached is not None:
            return cached
        cfg = self.config
        table = cfg.table
        assert table is not None
        survival = [SURVIVAL_PER_POSITION ** (j + 1) for j in range(cfg.gamma)]
        candidates = sorted((s for s in survival for _ in range(bs)), reverse=True)
        scored: list[tuple[int, float, float]] = []  # (budget, step ms, theta)
        prefix = 0.0
        for k in range(len(candidates) + 1):
            if k > 0:
                prefix += candidates[k - 1]
            tau = bs + prefix
            if table.kind == "additive":
                step = table.additive_step_time(bs, k)
                theta = tau / step if step > 0 else -math.inf
            else:
                sps = table.diagonal_lookup(bs + k)
                step = 1.0 / sps if sps > 0 else math.inf
                theta = tau * sps
            scored.append((k, step * 1000.0, theta))
        best = max(scored, key=lambda row: row[2])  # the first maximum, as torch.argmax
        verify_all = scored[-1]
        if cfg.min_predicted_gain > 0 and (
            verify_all[2] <= 0 or best[2] < verify_all[2] * (1.0 + cfg.min_predicted_gain)
        ):
            best = verify_all
        self._budget_cache[bs] = best
        return best

    # ------------------------------------------------------------------ commit

    def _commit(self, group: Group, step: GroupStep) -> None:
        seconds = step.end - step.start
        for r, plan in step.plans.items():
            rank = self.ranks[r]
            rank.forward_ct += 1
            if plan.kind != "idle":
                rank.busy_model_seconds += seconds
            if plan.kind == "prefill":
                rank.prefill_steps += 1
                self._commit_prefill(rank, plan, step)
                rank.last_kind = "prefill"
                rank.decode_steps_since_prefill = 0
            elif plan.kind == "decode":
                rank.decode_steps += 1
                self._commit_decode(rank, plan, step, seconds)
                rank.last_kind = "decode"
                rank.decode_steps_since_prefill += 1
            else:
                rank.last_kind = "idle"

    def _commit_prefill(self, rank: RankState, plan: RankStepPlan, step: GroupStep) -> None:
        for req in plan.requests:
            if req.max_new_tokens <= 0:
                self._finish(req, {"type": "length", "length": 0}, step.end)
                continue
            req.output_ids.append(self._token())
            if len(req.output_ids) >= req.max_new_tokens:
                self._finish(req, {"type": "length", "length": req.max_new_tokens}, step.end)
            else:
                rank.running.append(req)

    def _commit_decode(
        self, rank: RankState, plan: RankStepPlan, step: GroupStep, seconds: float
    ) -> None:
        if self.config.records_enabled and plan.record is not None:
            record = dict(plan.record)
            record["forward_ct"] = rank.forward_ct
            self._add_timings(record, rank, plan, seconds)
            rank.ring.append(json.dumps(record, separators=(",", ":")).encode())
        still_running: list[Request] = []
        in_step = {id(q) for q in plan.requests}
        for req in rank.running:
            if id(req) not in in_step:
                still_running.append(req)
                continue
            accepted = self._accepted_tokens(req)
            rank.spec_verify_ct += 1
            rank.spec_accepted_tokens += accepted
            req.verify_steps += 1
            room = req.max_new_tokens - len(req.output_ids)
            for _ in range(min(accepted, room)):
                req.output_ids.append(self._token())
            if req.abort_at is not None and req.abort_at <= step.start:
                self._finish(req, _abort_reason(), step.end)
            elif len(req.output_ids) >= req.max_new_tokens:
                self._finish(req, {"type": "length", "length": req.max_new_tokens}, step.end)
            else:
                still_running.append(req)
        rank.running = still_running

    def _add_timings(
        self, record: dict[str, Any], rank: RankState, plan: RankStepPlan, seconds: float
    ) -> None:
        comps = self.config.components
        # The first decode step after any prefill/idle step has no previous observe.
        timed = rank.last_kind == "decode" and 0 < seconds <= STEP_CPU_MS_MAX_GAP_S
        if "step_cpu_time" in comps and timed:
            record["step_cpu_ms"] = round(seconds * 1000.0, 4)
        if "step_gpu_time" in comps:
            record["step_gpu_ms"] = round(plan.seconds * 1000.0 * 0.96, 4)
        if "draft_gpu_time" in comps:
            record["draft_gpu_ms"] = round(plan.seconds * 1000.0 * 0.18, 4)
        if "target_verify_gpu_time" in comps:
            record["target_verify_gpu_ms"] = round(plan.seconds * 1000.0 * 0.7, 4)
        if "reqs" in comps:
            record["reqs"] = [q.rid for q in plan.requests]

    def _accepted_tokens(self, req: Request) -> int:
        """Tokens committed by one verify step (SGLANG_SIMULATE_ACC_LEN semantics)."""
        acc = self.config.simulate_acc_len
        if acc == 1.0:  # the profiling setting: exactly the bonus token
            return 1
        k = self.config.verify_num_draft_tokens
        if acc is None:
            # No simulation: a plausible real acceptance, deterministic per step index.
            pattern = (3, 4, 2, 5, 3, 1, 4, 3)
            return min(k, pattern[req.verify_steps % len(pattern)])
        if self.config.simulate_acc_method == "multinomial":
            value = self.noise.gauss(acc, 1.0)
            return int(min(max(round(value), 1), k))
        # match-expected: commit floor/ceil so the running mean equals acc.
        req.accepted_carry += acc
        n = int(req.accepted_carry + 1e-9)
        req.accepted_carry -= n
        return min(max(n, 1), k)

    def _token(self) -> int:
        # xorshift: cheap deterministic token ids in [1000, 31000).
        x = self._token_rng_state
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        self._token_rng_state = x
        return 1000 + x % 30000

    def _finish(self, req: Request, reason: dict[str, Any], at: float) -> None:
        if req.finish_reason is None:
            req.finish_reason = reason
            req.finished_at = at
            self.finished.append(req)

    # ------------------------------------------------------------------ views

    def records(self, rank: int) -> list[dict[str, Any]]:
        return [json.loads(b) for b in self.ranks[rank].ring]

    def records_json(self, rank: int) -> bytes:
        return b"[" + b",".join(self.ranks[rank].ring) + b"]"

    def iter_ranks(self) -> Iterable[RankState]:
        return iter(self.ranks)


def _abort_reason() -> dict[str, Any]:
    return {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}

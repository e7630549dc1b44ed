"""Thin HTTP layer of sps-sim: SGLang's HTTP routes over the pure engine (served by http_wire).

Model time = (monotonic - start) * time_scale. A driver task completes engine steps as model
time passes; every handler first brings the engine up to "now", so the simulated server
behaves the same whatever this process's own latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

import sps_operator
from sps_sim import protocol
from sps_sim.engine import Engine, Request
from sps_sim.group import lead, serve_as_worker, table_identity
from sps_sim.http_wire import (
    Handler,
    HttpRequest,
    HttpServer,
    Response,
    json_response,
    text_response,
)
from sps_sim.settings import SimSettings

log = logging.getLogger("sps_sim")

FLUSH_OK_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
FLUSH_FAILED_TEXT = "Flush cache failed.\n"
_RECORDS_PLACEHOLDER = "__sps_sim_records_{}__"


class SimServer:
    """One simulated SGLang server: an engine, a driver task and the HTTP routes."""

    def __init__(
        self, settings: SimSettings, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._t0 = clock()
        self._scale = settings.time_scale
        self.engine = Engine(settings.engine, settings.preset, now=0.0)
        self._waiters: dict[str, asyncio.Future[Request]] = {}
        self._wake: asyncio.Event | None = None
        self._driver: asyncio.Task[None] | None = None
        self._http: HttpServer | None = None
        self.startup_time = 0.0
        self.port: int | None = None

    # ------------------------------------------------------------------ time

    def model_now(self) -> float:
        return (self._clock() - self._t0) * self._scale

    def _sync(self) -> float:
        now = self.model_now()
        self.engine.advance(now)
        self._deliver()
        return now

    def _deliver(self) -> None:
        for req in self.engine.drain_finished():
            fut = self._waiters.pop(req.rid, None)
            if fut is not None and not fut.done():
                fut.set_result(req)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _drive(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            self._sync()
            next_end = self.engine.next_event_time()
            if next_end is None:
                await self._wake.wait()
                continue
            delay = (next_end - self.model_now()) / self._scale
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
            else:
                await asyncio.sleep(0)  # let handlers in while catching up

    # ------------------------------------------------------------------ lifecycle

    def routes(self) -> dict[tuple[str, str], Handler]:
        routes: dict[tuple[str, str], Handler] = {
            ("GET", "/server_info"): self.handle_server_info,
            ("GET", "/get_server_info"): self.handle_server_info,
            ("POST", "/abort_request"): self.handle_abort,
            ("GET", "/flush_cache"): self.handle_flush_cache,
            ("POST", "/flush_cache"): self.handle_flush_cache,
            ("GET", "/health"): self.handle_health,
            ("GET", "/health_generate"): self.handle_health,
            ("GET", "/model_info"): self.handle_model_info,
            ("GET", "/get_model_info"): self.handle_model_info,
            ("GET", "/v1/models"): self.handle_models,
        }
        for method in ("POST", "PUT"):
            routes[(method, "/generate")] = self.handle_generate
            routes[(method, "/set_internal_state")] = self.handle_set_internal_state
        return routes

    async def start(self, host: str | None = None, port: int | None = None) -> int:
        started = time.monotonic()
        self._wake = asyncio.Event()
        self._t0 = self._clock()
        self._driver = asyncio.get_running_loop().create_task(self._drive())
        self._http = HttpServer(self.routes())
        self.port = await self._http.start(
            host or self.settings.host, self.settings.port if port is None else port
        )
        self.startup_time = round(time.monotonic() - started, 3)
        return self.port

    async def stop(self) -> None:
        for fut in self._waiters.values():
            fut.cancel()
        self._waiters.clear()
        await asyncio.sleep(0)
        if self._http is not None:
            await self._http.stop()
            self._http = None
        if self._driver is not None:
            self._driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._driver
            self._driver = None

    # ------------------------------------------------------------------ routes

    async def handle_health(self, request: HttpRequest) -> Response:
        return Response(200)

    async def handle_model_info(self, request: HttpRequest) -> Response:
        args = self.settings.server_args
        return json_response(
            {
                "model_path": args["model_path"],
                "tokenizer_path": args["tokenizer_path"],
                "is_generation": True,
            }
        )

    async def handle_models(self, request: HttpRequest) -> Response:
        name = self.settings.server_args["served_model_name"]
        return json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": 0,
                        "owned_by": "sglang",
                        "root": name,
                    }
                ],
            }
        )

    async def handle_server_info(self, request: HttpRequest) -> Response:
        self._sync()
        body = self.server_info_bytes()
        return Response(200, body, "application/json")

    def server_info_bytes(self) -> bytes:
        """The /server_info JSON; record rings are spliced in as pre-encoded fragments."""
        cfg = self.settings.engine
        args = self.settings.server_args
        states = []
        for rank in self.engine.iter_ranks():
            state: dict[str, Any] = dict(args)
            state.update(rank.overrides)
            state["last_gen_throughput"] = 0.0
            state["memory_usage"] = {
                "weight": 15.2,
                "kvcache": 60.1,
                "startup_available": 80.0,
                "token_capacity": self.settings.token_capacity_per_dp,
                "token_capacity_swa": None,
                "graph": {"decode": 1.2},
            }
            state["effective_max_running_requests_per_dp"] = cfg.max_running_per_dp
            if self.settings.own_env is not None:
                state["env_vars"] = self.settings.own_env
            if rank.spec_verify_ct > 0:
                state["avg_spec_accept_length"] = rank.spec_accepted_tokens / rank.spec_verify_ct
            if cfg.records_enabled:
                state["dspark_info_record"] = {
                    "mode": cfg.mode,
                    "gamma": cfg.gamma,
                    "verify_num_draft_tokens": cfg.verify_num_draft_tokens,
                    "components": sorted(cfg.components),
                    "records": _RECORDS_PLACEHOLDER.format(rank.index),
                    "simulate_acc_len": cfg.simulate_acc_len,
                }
            states.append(state)
        ranks = list(self.engine.iter_ranks())
        info: dict[str, Any] = dict(args)
        info.update(
            {
                "status": "ready",
                "max_total_num_tokens": self.settings.token_capacity_per_dp,
                "max_req_input_len": self.settings.token_capacity_per_dp - 1024,
                "startup_time": self.startup_time,
                "internal_states": states,
                "version": f"{sps_operator.__version__}+sps-sim",
                "kv_events": None,
                "sps_table": self.settings.table_info,
                "sim_stats": {
                    "model_time_s": round(self.engine.now, 6),
                    "busy_model_seconds": max(r.busy_model_seconds for r in ranks),
                    "busy_model_seconds_per_rank": [r.busy_model_seconds for r in ranks],
                    "decode_steps": sum(r.decode_steps for r in ranks),
                    "prefill_steps": sum(r.prefill_steps for r in ranks),
                },
                "sps_sim": {
                    "preset": self.settings.preset.name,
                    "time_scale": self.settings.time_scale,
                    "seed": self.settings.seed,
                    "seed_given": self.settings.seed_given,
                    "sglang_flavor": self.settings.sglang_flavor,
                    "capture_derived_sps": self.settings.capture_derived_status,
                    "verify_all_bug": self.settings.verify_all_bug_setting,
                    "verify_all_shortcut_active": cfg.is_verify_all and cfg.verify_all_bug,
                },
            }
        )
        text = json.dumps(info, separators=(",", ":"))
        if not cfg.records_enabled:
            return text.encode()
        parts: list[bytes] = []
        rest = text
        for rank in self.engine.iter_ranks():
            marker = json.dumps(_RECORDS_PLACEHOLDER.format(rank.index))
            head, _, rest = rest.partition(marker)
            parts.append(head.encode())
            parts.append(self.engine.records_json(rank.index))
        parts.append(rest.encode())
        return b"".join(parts)

    async def handle_generate(self, request: HttpRequest) -> Response:
        raw = request.body
        parsed = protocol.parse_generate(raw)
        if isinstance(parsed, protocol.HttpError):
            return parsed.response()
        now = self._sync()
        try:
            reqs = self.engine.submit(
                [(p.rid, p.input_len, p.max_new_tokens) for p in parsed.prompts], now
            )
        except ValueError as exc:
            return protocol.error_response(str(exc), 400)
        loop = asyncio.get_running_loop()
        futures = []
        for req in reqs:
            fut: asyncio.Future[Request] = loop.create_future()
            self._waiters[req.rid] = fut
            futures.append(fut)
        self._deliver()
        self._poke()
        started = time.monotonic()
        try:
            done = await asyncio.gather(*futures)
        except asyncio.CancelledError:
            # Client went away: the real server aborts its requests.
            for req in reqs:
                self._waiters.pop(req.rid, None)
                self.engine.abort(self.model_now(), rid=req.rid)
            self._poke()
            raise
        latency = time.monotonic() - started
        outs = [protocol.generate_output(req, latency, self.settings.engine.gamma) for req in done]
        body: Any = outs if parsed.batch else outs[0]
        if parsed.stream:
            events = [b"data: " + json.dumps(out).encode() + b"\n\n" for out in outs]
            return Response(
                200, content_type="text/event-stream", chunks=(*events, b"data: [DONE]\n\n")
            )
        return json_response(body, dumps=_compact_dumps)

    async def handle_abort(self, request: HttpRequest) -> Response:
        raw = request.body
        parsed = protocol.parse_abort(raw)
        if isinstance(parsed, protocol.HttpError):
            return parsed.response()
        rid, abort_all = parsed
        self.engine.abort(self.model_now(), rid=rid, abort_all=abort_all)
        self._deliver()
        self._poke()
        return Response(200)

    async def handle_flush_cache(self, request: HttpRequest) -> Response:
        timeout_raw = request.query.get("timeout")
        if timeout_raw is not None:
            error = protocol.check_flush_timeout(timeout_raw)
            if error is not None:
                return error.response()
        ok = self.engine.flush_cache(self.model_now())
        if ok:
            return text_response(FLUSH_OK_TEXT)
        return text_response(FLUSH_FAILED_TEXT, 400)

    async def handle_set_internal_state(self, request: HttpRequest) -> Response:
        raw = request.body
        parsed = protocol.parse_set_internal_state(
            raw, accept_null_pin=self.settings.accept_null_pin
        )
        if isinstance(parsed, protocol.HttpError):
            return parsed.response()
        results = self.engine.set_internal_state(parsed, self.model_now())
        self._poke()
        if self.settings.legacy_set_internal_state:
            return json_response(
                [
                    {"updated": ok, "server_args": dict(rank.overrides)}
                    for ok, rank in zip(results, self.engine.iter_ranks(), strict=True)
                ]
            )
        return json_response(results)


def _compact_dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


async def serve_forever(settings: SimSettings) -> None:
    """Serve until SIGTERM/SIGINT (a Kubernetes stop ends with exit code 0)."""
    server = SimServer(settings)
    port = await server.start()
    log.info(
        "sps-sim ready on http://%s:%s (preset %s, mode %s, time scale %g)",
        settings.host,
        port,
        settings.preset.name,
        settings.engine.mode,
        settings.time_scale,
    )
    print(f"The server is fired up and ready to roll! (sps-sim on port {port})", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()


async def serve_group(settings: SimSettings) -> None:
    """One rank of a multi-node group (sps_sim.group): rank 0 serves HTTP once every rank
    joined with the same table; another rank stays until rank 0 goes."""
    group = settings.group
    assert group is not None
    table = table_identity(settings.table_info)
    if not group.leader:
        await serve_as_worker(group, table)
        return
    rendezvous, workers = await lead(group, table)
    try:
        await serve_forever(settings)
    finally:
        for writer in workers:
            writer.close()
        rendezvous.close()

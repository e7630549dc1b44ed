"""The liveness endpoint: 200 while nothing is wrong, 503 with the reason once the
replica says it cannot work."""

from __future__ import annotations

import aiohttp

from sps_operator.controller.process.health import serve_health
from sps_testbed.processes import free_port


async def test_health_says_ok_then_why_it_cannot_work() -> None:
    problem: list[str] = []
    port = free_port()
    runner = await serve_health(
        f"http://127.0.0.1:{port}/healthz", lambda: problem[0] if problem else None
    )
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/healthz") as resp:
                assert resp.status == 200 and await resp.text() == "ok\n"
            problem.append("the Lease ns/ops has been refused for 61 s (HTTP 403 Forbidden)")
            async with session.get(f"http://127.0.0.1:{port}/healthz") as resp:
                assert resp.status == 503
                assert "HTTP 403 Forbidden" in await resp.text()
    finally:
        await runner.cleanup()


async def test_health_without_a_problem_source_is_always_ok() -> None:
    port = free_port()
    runner = await serve_health(f"http://127.0.0.1:{port}/live")
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/live") as resp,
        ):
            assert resp.status == 200
    finally:
        await runner.cleanup()

"""The liveness endpoint: 200 while the event loop answers, leading or standing by.

A standby replica must look alive (it is waiting for the Lease, not stuck), so this is
the operator's own endpoint rather than kopf's, which exists only while kopf runs. A
wedged event loop does not answer, and the kubelet restarts the pod; a replica that says
it cannot work (`problem`: e.g. its Lease refused for a minute) answers 503 with why."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from aiohttp import web


async def serve_health(url: str, problem: Callable[[], str | None] | None = None) -> web.AppRunner:
    """Serve GET <path of url> on its host and port; returns the runner to clean up."""
    parts = urlsplit(url)
    app = web.Application()

    async def healthy(_: web.Request) -> web.Response:
        reason = problem() if problem is not None else None
        if reason:
            return web.Response(status=503, text=f"{reason}\n")
        return web.Response(text="ok\n")

    app.router.add_get(parts.path or "/healthz", healthy)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, parts.hostname or "0.0.0.0", parts.port or 8080).start()
    return runner

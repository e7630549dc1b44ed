"""The operator's logs at the default level: its own lines, not one per watch event; and
ERROR only for what nothing retries (what kopf or the operator retries is a WARNING)."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from aiohttp import web

from sps_operator.controller.main import KOPF_WATCHING_LOGGER, configure_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    ours = logging.getLogger("sps_operator").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("sps_operator").setLevel(ours)


def test_default_level_drops_kopfs_per_event_lines_and_keeps_ours(restore_logging: None) -> None:
    configure_logging(debug=False, verbose=False, log_format="plain")
    assert not logging.getLogger("kopf.objects").isEnabledFor(logging.INFO)
    assert logging.getLogger("kopf.objects").isEnabledFor(logging.WARNING)
    assert logging.getLogger("sps_operator.controller.reconcile.reconciler").isEnabledFor(
        logging.INFO
    )


def test_verbose_shows_kopfs_handler_lines(restore_logging: None) -> None:
    configure_logging(debug=False, verbose=True, log_format="plain")
    assert logging.getLogger("kopf.objects").isEnabledFor(logging.INFO)


# --------------------------------------------------------------------------- item 28


class _Throttling:
    """A loopback API server that answers 429 (with Retry-After) `times` times, then 200."""

    def __init__(self, times: int) -> None:
        self.left = times

    async def handle(self, request: web.Request) -> web.Response:
        if self.left > 0:
            self.left -= 1
            status = {
                "kind": "Status",
                "status": "Failure",
                "reason": "TooManyRequests",
                "message": "Too many requests, please try again later.",
                "code": 429,
            }
            return web.json_response(status, status=429, headers={"Retry-After": "0"})
        return web.json_response({"kind": "ConfigMapList", "items": []})


async def _kopf_request_through_throttling(times: int, backoffs: list[float]) -> None:
    """kopf's own request path (the one its watchers' LISTs take at start-up) against a
    server that throttles it."""
    from kopf._cogs.clients import api
    from kopf._cogs.clients.auth import APIContext

    server = _Throttling(times)
    app = web.Application()
    app.router.add_get("/api/v1/configmaps", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    context = APIContext(kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}"))
    try:
        response = await api.request(
            "get",
            "/api/v1/configmaps",
            settings=kopf.OperatorSettings(),
            backoffs=backoffs,
            context=context,
            logger=logging.getLogger(KOPF_WATCHING_LOGGER),
        )
        response.close()
    finally:
        await context.close()
        await runner.cleanup()


def _lines(text: str, level: str) -> list[str]:
    return [line for line in text.splitlines() if f"[{level}" in line]


def test_a_429_kopf_retries_is_a_warning_not_an_error(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18, item 28: a 429 at start-up, which kopf retries, was logged as ERROR."""
    configure_logging(debug=False, verbose=False, log_format="full")
    asyncio.run(_kopf_request_through_throttling(times=1, backoffs=[0.0]))
    err = capsys.readouterr().err
    assert len(_lines(err, "WARNING")) == 1 and "will retry" in err, err
    assert "TooManyRequests" in err or "APITooManyRequestsError" in err
    assert not _lines(err, "ERROR"), err


def test_what_nothing_retries_stays_an_error(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(debug=False, verbose=False, log_format="full")
    log = logging.getLogger("kopf.objects")
    log.error("Handler 'sps_release' failed permanently: the release cannot be done")
    log.error("Handler 'sps_release' failed temporarily: 500 from the API server")
    logging.getLogger("kopf._core.reactor.running").error("Request attempt #9/9 failed; "
                                                          "escalating: GET /x -> 500")  # fmt: skip
    err = capsys.readouterr().err
    assert [line.split("] ", 2)[-1] for line in _lines(err, "ERROR")] == [
        "Handler 'sps_release' failed permanently: the release cannot be done",
        "Request attempt #9/9 failed; escalating: GET /x -> 500",
    ]
    assert "failed temporarily" in "".join(_lines(err, "WARNING"))


def test_the_retried_wording_is_the_installed_kopfs() -> None:
    """The filter recognises kopf's messages by their words: a kopf that words them
    differently must fail here, not silently log ERROR again."""
    from kopf._cogs.clients import api
    from kopf._core.actions import execution

    assert "failed; will retry: " in inspect.getsource(api.request)
    assert " failed temporarily: " in inspect.getsource(execution)
    assert "APITooManyRequestsError" in inspect.getsource(
        importlib.import_module(KOPF_WATCHING_LOGGER)
    )


def test_a_throttled_lease_is_a_warning_and_a_forbidden_one_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from fakerest import FakeRest, Sent

    from sps_operator.controller.process.leader import LeaseElector

    class Leases:
        status = 429

        def __call__(self, sent: Sent) -> tuple[int, dict[str, Any]]:
            return self.status, {"kind": "Status"}

    api = Leases()
    elector = LeaseElector("ops", "sps-system", "me", api=FakeRest(api).api)
    with caplog.at_level(logging.DEBUG, logger="sps_operator.controller.process.leader"):
        elector.try_once()
        api.status = 403
        elector.try_once()
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    (error,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "429" in warning.getMessage() and "--lease-namespace" not in warning.getMessage()
    assert "403" in error.getMessage() and "--lease-namespace" in error.getMessage()


@pytest.mark.parametrize(("status", "level"), [(429, logging.WARNING), (422, logging.ERROR)])
def test_a_status_write_the_next_pass_retries_is_a_warning(
    caplog: pytest.LogCaptureFixture, status: int, level: int
) -> None:
    from controller_harness import Harness
    from kubernetes.client.rest import ApiException

    h = Harness.one_target()

    def refuse(*_: Any) -> None:
        raise ApiException(status=status, reason="Refused")

    h.kube.patch_status = refuse  # type: ignore[method-assign]
    with caplog.at_level(logging.DEBUG, logger="sps_operator"):
        h.run_pass()
    lines = [r for r in caplog.records if "not written" in r.getMessage()]
    assert lines and max(r.levelno for r in lines) == level, caplog.text

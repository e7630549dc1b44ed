"""Test helper: a simulated DSpark server on a free loopback port, in a background thread.

    with running_sim(["--dp-size", "2"], env={"SGLANG_RAGGED_VERIFY_MODE": "compact"}) as url:
        requests.get(url + "/server_info")

``env`` is read in place of ``os.environ`` (the process environment is not touched), with the
profiling defaults ``SGLANG_DSPARK_ENABLE_SPS_RECORD=1`` and ``SGLANG_SIMULATE_ACC_LEN=1.0``
unless ``profiling_env=False``. Extra keyword arguments become simulator flags:
``preset="NVIDIA-H200"`` → ``--preset NVIDIA-H200``, ``accept_null_pin=True`` →
``--accept-null-pin``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from sps_sim.settings import build_settings

PROFILING_ENV = {"SGLANG_DSPARK_ENABLE_SPS_RECORD": "1", "SGLANG_SIMULATE_ACC_LEN": "1.0"}
DEFAULT_ARGS = ["--speculative-algorithm", "DSPARK"]


def _kw_flags(kw: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, value in kw.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False or value is None:
            continue
        else:
            out += [flag, str(value)]
    return out


@contextlib.contextmanager
def running_sim(
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    time_scale: float = 50.0,
    *,
    profiling_env: bool = True,
    host: str = "127.0.0.1",
    **kw: Any,
) -> Iterator[str]:
    """Start sps-sim in a thread with its own event loop; yield its base URL; stop it."""
    from sps_sim.http_server import SimServer

    argv = list(args) if args is not None else []
    if not any(a.startswith("--speculative-algorithm") for a in argv):
        argv = DEFAULT_ARGS + argv
    argv += _kw_flags(kw)
    if not any(a.startswith("--time-scale") for a in argv):
        argv += ["--time-scale", str(time_scale)]
    full_env = dict(PROFILING_ENV) if profiling_env else {}
    full_env.update(env or {})
    settings = build_settings([*argv, "--host", host, "--port", "0"], full_env)

    loop = asyncio.new_event_loop()
    server = SimServer(settings)
    started = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start(host, 0))
        except BaseException as exc:  # surfaced in the caller's thread
            failure.append(exc)
            started.set()
            return
        started.set()
        loop.run_forever()
        loop.run_until_complete(server.stop())
        loop.close()

    thread = threading.Thread(target=run, name="sps-sim", daemon=True)
    thread.start()
    started.wait(30)
    if failure:
        raise failure[0]
    if server.port is None:
        raise RuntimeError("sps-sim did not start within 30 s")
    try:
        yield f"http://{host}:{server.port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)

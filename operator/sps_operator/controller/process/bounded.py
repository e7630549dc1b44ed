"""CPU work with a time and a memory bound: a call in a child process (forkserver: no fork
of the threaded operator) under RLIMIT_AS, killed when it runs out of time.

A fit's cost depends on what a profiling Job published; the operator must not hang a
pass, nor be OOM-killed, because of it. The child returns the result or the exception's
text; a child that dies (killed, out of memory) becomes `BoundExceeded`. `judge_bounded`
runs the acceptance judge (`policies.acceptance`, pure) so.
"""

from __future__ import annotations

import multiprocessing
import resource
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any, Protocol, TypeVar

from sps_operator.api.kinds import TableKind
from sps_operator.api.reasons import FIT_FAILED
from sps_operator.api.spec import SpsProfileSpec
from sps_operator.controller.policies.acceptance import (
    Judgement,
    Verdict,
    judge,
    judgement_chain,
    run_chain,
)
from sps_operator.tables.formats import SpsTable

T = TypeVar("T")
_CONTEXT = multiprocessing.get_context("forkserver")
# The forkserver imports the judge (numpy, pydantic, the API models) once; without it every
# child imported them again to unpickle its call (~0.35 CPU-s and up to 4 s a judgement on
# the test bed). (Python 3.11's own '__main__' preload never applies: the forkserver is not
# given the main module's path.)
_CONTEXT.set_forkserver_preload([__name__])


class BoundExceeded(RuntimeError):
    """The call ran out of time or memory, or its process died."""


class CallFailed(RuntimeError):
    """The call raised; the message is the child's exception."""


def _child(conn: Connection, fn: Callable[..., Any], args: tuple[Any, ...], memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    try:
        conn.send(("ok", fn(*args)))
    except MemoryError:
        conn.send(("memory", "out of memory"))
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def call_bounded(fn: Callable[..., T], *args: Any, seconds: float, memory_bytes: int) -> T:
    """`fn(*args)` in a child process with at most `seconds` and `memory_bytes` of address
    space. `fn`, its arguments and its result must pickle."""
    receive, send = _CONTEXT.Pipe(duplex=False)
    process = _CONTEXT.Process(
        target=_child, args=(send, fn, args, memory_bytes), daemon=True, name="sps-bounded"
    )
    process.start()
    send.close()
    try:
        if not receive.poll(seconds):
            raise BoundExceeded(f"took more than {seconds:g} s")
        try:
            status, value = receive.recv()
        except EOFError:
            raise BoundExceeded(f"its process died (exit code {process.exitcode})") from None
    finally:
        receive.close()
        if process.is_alive():
            process.kill()
        process.join(5)
    if status == "ok":
        return value
    if status == "memory":
        raise BoundExceeded(f"needed more than {memory_bytes // 2**20} MiB")
    raise CallFailed(str(value))


class FitLimits(Protocol):
    """The bounds of a fit in a child process (the operator's `passes.state.Settings` has
    them; this floor does not import the steps above it)."""

    @property
    def isolate_fits(self) -> bool: ...
    @property
    def fit_seconds(self) -> float: ...
    @property
    def fit_memory_mib(self) -> int: ...


def judge_bounded(
    rounds: Sequence[Mapping[str, Any]],
    spec: SpsProfileSpec,
    *,
    kind: TableKind,
    live: SpsTable | None = None,
    gate: bool = True,
    limits: FitLimits | None = None,
) -> Verdict:
    """`judge` in a child process bounded in time and memory (`limits`), or in-process
    when `limits` is None or says not to isolate."""
    if limits is None or not limits.isolate_fits:
        return judge(rounds, spec, kind=kind, live=live, gate=gate)
    try:
        return call_bounded(
            run_chain,
            judgement_chain(gate),
            Judgement(list(rounds), spec, kind, live),
            seconds=limits.fit_seconds,
            memory_bytes=limits.fit_memory_mib * 2**20,
        )
    except BoundExceeded as exc:
        return Verdict(
            FIT_FAILED,
            f"the fit of {len(rounds)} rounds {exc}; measure fewer cells "
            "(spec.table.sweep), or raise the operator's fit limits",
        )
    except CallFailed as exc:
        return Verdict(FIT_FAILED, f"the fit failed: {exc}")

"""CPU work bounded in time and memory (a child process), as the operator runs its fits."""

from __future__ import annotations

import os
import time

import pytest
from controller_harness import Harness

from sps_operator.controller.passes.state import Settings
from sps_operator.controller.process.bounded import BoundExceeded, CallFailed, call_bounded

MIB = 2**20


def _sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def _allocate(mib: int) -> int:
    return len(bytearray(mib * MIB))


def _fail() -> None:
    raise ValueError("no cells")


def test_a_call_returns_its_result_or_its_error() -> None:
    assert call_bounded(_sleep, 0.0, seconds=30, memory_bytes=512 * MIB) == "woke"
    with pytest.raises(CallFailed, match="ValueError: no cells"):
        call_bounded(_fail, seconds=30, memory_bytes=512 * MIB)


def test_a_call_past_its_time_is_killed() -> None:
    started = time.monotonic()
    with pytest.raises(BoundExceeded, match=r"more than 0\.5 s"):
        call_bounded(_sleep, 30.0, seconds=0.5, memory_bytes=512 * MIB)
    assert time.monotonic() - started < 20  # it did not wait the 30 s out


def test_a_call_past_its_memory_fails_without_touching_the_caller() -> None:
    with pytest.raises(BoundExceeded, match="more than 600 MiB"):
        call_bounded(_allocate, 2048, seconds=30, memory_bytes=600 * MIB)


def test_a_whole_run_publishes_through_an_isolated_fit() -> None:
    h = Harness.one_target(Settings(gpu_debounce_seconds=0, isolate_fits=True, fit_seconds=60))
    status = h.profile_once()
    assert status["tables"] and h.condition("Ready")[0] == "True"


def test_a_fit_past_its_bound_is_a_failed_run_with_a_reason() -> None:
    # No time at all: 1 ms held only while each child imported the judge (~0.35 s); from a
    # forkserver that holds the imports, a small fit answered within 1 ms under xdist.
    h = Harness.one_target(Settings(gpu_debounce_seconds=0, isolate_fits=True, fit_seconds=0))
    h.tick()
    h.run_pass()
    h.finish()
    status = h.settle()
    assert status["lastFailure"]["reason"] == "FitFailed"
    assert "took more than" in status["lastFailure"]["message"]


def _forkserver_maps() -> str:
    with open(f"/proc/{os.getppid()}/maps") as maps:  # the forkserver forked this child
        return maps.read()


def test_the_forkserver_holds_the_judge_imports_so_a_child_does_not_import_them() -> None:
    # Each child imported numpy, pydantic and the API models to unpickle its call (~0.35
    # CPU-s a judgement): the forkserver has them loaded before it forks.
    maps = call_bounded(_forkserver_maps, seconds=30, memory_bytes=2048 * MIB)
    assert "_multiarray_umath" in maps and "pydantic_core" in maps

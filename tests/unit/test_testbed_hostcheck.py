"""Before a bed starts (sps_testbed.hostcheck): the inotify room for the beds to start, the
beds already running and how to stop them, and the limits the host setup raises."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from sps_testbed import hostcheck
from sps_testbed.hostcheck import BedsToStart, InotifyLimits, InotifyUse, RunningBed

FRESH = InotifyLimits(max_user_instances=128, max_user_watches=65536)
RAISED = InotifyLimits(max_user_instances=512, max_user_watches=524288)
# make test at its peak (tests/run-all.sh): three beds, the session's six nodes, the second
# bed's six and the third bed's four (earlier: the demo's four and the network-policy bed's two).
MAKE_TEST = BedsToStart(beds=3, nodes=16)
DEMO = BedsToStart(beds=1, nodes=4)
GIB = 2**30
PLENTY = 22 * GIB  # a fresh 24 GB machine's MemAvailable


def test_a_fresh_machine_fits_make_test_and_nothing_more() -> None:
    assert hostcheck.inotify_problems(FRESH, InotifyUse(0, 0), MAKE_TEST) == []
    # The failure the issue saw: make test's beds beside a demo left running.
    held_by_demo = InotifyUse(DEMO.instances, 3000)
    problems = hostcheck.inotify_problems(FRESH, held_by_demo, MAKE_TEST)
    assert len(problems) == 1
    assert "max_user_instances is 128" in problems[0]
    assert f"hold {DEMO.instances}" in problems[0]
    assert "3 bed(s) of 16 node(s)" in problems[0]


def test_make_tests_need_is_what_its_beds_were_measured_to_hold() -> None:
    assert MAKE_TEST.instances == 123  # of a fresh machine's 128


def test_each_bed_of_make_test_fits_beside_the_others_on_a_fresh_machine() -> None:
    session = BedsToStart(1, 6)
    # The demo's bed and the network-policy bed start while the session's runs...
    assert hostcheck.inotify_problems(FRESH, InotifyUse(session.instances, 0), DEMO) == []
    both = InotifyUse(session.instances + DEMO.instances, 0)
    assert hostcheck.inotify_problems(FRESH, both, BedsToStart(1, 2)) == []
    # ...and the second bed after the shared phase, beside the session's.
    assert hostcheck.inotify_problems(FRESH, InotifyUse(session.instances, 0), session) == []


def test_a_bigger_bed_needs_more() -> None:
    assert BedsToStart(1, 6).instances > BedsToStart(1, 2).instances > BedsToStart(1, 0).instances
    assert BedsToStart(1, 6).watches > BedsToStart(1, 2).watches


def test_kinds_limits_fit_the_suite_beside_a_demo() -> None:
    assert hostcheck.inotify_problems(RAISED, InotifyUse(DEMO.instances, 3000), MAKE_TEST) == []


def test_too_few_watches_is_a_problem_of_its_own() -> None:
    problems = hostcheck.inotify_problems(InotifyLimits(512, 6000), InotifyUse(0, 100), MAKE_TEST)
    assert len(problems) == 1
    assert "max_user_watches is 6000" in problems[0]


@given(
    instances=st.integers(0, 10_000),
    watches=st.integers(0, 2_000_000),
    used_instances=st.integers(0, 10_000),
    used_watches=st.integers(0, 2_000_000),
    beds=st.integers(0, 5),
    nodes=st.integers(0, 40),
)
def test_the_check_passes_exactly_when_the_free_room_covers_the_beds(
    instances: int, watches: int, used_instances: int, used_watches: int, beds: int, nodes: int
) -> None:
    start = BedsToStart(beds, nodes)
    problems = hostcheck.inotify_problems(
        InotifyLimits(instances, watches), InotifyUse(used_instances, used_watches), start
    )
    fits = instances - used_instances >= start.instances and watches - used_watches >= start.watches
    assert (problems == []) == fits
    assert len(problems) == (instances - used_instances < start.instances) + (
        watches - used_watches < start.watches
    )


def test_raised_limits_are_kinds_and_never_lower() -> None:
    assert hostcheck.raised_limits(FRESH) == RAISED
    high = InotifyLimits(8192, 1_048_576)
    assert hostcheck.raised_limits(high) == high


def test_a_demo_left_running_is_named_with_the_command_that_stops_it() -> None:
    demo = RunningBed(1, 100, "/home/dev/sps/.demo/bed")
    ok, lines = hostcheck.preflight_report(RAISED, InotifyUse(33, 3000), [demo], MAKE_TEST, PLENTY)
    assert ok
    assert "sps-testbed demo down --state-dir /home/dev/sps/.demo" in lines[0]
    assert "fit beside it" in lines[-1]


def test_the_host_setup_names_a_running_bed_and_starts_none() -> None:
    demo = RunningBed(1, 100, "/home/dev/sps/.demo/bed")
    ok, lines = hostcheck.preflight_report(
        FRESH, InotifyUse(33, 0), [demo], BedsToStart(0, 0), PLENTY
    )
    assert ok
    assert lines == [
        "a test bed is running: /home/dev/sps/.demo/bed; "
        "stop it: sps-testbed demo down --state-dir /home/dev/sps/.demo"
    ]


def test_no_room_says_what_runs_how_to_stop_it_and_what_to_raise() -> None:
    demo = RunningBed(1, 100, "/home/dev/sps/.demo/bed")
    mine = RunningBed(2, 200, "/var/tmp/mybed")
    run = RunningBed(3, 300, "/tmp/sps-testbed-abc123")
    ok, lines = hostcheck.preflight_report(
        FRESH, InotifyUse(100, 6000), [demo, mine, run], MAKE_TEST, PLENTY
    )
    assert not ok
    text = "\n".join(lines)
    assert "sps-testbed demo down --state-dir /home/dev/sps/.demo" in text
    assert "sps-testbed down --state-dir /var/tmp/mybed" in text
    assert "sps-testbed down --state-dir /tmp/sps-testbed-abc123" in text
    assert "another make test" in text
    assert hostcheck.RAISE_COMMAND in text


def test_no_room_and_no_bed_running_says_what_to_raise() -> None:
    ok, lines = hostcheck.preflight_report(FRESH, InotifyUse(100, 0), [], DEMO, PLENTY)
    assert not ok
    assert lines[-1].strip() == hostcheck.RAISE_COMMAND


def test_make_test_fits_a_24_gb_machine_in_memory_and_an_8_gb_one_does_not() -> None:
    assert hostcheck.memory_problems(PLENTY, MAKE_TEST) == []
    problems = hostcheck.memory_problems(7 * GIB, MAKE_TEST)
    assert len(problems) == 1
    assert "7.0 GiB of memory available" in problems[0]
    assert "3 bed(s) of 16 node(s) need about 12.4 GiB" in problems[0]


def test_short_of_memory_says_so_and_names_no_inotify_limit() -> None:
    demo = RunningBed(1, 100, "/home/dev/sps/.demo/bed")
    ok, lines = hostcheck.preflight_report(RAISED, InotifyUse(33, 0), [demo], MAKE_TEST, 4 * GIB)
    assert not ok
    text = "\n".join(lines)
    assert "sps-testbed demo down --state-dir /home/dev/sps/.demo" in text
    assert "need about 12.4 GiB" in text
    assert hostcheck.RAISE_COMMAND not in text
    ok, lines = hostcheck.preflight_report(RAISED, InotifyUse(0, 0), [], DEMO, 1 * GIB)
    assert not ok
    assert lines[-1] == "free memory"


@given(available=st.integers(0, 2**40), beds=st.integers(0, 5), nodes=st.integers(0, 40))
def test_the_memory_check_passes_exactly_when_the_available_memory_covers_the_beds(
    available: int, beds: int, nodes: int
) -> None:
    start = BedsToStart(beds, nodes)
    assert (hostcheck.memory_problems(available, start) == []) == (available >= start.memory)


def test_meminfo_is_read_in_bytes(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text("MemTotal:  24000000 kB\nMemAvailable:  1000 kB\n")
    assert hostcheck.read_available_memory(tmp_path) == 1_024_000


def test_running_beds_are_those_whose_holder_lives(tmp_path: Path) -> None:
    (tmp_path / "1").write_text(json.dumps({"pid": os.getpid(), "state_dir": "/s/.demo/bed"}))
    (tmp_path / "2").write_text(json.dumps({"pid": 2**22 + 7, "state_dir": "/gone"}))
    (tmp_path / "3").write_text("not json")
    assert hostcheck.running_beds(tmp_path) == [RunningBed(1, os.getpid(), "/s/.demo/bed")]
    assert hostcheck.running_beds(tmp_path / "missing") == []


def _fake_proc(root: Path, instances: int, watches: int) -> Path:
    base = root / "sys" / "fs" / "inotify"
    base.mkdir(parents=True)
    (base / "max_user_instances").write_text(f"{instances}\n")
    (base / "max_user_watches").write_text(f"{watches}\n")
    return root


def test_raise_limits_writes_only_what_is_below_kinds(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, 128, 1_048_576)
    changed = hostcheck.raise_limits(proc)
    if os.geteuid() != 0:
        assert changed == [f"not root, the limits stay as they are; run: {hostcheck.RAISE_COMMAND}"]
        return
    assert changed == ["fs.inotify.max_user_instances: 128 -> 512"]
    assert hostcheck.read_limits(proc) == InotifyLimits(512, 1_048_576)
    assert hostcheck.raise_limits(proc) == []


def test_this_processes_inotify_instances_are_counted(tmp_path: Path) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init()
    assert fd >= 0
    try:
        assert libc.inotify_add_watch(fd, str(tmp_path).encode(), 0x100) >= 0  # IN_CREATE
        after = hostcheck.count_inotify(os.getuid())
    finally:
        os.close(fd)
    # Other processes of this user may hold some too: at least ours is counted.
    assert after.instances >= 1
    assert after.watches >= 1

"""The shared bed tests' order (tests/bed_durations.py): longest work unit first."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bed_durations import DEFAULT_SECONDS, from_log, load, longest_first


@dataclass
class Item:
    nodeid: str
    group: str | None = None


def unit(item: Item) -> str:
    return item.group or item.nodeid


def test_the_longest_unit_goes_first_and_a_group_counts_as_the_sum_of_its_tests() -> None:
    items = [
        Item("a.py::short"),
        Item("b.py::pool1@pool", "pool"),
        Item("a.py::long"),
        Item("b.py::pool2@pool", "pool"),
        Item("a.py::unknown"),
    ]
    seconds = {"a.py::short": 5, "a.py::long": 150, "b.py::pool1": 90, "b.py::pool2": 80}
    order = [i.nodeid for i in longest_first(items, seconds, unit)]
    # pool: 170 s (its ids carry `@pool`, the file does not), long 150, unknown 20, short 5;
    # the group's tests stay together and in their order.
    assert order == [
        "b.py::pool1@pool",
        "b.py::pool2@pool",
        "a.py::long",
        "a.py::unknown",
        "a.py::short",
    ]
    assert DEFAULT_SECONDS == 20


def test_equal_units_keep_the_collection_order() -> None:
    items = [Item(f"t.py::t{i}") for i in range(5)]
    assert longest_first(items, {}, unit) == items


def test_from_log_sums_setup_call_and_teardown_of_the_shared_phase_only() -> None:
    log = [
        "151.76s call     tests/e2e/x.py::test_a",
        "  3.10s setup    tests/e2e/x.py::test_a",
        " 99.80s call     tests/e2e/y.py::test_b@gpu-pool",
        "41 passed in 605.65s (0:10:05)",
        "==== bed, shared: exit 0 after 609 s",
        " 47.61s call     tests/realnode/z.py::test_alone",
    ]
    assert from_log(log) == {
        "tests/e2e/x.py::test_a": 151.76 + 3.10,
        "tests/e2e/y.py::test_b": 99.80,
    }


def test_load_reads_the_file_and_a_missing_file_is_no_order(tmp_path: Path) -> None:
    f = tmp_path / "d.txt"
    f.write_text("# comment\n 158 tests/a.py::t1\n   7 tests/b.py::t2\n", encoding="utf-8")
    assert load(f) == {"tests/a.py::t1": 158.0, "tests/b.py::t2": 7.0}
    assert load(tmp_path / "missing.txt") == {}


def test_the_checked_in_file_lists_the_slowest_shared_tests() -> None:
    """The file `make test` orders by lists the long shared tests, and only tests that
    exist: one emptied, or left naming tests since renamed, orders nothing. (Its figures
    move as the tests get faster: the longest was 124 s, then 98.)"""
    seconds = load()
    assert len(seconds) >= 20 and max(seconds.values()) >= 60
    root = Path(__file__).resolve().parents[2]
    for nodeid in seconds:
        path, _, name = nodeid.partition("::")
        assert f"def {name.split('[')[0]}(" in (root / path).read_text(), nodeid

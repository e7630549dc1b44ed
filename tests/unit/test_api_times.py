"""api/times.py: one RFC 3339 reading for the controller and the plugin."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from sps_operator.api.times import parse_rfc3339


def test_reads_what_kubernetes_writes() -> None:
    assert parse_rfc3339("2026-12-02T11:59:00Z") == datetime(2026, 12, 2, 11, 59, tzinfo=UTC)
    assert parse_rfc3339("2026-12-02T13:59:00+02:00") == datetime(2026, 12, 2, 11, 59, tzinfo=UTC)


def test_absent_or_unreadable_is_none_and_naive_stays_naive() -> None:
    assert parse_rfc3339(None) is None
    assert parse_rfc3339("") is None
    assert parse_rfc3339("yesterday") is None
    naive = parse_rfc3339("2026-12-02T11:59:00")
    assert naive == datetime(2026, 12, 2, 11, 59)
    assert naive is not None and naive.tzinfo is None


@given(st.text(max_size=64))
def test_any_text_gives_a_time_or_none(text: str) -> None:
    assert parse_rfc3339(text) is None or isinstance(parse_rfc3339(text), datetime)


@given(st.datetimes(min_value=datetime(1970, 1, 1), timezones=st.just(UTC)))
def test_round_trips_the_operators_own_format(when: datetime) -> None:
    when = when.replace(microsecond=0)
    assert parse_rfc3339(when.strftime("%Y-%m-%dT%H:%M:%SZ")) == when

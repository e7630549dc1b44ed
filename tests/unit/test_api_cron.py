"""refresh.schedule: the cron grammar the CRD's CEL rules and the pydantic validator share.

The CEL side runs against the real API server in tests/k8s/test_k8s_controlplane_crd.py
(a fixed table of cases); here the same regexes are checked against an independent,
regex-free reading of the grammar (plus cronsim, which computes the fire times), with
Hypothesis generating schedules.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sps_operator.api import cron
from sps_operator.api.spec import RefreshSpec

FIELD_NAMES = [f.name for f in cron.FIELDS]


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        # Issue 9 item 10: five fields, minute out of range. Say that.
        ("75 3 * * 0", "refresh.schedule: minute 75 is out of range 0-59"),
        ("0 24 * * *", "refresh.schedule: hour 24 is out of range 0-23"),
        ("0 3 0 * *", "refresh.schedule: day-of-month 0 is out of range 1-31"),
        ("0 3 32 * *", "refresh.schedule: day-of-month 32 is out of range 1-31"),
        ("0 3 * 13 *", "refresh.schedule: month 13 is out of range 1-12"),
        ("0 3 * * 8", "refresh.schedule: weekday 8 is out of range 0-7"),
        ("5,75 3 * * *", "refresh.schedule: minute '5,75' is not valid: use *, a value 0-59"),
        ("5-2 * * * *", "minute '5-2' is not valid"),
        ("*/0 * * * *", "minute '*/0' is not valid"),
        ("*/60 * * * *", "step /n (n 1-59)"),
        ("0 3 * * mon-sun", "weekday 'mon-sun' is not valid: use *, a value 0-7 or sun-sat"),
        ("0 3 * foo *", "month 'foo' is not valid: use *, a value 1-12 or jan-dec"),
        ("0 3 ? * *", "day-of-month '?' is not valid"),
        ("0 3 L * *", "day-of-month 'L' is not valid"),
        ("0 3 * * 1#2", "weekday '1#2' is not valid"),
        ("0 0 30 2 *", "day-of-month 30 never occurs in month 2, so the schedule would never fire"),
        ("0 0 31 apr,jun *", "day-of-month 31 never occurs in month apr,jun"),
        ("0 3 * *", cron.MSG_SHAPE),
        ("0 3 * * * *", cron.MSG_SHAPE),
        ("every day", cron.MSG_SHAPE),
        ("@reboot", cron.MSG_SHAPE),
        ("", cron.MSG_SHAPE),
        ("0 3 * * *\n", cron.MSG_SHAPE),
        ("0\u00a03 * * *", cron.MSG_SHAPE),
    ],
)
def test_bad_schedules_name_the_field_and_value(schedule: str, message: str) -> None:
    assert message in (cron.schedule_error(schedule) or "")
    with pytest.raises(ValidationError) as info:
        RefreshSpec(schedule=schedule)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "schedule",
    [
        "0 3 * * 0",
        "00 03 * * *",
        "*/5 * * * *",
        "5/15 * * * *",
        "0-59/7 0-23/2 1-31/3 1-12/5 0-7/2",
        "0 0 1 jan *",
        "0 0 1 JAN-Dec *",
        "0 0 * * sun-sat",
        "0 0 * * 5-7",
        "0 0 * * 7",
        "0 0 29 2 *",
        "0 0 30 2 1",  # weekday given: cron ORs the day fields, Mondays in February fire
        "0 0 31 2,3 *",
        "1,2,3-5,*/20 * * * *",
        "0\t3  *  *\t0",
        " 0 3 * * 0 ",
        *cron.MACROS,
    ],
)
def test_good_schedules_pass_and_fire(schedule: str) -> None:
    assert cron.schedule_error(schedule) is None
    assert RefreshSpec(schedule=schedule).schedule == schedule
    start = datetime(2026, 1, 1, tzinfo=UTC)
    first = cron.next_fire_time(schedule, start)
    assert start < first < start + timedelta(days=366 * 5)


def test_next_fire_time_is_utc_and_strictly_after() -> None:
    at = datetime(2026, 3, 1, 3, 0, tzinfo=UTC)
    assert cron.next_fire_time("0 3 * * *", at) == datetime(2026, 3, 2, 3, 0, tzinfo=UTC)
    assert cron.next_fire_time("@hourly", at) == datetime(2026, 3, 1, 4, 0, tzinfo=UTC)
    # Cron fields are UTC whatever offset the caller's clock carries.
    plus2 = timezone(timedelta(hours=2))
    assert cron.next_fire_time("0 3 * * *", at.astimezone(plus2)) == datetime(
        2026, 3, 2, 3, 0, tzinfo=UTC
    )


def test_one_cel_rule_per_field_with_a_message_naming_it() -> None:
    rules = cron.cel_rules()
    assert rules[0]["message"] == cron.MSG_SHAPE
    for field, rule in zip(cron.FIELDS, rules[1:6], strict=True):
        assert f"the {field.name} field" in rule["message"]
        assert f"{field.name} " in rule["messageExpression"]
        assert "findAll" in rule["messageExpression"]
    assert "never fire" in rules[6]["message"]
    # Every pattern is anchored and readable by both engines (no \d, \s, \w, lookaround).
    for pattern in [
        cron.MACRO_PATTERN,
        cron.SHAPE_PATTERN,
        cron.NEVER_FIRES_PATTERN,
        *(cron.field_in_schedule_pattern(f) for f in cron.FIELDS),
    ]:
        assert pattern.startswith("^") and pattern.endswith("$")
        assert not re.search(r"\\[dswDSW]|\(\?[=!<]", pattern), pattern
        re.compile(pattern)


# --------------------------------------------------------------------------- properties


def _number(text: str, lo: int, hi: int) -> int | None:
    if not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if lo <= value <= hi else None


def _oracle_value(field: cron.CronField, text: str) -> int | None:
    """A value as cron reads it, without regexes: a number in range, or a name."""
    if field.names and text.lower() in field.names:
        return field.names.index(text.lower()) + field.first_named
    return _number(text, field.lo, field.hi)


def _oracle_item(field: cron.CronField, item: str) -> bool:
    body, _, step = item.partition("/")
    if "/" in item and _number(step, 1, field.hi) is None:
        return False
    if body == "*":
        return True
    start, dash, end = body.partition("-")
    a = _oracle_value(field, start)
    if not dash:
        return a is not None
    b = _oracle_value(field, end)
    return a is not None and b is not None and a <= b


def oracle_ok(schedule: str) -> bool:
    """The grammar read directly (split, parse, compare), then cronsim for days that never
    occur: an independent judge of what `schedule_error` decides with regexes."""
    if schedule in cron.MACROS:
        return True
    if any(c not in " \t" and not ("!" <= c <= "~") for c in schedule):
        return False
    tokens = schedule.replace("\t", " ").split()
    if len(tokens) != 5:
        return False
    for field, token in zip(cron.FIELDS, tokens, strict=True):
        if not all(_oracle_item(field, item) for item in token.split(",")):
            return False
    try:
        next(cron.CronSim(schedule, datetime(2026, 1, 1)))
    except (cron.CronSimError, StopIteration):
        return False
    return True


_ODD_ATOMS = ["23", "29", "30", "31", "59", "60", "75", "apr", "dec", "sat", "foo", "?", "L", ""]


def _samples(field: cron.CronField) -> list[str]:
    """Items of a field: mostly well-formed (numbers, zero-padded, names in any case,
    ranges, steps), some out of range, reversed or odd."""
    lo, hi = field.lo, field.hi
    mid = (lo + hi) // 2
    values = [str(lo), str(hi), str(mid), f"0{mid}", str(lo + 1)]
    values += [n for name in field.names[:3] for n in (name, name.upper())]
    good = ["*", "*/2", f"*/{hi}", *values, f"{lo}-{hi}", f"{mid}-{hi}/3", f"{lo + 1}/5"]
    if field.names:
        good += [f"{field.names[0]}-{field.names[-1]}", f"{field.names[1].title()}-{hi}"]
    bad = [str(hi + 1), f"{hi}-{lo}", "*/0", f"*/{hi + 1}", f"{mid}-{mid}/x", *_ODD_ATOMS]
    return good * 4 + bad


_ITEMS = [st.sampled_from(_samples(f)) for f in cron.FIELDS]


@st.composite
def _cronish(draw: st.DrawFn) -> str:
    count = draw(st.sampled_from([5] * 12 + [4, 6]))
    fields = [",".join(draw(st.lists(_ITEMS[i % 5], min_size=1, max_size=2))) for i in range(count)]
    if count == 5 and draw(st.integers(0, 7)) == 0:  # days that may never occur
        fields[2] = draw(st.sampled_from(["30", "31", "30,31", "31-31/2"]))
        fields[3] = draw(st.sampled_from(["2", "feb", "4,6", "2-6/2", "2/11", "4-11/5", "2,3"]))
        fields[4] = draw(st.sampled_from(["*", "*/2", "1"]))
    separators = draw(
        st.lists(
            st.sampled_from([" "] * 30 + ["  ", "\t", "\n", ""]), min_size=count, max_size=count
        )
    )
    return "".join(f + sep for f, sep in zip(fields[:-1], separators, strict=False)) + fields[-1]


CRONISH = _cronish()
SCHEDULES = st.one_of(
    CRONISH,
    CRONISH,
    CRONISH,
    st.sampled_from(list(cron.MACROS)),
    st.text(max_size=40),
    st.from_regex(r"@\w+", fullmatch=True),
)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(SCHEDULES)
def test_any_string_validates_consistently_or_fails_with_a_message(schedule: str) -> None:
    error = cron.schedule_error(schedule)
    # The regexes (what CEL checks) decide exactly what the direct reading decides.
    assert (error is None) == oracle_ok(schedule), (schedule, error)
    # pydantic refuses exactly then, with that message...
    try:
        RefreshSpec(schedule=schedule)
    except ValidationError as exc:
        assert error is not None and error in str(exc)
    else:
        assert error is None
    if error is None:
        # ...and whatever passes, cronsim reads and fires (day and weekday ANDed, as with
        # `0 0 29 2 */7`, can take up to 28 years).
        start = datetime(2026, 1, 1, tzinfo=UTC)
        assert start < cron.next_fire_time(schedule, start) < start + timedelta(days=40 * 366)
        return
    assert error.startswith("refresh.schedule")
    if re.fullmatch(cron.SHAPE_PATTERN[1:-1], schedule) and "never fire" not in error:
        # A five-field schedule: the message names the field and its value.
        named = [f for f in FIELD_NAMES if f"schedule: {f} " in error]
        assert len(named) == 1, error
        tokens = re.findall(cron.TOKEN, schedule)
        assert tokens[FIELD_NAMES.index(named[0])] in error

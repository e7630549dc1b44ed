"""`refresh.schedule`: one cron grammar, checked alike by the API server (CEL) and pydantic.

The grammar is Vixie/Debian cron's, as Kubernetes CronJobs take it: five fields separated
by spaces or tabs,

    minute 0-59 | hour 0-23 | day-of-month 1-31 | month 1-12, jan-dec | weekday 0-7, sun-sat

(0 and 7 are Sunday; names in any case), each a comma list of items; an item is `*`, a
value or a range `a-b` with a <= b, optionally with a step `/n` (1 <= n <= the field's
maximum). Or one of the macros @yearly @annually @monthly @weekly @daily @midnight @hourly.
A schedule whose days never occur (`0 0 30 2 *`) is refused too: it would never fire.

Each rule is a regex built here from the field table, kept to what RE2 (CEL's `matches`)
and Python's `re` read the same way: character classes without `\\d`/`\\s`, alternation,
`(?i:...)`, anchors `^...$` (Python matches with `fullmatch`, so `$` never accepts a
trailing newline). The CRD gets one CEL rule per field, with a messageExpression that
names the field and its value; `schedule_error` builds the same message from the same
regexes. Fire times come from cronsim (Debian cron semantics), which accepts everything
this grammar does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cronsim import CronSim, CronSimError

SCHEDULE_FIELD = "refresh.schedule"

MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
WEEKDAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


@dataclass(frozen=True)
class CronField:
    index: int
    name: str
    lo: int
    hi: int
    names: tuple[str, ...] = ()  # names[i] stands for the value `first_named + i`
    first_named: int = 0

    def named(self, value: int) -> list[str]:
        i = value - self.first_named
        return [self.names[i]] if self.names and 0 <= i < len(self.names) else []

    @property
    def hint(self) -> str:
        names = f" or {self.names[0]}-{self.names[-1]}" if self.names else ""
        return (
            f"use *, a value {self.lo}-{self.hi}{names}, a range a-b with a <= b, or a comma "
            f"list of these, each optionally with a step /n (n 1-{self.hi})"
        )


FIELDS = (
    CronField(0, "minute", 0, 59),
    CronField(1, "hour", 0, 23),
    CronField(2, "day-of-month", 1, 31),
    CronField(3, "month", 1, 12, MONTH_NAMES, first_named=1),
    CronField(4, "weekday", 0, 7, WEEKDAY_NAMES, first_named=0),
)

# --------------------------------------------------------------------------- regexes

SEP = r"[ \t]+"
PAD = r"[ \t]*"
TOKEN = "[!-~]+"  # printable ASCII without space: what a field may be made of at all


def _alt(options: Iterable[str]) -> str:
    listed = list(options)
    return listed[0] if len(listed) == 1 else "(?:" + "|".join(listed) + ")"


def _digit(a: int, b: int) -> str:
    return str(a) if a == b else f"[{a}-{b}]"


def _number(values: list[int]) -> str:
    """Decimal integers in `values` (0-99, consecutive), leading zeros allowed."""
    lo, hi = values[0], values[-1]
    parts: list[str] = []
    if lo <= 9:
        parts.append(_digit(lo, min(hi, 9)))
    runs: list[tuple[int, int, int, int]] = []  # (first tens, last tens, first one, last one)
    for tens in range(max(lo // 10, 1), hi // 10 + 1):
        a, b = max(lo, tens * 10) % 10, min(hi, tens * 10 + 9) % 10
        if runs and (a, b) == (0, 9) and runs[-1][2:] == (0, 9):
            runs[-1] = (runs[-1][0], tens, 0, 9)
        else:
            runs.append((tens, tens, a, b))
    parts += [_digit(t0, t1) + _digit(a, b) for t0, t1, a, b in runs]
    return "0*" + _alt(parts)


def _value(field: CronField, values: list[int]) -> str:
    """One value among `values`, as a number or a name."""
    names = [n for v in values for n in field.named(v)]
    return _alt([_number(values), *([f"(?i:{'|'.join(names)})"] if names else [])])


def _item(field: CronField) -> str:
    every = list(range(field.lo, field.hi + 1))
    ordered_ranges = [
        f"{_value(field, [a])}-{_value(field, every[i:])}" for i, a in enumerate(every)
    ]
    step = "/" + _number(list(range(1, field.hi + 1)))
    return _alt([r"\*", *ordered_ranges, _value(field, every)]) + f"(?:{step})?"


def field_pattern(field: CronField) -> str:
    """A whole field (unanchored): a comma list of items."""
    item = _item(field)
    return f"{item}(?:,{item})*"


MACRO_PATTERN = "^" + _alt(re.escape(m) for m in MACROS) + "$"
SHAPE_PATTERN = f"^{PAD}{TOKEN}(?:{SEP}{TOKEN}){{4}}{PAD}$"


def field_in_schedule_pattern(field: CronField) -> str:
    """The whole schedule, with field `field.index` well-formed (others: any token)."""
    before = f"(?:{TOKEN}{SEP}){{{field.index}}}"
    after = f"(?:{SEP}{TOKEN}){{{4 - field.index}}}"
    return f"^{PAD}{before}(?:{field_pattern(field)}){after}{PAD}$"


def _month_items_within(allowed: set[int]) -> str:
    """Month items whose months all lie in `allowed` (enumerated: the field is small)."""
    month = FIELDS[3]
    steps = range(1, month.hi + 1)
    options: list[str] = []
    for a in range(month.lo, month.hi + 1):
        for b in [None, *range(a, month.hi + 1)]:
            last_with_step = b if b is not None else month.hi  # `a/n` runs to December
            ok_steps = [n for n in steps if set(range(a, last_with_step + 1, n)) <= allowed]
            plain_ok = set(range(a, (b if b is not None else a) + 1)) <= allowed
            if not ok_steps and not plain_ok:
                continue
            text = _value(month, [a]) + (f"-{_value(month, [b])}" if b is not None else "")
            step = f"/0*{_alt(str(n) for n in ok_steps)}" if ok_steps else ""
            options.append(text + (f"(?:{step})?" if plain_ok and step else step))
    item = _alt(options)
    return f"{item}(?:,{item})*"


def _days_from(first: str) -> str:
    """Day-of-month items that all start at `first` or later (a list of such items)."""
    item = f"0*{first}(?:-[0-9]+)?(?:/[0-9]+)?"
    return f"{item}(?:,{item})*"


# With weekday `*...`, cron ANDs day-of-month with month: days 30-31 never occur in February
# alone, day 31 never in 30-day months. cronsim refuses those schedules; so do we.
_SHORT_MONTHS = {2, 4, 6, 9, 11}
NEVER_FIRES_PATTERN = (
    f"^{PAD}{TOKEN}{SEP}{TOKEN}{SEP}"
    + _alt(
        [
            f"(?:{_days_from('3[01]')}){SEP}(?:{_month_items_within({2})})",
            f"(?:{_days_from('31')}){SEP}(?:{_month_items_within(_SHORT_MONTHS)})",
        ]
    )
    + rf"{SEP}\*(?:{TOKEN})?{PAD}$"
)

PLAIN_NUMBER = "^[0-9]+$"

# --------------------------------------------------------------------------- messages

MSG_SHAPE = (
    f"{SCHEDULE_FIELD} must be a cron expression of 5 fields (minute hour day-of-month month "
    "weekday, separated by spaces), e.g. '0 3 * * 0', or one of " + ", ".join(MACROS)
)
MSG_NEVER_FIRES = (
    f"{SCHEDULE_FIELD}: the day-of-month never occurs in the months given (with weekday *), "
    "so the schedule would never fire"
)


def field_message(field: CronField) -> str:
    """The static message of a field's rule (what `kubectl explain`-style docs show)."""
    return f"{SCHEDULE_FIELD}: the {field.name} field is not valid: {field.hint}"


def field_error(field: CronField, token: str) -> str:
    if re.fullmatch(PLAIN_NUMBER[1:-1], token):
        return f"{SCHEDULE_FIELD}: {field.name} {token} is out of range {field.lo}-{field.hi}"
    return f"{SCHEDULE_FIELD}: {field.name} '{token}' is not valid: {field.hint}"


def never_fires_error(day: str, month: str) -> str:
    return (
        f"{SCHEDULE_FIELD}: day-of-month {day} never occurs in month {month}, "
        "so the schedule would never fire"
    )


# --------------------------------------------------------------------------- CEL


def _cel_string(text: str) -> str:
    """A CEL single-quoted string literal (raw: the regex goes to RE2 unchanged)."""
    if "'" in text or "\n" in text:
        raise ValueError(f"cannot embed {text!r} in a raw CEL string")
    return f"r'{text}'"


def _cel_text(text: str) -> str:
    """A CEL double-quoted string literal of plain text."""
    if any(c in text for c in '"\\\n'):
        raise ValueError(f"cannot embed {text!r} in a CEL string")
    return f'"{text}"'


_S = "self.schedule"
_TOKENS = f"{_S}.findAll({_cel_string(TOKEN)})"
_IS_FIELDS = f"{_S}.matches({_cel_string(SHAPE_PATTERN)})"


def cel_rules() -> list[dict[str, str]]:
    """The CEL rules of RefreshSpec for `schedule` (the order `schedule_error` checks in)."""
    rules = [
        {
            "rule": f"!has(self.schedule) || {_S}.matches({_cel_string(MACRO_PATTERN)}) "
            f"|| {_IS_FIELDS}",
            "message": MSG_SHAPE,
        }
    ]
    for field in FIELDS:
        token = f"{_TOKENS}[{field.index}]"
        out_of_range = (
            f"{_cel_text(f'{SCHEDULE_FIELD}: {field.name} ')} + {token} + "
            f"{_cel_text(f' is out of range {field.lo}-{field.hi}')}"
        )
        invalid = (
            f"{_cel_text(f'{SCHEDULE_FIELD}: {field.name} ' + chr(39))} + {token} + "
            f"{_cel_text(chr(39) + ' is not valid: ' + field.hint)}"
        )
        rules.append(
            {
                "rule": f"!has(self.schedule) || !{_IS_FIELDS} || "
                f"{_S}.matches({_cel_string(field_in_schedule_pattern(field))})",
                "message": field_message(field),
                "messageExpression": f"{token}.matches({_cel_string(PLAIN_NUMBER)}) ? "
                f"{out_of_range} : {invalid}",
            }
        )
    rules.append(
        {
            "rule": f"!has(self.schedule) || !{_S}.matches({_cel_string(NEVER_FIRES_PATTERN)})",
            "message": MSG_NEVER_FIRES,
            "messageExpression": f"{_cel_text(f'{SCHEDULE_FIELD}: day-of-month ')} + "
            f"{_TOKENS}[2] + {_cel_text(' never occurs in month ')} + {_TOKENS}[3] + "
            f"{_cel_text(', so the schedule would never fire')}",
        }
    )
    return rules


# --------------------------------------------------------------------------- Python


def _matches(pattern: str, text: str) -> bool:
    """`text.matches(pattern)` as CEL means it for our anchored patterns."""
    assert pattern.startswith("^") and pattern.endswith("$"), pattern
    return re.fullmatch(pattern[1:-1], text) is not None


def schedule_error(schedule: str) -> str | None:
    """Why `schedule` is refused (the first message the API server would give), or None."""
    if _matches(MACRO_PATTERN, schedule):
        return None
    if not _matches(SHAPE_PATTERN, schedule):
        return MSG_SHAPE
    tokens = re.findall(TOKEN, schedule)
    for field in FIELDS:
        if not _matches(field_in_schedule_pattern(field), schedule):
            return field_error(field, tokens[field.index])
    if _matches(NEVER_FIRES_PATTERN, schedule):
        return never_fires_error(tokens[2], tokens[3])
    return None


def expand(schedule: str) -> str:
    """The five-field form of a valid schedule (macros expanded)."""
    return MACROS.get(schedule, schedule)


def next_fire_time(schedule: str, after: datetime) -> datetime:
    """The first time strictly after `after` that a valid schedule fires (cronsim). Cron
    fields are UTC: an aware `after` is converted to UTC first (a naive one is taken as UTC)."""
    if after.tzinfo is not None:
        after = after.astimezone(UTC)
    try:
        return next(CronSim(expand(schedule), after))
    except (CronSimError, StopIteration) as exc:  # cannot happen for a schedule that validates
        raise ValueError(f"{SCHEDULE_FIELD} {schedule!r}: {exc or 'never fires'}") from exc


def last_fire_time(schedule: str, at: datetime) -> datetime:
    """The last time at or before `at` that a valid schedule fired (cronsim, backwards)."""
    if at.tzinfo is not None:
        at = at.astimezone(UTC)
    try:
        return next(CronSim(expand(schedule), at + timedelta(seconds=1), reverse=True))
    except (CronSimError, StopIteration) as exc:  # cannot happen for a schedule that validates
        raise ValueError(f"{SCHEDULE_FIELD} {schedule!r}: {exc or 'never fires'}") from exc

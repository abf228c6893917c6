"""Schedules: an agent run started on a cron expression or every N seconds (plain data and time math, no I/O).

``Runtime.schedule`` stores them in Redis; Celery beat with :class:`agents_celery.broker.beat.RunScheduler`
fires them. Times are UTC. A cron expression has the five usual fields (minute, hour, day of month, month,
day of week; ``*``, ``*/n``, ``a-b``, ``a-b/n``, lists, ``jan``..``dec``, ``sun``..``sat``, 0 or 7 for Sunday);
when both day fields are restricted, a day matching either is due (as cron does).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from .errors import ValidationError

_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun"), start=1)}
_MONTHS.update({m: i for i, m in enumerate(("jul", "aug", "sep", "oct", "nov", "dec"), start=7)})
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
#: (name, lowest, highest, names) of the five fields.
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
_PART = re.compile(r"^(\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/(\d+))?$")
#: Shortest ``every`` interval, in seconds.
MIN_EVERY = 1.0


@dataclass(frozen=True)
class Cron:
    """A parsed cron expression: the allowed values of each field."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool
    any_weekday: bool

    @classmethod
    def parse(cls, text: str) -> Cron:
        parts = text.lower().split() if isinstance(text, str) else []
        if len(parts) != 5:
            raise ValidationError(f"cron needs 5 fields (minute hour day-of-month month day-of-week), got {text!r}")
        sets = [_field(p, *spec) for p, spec in zip(parts, _FIELDS, strict=True)]
        weekdays = frozenset(0 if d == 7 else d for d in sets[4])
        return cls(sets[0], sets[1], sets[2], sets[3], weekdays, parts[2] == "*", parts[4] == "*")

    def day_matches(self, t: datetime) -> bool:
        dom, dow = t.day in self.days, t.isoweekday() % 7 in self.weekdays
        if self.any_day or self.any_weekday:
            return dom and dow
        return dom or dow

    def after(self, t: datetime) -> datetime:
        """The first time strictly after ``t`` that matches (minute precision)."""
        t = t.replace(second=0, microsecond=0) + timedelta(minutes=1)
        for _ in range(4 * 366 * 24):  # whole days and hours are skipped: this bounds even "29 feb"
            if t.month not in self.months:
                t = (t.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
            elif not self.day_matches(t):
                t = t.replace(hour=0, minute=0) + timedelta(days=1)
            elif t.hour not in self.hours:
                t = t.replace(minute=0) + timedelta(hours=1)
            elif t.minute not in self.minutes:
                t += timedelta(minutes=1)
            else:
                return t
        raise ValidationError("the cron expression never matches a date")


def _field(part: str, name: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for item in part.split(","):
        m = _PART.match(item)
        if m is None:
            raise ValidationError(f"cron {name} {part!r}: cannot read {item!r}")
        span, step = m.group(1), int(m.group(2) or 1)
        if span == "*":
            first, last = low, high
        else:
            a, _, b = span.partition("-")
            first = _value(a, name, low, high, names)
            last = _value(b, name, low, high, names) if b else (high if m.group(2) else first)
        if step < 1 or first > last:
            raise ValidationError(f"cron {name} {item!r}: empty range")
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _value(text: str, name: str, low: int, high: int, names: dict[str, int]) -> int:
    value = names.get(text) if text in names else int(text) if text.isdigit() else None
    if value is None or not low <= value <= high:
        raise ValidationError(f"cron {name}: {text!r} is not in {low}-{high}")
    return value


@lru_cache(maxsize=256)
def _cron(text: str) -> Cron:
    return Cron.parse(text)


@dataclass
class Schedule:
    """A stored schedule. Exactly one of ``cron`` and ``every_seconds`` is set."""

    schedule_id: str
    agent_id: str
    message: str
    cron: str | None = None
    every_seconds: float | None = None
    session_id: str | None = None
    name: str | None = None
    user_id: str | None = None
    paused: bool = False
    created_at: int = 0  # ms; ``every`` ticks fall on created_at + n * every
    #: When the next tick is due (ms); kept beside the schedule in Redis, shown here.
    next_at: int | None = None

    def validate(self) -> Schedule:
        if (self.cron is None) == (self.every_seconds is None):
            raise ValidationError("give cron or every_seconds (exactly one)")
        if self.cron is not None:
            Cron.parse(self.cron)
        elif not isinstance(self.every_seconds, int | float) or not self.every_seconds >= MIN_EVERY:
            raise ValidationError(f"every_seconds must be a number, {MIN_EVERY:g} or more; got {self.every_seconds!r}")
        if not isinstance(self.message, str) or not self.message.strip():
            raise ValidationError("message must be a non-empty string")
        return self

    def due_after(self, ms: int) -> int:
        """The first tick strictly after ``ms``."""
        if self.every_seconds is not None:
            every = int(self.every_seconds * 1000)
            return self.created_at + ((ms - self.created_at) // every + 1) * every
        assert self.cron is not None
        when = _cron(self.cron).after(datetime.fromtimestamp(ms / 1000, UTC))
        return int(when.timestamp() * 1000)

    def latest_due(self, due: int, now: int) -> int:
        """The last tick at or before ``now``, given that ``due`` (<= now) was due: what a beat that was away
        fires once on its return (the ticks it missed in between are not made up)."""
        if self.every_seconds is not None:
            every = int(self.every_seconds * 1000)
            return due + (now - due) // every * every
        latest = due
        while (following := self.due_after(latest)) <= now:
            latest = following
        return latest

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Schedule:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

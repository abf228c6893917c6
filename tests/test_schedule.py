"""Schedule time math, without Redis: cron expressions (UTC), ``every`` ticks, and what a returning beat fires."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents_celery import Schedule, ValidationError
from agents_celery.schedule import Cron


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("*/15 * * * *", at(2026, 11, 30, 10, 7), at(2026, 11, 30, 10, 15)),
        ("*/15 * * * *", at(2026, 11, 30, 10, 15), at(2026, 11, 30, 10, 30)),  # strictly after
        ("0 9 * * mon-fri", at(2026, 11, 28, 12, 0), at(2026, 11, 30, 9, 0)),  # Saturday -> Monday
        ("30 2 1 jan *", at(2026, 6, 1), at(2027, 1, 1, 2, 30)),
        ("0 0 29 2 *", at(2026, 3, 1), at(2028, 2, 29)),
        ("0 12 * * 7", at(2026, 11, 30), at(2026, 12, 6, 12, 0)),  # 7 is Sunday too
        ("0 0 1 * mon", at(2026, 11, 30, 1), at(2026, 12, 1)),  # both day fields: either matches
        ("5,10-12 8 * * *", at(2026, 11, 30, 8, 10), at(2026, 11, 30, 8, 11)),
    ],
)
def test_cron_next(expr: str, after: datetime, expected: datetime) -> None:
    assert Cron.parse(expr).after(after) == expected


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("* * *", "5 fields"),
        ("60 * * * *", "not in 0-59"),
        ("*/0 * * * *", "empty range"),
        ("10-5 * * * *", "empty range"),
        ("* * * foo *", "not in 1-12"),
        ("* * 31 2 *", "never matches"),
    ],
)
def test_bad_cron_is_refused(expr: str, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        Schedule("s", "a", "hi", cron=expr).validate().due_after(0)


def test_every_ticks_fall_on_a_grid_from_creation() -> None:
    s = Schedule("s", "a", "hi", every_seconds=2, created_at=10_000)
    assert s.due_after(10_000) == 12_000 and s.due_after(11_999) == 12_000 and s.due_after(12_000) == 14_000
    # A beat away from 12 s to 19.5 s fires the last tick it missed (18 s) once, then goes on at 20 s.
    assert s.latest_due(12_000, 19_500) == 18_000 and s.due_after(19_500) == 20_000
    assert s.latest_due(12_000, 12_000) == 12_000


def test_a_missed_cron_tick_fires_the_latest() -> None:
    s = Schedule("s", "a", "hi", cron="*/10 * * * *")
    due = ms(at(2026, 11, 30, 10, 0))
    assert s.latest_due(due, ms(at(2026, 11, 30, 10, 35))) == ms(at(2026, 11, 30, 10, 30))


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"cron": "* * * * *", "every_seconds": 5}, {"every_seconds": 0.5}, {"every_seconds": "5"}],
)
def test_exactly_one_valid_timing(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Schedule("s", "a", "hi", **kwargs).validate()  # type: ignore[arg-type]

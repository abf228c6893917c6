"""A pydantic-ai run's segment is one step however many units it journals: its attempt budget
(``max_step_attempts``, 3 by default) counts only attempts that saved nothing. Before, a run under kill -9 every few
seconds failed ``AbandonedRunError`` with most of its units journaled, though every attempt had made progress.

Real workers killed for real: after each journal write (every attempt saves one unit, then dies), and while the
model streams (no attempt saves anything).
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from agents_celery.testing import ScriptResponder

from .conftest import TEST_REDIS_URL, all_events, wait_for
from .support.invariants import assert_run_sound
from .support.workers import Deployment
from .test_pydantic_ai import WEATHER, WEATHER_TOOLS, Counts, _crash_key, alive, crashable, kill_live, mcp_server

__all__ = ["crashable", "mcp_server"]  # the fixtures, shared with tests/test_pydantic_ai.py

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]  # crash tests: kill -9, again and again

#: The weather run's units: three model requests and two tool calls.
UNITS = 5


def _ended(dep: Deployment, run_id: str) -> bool:
    """Whether the run ended; meanwhile keeps two workers alive (the kills take them one by one)."""
    alive(dep)
    return dep.runtime.get(run_id).status.value in ("completed", "failed", "cancelled")


def test_a_run_whose_every_attempt_saves_a_unit_completes_however_often_it_is_killed(
    crashable: Deployment, fake_openai: Any
) -> None:
    """Killed after each of its first four journal writes (four attempts, each saving one unit, more than the
    default budget of three): the fifth completes, each tool ran once, each model request was sent once."""
    dead = alive(crashable)
    rt = crashable.runtime
    fake_openai.responder = ScriptResponder(WEATHER)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, crashable, *WEATHER_TOOLS)
        r.set(_crash_key(crashable, "journal_each"), UNITS - 1)
        before = fake_openai.calls
        stream = rt.stream("pai_weather", "Weather in London?")
        wait_for(lambda: _ended(crashable, stream.id), timeout=120, what="the run's end")
        events = all_events(rt, stream.id)
        view = stream.get()
        assert view.status == "completed", view.error
        assert sum(w.proc.poll() is not None for w in crashable.workers) == dead + UNITS - 1
        assert view.output == "It is sunny in London."
        assert fake_openai.calls - before == 3  # every journaled request replayed, none sent again
        assert_run_sound(events, tool_counts=dict.fromkeys(WEATHER_TOOLS, 1), counter=counts)
    attempts = [e.data["metadata"]["attempt"] for e in events if e.type.value == "STEP_STARTED"]
    assert attempts == list(range(1, UNITS + 1)), attempts  # one segment, one step: five attempts at it


def test_a_run_whose_attempts_save_nothing_is_still_abandoned_at_the_budget(
    crashable: Deployment, fake_openai: Any
) -> None:
    """Killed while the model streams, attempt after attempt (the model unit is never journaled): after three
    attempts the run fails ``AbandonedRunError``, as any step does."""
    alive(crashable)
    rt = crashable.runtime
    text = " ".join(f"w{i}" for i in range(200))
    fake_openai.responder = ScriptResponder([text], token_delay=0.05)
    stream = rt.stream("pai_weather", "Talk.")
    for attempt in (1, 2, 3):

        def streaming(attempt: int = attempt) -> bool:
            events = all_events_now(rt, stream.id)
            started = [e for e in events if e.type.value == "STEP_STARTED"]
            return len(started) >= attempt and events[-1].type.value == "TEXT_MESSAGE_CONTENT"

        wait_for(streaming, timeout=60, what=f"attempt {attempt} to stream")
        kill_live(crashable)
    wait_for(lambda: _ended(crashable, stream.id), timeout=60, what="the run's end")
    view = stream.get()
    assert view.status == "failed"
    assert view.error is not None and view.error["type"] == "AbandonedRunError", view.error
    assert "attempted 3 times without committing" in view.error["message"]
    assert_run_sound(all_events(rt, stream.id))


def all_events_now(rt: Any, run_id: str) -> list[Any]:
    """The run's events so far (without waiting for its end)."""
    return list(rt.store.log.read(run_id))

"""agents_celery.testing.InlineRunner: an agent's steps run to the end in the test's own process."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from agents_celery import Agent, OpenAIChat, ScriptedModel, ScriptedToolCall, ScriptedTurn, ToolContext, tool
from agents_celery.events import EventType
from agents_celery.settings import Settings
from agents_celery.testing import FakeOpenAIServer, InlineRunner, ScriptResponder

from .support.invariants import assert_run_sound

pytestmark = pytest.mark.timeout(60)

calls: list[tuple[str, dict[str, Any]]] = []


@tool
def get_time(timezone: str = "UTC") -> str:
    """Tell the time."""
    calls.append(("get_time", {"timezone": timezone}))
    return f"12:00 in {timezone}"


@tool(requires_confirmation=True)
def delete_file(path: str, ctx: ToolContext) -> str:
    """Delete a file."""
    calls.append(("delete_file", {"path": path, "key": ctx.idempotency_key}))
    return f"deleted {path}"


def clock() -> Agent:
    turns = [ScriptedTurn("Let me look. ", [ScriptedToolCall("get_time", {"timezone": "Lisbon"})]), "It is noon."]
    return Agent(name="clock", model=ScriptedModel(turns), tools=[get_time])


def janitor() -> Agent:
    turns = [ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/a"})]), "Done."]
    return Agent(name="janitor", model=ScriptedModel(turns), tools=[delete_file])


def test_a_run_goes_to_the_end_in_process(settings: Settings) -> None:
    calls.clear()
    with InlineRunner([clock()], settings=settings) as runner:
        view = runner.run("clock", "What time is it?")
        assert view.status == "completed" and view.output == "It is noon."
        events = runner.events(view.run_id)
        assert_run_sound(events)
        assert len(events) == view.last_offset + 1
        assert events[0].type is EventType.RUN_STARTED and events[-1].type is EventType.RUN_FINISHED
        assert runner.text(view.run_id) == "Let me look. It is noon."
    assert calls == [("get_time", {"timezone": "Lisbon"})]


def test_a_paused_run_waits_for_its_answer(settings: Settings) -> None:
    calls.clear()
    with InlineRunner([janitor()], settings=settings) as runner:
        view = runner.run("janitor", "Clean up")
        assert view.status == "paused" and [c.name for c in view.pending] == ["delete_file"]
        assert calls == []
        call_id = view.pending[0].id
        done = runner.continue_run(view.run_id, [{"tool_call_id": call_id, "tool_args": {"path": "/tmp/b"}}])
        assert done.status == "completed" and done.output == "Done."
    assert calls == [("delete_file", {"path": "/tmp/b", "key": f"{view.run_id}:{call_id}"})]


def test_the_real_openai_sdk_against_the_fake_server(settings: Settings) -> None:
    with FakeOpenAIServer(ScriptResponder(["Hello ", "there"])) as server:
        agent = Agent(name="chatty", model=OpenAIChat("gpt-4o-mini", base_url=server.url, api_key="test"))
        with InlineRunner([agent], settings=settings) as runner:
            view = runner.run("chatty", "hi")
            assert view.status == "completed" and view.output == "Hello "
        assert server.calls == 1


def test_its_keys_are_gone_when_it_closes(r: redis.Redis, settings: Settings) -> None:
    with InlineRunner([clock()], redis_url=settings.redis_url) as runner:
        prefix = runner.settings.key_prefix
        runner.run("clock", "time?")
        assert any(r.scan_iter(match=f"{prefix}:*"))
    assert not any(r.scan_iter(match=f"{prefix}:*"))


def test_without_a_redis_it_starts_an_embedded_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTS_CELERY_REDIS_URL", "redis://127.0.0.1:1/0")  # nothing answers there
    with InlineRunner([clock()]) as runner:
        assert runner.settings.redis_url.startswith("unix://")
        assert runner.run("clock", "time?").status == "completed"

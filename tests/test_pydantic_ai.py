"""pydantic-ai agents on our backend (agents_celery.contrib.pydantic_ai): real workers, real Redis, pydantic-ai's
own OpenAIChatModel against the fake OpenAI server; each shape run in-process and on the backend, compared."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import redis

from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing import ScriptResponder

from .conftest import TEST_REDIS_URL, all_events, wait_for
from .invariants import assert_run_sound, counter_of

pytestmark = pytest.mark.timeout(120)

AGENTS = "tests.agents_pydantic"
#: Message fields that differ between two runs of the same conversation.
VOLATILE = {"timestamp", "run_id", "conversation_id", "provider_response_id", "provider_details", "metadata"}

WEATHER = [
    ScriptedTurn(tool_calls=[ScriptedToolCall("get_lat_lng", {"location": "London"})]),
    ScriptedTurn(tool_calls=[ScriptedToolCall("get_weather", {"lat": 51.5, "lng": -0.1})]),
    "It is sunny in London.",
]


def module(fake_openai: Any) -> Any:
    os.environ.setdefault("FAKE_OPENAI_URL", fake_openai.url)
    import tests.agents_pydantic as agents

    return agents


def stripped(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: stripped(v) for k, v in data.items() if k not in VOLATILE}
    if isinstance(data, list):
        return [stripped(v) for v in data]
    return data


def in_process(fake_openai: Any, agent_name: str, message: str, turns: list[Any]) -> tuple[Any, list[Any], int]:
    """The agent run in this process (the floor): its output, its messages as JSON, the model calls it made."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    agents = module(fake_openai)
    agent = {"pai_weather": agents.weather, "pai_bank": agents.bank, "pai_files": agents.files}[agent_name]
    fake_openai.responder = ScriptResponder(turns)
    before = fake_openai.calls
    result = agent.run_sync(message)
    messages = ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json")
    return result.output, messages, fake_openai.calls - before


def backend(deploy: Callable[..., Any], **extra: str) -> Any:
    dep = deploy("pai", {"AGENTS_CELERY_AGENTS": AGENTS, **extra})
    dep.start(1)
    return dep


def test_weather_agent_runs_on_the_backend_as_in_process(deploy: Callable[..., Any], fake_openai: Any) -> None:
    output, messages, calls = in_process(fake_openai, "pai_weather", "Weather in London?", WEATHER)
    dep = backend(deploy)
    rt = dep.runtime
    fake_openai.responder = ScriptResponder(WEATHER)
    before = fake_openai.calls
    stream = rt.stream("pai_weather", "Weather in London?")
    events = all_events(rt, stream.id)
    view = stream.get()
    assert view.status == "completed", events[-1].data
    assert view.output == output
    assert fake_openai.calls - before == calls
    state, _ = rt.store.load(stream.id)
    assert stripped(state.messages) == stripped(messages)
    assert state.usage["total_tokens"] > 0
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = {"pai:get_lat_lng": 1, "pai:get_weather": 1}
        assert_run_sound(events, tool_counts=counts, counter=counter_of(r, dep.prefix))
    kinds = [e.type.value for e in events]
    assert kinds.count("TOOL_CALL_RESULT") == 2
    assert "TEXT_MESSAGE_CONTENT" in kinds and "TOOL_CALL_ARGS" in kinds


def _crash_key(dep: Any, point: str) -> str:
    return f"{dep.prefix}:test:crash:{point}:any"


@pytest.mark.slow
@pytest.mark.parametrize("writes", [1, 2, 3])
def test_a_worker_killed_after_a_journal_write_replays_the_segment(
    deploy: Callable[..., Any], fake_openai: Any, writes: int
) -> None:
    output, messages, calls = in_process(fake_openai, "pai_weather", "Weather in London?", WEATHER)
    dep = deploy("paicrash", {"AGENTS_CELERY_AGENTS": AGENTS})
    dep.start(2)
    rt = dep.runtime
    fake_openai.responder = ScriptResponder(WEATHER)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        r.set(_crash_key(dep, "journal"), writes)
        before = fake_openai.calls
        stream = rt.stream("pai_weather", "Weather in London?")
        events = all_events(rt, stream.id)
        assert r.get(_crash_key(dep, "journal")) is None, "the crash never happened"
        assert sum(w.proc.poll() is not None for w in dep.workers) == 1
        view = stream.get()
        assert view.status == "completed", events[-1].data
        assert view.output == output
        assert fake_openai.calls - before == calls  # no journaled unit ran again
        state, _ = rt.store.load(stream.id)
        assert stripped(state.messages) == stripped(messages)
        counts = {"pai:get_lat_lng": 1, "pai:get_weather": 1}
        assert_run_sound(events, tool_counts=counts, counter=counter_of(r, dep.prefix))
    assert any(e.type.value == "CUSTOM" and e.data.get("name") == "attempt_abandoned" for e in events)
    assert [e.type.value for e in events].count("TOOL_CALL_RESULT") == 2


@pytest.mark.slow
@pytest.mark.parametrize("approve", [True, False])
def test_a_tool_killed_before_its_journal_write_pauses_as_may_have_run(
    deploy: Callable[..., Any], fake_openai: Any, approve: bool
) -> None:
    dep = deploy("paitool", {"AGENTS_CELERY_AGENTS": AGENTS})
    dep.start(2)
    rt = dep.runtime
    fake_openai.responder = ScriptResponder(WEATHER)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        r.set(_crash_key(dep, "tool_body"), 1)
        stream = rt.stream("pai_weather", "Weather in London?")
        wait_for(lambda: stream.get().status == "paused", timeout=30, what="the may-have-run pause")
        view = stream.get()
        pending = view.pending if hasattr(view, "pending") else None
        state, _ = rt.store.load(stream.id)
        assert [(c.name, c.pause_reason) for c in state.pending] == [("get_lat_lng", "may_have_run")]
        assert counter_of(r, dep.prefix)("pai:get_lat_lng") == 1
        del pending
        call_id = state.pending[0].id
        rt.continue_run(stream.id, [{"tool_call_id": call_id, "confirmed": approve}])
        wait_for(lambda: stream.get().status == "completed", timeout=30, what="the run's end")
        events = all_events(rt, stream.id)
        counts = {"pai:get_lat_lng": 2 if approve else 1, "pai:get_weather": 1}
        assert_run_sound(events, tool_counts=counts, counter=counter_of(r, dep.prefix))
    results = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert [e.data["tool_call_id"] for e in results].count(call_id) == 1
    if not approve:
        assert "did not run again" in next(e for e in results if e.data["tool_call_id"] == call_id).data["content"]


def _delete(path: str) -> list[Any]:
    return [ScriptedTurn(tool_calls=[ScriptedToolCall("delete_file", {"path": path})]), "Done."]


@pytest.mark.parametrize("decision", ["approve", "edit", "reject"])
def test_a_tool_needing_approval_pauses_and_continues(
    deploy: Callable[..., Any], fake_openai: Any, decision: str
) -> None:
    from pydantic_ai import DeferredToolRequests, DeferredToolResults
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    agents = module(fake_openai)
    fake_openai.responder = ScriptResponder(_delete("a.txt"))
    first = agents.files.run_sync("Delete a.txt", output_type=[str, DeferredToolRequests])
    assert isinstance(first.output, DeferredToolRequests)
    dep = backend(deploy)
    rt = dep.runtime
    fake_openai.responder = ScriptResponder(_delete("a.txt"))
    stream = rt.stream("pai_files", "Delete a.txt")
    wait_for(lambda: stream.get().status == "paused", timeout=30, what="the approval pause")
    events = all_events(rt, stream.id)
    outcome = events[-1].data["outcome"]
    assert outcome["type"] == "interrupt"
    (asked,) = outcome["interrupts"]
    assert asked["metadata"] == {"tool_name": "delete_file", "tool_args": {"path": "a.txt"}}
    assert "editedArgs" in asked["response_schema"]["properties"]
    call_id = asked["tool_call_id"]
    answer: dict[str, Any] = {"tool_call_id": call_id, "confirmed": decision != "reject"}
    if decision == "edit":
        answer["tool_args"] = {"path": "b.txt"}
    if decision == "reject":
        answer["confirmation_note"] = "keep it"
    rt.continue_run(stream.id, [answer])
    wait_for(lambda: stream.get().status == "completed", timeout=30, what="the run's end")
    events = all_events(rt, stream.id)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = {
            "pai:delete_file:a.txt": int(decision == "approve"),
            "pai:delete_file:b.txt": int(decision == "edit"),
        }
        assert_run_sound(events, tool_counts=counts, counter=counter_of(r, dep.prefix))
    (result,) = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
    expected = {"approve": "deleted a.txt", "edit": "deleted b.txt", "reject": "keep it"}[decision]
    assert expected in result.data["content"]
    if decision == "approve":  # the same conversation as in-process, resumed with the same decision
        fake_openai.responder = ScriptResponder(_delete("a.txt"))
        results = DeferredToolResults(approvals={call_id: True})
        done = agents.files.run_sync(message_history=first.all_messages(), deferred_tool_results=results)
        state, _ = rt.store.load(stream.id)
        assert stripped(state.messages) == stripped(
            ModelMessagesTypeAdapter.dump_python(done.all_messages(), mode="json")
        )
        assert stream.get().output == done.output

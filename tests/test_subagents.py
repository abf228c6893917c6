"""Agents as tools: a call of ``Agent.as_tool()`` runs that agent as a durable child run. Real workers, real
Redis, the real openai SDK path (the fake server answers each agent by its system prompt)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agents_celery import RunStatus, Runtime
from agents_celery.engine.children import child_run_id
from agents_celery.events import Event, EventType
from agents_celery.models import ScriptedToolCall
from agents_celery.testing.openai_server import FakeReply

pytestmark = pytest.mark.timeout(90)

Turns = Callable[[int, str], FakeReply]


def by_agent(**scripts: Turns) -> Callable[[dict[str, Any]], FakeReply]:
    """A responder that answers each agent (by the first word after "You are the" in its system prompt) with
    ``scripts[word](turn, last user message)``; the turn counts assistant messages after that message."""

    def respond(request: dict[str, Any]) -> FakeReply:
        messages = request["messages"]
        who = str(messages[0]["content"]).removeprefix("You are the ").split()[0].rstrip(".")
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        turn = sum(1 for m in messages[last_user:] if m["role"] == "assistant")
        return scripts[who](turn, str(messages[last_user]["content"]))

    return respond


def lead_asks(*inputs: str, then: str = "Summary written.") -> Turns:
    """The lead calls the researcher once per input, then answers ``then``."""

    def turns(turn: int, _message: str) -> FakeReply:
        if turn == 0:
            calls = [ScriptedToolCall("researcher", {"input": text}, f"call_r{i}") for i, text in enumerate(inputs)]
            return FakeReply(text="Asking the researcher.", tool_calls=calls)
        return FakeReply(text=then)

    return turns


def researcher_counts(seconds: float = 0.0, token_delay: float = 0.0) -> Turns:
    """The researcher runs slow_count (keyed by its message) once, then answers "Found: <message>"."""

    def turns(turn: int, message: str) -> FakeReply:
        if turn == 0:
            args = {"key": f"sub:{message}", "seconds": seconds}
            return FakeReply(text="Looking.", tool_calls=[ScriptedToolCall("slow_count", args, "call_count")])
        return FakeReply(text=f"Found: {message}", token_delay=token_delay)

    return turns


def log_of(runtime: Runtime, run_id: str) -> list[Event]:
    return list(runtime.get_stream(run_id).events(until_pause=False))


def count(runtime: Runtime, name: str) -> int:
    """How many times the workers' tools counted ``name`` (tests/agents_fixture.py)."""
    return int(runtime.redis.get(f"{runtime.settings.key_prefix}:test:count:{name}") or 0)


def assert_contiguous(log: list[Event]) -> None:
    assert [e.offset for e in log] == list(range(len(log)))


def test_a_parent_runs_two_children_concurrently_and_gets_their_answers(runtime: Runtime, fake_openai: Any) -> None:
    fake_openai.responder = by_agent(lead=lead_asks("alpha", "beta"), researcher=researcher_counts(seconds=1.0))
    manifest = runtime.agent_manifest("lead")
    assert {t["name"]: t.get("agent") for t in manifest["tools"]}["researcher"] == "researcher"
    view = runtime.run("lead", "research alpha and beta", timeout=60)
    assert view.status is RunStatus.COMPLETED and view.output == "Summary written."
    kids = {child_run_id(view.run_id, "call_r0"), child_run_id(view.run_id, "call_r1")}
    assert {c["run_id"] for c in view.children} == kids
    assert all(c["agent_id"] == "researcher" and c["status"] == "completed" for c in view.children)
    log = log_of(runtime, view.run_id)
    assert_contiguous(log)
    results = {e.data["tool_call_id"]: e.data["content"] for e in log if e.type is EventType.TOOL_CALL_RESULT}
    assert results == {"call_r0": "Found: alpha", "call_r1": "Found: beta"}
    started = [e.data for e in log if e.type is EventType.SUBAGENT_STARTED]
    assert sorted(s["parent_tool_call_id"] for s in started) == ["call_r0", "call_r1"]
    assert {s["subagent_run_id"] for s in started} == kids and all(s["name"] == "researcher" for s in started)
    finished = [e.data for e in log if e.type is EventType.SUBAGENT_FINISHED]
    assert sorted(f["result"] for f in finished) == ["Found: alpha", "Found: beta"]
    spans = []
    for kid in kids:
        child = runtime.get(kid)
        assert child.parent_run_id == view.run_id and child.status is RunStatus.COMPLETED
        child_log = log_of(runtime, kid)
        assert_contiguous(child_log)
        tools = [e for e in child_log if e.type in (EventType.STEP_STARTED, EventType.STEP_FINISHED)]
        tools = [e for e in tools if e.data["metadata"]["kind"] == "tools"]
        spans.append((tools[0].timestamp, tools[-1].timestamp))
    (a0, a1), (b0, b1) = spans
    assert a0 < b1 and b0 < a1, "the two children's tool steps (1 s each) overlapped in time"
    assert count(runtime, "sub:alpha") == 1 and count(runtime, "sub:beta") == 1

"""Handoffs: ``Agent(..., handoffs=[other])`` lets the model hand the conversation to another agent inside the
same run. Real workers (one killed with -9 right after a handoff), real Redis, the real openai SDK path."""

from __future__ import annotations

from typing import Any

import pytest

from agents_celery import Agent, ConfigurationError, RunStatus, Runtime, ScriptedModel
from agents_celery.agent import handoff_tool
from agents_celery.events import Event, EventType
from agents_celery.models import ScriptedToolCall, ScriptedTurn

from .conftest import wait_event, wait_for
from .support.invariants import assert_run_sound
from .support.workers import Deployment

pytestmark = pytest.mark.timeout(90)
HANDOFF = ScriptedTurn("Let me pass you on.", [ScriptedToolCall("transfer_to_billing", {"reason": "a charge"})])
ANSWER = " ".join(f"b{i}" for i in range(30))


def system_prompt(request: dict[str, Any]) -> str:
    return str(request["messages"][0]["content"])


def tool_names(request: dict[str, Any]) -> list[str]:
    return sorted(t["function"]["name"] for t in request.get("tools") or [])


def test_a_handoff_moves_the_next_turns_to_the_other_agent(runtime: Runtime, script: Any, fake_openai: Any) -> None:
    script(HANDOFF, ANSWER)
    manifest = runtime.agent_manifest("triage")
    assert manifest["handoffs"] == ["billing"]
    seen = len(fake_openai.requests)
    view = runtime.run("triage", "why was I charged twice?", timeout=30)
    assert view.status is RunStatus.COMPLETED and view.output == ANSWER
    assert view.agent_id == "triage" and view.active_agent == "billing"
    log = list(runtime.get_stream(view.run_id).events(until_pause=False))
    (handoff,) = [e for e in log if e.type is EventType.CUSTOM and e.data.get("name") == "handoff"]
    assert handoff.data["value"]["from"] == "triage" and handoff.data["value"]["to"] == "billing"
    assert handoff.data["value"]["reason"] == "a charge"
    results = [e.data["content"] for e in log if e.type is EventType.TOOL_CALL_RESULT]
    assert results == ["Transferred to billing."]
    first, second = fake_openai.requests[seen:]
    assert system_prompt(first) == "You are the triage agent." and "transfer_to_billing" in tool_names(first)
    assert system_prompt(second) == "You are the billing agent." and tool_names(second) == ["add"]


def test_handoff_definitions_are_checked() -> None:
    billing = Agent(name="billing2", model=ScriptedModel(["x"]))
    with pytest.raises(ConfigurationError, match="Agent objects"):
        Agent(name="a", model=ScriptedModel(["x"]), handoffs=["billing2"])  # type: ignore[list-item]
    agent = Agent(name="a", model=ScriptedModel(["x"]), handoffs=[billing])
    assert handoff_tool("billing2") in agent.handoffs
    assert [s["function"]["name"] for s in agent.tool_schemas()] == ["transfer_to_billing2"]


@pytest.fixture
def own(deploy: Any) -> Deployment:
    deployment: Deployment = deploy("hand")
    return deployment


@pytest.mark.slow
def test_a_handoff_survives_a_kill_before_the_next_turn_ends(own: Deployment, script: Any, fake_openai: Any) -> None:
    runtime = own.runtime
    script(HANDOFF, ANSWER, token_delay=0.05)
    first = own.worker()
    try:
        wait_for(lambda: runtime.store.agents.get("triage") is not None, what="the agents to be published")
        stream = runtime.stream("triage", "why was I charged twice?")
        handed: list[Event] = []

        def billing_streams(event: Event) -> bool:
            if event.type is EventType.CUSTOM and event.data.get("name") == "handoff":
                handed.append(event)
            return bool(handed) and event.type is EventType.TEXT_MESSAGE_CONTENT

        wait_event(runtime, stream.id, billing_streams)  # billing's turn is streaming: the handoff is committed
        first.kill()
    finally:
        first.stop()
    second = own.worker()
    try:
        view = wait_for(lambda: (v := runtime.get(stream.id)).status.is_final and v, timeout=45, what="the end")
        assert view.status is RunStatus.COMPLETED and view.output == ANSWER and view.active_agent == "billing"
        log = list(stream.events(until_pause=False))
        assert_run_sound(log)
        handoffs = [e for e in log if e.type is EventType.CUSTOM and e.data.get("name") == "handoff"]
        assert len(handoffs) == 1  # recorded once, with the tool step that committed it
        assert any(e.type is EventType.CUSTOM and e.data.get("name") == "attempt_abandoned" for e in log)
        retried = fake_openai.requests[-1]  # the turn taken again by the second worker
        assert system_prompt(retried) == "You are the billing agent." and tool_names(retried) == ["add"]
    finally:
        second.stop()

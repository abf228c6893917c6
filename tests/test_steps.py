"""Step decisions without Redis or a worker: what a model turn, a tool step and a new tool call make of a run.

Every function here is pure (no store, no broker, no thread): the engine calls them with what the step read
and did, and commits what they return.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from agents_celery import Agent, ScriptedModel, tool
from agents_celery.engine import children
from agents_celery.engine.calls import walk_away
from agents_celery.engine.steps import (
    Cancelled,
    StepResult,
    after_tools,
    after_turn,
    answered,
    cancelled,
    failed,
    from_ledger,
    new_call,
    step_event,
)
from agents_celery.engine.waiting import with_history
from agents_celery.errors import ModelError
from agents_celery.events import EventType, NewEvent
from agents_celery.models import TextDelta, ToolCallDelta, TurnAccumulator, Usage
from agents_celery.runs import RunState, RunStatus, ToolCall
from agents_celery.storage.store import Effect, RunStore

from .conftest import wait_for

FINISHED = step_event(EventType.STEP_FINISHED, "model", 3, 1)


@tool
def get_time(timezone: str = "UTC") -> str:
    """The time."""
    return "noon"


@tool(requires_confirmation=True)
def delete_file(path: str) -> str:
    """Deletes a file."""
    return "deleted"


@tool(idempotent=True)
def lookup(key: str) -> str:
    """Looks a key up."""
    return "found"


helper = Agent(name="helper", instructions="Help.", model=ScriptedModel(["Helped."]))
expert = Agent(name="expert", instructions="Know.", model=ScriptedModel(["Known."]))
agent = Agent(
    name="main",
    instructions="Work.",
    model=ScriptedModel(["Done."]),
    tools=[get_time, delete_file, lookup, helper.as_tool()],
    handoffs=[expert],
)


def _state(**update: Any) -> RunState:
    base = RunState(run_id="r1", agent_id="main", session_id="s1", messages=[{"role": "user", "content": "go"}])
    return base.model_copy(update={"status": RunStatus.RUNNING, **update})


Call = tuple[str, str, dict[str, Any]]


def _turn(text: str = "", calls: tuple[Call, ...] | list[Call] = (), usage: Usage | None = None) -> TurnAccumulator:
    acc = TurnAccumulator()
    if text:
        acc.add(TextDelta(text))
    for index, (call_id, name, args) in enumerate(calls):
        acc.add(ToolCallDelta(index, call_id, name, json.dumps(args)))
    if usage is not None:
        acc.add(usage)
    return acc


def _types(result: StepResult) -> list[EventType]:
    return [e.type for e in result.events]


def _payload(event: NewEvent) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(event.json)
    return value


# -- a new call ------------------------------------------------------------------------------------------


def _raw(name: str, args: Any = None, call_id: str = "c1") -> dict[str, str]:
    return {"id": call_id, "name": name, "arguments": json.dumps(args if args is not None else {})}


def test_a_plain_call_is_left_to_run() -> None:
    call = new_call(agent, _raw("get_time", {"timezone": "CET"}))
    assert (call.decision, call.error, call.agent, call.requires_confirmation) == (None, None, None, False)


def test_a_call_needing_confirmation_waits_for_a_human() -> None:
    call = new_call(agent, _raw("delete_file", {"path": "/a"}))
    assert (call.decision, call.pause_reason, call.requires_confirmation) == ("pending", "confirmation_required", True)


def test_an_unknown_tool_is_an_error_naming_what_exists() -> None:
    call = new_call(agent, _raw("rm_rf"), {"client_thing"})
    assert call.error is not None and "unknown tool 'rm_rf'" in call.error
    assert "client_thing" in call.error and "get_time" in call.error and "transfer_to_expert" in call.error


def test_invalid_arguments_are_an_error_the_model_sees() -> None:
    call = new_call(agent, _raw("delete_file", {"path": 3}))
    assert call.error is not None and call.decision is None


def test_a_client_tool_waits_for_the_client() -> None:
    call = new_call(agent, _raw("pick_colour"), {"pick_colour"})
    assert (call.decision, call.pause_reason) == ("pending", "client_tool")


def test_an_agent_tool_becomes_a_child_run_and_a_handoff_stays_plain() -> None:
    assert new_call(agent, _raw("helper", {"input": "x"})).agent == "helper"
    handoff = new_call(agent, _raw("transfer_to_expert"))
    assert (handoff.agent, handoff.decision, handoff.error) == (None, None, None)


# -- a model turn ----------------------------------------------------------------------------------------


def test_a_turn_without_calls_completes_the_run_with_its_text() -> None:
    state = _state(usage={"total_tokens": 5})
    result = after_turn(agent, state, _turn("Hello.", usage=Usage(2, 3, 5)), FINISHED)
    assert result.log_status == "ended" and result.state.status == RunStatus.COMPLETED
    assert result.state.output == "Hello." and result.state.turns == 1
    assert result.state.usage == {"total_tokens": 10, "prompt_tokens": 2, "completion_tokens": 3}
    assert result.state.messages[-1] == {"role": "assistant", "content": "Hello."}
    assert _types(result) == [EventType.STEP_FINISHED, EventType.RUN_FINISHED]
    assert _payload(result.events[-1])["outcome"] == {"type": "success"}
    assert state.status == RunStatus.RUNNING  # the state given is left alone


def test_a_turn_with_calls_goes_on_to_the_tool_step() -> None:
    result = after_turn(agent, _state(), _turn("", [("c1", "get_time", {})]), FINISHED)
    assert result.log_status == "live" and not result.waits and result.awaiting is None
    assert result.state.next == "tools" and [c.id for c in result.state.tool_calls] == ["c1"]
    assert result.state.output is None and _types(result) == [EventType.STEP_FINISHED]


def test_a_turn_asking_for_a_confirmed_tool_pauses_with_an_interrupt() -> None:
    acc = _turn("", [("c1", "get_time", {}), ("c2", "delete_file", {"path": "/a"})])
    result = after_turn(agent, _state(), acc, FINISHED)
    assert result.log_status == "paused" and result.state.status == RunStatus.PAUSED
    outcome = _payload(result.events[-1])["outcome"]
    assert outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    assert (interrupt["id"], interrupt["reason"]) == ("c2", "confirmation_required")
    assert interrupt["metadata"] == {"tool_name": "delete_file", "tool_args": {"path": "/a"}}
    assert "editedArgs" in interrupt["response_schema"]["properties"]


def test_a_turn_calling_only_client_tools_pauses_with_their_ids() -> None:
    state = _state(client_tools=[{"name": "pick_colour"}])
    result = after_turn(agent, state, _turn("", [("c9", "pick_colour", {})]), FINISHED)
    assert result.log_status == "paused"
    assert _payload(result.events[-1])["outcome"] == {"type": "success", "pending_tool_call_ids": ["c9"]}


# -- a tool step -----------------------------------------------------------------------------------------


def test_calls_that_do_not_run_get_their_result_from_the_decision() -> None:
    rejected = ToolCall(id="c1", name="delete_file", arguments="{}", decision="rejected", note="not that one")
    note = "The user rejected this tool call; it did not run. Note from the user: not that one"
    assert answered(agent, rejected).result == note  # type: ignore[union-attr]
    broken = ToolCall(id="c2", name="rm", arguments="{}", error="unknown tool 'rm'")
    assert answered(agent, broken).result == "Error: unknown tool 'rm'"  # type: ignore[union-attr]
    handoff = ToolCall(id="c3", name="transfer_to_expert", arguments="{}")
    assert answered(agent, handoff).result == "Transferred to expert."  # type: ignore[union-attr]
    assert answered(agent, ToolCall(id="c4", name="get_time", arguments="{}")) is None


def test_the_effect_ledger_decides_whether_a_call_runs_again() -> None:
    call = ToolCall(id="c1", name="get_time", arguments="{}")
    done = from_ledger(call, get_time, Effect("done", "noon", None))
    assert done is not None and (done.result, done.error) == ("noon", None)
    assert from_ledger(call, get_time, None) is None  # this attempt started it: it runs
    crashed = from_ledger(call, get_time, Effect("started"))  # started by an attempt that died, not idempotent
    assert crashed is not None and (crashed.decision, crashed.pause_reason) == ("pending", "may_have_run")
    assert from_ledger(call, lookup, Effect("started")) is None  # idempotent: it simply runs again


def test_finished_calls_go_to_the_next_model_turn() -> None:
    calls = [ToolCall(id="c1", name="get_time", arguments="{}", result="noon")]
    finished = step_event(EventType.STEP_FINISHED, "tools", 4, 1)
    result = after_tools(agent, _state(tool_calls=calls, next="tools"), calls, children.NONE, False, finished)
    assert result.log_status == "live" and not result.waits and result.awaiting is None
    assert result.state.next == "model" and result.state.tool_calls == []
    assert result.state.messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "noon"}
    assert _types(result) == [EventType.TOOL_CALL_RESULT, EventType.STEP_FINISHED]


def test_a_handoff_switches_the_agent_of_the_next_turns() -> None:
    calls = [ToolCall(id="c1", name="transfer_to_expert", arguments='{"reason": "deep"}', result="Transferred.")]
    result = after_tools(agent, _state(tool_calls=calls), calls, children.NONE, False, FINISHED)
    assert result.state.active_agent == "expert"
    custom = [_payload(e) for e in result.events if e.type is EventType.CUSTOM]
    assert custom[0]["name"] == "handoff" and custom[0]["value"]["to"] == "expert"


def test_a_call_that_may_have_run_pauses_the_run() -> None:
    calls = [ToolCall(id="c1", name="get_time", arguments="{}", decision="pending", pause_reason="may_have_run")]
    result = after_tools(agent, _state(tool_calls=calls), calls, children.NONE, False, FINISHED)
    assert result.log_status == "paused"
    assert _payload(result.events[-1])["outcome"]["interrupts"][0]["reason"] == "may_have_run"


def test_child_runs_still_working_end_the_step_waiting_for_them() -> None:
    calls = [ToolCall(id="c1", name="helper", arguments="{}", agent="helper", child_run_id="k1")]
    got = children.Collected(events=[], state=None)
    result = after_tools(agent, _state(tool_calls=calls), calls, got, True, FINISHED)
    assert (result.log_status, result.waits, result.awaiting) == ("live", ["k1"], ["k1"])
    assert result.state.tool_calls == calls and result.state.child_pending == []


def test_a_paused_child_pauses_its_parent_with_the_childs_calls() -> None:
    calls = [ToolCall(id="c1", name="helper", arguments="{}", agent="helper", child_run_id="k1")]
    held = [ToolCall(id="k1:x", name="delete_file", arguments="{}", decision="pending", run_id="k1")]
    got = children.Collected(paused={"k1": held})
    result = after_tools(agent, _state(tool_calls=calls), calls, got, True, FINISHED)
    assert result.log_status == "paused" and result.state.child_pending == held
    assert EventType.SUBAGENT_FINISHED in _types(result)
    assert got.events == []  # what was collected is not changed


def test_a_stop_while_children_start_keeps_the_ones_started() -> None:
    """collect returns the state with the children started so far and the stop, for the step to raise."""

    def check() -> None:
        raise Cancelled()

    starter = children.Starter(cast(RunStore, None), lambda *a: None, agent, 3, 10, check)
    call = ToolCall(id="c1", name="helper", arguments="{}", agent="helper")
    state = _state(tool_calls=[call])
    got = children.collect(starter, state, [call])
    assert isinstance(got.halted, Cancelled) and got.state is state and got.calls == {}
    refused = children.Starter(cast(RunStore, None), lambda *a: None, agent, 0, 10, check)
    got = children.collect(refused, state, [call])  # too deep: refused before anything starts
    assert got.halted is None and "nest at most 0 deep" in str(got.calls["c1"].error)


# -- endings, walking away, a waiting run ------------------------------------------------------------------


def test_endings() -> None:
    failure = failed(_state(), ModelError("no", retryable=False))
    assert failure.state.status == RunStatus.FAILED and _types(failure) == [EventType.RUN_ERROR]
    waiting = [ToolCall(id="c1", name="helper", arguments="{}", agent="helper", child_run_id="k1")]
    stop = cancelled(_state(tool_calls=waiting))
    assert _types(stop) == [EventType.SUBAGENT_ERROR, EventType.RUN_FINISHED]
    assert _payload(stop.events[-1])["outcome"] == {"type": "cancelled"} and stop.log_status == "ended"


@pytest.mark.parametrize(
    ("lost", "shutting_down", "deadline", "stopped_at", "expected"),
    [
        (False, False, None, None, None),
        (True, True, 0.0, 0.0, "lost"),
        (False, True, 0.0, 0.0, "shutdown"),
        (False, False, 10.0, 0.0, "deadline"),
        (False, False, None, 9.5, None),  # a stop has its grace
        (False, False, None, 7.0, "stopped"),
        (False, False, 11.0, None, None),
    ],
)
def test_why_a_step_walks_away_from_a_call(
    lost: bool, shutting_down: bool, deadline: float | None, stopped_at: float | None, expected: str | None
) -> None:
    assert walk_away(10.0, lost, shutting_down, deadline, stopped_at, 2.0) == expected


@pytest.mark.timeout(30)
def test_a_step_waiting_on_a_call_is_woken_not_polled() -> None:
    """A wait with a 30 s poll still ends at once when the call returns, the lease is lost (the keeper's signal), a
    stop's grace runs out, the worker shuts down, or the call's deadline comes: nothing waits for a poll."""
    import threading
    import time

    from agents_celery.engine import calls
    from agents_celery.storage.leases import Holding

    release = threading.Event()
    running = calls.ABANDONED.running

    def hang() -> str:
        release.wait(30)
        return "late"

    def waited(action: Any, **deadline: float) -> tuple[str, float]:
        holding = Holding("r", "t")
        watch = calls.Watch(holding.stop, holding.lost, 0.3, 30.0, None, holding.listen)
        if action is not None:
            threading.Timer(0.2, action, args=(holding,)).start()
        t0 = time.monotonic()
        try:
            result = calls.run_call(hang if action or deadline else lambda: "ok", watch, what="t", **deadline)
        except calls.CallAbandoned as exc:
            result = exc.reason
        assert holding.listeners == []  # the wait stopped listening
        return result, time.monotonic() - t0

    try:
        assert waited(None)[0] == "ok"
        for action, reason in [
            (lambda h: h.signal(h.lost), "lost"),
            (lambda h: h.signal(h.stop), "stopped"),  # after its grace of 0.3 s
            (lambda h: calls.shut_down(), "shutdown"),
        ]:
            got, took = waited(action)
            calls.SHUTTING_DOWN.clear()
            assert got == reason and took < 5, (reason, got, took)
        got, took = waited(None, deadline=time.monotonic() + 0.3)
        assert got == "deadline" and took < 5
    finally:
        calls.SHUTTING_DOWN.clear()
        release.set()
    wait_for(lambda: calls.ABANDONED.running == running, timeout=10, what="the abandoned calls to return")


def test_a_waiting_run_starts_with_the_sessions_history_as_it_is_now() -> None:
    old = [{"role": "user", "content": "old"}]
    state = _state(messages=[*old, {"role": "user", "content": "mine"}], history_len=1)
    now = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    started = with_history(state, now)
    assert started.messages == [*now, {"role": "user", "content": "mine"}] and started.history_len == 2

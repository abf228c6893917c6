"""How a step ends a run, or pauses it: the new state with its RUN_FINISHED or RUN_ERROR (no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..agent import Agent
from ..events import EventType, NewEvent, make_event
from ..runs import RunFailure, RunState, RunStatus, ToolCall
from . import children
from .stepcontext import StepResult
from .turn import new_id


def user_message_events(text: str) -> list[NewEvent]:
    """A user message sent to a live run, as the log shows it (message ids of users start with ``usr_``)."""
    mid = new_id("usr")
    return [
        make_event(EventType.TEXT_MESSAGE_START, message_id=mid, role="user"),
        make_event(EventType.TEXT_MESSAGE_CONTENT, message_id=mid, delta=text),
        make_event(EventType.TEXT_MESSAGE_END, message_id=mid),
    ]


def goes_on(result: StepResult) -> StepResult:
    """A completing result turned into one that goes on with another model turn (a user message arrived)."""
    state = result.state.model_copy(update={"status": RunStatus.RUNNING, "next": "model"})
    events = [e for e in result.events if e.type is not EventType.RUN_FINISHED]
    return StepResult(state, events, "live")


def completed(state: RunState, events: list[NewEvent]) -> StepResult:
    """The run completed: RUN_FINISHED with its output."""
    state = state.moved_to(RunStatus.COMPLETED)
    finished = make_event(
        EventType.RUN_FINISHED,
        thread_id=state.session_id,
        run_id=state.run_id,
        outcome={"type": "success"},
        result=state.output if state.output is not None else "",
    )
    return StepResult(state, [*events, finished], "ended")


def failed(state: RunState, error: BaseException, events: Sequence[NewEvent] = ()) -> StepResult:
    """The run failed with ``error``: RUN_ERROR with its message and code."""
    failure = RunFailure(type=type(error).__name__, message=str(error))
    state = state.model_copy(update={"status": RunStatus.FAILED, "error": failure})
    code = getattr(error, "code", None) or type(error).__name__
    err = make_event(EventType.RUN_ERROR, message=failure.message or failure.type, code=str(code))
    return StepResult(state, [*events, err], "ended")


def cancelled(state: RunState, events: Sequence[NewEvent] = ()) -> StepResult:
    """The run was stopped: the children it waited for are told, then RUN_FINISHED (cancelled)."""
    events = [*events, *children.unfinished(state)]  # the children it waited for are stopped with it
    state = state.moved_to(RunStatus.CANCELLED)
    done = make_event(
        EventType.RUN_FINISHED, thread_id=state.session_id, run_id=state.run_id, outcome={"type": "cancelled"}
    )
    return StepResult(state, [*events, done], "ended")


def paused(agent: Agent, state: RunState, events: list[NewEvent]) -> StepResult:
    """The run waits: for a human's decisions (an ``interrupt`` outcome, as AG-UI 1.0 has it), or only for the
    client's answers to calls of its own tools (``success`` with ``pending_tool_call_ids``, as AG-UI has it)."""
    state = state.moved_to(RunStatus.PAUSED)
    waiting = [c for c in state.pending if c.pause_reason != "client_tool"]
    if waiting:
        outcome: dict[str, Any] = {"type": "interrupt", "interrupts": [_interrupt(agent, c) for c in waiting]}
    else:
        outcome = {"type": "success", "pending_tool_call_ids": [c.id for c in state.pending]}
    pause = make_event(EventType.RUN_FINISHED, thread_id=state.session_id, run_id=state.run_id, outcome=outcome)
    return StepResult(state, [*events, pause], "paused")


def _interrupt(agent: Agent, call: ToolCall) -> dict[str, Any]:
    tool = agent.tools.get(call.name)
    if call.pause_reason == "may_have_run":
        message = (
            f"Tool {call.name!r} started in an attempt that crashed and may have run. Approve to run it again, "
            "or reject to tell the model it may or may not have completed."
        )
    else:
        message = f"Tool {call.name!r} needs your confirmation to run with {call.arguments}."
    schema = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
    if tool is not None:
        schema["properties"]["editedArgs"] = tool.parameters  # type: ignore[index]
    return {
        "id": call.id,
        "reason": call.pause_reason or "confirmation_required",
        "message": message,
        "tool_call_id": call.id,
        "response_schema": schema,
        "metadata": {"tool_name": call.name, "tool_args": call.args, **_child_of(call)},
    }


def _child_of(call: ToolCall) -> dict[str, str]:
    """The child run holding a call shown in its parent's pending list (nothing for the run's own calls)."""
    return {"run_id": call.run_id} if call.run_id else {}

"""What :class:`~.runner.CeleryRunner` gives back: the SDK's result shape, for a run that happened on the workers.

:class:`CeleryRunResult` has what ``agents.RunResult`` has for its caller: ``final_output`` (the typed object when
the agent has an ``output_type``), ``new_items`` (the SDK's own ``RunItem`` classes, made from the run's stored
items by :func:`run_items`), ``interruptions`` (``ToolApprovalItem``), ``last_agent``, ``to_state()``,
``to_input_list()``, ``final_output_as()``, and ``run_id``. ``to_state()`` is a real ``agents.RunState``: the one the
workers saved at the pause, or, for a call that may have run in a crashed attempt, a fresh one holding that call.
:class:`~.runner.CeleryRunner` reads the decisions made on it (``state.approve`` / ``state.reject``) back through
the SDK's public ``RunContextWrapper.is_tool_approved``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from agents import Agent as SdkAgent
from agents import AgentOutputSchema, AgentOutputSchemaBase, FunctionTool, RunContextWrapper, RunState
from agents.handoffs import Handoff
from agents.items import (
    HandoffCallItem,
    HandoffOutputItem,
    MessageOutputItem,
    ReasoningItem,
    RunItem,
    ToolApprovalItem,
    ToolCallItem,
    ToolCallOutputItem,
)
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseReasoningItem

from ...runs import ToolCall

#: id of a state :meth:`CeleryRunResult.to_state` gave -> (the state, its run id): CeleryRunner.run(agent, state)
#: continues that run. Kept while the state lives (a weak reference would do, but a RunState is not weakly keyed).
_STATES: dict[int, tuple[RunState[Any, Any], str]] = {}
_LOCK = threading.Lock()


def remember(state: RunState[Any, Any], run_id: str) -> RunState[Any, Any]:
    with _LOCK:
        _STATES[id(state)] = (state, run_id)
    return state


def run_of(state: RunState[Any, Any]) -> str | None:
    """The run id of a state :meth:`CeleryRunResult.to_state` gave (None for any other)."""
    with _LOCK:
        known = _STATES.get(id(state))
    return known[1] if known is not None and known[0] is state else None


class Graph:
    """The agents a run may reach from its starting agent, by name, and each one's handoffs by tool name."""

    def __init__(self, start: SdkAgent[Any]) -> None:
        self.start = start
        self.agents: dict[str, SdkAgent[Any]] = {}
        self._add(start)

    def _add(self, agent: SdkAgent[Any]) -> None:
        if agent.name in self.agents:
            return
        self.agents[agent.name] = agent
        for h in agent.handoffs:
            if isinstance(h, SdkAgent):
                self._add(h)

    def agent(self, name: str | None) -> SdkAgent[Any]:
        return self.agents.get(name or "", self.start)

    def handoffs(self, agent: SdkAgent[Any]) -> dict[str, SdkAgent[Any]]:
        """``agent``'s handoff tools: tool name -> the agent it hands to (where this graph knows it)."""
        found = {}
        for h in agent.handoffs:
            if isinstance(h, SdkAgent):
                found[Handoff.default_tool_name(h)] = h
            elif isinstance(h, Handoff) and h.agent_name in self.agents:
                found[h.tool_name] = self.agents[h.agent_name]
        return found


def run_items(graph: Graph, items: list[dict[str, Any]]) -> list[RunItem]:
    """A run's stored items (after the input it was given) as the SDK's ``RunItem`` objects: messages, tool and
    handoff calls and outputs, approvals asked for, reasoning; each with the agent that produced it (a handoff's
    output moves on)."""
    out: list[RunItem] = []
    agent = graph.start
    calls: dict[str, str] = {}
    for item in items:
        kind = item.get("type")
        if kind == "message" and item.get("role") == "assistant":
            out.append(MessageOutputItem(agent=agent, raw_item=ResponseOutputMessage.model_validate(_message(item))))
        elif kind == "function_call":
            raw = ResponseFunctionToolCall.model_validate(item)
            calls[raw.call_id] = raw.name
            handing = raw.name in graph.handoffs(agent)
            out.append(
                HandoffCallItem(agent=agent, raw_item=raw) if handing else ToolCallItem(agent=agent, raw_item=raw)
            )
            if _asks(agent, raw.name):  # the SDK keeps the approval asked for among the run's items
                out.append(ToolApprovalItem(agent=agent, raw_item=raw, tool_name=raw.name))
        elif kind == "function_call_output":
            target = graph.handoffs(agent).get(calls.get(str(item.get("call_id")), ""))
            if target is not None:
                out.append(HandoffOutputItem(agent=agent, raw_item=item, source_agent=agent, target_agent=target))  # type: ignore[arg-type]
                agent = target
            else:
                out.append(ToolCallOutputItem(agent=agent, raw_item=item, output=item.get("output")))
        elif kind == "reasoning":
            out.append(ReasoningItem(agent=agent, raw_item=ResponseReasoningItem.model_validate(item)))
    return out


def _asks(agent: SdkAgent[Any], name: str) -> bool:
    """Whether every call of the agent's tool ``name`` asks for approval (``needs_approval=True``; a policy's
    answer is not kept, so its calls show no approval item)."""
    return any(isinstance(t, FunctionTool) and t.name == name and t.needs_approval is True for t in agent.tools)


def _message(item: dict[str, Any]) -> dict[str, Any]:
    """An assistant message item as a ``ResponseOutputMessage`` takes it (a history message may lack its id)."""
    content = item.get("content")
    if isinstance(content, str):
        content = [{"type": "output_text", "text": content, "annotations": []}]
    return {"id": "msg", "status": "completed", **item, "content": content}


def typed_output(agent: SdkAgent[Any], output: Any) -> Any:
    """A run's output as the SDK gives ``final_output``: the agent's ``output_type`` object for structured output."""
    kind = agent.output_type
    if output is None or kind is None or kind is str:
        return output
    try:
        schema = kind if isinstance(kind, AgentOutputSchemaBase) else AgentOutputSchema(kind)
        return schema.validate_json(json.dumps(output))
    except Exception:  # an output the schema does not take back: the JSON value, as the run keeps it
        return output


@dataclass
class CeleryRunResult:
    """A run that happened on the workers, in ``agents.RunResult``'s shape (module docs)."""

    run_id: str
    input: str | list[Any]
    new_items: list[RunItem]
    final_output: Any
    interruptions: list[ToolApprovalItem]
    last_agent: SdkAgent[Any]
    status: str
    context: Any = None
    max_turns: int = 10
    #: The workers' saved SDK state of a run paused for approvals (RunState JSON), if any.
    saved_state: dict[str, Any] | None = None
    #: The run's pending calls, as ours.
    pending: list[ToolCall] = field(default_factory=list)
    _state: RunState[Any, Any] | None = field(default=None, repr=False)

    @property
    def raw_responses(self) -> list[Any]:
        """The model's raw responses are the workers' (in the run's journal): none here."""
        return []

    def to_input_list(self) -> list[Any]:
        """The input, then the new items, as the next turn's input (as ``RunResult.to_input_list()``)."""
        given = [{"role": "user", "content": self.input}] if isinstance(self.input, str) else list(self.input)
        return [*given, *(item.to_input_item() for item in self.new_items)]

    def final_output_as(self, cls: type[Any], raise_if_incorrect_type: bool = False) -> Any:
        if raise_if_incorrect_type and not isinstance(self.final_output, cls):
            raise TypeError(f"final output is a {type(self.final_output).__name__}, not a {cls.__name__}")
        return self.final_output

    def to_state(self) -> RunState[Any, Any]:
        """The run's state for human decisions: ``state.approve(item)`` / ``state.reject(item)``, then
        ``CeleryRunner.run(agent, state)`` continues the run on the workers."""
        if self._state is None:
            raise RuntimeError("to_state() of a run that is not paused; only interrupted runs have a state to resume")
        return self._state

    def __str__(self) -> str:
        return f"CeleryRunResult(run_id={self.run_id!r}, status={self.status!r}, final_output={self.final_output!r})"


async def state_of(result: CeleryRunResult, start: SdkAgent[Any]) -> RunState[Any, Any]:
    """The SDK state a paused run's result hands out (:meth:`CeleryRunResult.to_state`), remembered by run id."""
    if result.saved_state is not None:
        state = await RunState.from_json(start, result.saved_state)
    else:  # a call that may have run in a crashed attempt: a state of its own, holding that call
        state = RunState(RunContextWrapper(result.context), result.input, start, result.max_turns)
    return remember(state, result.run_id)


def interruptions_of(
    state: RunState[Any, Any], pending: list[ToolCall], start: SdkAgent[Any]
) -> list[ToolApprovalItem]:
    """The run's interruptions: the SDK state's own, and a ``ToolApprovalItem`` per call that may have run."""
    items = list(state.get_interruptions())
    known = {_call_id(i) for i in items}
    for call in pending:
        if call.id not in known:
            raw = ResponseFunctionToolCall(
                type="function_call", call_id=call.id, name=call.name, arguments=call.arguments
            )
            items.append(ToolApprovalItem(agent=start, raw_item=raw, tool_name=call.name))
    return items


def _call_id(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    return str(raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", ""))


async def decisions_of(
    start: SdkAgent[Any], state: RunState[Any, Any], pending: list[ToolCall]
) -> list[dict[str, Any]]:
    """The decisions made on ``state`` (``approve`` / ``reject``) about the run's pending calls, as ours; read with
    the SDK's public API: the state's JSON restored onto a context of ours, asked ``is_tool_approved``."""
    ours: RunContextWrapper[Any] = RunContextWrapper(context=None)
    await RunState.from_json(start, state.to_json(), context_override=ours)
    decided = []
    for call in pending:
        approved = ours.is_tool_approved(call.name, call.id)
        if approved is None:
            raise _undecided(call)
        answer: dict[str, Any] = {"tool_call_id": call.id, "confirmed": approved}
        if not approved:
            note = ours.get_rejection_message(call.name, call.id)
            if note:
                answer["confirmation_note"] = note
        decided.append(answer)
    return decided


def _undecided(call: ToolCall) -> Exception:
    from ...errors import DecisionError

    return DecisionError(
        f"tool call {call.id!r} ({call.name}) is neither approved nor rejected; decide every interruption "
        "(state.approve(item) or state.reject(item)) before running the state again"
    )

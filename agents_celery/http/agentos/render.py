"""Render stored events in the dialect of Agno's AgentOS (the ``/agents/...`` routes).

Every rendered event is a JSON object with ``event`` (the AgentOS name), ``event_index`` (the event's offset
in the run's log), ``created_at`` (seconds), ``run_id``, ``session_id``, ``agent_id``, ``agent_name`` and,
where there is some, ``content``.

Mapping (stored AG-UI type -> AgentOS event):

- RUN_STARTED -> ``RunStarted``; with ``metadata.continued`` -> ``RunContinued``
- TEXT_MESSAGE_CONTENT -> ``RunContent`` (``content`` = the text delta)
- TOOL_CALL_END -> ``ToolCallStarted``: sent once the model has streamed the complete arguments, so
  ``tool.tool_args`` is whole. It means "the model asked for this call"; a call that needs confirmation
  is announced this way just before ``RunPaused``.
- TOOL_CALL_RESULT -> ``ToolCallCompleted`` (``tool.result`` = the tool's output)
- RUN_FINISHED success -> ``RunCompleted`` (``content`` = the final text, or the validated JSON value of a
  structured output with ``content_type`` ``json``); interrupt -> ``RunPaused``
  (``tools`` = the pending calls, ``is_paused: true``); cancelled -> ``RunCancelled``
- RUN_ERROR -> ``RunError`` (``content`` = the reason)
- STEP_*, TEXT_MESSAGE_START/END, TOOL_CALL_START/ARGS, CUSTOM: no AgentOS equivalent; **skipped**, so
  ``event_index`` has gaps there. It stays the offset, which is what ``/resume`` takes back.
  (Agno's client refuses event names it does not know, so a generic name would break it.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ...events import Event, EventType, ToolCalls
from ...runs import RunView, ToolCall

#: Our run statuses in Agno's ``RunStatus`` spelling.
AGNO_STATUS = {
    "scheduled": "PENDING",
    "queued": "PENDING",
    "running": "RUNNING",
    "paused": "PAUSED",
    "completed": "COMPLETED",
    "failed": "ERROR",
    "cancelled": "CANCELLED",
}


def tool_object(
    tool_call_id: str,
    name: str | None,
    args: dict[str, Any] | None,
    *,
    result: str | None = None,
    error: str | None = None,
    requires_confirmation: bool = False,
    confirmed: bool | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """A tool call in AgentOS's ``ToolExecution`` shape."""
    return {
        "tool_call_id": tool_call_id,
        "tool_name": name,
        "tool_args": args or {},
        "result": result,
        "tool_call_error": error,
        "requires_confirmation": requires_confirmation,
        "confirmed": confirmed,
        "confirmation_note": note,
    }


class AgentOSRenderer:
    """Turns one run's stored events into AgentOS events; remembers tool names and arguments across a stream.

    Args:
        history: Called at most once, when a TOOL_CALL_RESULT names a call whose START this stream did not
            see (it started before the requested offset); returns the earlier events of the run.
        confirm: The agent's tools that need a confirmation: their ``ToolCallStarted`` says so.
    """

    def __init__(self, history: Callable[[], list[Event]] | None = None, confirm: frozenset[str] = frozenset()) -> None:
        self._history = history
        #: Names of the agent's tools that need a confirmation.
        self._confirm = confirm
        self._calls = ToolCalls()
        self._decisions: dict[str, str] = {}
        self._primed = False

    def remember(self, ev: Event) -> None:
        """Take in an event from before the stream's first (a resume folds the earlier log through this)."""
        self._primed = True  # told of the earlier events: nothing more to ask ``history`` for
        self._remember(ev)

    def _remember(self, ev: Event) -> None:
        self._calls.take(ev)
        if ev.type is EventType.RUN_STARTED:
            for d in (ev.data.get("metadata") or {}).get("decisions") or []:
                self._decisions[d.get("tool_call_id", "")] = d.get("decision", "")

    def _prime(self) -> None:
        if not self._primed and self._history is not None:
            self._primed = True
            for ev in self._history():
                self._remember(ev)

    def _tool(self, ident: str, **extra: Any) -> dict[str, Any]:
        if ident not in self._calls.names:
            self._prime()
        decision = self._decisions.get(ident)
        confirmed = None if decision is None else decision == "approved"
        return tool_object(
            ident,
            self._calls.names.get(ident),
            self._calls.args(ident),
            requires_confirmation=decision is not None or self._calls.names.get(ident) in self._confirm,
            confirmed=confirmed,
            **extra,
        )

    def render(self, ev: Event) -> dict[str, Any] | None:
        """The AgentOS event for ``ev``, or None when it has no AgentOS equivalent (skipped)."""
        self._remember(ev)
        body = self._body(ev)
        if body is None:
            return None
        return {
            "event": body.pop("event"),
            "event_index": ev.offset,
            "created_at": ev.timestamp // 1000,
            "run_id": ev.run_id,
            "session_id": ev.session_id,
            "agent_id": ev.agent_id,
            "agent_name": ev.agent_id,
            **body,
        }

    def _body(self, ev: Event) -> dict[str, Any] | None:
        data = ev.data
        if ev.type is EventType.RUN_STARTED:
            meta = data.get("metadata") or {}
            if meta.get("stopping"):
                return None  # only there so an AG-UI stream may end a paused run; AgentOS sees RunCancelled
            return {"event": "RunContinued" if meta.get("continued") else "RunStarted"}
        if ev.type is EventType.TEXT_MESSAGE_CONTENT:
            if str(data.get("message_id", "")).startswith("usr_"):  # a user's message sent to the live run
                return None
            return {"event": "RunContent", "content": data.get("delta", ""), "content_type": "str"}
        if ev.type is EventType.TOOL_CALL_END:
            return {"event": "ToolCallStarted", "tool": self._tool(data.get("tool_call_id", ""))}
        if ev.type is EventType.TOOL_CALL_RESULT:
            content = data.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            return {
                "event": "ToolCallCompleted",
                "content": text,
                "tool": self._tool(data["tool_call_id"], result=text),
            }
        if ev.type is EventType.RUN_ERROR:
            return {"event": "RunError", "content": data.get("message", ""), "error_type": data.get("code")}
        if ev.type is EventType.RUN_FINISHED:
            return _finished(data)
        return None


def _finished(data: dict[str, Any]) -> dict[str, Any]:
    outcome = data.get("outcome") or {}
    kind = outcome.get("type", "success")
    if kind == "interrupt":
        tools = [paused_tool(i) for i in outcome.get("interrupts") or []]
        content = "; ".join(i.get("message") or i.get("reason", "") for i in outcome.get("interrupts") or [])
        return {"event": "RunPaused", "tools": tools, "is_paused": True, "content": content or None}
    if kind == "cancelled":
        return {"event": "RunCancelled", "content": "run cancelled"}
    if outcome.get("pending_tool_call_ids"):  # paused for the client's own tools (AG-UI frontend tools)
        tools = [tool_object(i, None, None) for i in outcome["pending_tool_call_ids"]]
        return {"event": "RunPaused", "tools": tools, "is_paused": True, "content": None}
    result = data.get("result")
    if result is None or isinstance(result, str):
        return {"event": "RunCompleted", "content": result, "content_type": "str"}
    # structured output: the validated JSON value itself, as Agno sends a response model's content
    return {"event": "RunCompleted", "content": result, "content_type": "json"}


def paused_tool(interrupt: dict[str, Any]) -> dict[str, Any]:
    """A pending call (from a RUN_FINISHED interrupt) in AgentOS's tool shape."""
    meta = interrupt.get("metadata") or {}
    ident = interrupt.get("tool_call_id") or interrupt.get("id", "")
    return tool_object(ident, meta.get("tool_name"), meta.get("tool_args"), requires_confirmation=True)


def _confirmed(call: ToolCall) -> bool | None:
    return None if call.decision in (None, "pending") else call.decision == "approved"


def _call_object(call: ToolCall) -> dict[str, Any]:
    return tool_object(
        call.id,
        call.name,
        call.args,
        result=call.result,
        error=call.error,
        requires_confirmation=call.requires_confirmation,
        confirmed=_confirmed(call),
        note=call.note,
    )


def run_output(view: RunView) -> dict[str, Any]:
    """A run as AgentOS's ``RunOutput`` JSON (``tools``: the pending calls while paused)."""
    paused = view.status.value == "paused"
    calls = view.pending if paused else view.tool_calls
    return {
        "run_id": view.run_id,
        "agent_id": view.agent_id,
        "agent_name": view.agent_id,
        "session_id": view.session_id,
        "status": AGNO_STATUS[view.status.value],
        "content": view.output,
        "content_type": "str" if view.output is None or isinstance(view.output, str) else "json",
        "is_paused": paused,
        "tools": [_call_object(c) for c in calls],
        "messages": view.messages,
        "error": view.error,
        "created_at": view.created_at // 1000,
        "event_index": view.last_offset,
    }

"""Render stored events as strict AG-UI 1.0 events (``?format=agui``).

Each event is rebuilt with ``ag_ui.core``'s model for its type (so it is validated), dumped with camelCase
keys and without ``None`` fields (AG-UI's JS client wants optional fields left out, not ``null``).
Event-level ``metadata`` (our engine's bookkeeping: step attempts, continue decisions) and any field the
models do not declare are dropped; an interrupt's declared ``metadata`` (tool name and arguments) is kept.

Joining mid-run: the JS client refuses a stream whose first event is not RUN_STARTED, and CONTENT/ARGS
without their START. When a stream starts after offset N > -1 inside a run segment, :meth:`AguiRenderer.
prelude` synthesizes a RUN_STARTED and the START (plus the arguments streamed so far, as one ARGS) of every
step, message and tool call still open at N. Synthesized frames carry **no** ``id:`` line, so ``Last-Event-ID``
remains the offset of the last real event and a reconnect never skips or repeats a real one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ag_ui.core as agui
import pydantic

from ...content import text_of
from ...conversation import as_chat
from ...events import AGUI_MODELS, Event, EventType


def _strict(model: pydantic.BaseModel) -> Any:
    """``model`` without undeclared (extra) fields, recursively."""
    if isinstance(model, pydantic.BaseModel):
        declared = {name: _strict(getattr(model, name)) for name in type(model).model_fields}
        return type(model).model_construct(**declared)
    if isinstance(model, list):
        return [_strict(v) for v in model]
    return model


def to_agui(type_: EventType, timestamp: int, data: dict[str, Any]) -> dict[str, Any]:
    """One AG-UI 1.0 event (camelCase JSON) from stored fields; raises pydantic.ValidationError if invalid."""
    fields = {k: v for k, v in data.items() if k not in ("metadata", "raw_event")}
    model = AGUI_MODELS[type_].model_validate({**fields, "type": type_.value, "timestamp": timestamp})
    out: dict[str, Any] = _strict(model).model_dump(mode="json", by_alias=True, exclude_none=True)
    return out


def render(ev: Event) -> dict[str, Any]:
    """The AG-UI event for a stored event."""
    return to_agui(ev.type, ev.timestamp, ev.data)


class AguiRenderer:
    """Renders one stream; tracks what is open so a mid-run join starts as a valid AG-UI sequence."""

    def __init__(self, run_id: str, session_id: str) -> None:
        self.run_id = run_id
        self.session_id = session_id

    def prelude(self, history: Iterable[Event] | Opened, first: Event) -> list[dict[str, Any]]:
        """Synthesized events to send before ``first`` when the stream joins after ``history`` (offsets <= N), given
        as the events or as their fold (:class:`Opened`: a resume folds the log page by page, holding none)."""
        opened = history if isinstance(history, Opened) else Opened.of(history)
        if not opened.seen or first.type is EventType.RUN_STARTED:
            return []
        ts = first.timestamp
        out = [to_agui(EventType.RUN_STARTED, ts, {"thread_id": self.session_id, "run_id": self.run_id})]
        out += [to_agui(EventType.SUBAGENT_STARTED, ts, data) for data in opened.subagents.values()]
        out += [to_agui(EventType.STEP_STARTED, ts, data) for data in opened.steps.values()]
        out += [to_agui(EventType.TEXT_MESSAGE_START, ts, data) for data in opened.messages.values()]
        for cid, data in opened.calls.items():
            out.append(to_agui(EventType.TOOL_CALL_START, ts, data))
            if opened.args.get(cid):
                out.append(to_agui(EventType.TOOL_CALL_ARGS, ts, {"tool_call_id": cid, "delta": opened.args[cid]}))
        return out


class Opened:
    """The steps, messages, tool calls (with the arguments streamed so far) and subagents the log's last run
    segment left open: a fold of the log, one event at a time (a RUN_STARTED begins a segment, all closed)."""

    def __init__(self) -> None:
        #: Any event was seen (a stream that starts after none needs no prelude).
        self.seen = False
        self.steps: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, dict[str, Any]] = {}
        self.calls: dict[str, dict[str, Any]] = {}
        self.args: dict[str, str] = {}
        self.subagents: dict[str, dict[str, Any]] = {}

    @classmethod
    def of(cls, events: Iterable[Event]) -> Opened:
        opened = cls()
        for ev in events:
            opened.see(ev)
        return opened

    def see(self, ev: Event) -> None:
        self.seen = True
        step, mid, cid = (ev.data.get(k, "") for k in ("step_name", "message_id", "tool_call_id"))
        if ev.type is EventType.RUN_STARTED:
            for open_items in (self.steps, self.messages, self.calls, self.args, self.subagents):
                open_items.clear()
        elif ev.type is EventType.STEP_STARTED:
            self.steps[step] = ev.data
        elif ev.type is EventType.STEP_FINISHED:
            self.steps.pop(step, None)
        elif ev.type is EventType.TEXT_MESSAGE_START:
            self.messages[mid] = ev.data
        elif ev.type is EventType.TEXT_MESSAGE_END:
            self.messages.pop(mid, None)
        elif ev.type is EventType.TOOL_CALL_START:
            self.calls[cid], self.args[cid] = ev.data, ""
        elif ev.type is EventType.TOOL_CALL_ARGS:
            self.args[cid] = self.args.get(cid, "") + ev.data.get("delta", "")
        elif ev.type is EventType.TOOL_CALL_END:
            self.calls.pop(cid, None)
        elif ev.type is EventType.SUBAGENT_STARTED:
            self.subagents[ev.data["subagent_run_id"]] = ev.data
        elif ev.type in SUBAGENT_ENDS:
            self.subagents.pop(ev.data.get("subagent_run_id", ""), None)


# -- child runs (agents as tools) ----------------------------------------------------------------------------

#: The events that close a subagent in its parent's log.
SUBAGENT_ENDS = (EventType.SUBAGENT_FINISHED, EventType.SUBAGENT_ERROR)
_LIFECYCLE = (EventType.RUN_STARTED, EventType.RUN_FINISHED, EventType.RUN_ERROR)


def segments(child_log: list[Event]) -> list[list[Event]]:
    """A run's log cut at each RUN_STARTED: its first stretch (up to its first pause or its end), then one per
    continue."""
    out: list[list[Event]] = []
    for ev in child_log:
        if ev.type is EventType.RUN_STARTED or not out:
            out.append([])
        out[-1].append(ev)
    return out


def attribute(ev: Event, child_id: str) -> dict[str, Any] | None:
    """A child's event as its parent's stream shows it: ``subagentRunId`` set, tool call ids
    ``<child run id>:<id>`` (unique in the stream, and as the parent's interrupts name the child's calls), a
    grandchild's SUBAGENT_STARTED naming the child as its parent; None for the child's own RUN_* events."""
    if ev.type in _LIFECYCLE:
        return None
    event = render(ev)
    if "toolCallId" in event:
        event["toolCallId"] = f"{child_id}:{event['toolCallId']}"
    if ev.type is EventType.SUBAGENT_STARTED:
        event["parentSubagentRunId"] = child_id
    elif ev.type not in SUBAGENT_ENDS:
        event["subagentRunId"] = child_id
    return event


def attributed(child_log: list[Event], child_id: str, segment: int, after: int = -1) -> list[dict[str, Any]]:
    """The child's work in its ``segment``-th stretch (0: up to its first pause or its end), after offset
    ``after``, as its parent's AG-UI stream shows it (:func:`attribute`)."""
    cut = segments(child_log)
    found = [attribute(ev, child_id) for ev in (cut[segment] if segment < len(cut) else []) if ev.offset > after]
    return [e for e in found if e is not None]


# -- the AG-UI endpoint's streams (POST /agui/<agent_id>) ---------------------------------------------------


def interrupt_view(interrupt: dict[str, Any]) -> dict[str, Any]:
    """A stored interrupt as AG-UI 1.0 spells a tool call's: reason ``tool_call`` (ours goes in metadata)."""
    meta = {**(interrupt.get("metadata") or {}), "pause_reason": interrupt.get("reason")}
    return {**interrupt, "reason": "tool_call", "metadata": meta}


def to_messages(messages: list[dict[str, Any]], thread_id: str) -> list[dict[str, Any]]:
    """A conversation (OpenAI chat messages, or a pydantic-ai agent's) as AG-UI messages, with ids stable across
    snapshots."""
    out: list[dict[str, Any]] = []
    for i, m in enumerate(as_chat(messages)):
        role, ident = m.get("role"), f"{thread_id}-{i}"
        text = m.get("content") if isinstance(m.get("content"), str) else None
        if role == "user":  # a message with images or files: its text (the parts stay with the run)
            out.append({"id": ident, "role": "user", "content": text_of(m.get("content"))})
        elif role == "assistant":
            calls = [
                {"id": c["id"], "type": "function", "function": dict(c["function"])} for c in m.get("tool_calls") or []
            ]
            msg: dict[str, Any] = {"id": ident, "role": "assistant"}
            if text:
                msg["content"] = text
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif role == "tool":
            out.append({"id": ident, "role": "tool", "content": text or "", "tool_call_id": m.get("tool_call_id", "")})
    return out


def snapshots(state: Any, messages: list[dict[str, Any]], thread_id: str, timestamp: int) -> list[dict[str, Any]]:
    """STATE_SNAPSHOT (the client's state as the run has it) and MESSAGES_SNAPSHOT (the conversation)."""
    shot = agui.StateSnapshotEvent(snapshot=state if state is not None else {}, timestamp=timestamp)
    convo = agui.MessagesSnapshotEvent.model_validate(
        {"messages": to_messages(messages, thread_id), "timestamp": timestamp}
    )
    return [e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in (shot, convo)]


def run_error(message: str, code: str, timestamp: int) -> dict[str, Any]:
    return agui.RunErrorEvent(message=message, code=code, timestamp=timestamp).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


def run_started(thread_id: str, run_id: str, timestamp: int) -> dict[str, Any]:
    return agui.RunStartedEvent(thread_id=thread_id, run_id=run_id, timestamp=timestamp).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )

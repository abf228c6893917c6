"""Render stored events as strict AG-UI 1.0 events (``?format=agui``).

Each event is rebuilt with ``ag_ui.core``'s model for its type (so it is validated), dumped with camelCase
keys and without ``None`` fields (AG-UI's JS client wants optional fields left out, not ``null``).
Event-level ``metadata`` (our engine's bookkeeping: step attempts, continue decisions) and any field the
models do not declare are dropped; an interrupt's declared ``metadata`` (tool name and arguments) is kept.

Joining mid-run: the JS client refuses a stream whose first event is not RUN_STARTED, and CONTENT/ARGS
without their START. When a stream starts after offset N > -1 inside a run segment, :meth:`AguiRenderer.
prelude` synthesizes a RUN_STARTED and the START (plus the arguments streamed so far, as one ARGS) of every
message and tool call still open at N. Synthesized frames carry **no** ``id:`` line, so ``Last-Event-ID``
remains the offset of the last real event and a reconnect never skips or repeats a real one.
"""

from __future__ import annotations

from typing import Any

import pydantic

from ..events import AGUI_MODELS, Event, EventType


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

    def prelude(self, history: list[Event], first: Event) -> list[dict[str, Any]]:
        """Synthesized events to send before ``first`` when the stream joins after ``history`` (offsets <= N)."""
        if not history or first.type is EventType.RUN_STARTED:
            return []
        segment = history
        for i in range(len(history) - 1, -1, -1):
            if history[i].type is EventType.RUN_STARTED:
                segment = history[i + 1 :]
                break
        ts = first.timestamp
        out = [to_agui(EventType.RUN_STARTED, ts, {"thread_id": self.session_id, "run_id": self.run_id})]
        messages: dict[str, dict[str, Any]] = {}
        calls: dict[str, dict[str, Any]] = {}
        args: dict[str, str] = {}
        for ev in segment:
            mid, cid = ev.data.get("message_id", ""), ev.data.get("tool_call_id", "")
            if ev.type is EventType.TEXT_MESSAGE_START:
                messages[mid] = ev.data
            elif ev.type is EventType.TEXT_MESSAGE_END:
                messages.pop(mid, None)
            elif ev.type is EventType.TOOL_CALL_START:
                calls[cid], args[cid] = ev.data, ""
            elif ev.type is EventType.TOOL_CALL_ARGS:
                args[cid] = args.get(cid, "") + ev.data.get("delta", "")
            elif ev.type is EventType.TOOL_CALL_END:
                calls.pop(cid, None)
        out += [to_agui(EventType.TEXT_MESSAGE_START, ts, data) for data in messages.values()]
        for cid, data in calls.items():
            out.append(to_agui(EventType.TOOL_CALL_START, ts, data))
            if args.get(cid):
                out.append(to_agui(EventType.TOOL_CALL_ARGS, ts, {"tool_call_id": cid, "delta": args[cid]}))
        return out

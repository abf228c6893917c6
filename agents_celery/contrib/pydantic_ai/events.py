"""pydantic-ai's stream events as the events of our log (AG-UI 1.0 vocabulary).

A model unit streams ``PartStartEvent`` / ``PartDeltaEvent`` / ``PartEndEvent``; they become TEXT_MESSAGE_* and
TOOL_CALL_START/ARGS/END as they come (:class:`ModelStream`, one per model unit). A tool's result
(``FunctionToolResultEvent``, ``OutputToolResultEvent``) becomes one TOOL_CALL_RESULT (:func:`tool_result`).
Thinking parts and the rest are not shown.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_ai.messages import (
    FunctionToolResultEvent,
    OutputToolResultEvent,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)

from ...engine.turn import new_id
from ...events import EventType, NewEvent, make_event
from ..guests.stream import OpenParts


def _args_text(args: Any) -> str:
    if args is None:
        return ""
    return args if isinstance(args, str) else json.dumps(args)


class ModelStream(OpenParts):
    """Turns one model unit's stream events into our events, by part index; :meth:`close` ends what is still open."""

    def feed(self, event: Any) -> list[NewEvent]:
        if isinstance(event, PartStartEvent):
            return self._start(event.index, event.part)
        if isinstance(event, PartDeltaEvent):
            return self._delta(event.index, event.delta)
        if isinstance(event, PartEndEvent):
            return self._end(event.index)
        return []

    def _start(self, index: int, part: Any) -> list[NewEvent]:
        out = self._end(index)  # a part index reused: the earlier part is over
        if isinstance(part, TextPart):
            mid = new_id("msg")
            self.open[index] = (EventType.TEXT_MESSAGE_START, mid)
            out.append(make_event(EventType.TEXT_MESSAGE_START, message_id=mid, role="assistant"))
            if part.content:
                out.append(make_event(EventType.TEXT_MESSAGE_CONTENT, message_id=mid, delta=part.content))
        elif isinstance(part, ToolCallPart):
            cid = part.tool_call_id
            self.open[index] = (EventType.TOOL_CALL_START, cid)
            out.append(make_event(EventType.TOOL_CALL_START, tool_call_id=cid, tool_call_name=part.tool_name))
            if args := _args_text(part.args):
                out.append(make_event(EventType.TOOL_CALL_ARGS, tool_call_id=cid, delta=args))
        return out

    def _delta(self, index: int, delta: Any) -> list[NewEvent]:
        opened = self.open.get(index)
        if opened is None:
            return []
        kind, ident = opened
        if isinstance(delta, TextPartDelta) and kind is EventType.TEXT_MESSAGE_START and delta.content_delta:
            return [make_event(EventType.TEXT_MESSAGE_CONTENT, message_id=ident, delta=delta.content_delta)]
        args = _args_text(delta.args_delta) if isinstance(delta, ToolCallPartDelta) else ""
        if args and kind is EventType.TOOL_CALL_START:
            return [make_event(EventType.TOOL_CALL_ARGS, tool_call_id=ident, delta=args)]
        return []


def tool_result(event: Any) -> list[NewEvent]:
    """The TOOL_CALL_RESULT of a tool's (or an output tool's) result event; nothing for other events."""
    if not isinstance(event, FunctionToolResultEvent | OutputToolResultEvent):
        return []
    part = event.part
    content = part.model_response_str()
    return [
        make_event(
            EventType.TOOL_CALL_RESULT, message_id=new_id("tool"), tool_call_id=part.tool_call_id, content=content
        )
    ]

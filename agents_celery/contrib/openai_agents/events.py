"""The Agents SDK's model stream events (OpenAI Responses stream events) as the events of our log (AG-UI 1.0).

A model unit streams ``response.output_item.added`` / ``...done`` for each output item, text deltas
(``response.output_text.delta``, ``response.refusal.delta``) and function-call argument deltas
(``response.function_call_arguments.delta``), by ``output_index``; they become TEXT_MESSAGE_* and
TOOL_CALL_START/ARGS/END as they come (:class:`ResponseStream`, one per model unit). Reasoning items and the rest
are not shown. A tool call's result is one TOOL_CALL_RESULT (:func:`tool_result`).
"""

from __future__ import annotations

import json
from typing import Any

from ...engine.turn import new_id
from ...events import EventType, NewEvent, make_event
from ..guests.stream import OpenParts


class ResponseStream(OpenParts):
    """Turns one model unit's stream events into our events, by output index; :meth:`close` ends what is still
    open."""

    def __init__(self) -> None:
        super().__init__()
        #: Output indexes of function calls whose arguments came as deltas (their done event repeats them).
        self._streamed: set[int] = set()

    def feed(self, event: Any) -> list[NewEvent]:
        kind = getattr(event, "type", "")
        index = getattr(event, "output_index", None)
        if not isinstance(index, int):
            return []
        if kind == "response.output_item.added":
            return self._start(index, event.item)
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            return self._text(index, event.delta)
        if kind == "response.function_call_arguments.delta":
            return self._args(index, event.delta)
        if kind == "response.output_item.done":
            return self._done(index, event.item)
        return []

    def _start(self, index: int, item: Any) -> list[NewEvent]:
        out = self._end(index)  # an output index reused: the earlier item is over
        item_type = getattr(item, "type", "")
        if item_type == "message":
            mid = new_id("msg")
            self.open[index] = (EventType.TEXT_MESSAGE_START, mid)
            out.append(make_event(EventType.TEXT_MESSAGE_START, message_id=mid, role="assistant"))
        elif item_type == "function_call":
            cid = item.call_id
            self.open[index] = (EventType.TOOL_CALL_START, cid)
            out.append(make_event(EventType.TOOL_CALL_START, tool_call_id=cid, tool_call_name=item.name))
        return out

    def _text(self, index: int, delta: str) -> list[NewEvent]:
        opened = self.open.get(index)
        if opened is None or opened[0] is not EventType.TEXT_MESSAGE_START or not delta:
            return []
        return [make_event(EventType.TEXT_MESSAGE_CONTENT, message_id=opened[1], delta=delta)]

    def _args(self, index: int, delta: str) -> list[NewEvent]:
        opened = self.open.get(index)
        if opened is None or opened[0] is not EventType.TOOL_CALL_START or not delta:
            return []
        self._streamed.add(index)
        return [make_event(EventType.TOOL_CALL_ARGS, tool_call_id=opened[1], delta=delta)]

    def _done(self, index: int, item: Any) -> list[NewEvent]:
        out: list[NewEvent] = []
        if getattr(item, "type", "") == "function_call":
            if index not in self.open:  # a call announced only when done
                out += self._start(index, item)
            if index not in self._streamed and item.arguments:
                out += self._args(index, item.arguments)
        return [*out, *self._end(index)]

    def _end(self, index: int) -> list[NewEvent]:
        self._streamed.discard(index)
        return super()._end(index)


def output_text(output: Any) -> str:
    """A function call output as the model is shown it (``output`` of a ``function_call_output`` item: text, or
    structured parts), as the text of a TOOL_CALL_RESULT."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        texts = [p.get("text", "") for p in output if isinstance(p, dict) and p.get("type") in ("input_text", "text")]
        if len(texts) == len(output):
            return "".join(texts)
    return json.dumps(output, default=str)


def tool_result(call_id: str, output: Any) -> NewEvent:
    """The TOOL_CALL_RESULT of a call whose output the model is shown."""
    return make_event(
        EventType.TOOL_CALL_RESULT, message_id=new_id("tool"), tool_call_id=call_id, content=output_text(output)
    )


def handoff(from_agent: str, to_agent: str, call_id: str | None) -> NewEvent:
    """The CUSTOM ``handoff`` event of a run whose conversation another agent takes over (as our own agents')."""
    value: dict[str, Any] = {"from": from_agent, "to": to_agent, "tool_call_id": call_id}
    return make_event(EventType.CUSTOM, name="handoff", value=value)

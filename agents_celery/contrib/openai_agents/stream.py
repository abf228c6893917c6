"""A run's stored events as the SDK's own stream events (``RunResultStreaming.stream_events()``), no I/O.

The caller of :meth:`~.runner.CeleryRunner.run_streamed` reads what ``Runner.run_streamed`` gives: raw model deltas
as ``RawResponsesStreamEvent`` (``response.output_text.delta``, ``response.function_call_arguments.delta``), the
run's items as ``RunItemStreamEvent`` (``message_output_created``, ``tool_called``, ``tool_output``,
``handoff_requested``, ``handoff_occured``) and a handoff as ``AgentUpdatedStreamEvent``. Deltas go out as they
come. An item goes out once the unit that made it is saved (its ``unit_saved`` event, or the run's end): a model
call a crashed attempt left half done is retried on another worker (``attempt_abandoned``), and its items would
otherwise come twice; its deltas do come again, as the retried call streams them.
"""

from __future__ import annotations

from typing import Any

from agents import Agent as SdkAgent
from agents.items import (
    HandoffCallItem,
    HandoffOutputItem,
    MessageOutputItem,
    RunItem,
    ToolCallItem,
    ToolCallOutputItem,
)
from agents.stream_events import AgentUpdatedStreamEvent, RawResponsesStreamEvent, RunItemStreamEvent, StreamEvent
from openai.types.responses import (
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
)

from ...events import UNIT_SAVED, Event, EventType
from .results import Graph


class Translation:
    """Our events of one run, one at a time, as the SDK's stream events (module docs)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.agent: SdkAgent[Any] = graph.start
        self.sequence = 0
        self._texts: dict[str, str] = {}
        self._calls: dict[str, tuple[str, str]] = {}
        self._held: list[StreamEvent] = []

    def started(self) -> list[StreamEvent]:
        return [AgentUpdatedStreamEvent(new_agent=self.agent)]

    def take(self, ev: Event) -> list[StreamEvent]:
        """The SDK events ``ev`` stands for, in order (held items let go when their unit is saved)."""
        kind, data = ev.type, ev.data
        if kind is EventType.TEXT_MESSAGE_START:
            self._texts[data["message_id"]] = ""
        elif kind is EventType.TEXT_MESSAGE_CONTENT:
            return [self._text_delta(data["message_id"], data["delta"])]
        elif kind is EventType.TEXT_MESSAGE_END:
            self._hold(self._message(data["message_id"]))
        elif kind is EventType.TOOL_CALL_START:
            self._calls[data["tool_call_id"]] = (data.get("tool_call_name", ""), "")
        elif kind is EventType.TOOL_CALL_ARGS:
            return [self._args_delta(data["tool_call_id"], data["delta"])]
        elif kind is EventType.TOOL_CALL_END:
            self._hold(self._call(data["tool_call_id"]))
        elif kind is EventType.TOOL_CALL_RESULT:
            self._hold(self._output(data["tool_call_id"], data.get("content", "")))
        elif kind is EventType.CUSTOM:
            return self._custom(data)
        elif kind in (EventType.RUN_FINISHED, EventType.RUN_ERROR):
            return self._let_go()
        return []

    def _custom(self, data: dict[str, Any]) -> list[StreamEvent]:
        name = data.get("name")
        if name == UNIT_SAVED:
            return self._let_go()
        if name == "attempt_abandoned":
            self._held = []  # the dead attempt's unsaved items: its unit runs again
        elif name == "handoff":
            target = self.graph.agent(str((data.get("value") or {}).get("to")))
            self.agent = target
            self._held.append(AgentUpdatedStreamEvent(new_agent=target))
        return []

    def _hold(self, event: StreamEvent | None) -> None:
        if event is not None:
            self._held.append(event)

    def _let_go(self) -> list[StreamEvent]:
        out, self._held = self._held, []
        return out

    def _next(self) -> int:
        self.sequence += 1
        return self.sequence

    def _text_delta(self, message_id: str, delta: str) -> StreamEvent:
        self._texts[message_id] = self._texts.get(message_id, "") + delta
        data = ResponseTextDeltaEvent(
            type="response.output_text.delta",
            item_id=message_id,
            output_index=0,
            content_index=0,
            delta=delta,
            logprobs=[],
            sequence_number=self._next(),
        )
        return RawResponsesStreamEvent(data=data)

    def _args_delta(self, call_id: str, delta: str) -> StreamEvent:
        name, args = self._calls.get(call_id, ("", ""))
        self._calls[call_id] = (name, args + delta)
        data = ResponseFunctionCallArgumentsDeltaEvent(
            type="response.function_call_arguments.delta",
            item_id=call_id,
            output_index=0,
            delta=delta,
            sequence_number=self._next(),
        )
        return RawResponsesStreamEvent(data=data)

    def _message(self, message_id: str) -> StreamEvent | None:
        text = self._texts.pop(message_id, None)
        if text is None:
            return None
        part = ResponseOutputText(type="output_text", text=text, annotations=[])
        raw = ResponseOutputMessage(id=message_id, type="message", role="assistant", status="completed", content=[part])
        return RunItemStreamEvent(name="message_output_created", item=MessageOutputItem(agent=self.agent, raw_item=raw))

    def _call(self, call_id: str) -> StreamEvent | None:
        name, args = self._calls.get(call_id, ("", ""))
        raw = ResponseFunctionToolCall(type="function_call", call_id=call_id, name=name, arguments=args or "{}")
        if name in self.graph.handoffs(self.agent):
            return RunItemStreamEvent(name="handoff_requested", item=HandoffCallItem(agent=self.agent, raw_item=raw))
        return RunItemStreamEvent(name="tool_called", item=ToolCallItem(agent=self.agent, raw_item=raw))

    def _output(self, call_id: str, content: str) -> StreamEvent:
        name, _ = self._calls.get(call_id, ("", ""))
        raw = {"type": "function_call_output", "call_id": call_id, "output": content}
        target = self.graph.handoffs(self.agent).get(name)
        item: RunItem
        if target is not None:
            item = HandoffOutputItem(agent=self.agent, raw_item=raw, source_agent=self.agent, target_agent=target)  # type: ignore[arg-type]
            return RunItemStreamEvent(name="handoff_occured", item=item)
        item = ToolCallOutputItem(agent=self.agent, raw_item=raw, output=content)
        return RunItemStreamEvent(name="tool_output", item=item)

"""One model turn as it streams: model chunks become AG-UI events as they come, and the turn remembers what is open.

A :class:`TurnStream` is fed on the call thread that reads the model (:func:`agents_celery.engine.steps.model_turn`)
while the step's thread waits; it writes through the step's event writer and assembles the assistant message
(:class:`~agents_celery.models.TurnAccumulator`). Whatever ends the turn (an answer, a retry, a stop, a crash of
the model), :meth:`TurnStream.close` ends the text message and the tool calls it opened, so the stream stays valid.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..events import Deltas, EventType, NewEvent, make_event
from ..ids import random_hex
from ..models import TextDelta, ToolCallDelta, TurnAccumulator


def new_id(prefix: str) -> str:
    """A new message or call id: ``prefix`` and 16 hex digits."""
    return f"{prefix}_{random_hex()[:16]}"


class TurnStream:
    """Turns model chunks into events, remembering what is open so it can be closed on any exit."""

    def __init__(self, emit: Callable[[NewEvent], None], stop: threading.Event, lost: threading.Event) -> None:
        self.emit, self.stop, self.lost = emit, stop, lost
        self.message_id = new_id("msg")
        self.text = Deltas(EventType.TEXT_MESSAGE_CONTENT, self.message_id)
        self.acc = TurnAccumulator()
        self.text_open = False
        self.calls: dict[int, str] = {}
        self.args: dict[int, Deltas] = {}
        self.open_calls: list[str] = []
        # The model is read on a call thread while the step's thread waits: the lock keeps the step's thread
        # from closing the turn while that thread is feeding a chunk, and a walked-away turn takes no more.
        self._lock = threading.Lock()
        self._abandoned = False

    def offer(self, chunk: Any) -> bool:
        """Feed ``chunk`` from the call thread; False once the step walked away from the turn, or a stop came
        (or the lease went): the reading ends at once, and the step's thread sees why."""
        with self._lock:
            if self.unwanted():
                return False
            self.feed(chunk)
            return True

    def abandon(self) -> None:
        """The step walked away: the call thread's chunks are dropped from now on."""
        with self._lock:
            self._abandoned = True

    def unwanted(self) -> bool:
        """Whether the model's stream should stop being read (walked away from, stopped, lease lost)."""
        return self._abandoned or self.stop.is_set() or self.lost.is_set()

    def feed(self, chunk: Any) -> None:
        emit = self.emit
        if isinstance(chunk, TextDelta) and chunk.text:
            if not self.text_open:
                emit(make_event(EventType.TEXT_MESSAGE_START, message_id=self.message_id, role="assistant"))
                self.text_open = True
            emit(self.text(chunk.text))
        elif isinstance(chunk, ToolCallDelta):
            if chunk.index not in self.calls:
                self.close_text()
                call_id = chunk.id or new_id("call")
                chunk = ToolCallDelta(chunk.index, call_id, chunk.name, chunk.arguments)
                self.calls[chunk.index] = call_id
                self.args[chunk.index] = Deltas(EventType.TOOL_CALL_ARGS, call_id)
                self.open_calls.append(call_id)
                emit(
                    make_event(
                        EventType.TOOL_CALL_START,
                        tool_call_id=call_id,
                        tool_call_name=chunk.name or "unknown",
                        parent_message_id=self.message_id,
                    )
                )
            if chunk.arguments:
                emit(self.args[chunk.index](chunk.arguments))
        self.acc.add(chunk)

    def close_text(self) -> None:
        if self.text_open:
            self.emit(make_event(EventType.TEXT_MESSAGE_END, message_id=self.message_id))
            self.text_open = False

    def close(self) -> None:
        self.close_text()
        for call_id in self.open_calls:
            self.emit(make_event(EventType.TOOL_CALL_END, tool_call_id=call_id))
        self.open_calls = []

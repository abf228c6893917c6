"""The model contract: what a model streams, and how a streamed turn becomes an assistant message.

A model yields :data:`ModelChunk` values (text deltas, tool call deltas, usage) and raises
:class:`~agents_celery.errors.ModelError` on failure, with ``retryable`` set. A model never retries by itself:
the engine retries, with backoff, and records each attempt. :class:`TurnAccumulator` assembles a streamed turn
into an assistant message; :data:`STOP_READING` tells a model that reads a network stream when to stop.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "STOP_READING",
    "Model",
    "ModelChunk",
    "TextDelta",
    "ToolCallDelta",
    "TurnAccumulator",
    "Usage",
    "reading_until",
]


@dataclass(frozen=True)
class TextDelta:
    """A piece of the assistant's text."""

    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of one tool call. ``id`` and ``name`` come on the first delta of a call; ``arguments`` is JSON text."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True)
class Usage:
    """Token counts of one model call."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


ModelChunk = TextDelta | ToolCallDelta | Usage


@runtime_checkable
class Model(Protocol):
    """Streams one assistant turn.

    ``messages`` are Chat Completions message dicts; ``tools`` are :meth:`Tool.openai_schema` dicts and may be
    empty. A model whose ``stream`` takes a ``response_format`` keyword is passed one (Chat Completions'
    ``{"type": "json_schema", ...}``) when the run asks for structured output; any other is told the schema in
    its system prompt. Failures raise :class:`~agents_celery.errors.ModelError`. A model that reads a network stream may
    look at :data:`STOP_READING` between reads: when it is set and returns True, the caller no longer wants the
    turn, and the model should stop reading and return. A model may also have a ``warm_up()`` method: a worker
    calls it as it starts, before its pool forks, to load what the first turn would (an SDK's modules).
    """

    @property
    def name(self) -> str:
        """A short description such as ``"openai:gpt-4o-mini"``."""
        ...

    def stream(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Iterator[ModelChunk]:
        """Yield the chunks of the next assistant turn."""
        ...


class TurnAccumulator:
    """Assembles streamed chunks into one assistant turn.

    Example::

        acc = TurnAccumulator()
        for chunk in model.stream(messages, tools):
            acc.add(chunk)
        messages.append(acc.assistant_message())
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, dict[str, str]] = {}
        self._missing_ids: set[int] = set()
        self.usage = Usage()

    def add(self, chunk: ModelChunk) -> None:
        """Take in one chunk."""
        if isinstance(chunk, TextDelta):
            self._text.append(chunk.text)
        elif isinstance(chunk, ToolCallDelta):
            self._add_call_delta(chunk)
        else:
            # The last usage report wins: some servers send running totals.
            self.usage = chunk

    def _add_call_delta(self, delta: ToolCallDelta) -> None:
        call = self._calls.get(delta.index)
        if call is None:
            # A server that sends no id still needs one unique per call: results are keyed by it.
            call = self._calls[delta.index] = {
                "id": delta.id or f"call_{uuid.uuid4().hex[:24]}",
                "name": "",
                "arguments": "",
            }
            if not delta.id:
                self._missing_ids.add(delta.index)
        elif delta.id and delta.index in self._missing_ids:
            call["id"] = delta.id
            self._missing_ids.discard(delta.index)
        if delta.name and not call["name"]:
            call["name"] = delta.name
        call["arguments"] += delta.arguments

    @property
    def text(self) -> str:
        """The text so far."""
        return "".join(self._text)

    @property
    def tool_calls(self) -> list[dict[str, str]]:
        """The tool calls so far, in index order: ``{"id", "name", "arguments"}`` each."""
        return [dict(self._calls[index]) for index in sorted(self._calls)]

    def assistant_message(self) -> dict[str, Any]:
        """The turn as a Chat Completions assistant message."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        calls = self.tool_calls
        if calls:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls
            ]
        return message


#: The model adapter's stop signal: the one ambient value of a model call, declared here and nowhere else. The
#: engine sets it around each model call (:func:`reading_until`, on the thread that reads the model) to a function
#: that returns True once the caller no longer wants the stream (a stop, a lost lease, a walked-away turn); it is
#: None outside a call. A model may look at it between reads (see :class:`Model`); :class:`OpenAIChat` does on
#: every line, keep-alive comments included, so a server that only sends those cannot keep the read going.
STOP_READING: ContextVar[Callable[[], bool] | None] = ContextVar("agents_celery_stop_reading", default=None)


@contextmanager
def reading_until(unwanted: Callable[[], bool]) -> Iterator[None]:
    """Set :data:`STOP_READING` to ``unwanted`` for the block (the engine's model call), then restore it."""
    token = STOP_READING.set(unwanted)
    try:
        yield
    finally:
        STOP_READING.reset(token)  # the call thread serves other calls next

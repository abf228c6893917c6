"""A foreground wait that keeps its connection alive (a :class:`~.messages.Wait` with ``keepalive``): the status
and headers go out at once, then a space every ``keepalive`` seconds while the run works, then the JSON answer.

JSON allows leading whitespace, so any client parses the body as it would without the spaces; and the openai SDK's
read timeout (600 s), like a proxy's idle timeout (often 60 s), counts the time between two reads, so a run that
works for longer than either no longer looks like a dead connection that the SDK then sends again.

The price: the status line is sent before the run ends, so it is 200 whatever comes after. A run that fails is
still answered with its Response (``status: failed``, its ``error``), as it would be without the spaces; a wait
that itself breaks (Redis unreachable, the run deleted meanwhile) ends the body with an error object in OpenAI's
shape instead of the Response (the front ends use this for the ``/v1`` routes only).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator

from ..errors import AgentsCeleryError
from ..storage.connections import UNAVAILABLE, unavailable
from ..storage.eventlog import AsyncEventLog, EventLog
from .messages import Wait, error_reply
from .sse import LogStream

#: The longest a wait goes without looking at its deadline and at the time of its next space.
TICK_SECONDS = 1.0


class _Clock:
    def __init__(self, wait: Wait) -> None:
        assert wait.keepalive is not None and wait.answer is not None
        self.every = wait.keepalive
        self.deadline = time.monotonic() + wait.seconds
        self.last = time.monotonic()

    def space(self) -> str:
        """A space when one is due."""
        if time.monotonic() - self.last < self.every:
            return ""
        self.last = time.monotonic()
        return " "

    @property
    def past(self) -> bool:
        return time.monotonic() > self.deadline


def _stream(wait: Wait) -> LogStream:
    tick = min(TICK_SECONDS, wait.keepalive or TICK_SECONDS)
    return LogStream(wait.run_id, wait.after, "canonical", until_pause=True, keepalive_seconds=tick)


def answer_text(wait: Wait) -> str:
    """The JSON the wait ends with: its answer, or the error that kept it from one (OpenAI's shape)."""
    assert wait.answer is not None
    try:
        body = wait.answer().body
    except AgentsCeleryError as exc:
        body = error_reply(exc, openai=True).body
    except UNAVAILABLE as exc:
        down = unavailable(exc)
        if down is None:
            raise
        body = error_reply(down, openai=True).body
    return json.dumps(body, ensure_ascii=False)


def spaced(wait: Wait, log: EventLog) -> Iterator[str]:
    """The body of a kept-alive wait, read through ``log`` (sync)."""
    clock = _Clock(wait)
    yield " "  # the status and headers go out with the first chunk
    for _ in _stream(wait).frames(log):
        if clock.past:
            break
        if space := clock.space():
            yield space
    yield answer_text(wait)


async def aspaced(wait: Wait, log: AsyncEventLog) -> AsyncIterator[str]:
    """The body of a kept-alive wait, read through an asyncio ``log`` (the answer is built in a thread)."""
    clock = _Clock(wait)
    yield " "
    async for _ in _stream(wait).aframes(log):
        if clock.past:
            break
        if space := clock.space():
            yield space
    yield await asyncio.to_thread(answer_text, wait)

"""Server-sent events: framing, and the frames of a run's log in each dialect. No web framework, no I/O here.

A frame is ``id: <offset>\\nevent: <Name>\\ndata: <one-line JSON>\\n\\n`` (LF only: AG-UI's JS parser splits on
a bare blank line). Frames that are not events of the log (meta frames, synthesized AG-UI starts) carry no
``id:`` line, so the browser's ``Last-Event-ID`` is always the offset of the last real event it received.
An idle stream gets a ``: keep-alive`` comment every ``keepalive_seconds`` so proxies keep it open and a
client that went away is noticed (the write fails and the generator is closed).

A :class:`LogStream` says what to stream (which run, from which offset, until what, in which dialect);
:meth:`LogStream.frames` (sync, for WSGI) and :meth:`LogStream.aframes` (asyncio, for ASGI) read the log with
the one replay-then-tail loop (:mod:`agents_celery.storage.eventlog`) and render each page as one chunk. The
canonical dialect is built from the stored JSON without decoding it (:class:`~agents_celery.events.WireJSON`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis

from ..errors import AgentsCeleryError
from ..events import Event, WireJSON, tag_of
from ..storage.eventlog import AsyncEventLog, Entry, EventLog, Idle, LogInfo
from . import agui as agui_mod
from .agentos import AgentOSRenderer

#: Response headers of every event stream: no caching, no proxy buffering (nginx honours X-Accel-Buffering).
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
CONTENT_TYPE = "text/event-stream"
KEEP_ALIVE = ": keep-alive\n\n"
#: Longest XREAD BLOCK, in ms; the stream client's socket timeout must exceed it.
MAX_BLOCK_MS = 1000

Dialect = Literal["canonical", "agui", "agentos"]


def frame(data: dict[str, Any], event: str | None = None, id: int | str | None = None) -> str:
    """One SSE frame; ``data`` is written as one line of compact JSON."""
    return raw_frame(json.dumps(data, separators=(",", ":"), ensure_ascii=False), event, id)


def raw_frame(data: str, event: str | None = None, id: int | str | None = None) -> str:
    """One SSE frame around ``data``, one line of JSON already serialised."""
    head = "" if id is None else f"id: {id}\n"
    if event:
        head += f"event: {event}\n"
    return f"{head}data: {data}\n\n"


def error_frame(exc: BaseException) -> str:
    """A last frame (no ``id:``) telling the client the stream broke off; it should resume from its offset."""
    code = getattr(exc, "code", "stream_error")
    return frame({"event": "error", "detail": str(exc), "code": code}, "error")


class Renderer:
    """Turns one stream's pages of entries into SSE text, in one dialect (see :class:`LogStream`)."""

    def __init__(self, stream: LogStream, info: LogInfo, history: Sequence[Event]) -> None:
        self.stream, self.info, self.history = stream, info, list(history)
        self.wire = WireJSON(info.run_id, info.session_id, info.agent_id)
        self.agentos = AgentOSRenderer(lambda: self.history, stream.confirm_tools)
        self.agui_started = False
        self.mark = stream.subscribed

    def head(self) -> str:
        """The meta frames that open the stream."""
        out = [frame(meta, meta["event"]) for meta in self.stream.head]
        if self.mark is not None and self.stream.after >= self.mark[0]:
            out.append(frame(self.mark[1], self.mark[1]["event"]))
            self.mark = None
        return "".join(out)

    def page(self, page: list[Entry]) -> str:
        dialect = self.stream.dialect
        if dialect == "canonical":
            return "".join(self._canonical(entry) for entry in page)
        out: list[str] = []
        for entry in page:
            ev = self.info.event(entry)
            if dialect == "agui":
                if not self.agui_started:
                    self.agui_started = True
                    renderer = agui_mod.AguiRenderer(self.info.run_id, ev.session_id)
                    out += [frame(e, e["type"]) for e in renderer.prelude(self.history, ev)]
                out.append(frame(agui_mod.render(ev), ev.type.value, ev.position))
                continue
            rendered = self.agentos.render(ev)
            if rendered is not None:
                out.append(frame(rendered, rendered["event"], ev.position))
            if self.mark is not None and ev.offset >= self.mark[0]:
                out.append(frame(self.mark[1], self.mark[1]["event"]))
                self.mark = None
        return "".join(out)

    def _canonical(self, entry: Entry) -> str:
        kind, data = self.wire(*entry)
        return raw_frame(data, kind, f"{entry[0]}.{tag_of(entry[1])}")


@dataclass
class LogStream:
    """What one SSE response streams: the run's events after ``after`` in a dialect, until it ends (or pauses).

    Args:
        head: Meta frames (no ``id:``) sent first (AgentOS ``/resume``: ``catch_up`` or ``replay``).
        subscribed: ``(offset, meta)``: send ``meta`` once the events up to ``offset`` went out (where live
            events begin); the events come from one continuous read, so none falls in between.
        confirm_tools: The agent's tools that need a confirmation (AgentOS ``requires_confirmation``).
        info: The log's info, when the caller read it already.
    """

    run_id: str
    after: int
    dialect: Dialect
    until_pause: bool
    keepalive_seconds: float = 15.0
    head: Sequence[dict[str, Any]] = ()
    subscribed: tuple[int, dict[str, Any]] | None = None
    confirm_tools: frozenset[str] = frozenset()
    info: LogInfo | None = None

    @property
    def block_ms(self) -> int:
        return max(50, min(MAX_BLOCK_MS, int(self.keepalive_seconds * 1000)))

    def _needs_history(self) -> bool:
        return self.after >= 0 and self.dialect != "canonical"

    def frames(self, log: EventLog) -> Iterator[str]:
        """The SSE text, read through ``log`` (sync: one kept connection of its client)."""
        try:
            info = self.info or log.info(self.run_id)
            history = log.read(self.run_id, -1, limit=self.after + 1) if self._needs_history() else []
            renderer = Renderer(self, info, history)
            if head := renderer.head():
                yield head
            pages = log.tail(
                self.run_id,
                self.after,
                until_pause=self.until_pause,
                block_ms=self.block_ms,
                info=info,
                idle_seconds=self.keepalive_seconds,
            )
            for page in pages:
                text = KEEP_ALIVE if isinstance(page, Idle) else renderer.page(page)
                if text:
                    yield text
        except (AgentsCeleryError, redis.RedisError) as exc:
            yield error_frame(exc)

    async def aframes(self, log: AsyncEventLog) -> AsyncIterator[str]:
        """The SSE text, read through an asyncio ``log`` (ASGI: no thread held while the stream waits)."""
        try:
            info = self.info or await log.info(self.run_id)
            history = await log.read(self.run_id, -1, limit=self.after + 1) if self._needs_history() else []
            renderer = Renderer(self, info, history)
            if head := renderer.head():
                yield head
            pages = log.tail(
                self.run_id,
                self.after,
                until_pause=self.until_pause,
                block_ms=self.block_ms,
                info=info,
                idle_seconds=self.keepalive_seconds,
            )
            async for page in pages:
                text = KEEP_ALIVE if isinstance(page, Idle) else renderer.page(page)
                if text:
                    yield text
        except (AgentsCeleryError, redis.RedisError) as exc:
            yield error_frame(exc)

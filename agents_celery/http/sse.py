"""Server-sent events: framing, the streaming response, and a log follower that ticks on idle streams.

A frame is ``id: <offset>\\nevent: <Name>\\ndata: <one-line JSON>\\n\\n`` (LF only: AG-UI's JS parser splits on
a bare blank line). Frames that are not events of the log (meta frames, synthesized AG-UI starts) carry no
``id:`` line, so the browser's ``Last-Event-ID`` is always the offset of the last real event it received.
An idle stream gets a ``: keep-alive`` comment every ``keepalive_seconds`` so proxies keep it open and a
client that went away is noticed (the write fails and the generator is closed).

Reading a log (:func:`pages`): XRANGE pages replay what is there, then XREAD BLOCK from the last id delivers
live entries, and its reply is used as is (one round trip per live batch). The log's status is only looked at
when XREAD times out, or after a pause, so a stream stops at the end of the run, or at a pause if asked.
Everything a stream reads goes through the API's stream client (:class:`~agents_celery.http.streams.Streams`),
one connection per open stream, whose socket timeout exceeds the XREAD block time.

Every page of entries is written as one chunk (one ``send``), and the default (canonical) format is built
from the stored JSON without decoding and re-encoding it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator
from typing import Any

import redis
from flask import Response

from ..errors import AgentsCeleryError
from ..events import Event
from ..runtime import Runtime
from ..storage.connections import keeping_one, reconnect_if_closed
from ..storage.eventlog import EventLog, LogInfo, stream_id
from . import agui as agui_mod
from .agentos import AgentOSRenderer
from .streams import Streams

#: Response headers of every event stream: no caching, no proxy buffering (nginx honours X-Accel-Buffering).
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
KEEP_ALIVE = ": keep-alive\n\n"
#: Entries read per round trip, replaying (XRANGE) and live (XREAD).
PAGE = 1000
#: Longest XREAD BLOCK, in ms; the stream client's socket timeout must exceed it.
MAX_BLOCK_MS = 1000

#: One stored entry: its offset and its stored JSON (``{"type":...,"timestamp":...,<fields>}``).
Entry = tuple[int, str]

_HEAD = re.compile(r'\{"type":"([A-Z_]+)","timestamp":(-?\d+)([,}])')
#: Stored types that can end a stream (RUN_FINISHED is a pause when its outcome is an interrupt).
_ENDS = ('RUN_FINISHED"', 'RUN_ERROR"')
#: Field names of the canonical envelope; a stored event carrying one of them is rendered the slow way.
_ENVELOPE = ('"offset"', '"run_id"', '"session_id"', '"agent_id"', '"type"', '"timestamp"')


def frame(data: dict[str, Any], event: str | None = None, id: int | None = None) -> str:
    """One SSE frame; ``data`` is written as one line of compact JSON."""
    head = "" if id is None else f"id: {id}\n"
    if event:
        head += f"event: {event}\n"
    return f"{head}data: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n"


def sse_response(frames: Iterable[str], status: int = 200) -> Response:
    """A streaming ``text/event-stream`` response over ``frames``."""
    return Response(frames, status=status, mimetype="text/event-stream", headers=dict(HEADERS))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entries(raw: Any) -> list[Entry]:
    out = []
    for entry_id, fields in raw:
        stored = fields.get(b"event") if b"event" in fields else fields.get("event")
        out.append((int(_text(entry_id).split("-", 1)[0]), _text(stored)))
    return out


class Reader:
    """Reads one run's log for a stream, through the API's stream client."""

    def __init__(self, client: redis.Redis, log: EventLog, key: str, info: LogInfo) -> None:
        self.client = client
        self.log = log
        self.key = key
        self.info = info
        self._envelope = ",".join(
            f'"{k}":{json.dumps(v, ensure_ascii=False)}'
            for k, v in (("run_id", info.run_id), ("session_id", info.session_id), ("agent_id", info.agent_id))
        )

    @classmethod
    def open(cls, streams: Streams, run_id: str, info: LogInfo | None = None) -> Reader:
        """A reader of ``run_id`` (RunNotFoundError / RunExpiredError when there is no such log)."""
        info = info or streams.log.info(run_id)
        return cls(streams.redis, streams.log, streams.keys.run(run_id).events, info)

    def event(self, entry: Entry) -> Event:
        info = self.info
        return Event.from_stored(entry[0], entry[1], info.run_id, info.session_id, info.agent_id)

    def pages(self, after: int, *, until_pause: bool, keepalive_seconds: float = 15.0) -> Iterator[list[Entry] | None]:
        """Pages of the entries with offset > ``after``, then live ones, until the run ends (or pauses, if asked).

        Yields ``None`` when nothing arrived for ``keepalive_seconds`` (the caller writes a keep-alive comment).
        Replay (XRANGE) and tail (XREAD BLOCK) start from the same stream id: no gap, no duplicate.
        """
        block_ms = max(50, min(MAX_BLOCK_MS, int(keepalive_seconds * 1000)))
        last, idle_since = after, time.monotonic()
        client = keeping_one(self.client)  # the stream's connection, for all its reads
        try:
            while True:  # replay
                reconnect_if_closed(client)  # a slow client may have kept the stream waiting between reads
                page = _entries(client.xrange(self.key, min=f"{last + 1}-0", count=PAGE))
                if page:
                    last = page[-1][0]
                    page, stop = self._cut(page, until_pause, client)
                    yield page
                    if stop:
                        return
                if len(page) < PAGE:
                    break
            idle_since = time.monotonic()
            if self._done(last, until_pause, client):
                return
            while True:  # live: the status is only looked at when XREAD times out, or after a pause
                reconnect_if_closed(client)
                reply: Any = client.xread({self.key: stream_id(last)}, count=PAGE, block=block_ms)
                if not reply:
                    if self._done(last, until_pause, client):
                        return
                    if time.monotonic() - idle_since >= keepalive_seconds:
                        idle_since = time.monotonic()
                        yield None
                    continue
                for _, batch in reply:
                    page = _entries(batch)
                    if not page:
                        continue
                    last = page[-1][0]
                    page, stop = self._cut(page, until_pause, client)
                    yield page
                    if stop:
                        return
                    idle_since = time.monotonic()
        finally:
            client.close()

    def _cut(self, page: list[Entry], until_pause: bool, client: redis.Redis) -> tuple[list[Entry], bool]:
        """``page`` up to its first terminal event (and whether there was one); a pause that ends the
        page ends the stream when ``until_pause`` and the log says the run is still paused."""
        for i, entry in enumerate(page):
            stored = entry[1]
            if stored.startswith('{"type":"') and not stored.startswith(_ENDS, 9):
                continue  # the common case, decided without a parse
            ev = self.event(entry)
            if ev.is_terminal:
                return page[: i + 1], True
            if until_pause and ev.is_pause and i + 1 == len(page) and self._done(entry[0], until_pause, client):
                return page, True
        return page, False

    def _done(self, last: int, until_pause: bool, client: redis.Redis) -> bool:
        info = self.log.info(self.info.run_id, client)  # RunExpiredError if the log vanished while we waited
        if last < info.last_offset:
            return False
        return info.status == "ended" or (until_pause and info.status == "paused")

    # -- rendering --------------------------------------------------------------------------------------

    def canonical(self, entry: Entry) -> str:
        """The frame of ``entry`` as stored (canonical): ``Event.to_dict()`` as JSON, built from the stored text."""
        offset, stored = entry
        m = _HEAD.match(stored)
        if m is not None:
            rest = stored[m.end() :] if m.group(3) == "," else ""
            if not any(name in rest for name in _ENVELOPE):
                kind, ts = m.group(1), m.group(2)
                tail = "," + rest if rest else "}"
                return (
                    f'id: {offset}\nevent: {kind}\ndata: {{"offset":{offset},"type":"{kind}",'
                    f'{self._envelope},"timestamp":{ts}{tail}\n\n'
                )
        ev = self.event(entry)
        return frame(ev.to_dict(), ev.type.value, ev.offset)


def follow(
    runtime: Runtime,
    streams: Streams,
    run_id: str,
    after: int,
    *,
    until_pause: bool,
    keepalive_seconds: float = 15.0,
) -> Iterator[Event | None]:
    """The events with offset > ``after``, then live ones, until the run ends (or pauses, if asked).

    Yields ``None`` when nothing arrived for ``keepalive_seconds`` (the caller writes a keep-alive comment).
    """
    reader = Reader.open(streams, run_id)
    for page in reader.pages(after, until_pause=until_pause, keepalive_seconds=keepalive_seconds):
        if page is None:
            yield None
            continue
        for entry in page:
            yield reader.event(entry)


def error_frame(exc: BaseException) -> str:
    """A last frame (no ``id:``) telling the client the stream broke off; it should resume from its offset."""
    code = getattr(exc, "code", "stream_error")
    return frame({"event": "error", "detail": str(exc), "code": code}, "error")


def agentos_frames(
    runtime: Runtime,
    streams: Streams,
    run_id: str,
    after: int,
    *,
    until_pause: bool = True,
    keepalive_seconds: float = 15.0,
    head: Iterable[dict[str, Any]] = (),
    subscribed: tuple[int, dict[str, Any]] | None = None,
    info: LogInfo | None = None,
) -> Iterator[str]:
    """Meta frames ``head`` (no ``id:``), then the run's events after ``after`` in the AgentOS dialect.

    ``subscribed = (offset, meta)``: send ``meta`` once the events up to ``offset`` went out (the end of the
    catch-up, where live events begin); the events come from one continuous read, so none falls in between.
    """

    def history() -> list[Event]:
        return runtime.store.log.read(run_id, -1, limit=after + 1) if after >= 0 else []

    renderer = AgentOSRenderer(history)
    out = [frame(meta, meta["event"]) for meta in head]
    mark = subscribed
    if mark is not None and after >= mark[0]:
        out.append(frame(mark[1], mark[1]["event"]))
        mark = None
    if out:
        yield "".join(out)
    try:
        reader = Reader.open(streams, run_id, info)
        for page in reader.pages(after, until_pause=until_pause, keepalive_seconds=keepalive_seconds):
            if page is None:
                yield KEEP_ALIVE
                continue
            out = []
            for entry in page:
                ev = reader.event(entry)
                rendered = renderer.render(ev)
                if rendered is not None:
                    out.append(frame(rendered, rendered["event"], ev.offset))
                if mark is not None and ev.offset >= mark[0]:
                    out.append(frame(mark[1], mark[1]["event"]))
                    mark = None
            if out:
                yield "".join(out)
    except (AgentsCeleryError, redis.RedisError) as exc:
        yield error_frame(exc)


def log_frames(
    runtime: Runtime,
    streams: Streams,
    run_id: str,
    after: int,
    *,
    agui: bool,
    until_pause: bool,
    keepalive_seconds: float = 15.0,
    info: LogInfo | None = None,
) -> Iterator[str]:
    """The run's events after ``after`` as stored (canonical) or as strict AG-UI 1.0 events.

    Ends with an error frame if reading the log fails.
    """
    started = False
    try:
        reader = Reader.open(streams, run_id, info)
        for page in reader.pages(after, until_pause=until_pause, keepalive_seconds=keepalive_seconds):
            if page is None:
                yield KEEP_ALIVE
            elif not agui:
                yield "".join(map(reader.canonical, page))
            else:
                out = []
                for entry in page:
                    ev = reader.event(entry)
                    if not started:
                        started = True
                        history = runtime.store.log.read(run_id, -1, limit=after + 1) if after >= 0 else []
                        renderer = agui_mod.AguiRenderer(run_id, ev.session_id)
                        out += [frame(e, e["type"]) for e in renderer.prelude(history, ev)]
                    out.append(frame(agui_mod.render(ev), ev.type.value, ev.offset))
                yield "".join(out)
    except (AgentsCeleryError, redis.RedisError) as exc:
        yield error_frame(exc)

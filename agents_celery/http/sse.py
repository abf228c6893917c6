"""Server-sent events: framing, and the frames of a run's log in each dialect. No web framework here.

A frame is ``id: <offset>\nevent: <Name>\ndata: <one-line JSON>\n\n`` (LF only: AG-UI's JS parser splits on
a bare blank line). Frames that are not events of the log (meta frames, synthesized AG-UI starts) carry no
``id:`` line, so the browser's ``Last-Event-ID`` is always the offset of the last real event it received.
An idle stream gets a ``: keep-alive`` comment every ``keepalive_seconds`` so proxies keep it open and a
client that went away is noticed (the write fails and the generator is closed).

The log is read by the one replay-then-tail loop (:meth:`agents_celery.storage.eventlog.EventLog.tail`)
through the API's stream client (:class:`~agents_celery.http.streams.Streams`), one connection per open
stream, whose socket timeout exceeds the XREAD block time. Every page of entries is written as one chunk
(one ``send``), and the canonical format is built from the stored JSON without decoding it
(:class:`~agents_celery.events.WireJSON`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import redis

from ..errors import AgentsCeleryError
from ..events import Event, WireJSON
from ..runtime import Runtime
from ..storage.eventlog import Entry, Idle, LogInfo
from . import agui as agui_mod
from .agentos import AgentOSRenderer
from .streams import Streams

#: Response headers of every event stream: no caching, no proxy buffering (nginx honours X-Accel-Buffering).
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
CONTENT_TYPE = "text/event-stream"
KEEP_ALIVE = ": keep-alive\n\n"
#: Longest XREAD BLOCK, in ms; the stream client's socket timeout must exceed it.
MAX_BLOCK_MS = 1000


def frame(data: dict[str, Any], event: str | None = None, id: int | None = None) -> str:
    """One SSE frame; ``data`` is written as one line of compact JSON."""
    return raw_frame(json.dumps(data, separators=(",", ":"), ensure_ascii=False), event, id)


def raw_frame(data: str, event: str | None = None, id: int | None = None) -> str:
    """One SSE frame around ``data``, one line of JSON already serialised."""
    head = "" if id is None else f"id: {id}\n"
    if event:
        head += f"event: {event}\n"
    return f"{head}data: {data}\n\n"


def pages(
    streams: Streams, run_id: str, after: int, *, until_pause: bool, keepalive_seconds: float, info: LogInfo
) -> Iterator[list[Entry] | Idle]:
    """The run's entries after ``after`` in pages, then live ones; an :class:`Idle` every ``keepalive_seconds``."""
    block_ms = max(50, min(MAX_BLOCK_MS, int(keepalive_seconds * 1000)))
    return streams.log.tail(
        run_id, after, until_pause=until_pause, block_ms=block_ms, info=info, idle_seconds=keepalive_seconds
    )


def follow(
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
    info = streams.log.info(run_id)
    for page in pages(streams, run_id, after, until_pause=until_pause, keepalive_seconds=keepalive_seconds, info=info):
        if isinstance(page, Idle):
            yield None
            continue
        for entry in page:
            yield info.event(entry)


def _canonical(wire: WireJSON, entry: Entry) -> str:
    kind, data = wire(*entry)
    return raw_frame(data, kind, entry[0])


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
        info = info or streams.log.info(run_id)
        for page in pages(
            streams, run_id, after, until_pause=until_pause, keepalive_seconds=keepalive_seconds, info=info
        ):
            if isinstance(page, Idle):
                yield KEEP_ALIVE
                continue
            out = []
            for entry in page:
                ev = info.event(entry)
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
        info = info or streams.log.info(run_id)
        wire = WireJSON(info.run_id, info.session_id, info.agent_id)
        for page in pages(
            streams, run_id, after, until_pause=until_pause, keepalive_seconds=keepalive_seconds, info=info
        ):
            if isinstance(page, Idle):
                yield KEEP_ALIVE
            elif not agui:
                yield "".join(_canonical(wire, entry) for entry in page)
            else:
                out = []
                for entry in page:
                    ev = info.event(entry)
                    if not started:
                        started = True
                        history = runtime.store.log.read(run_id, -1, limit=after + 1) if after >= 0 else []
                        renderer = agui_mod.AguiRenderer(run_id, ev.session_id)
                        out += [frame(e, e["type"]) for e in renderer.prelude(history, ev)]
                    out.append(frame(agui_mod.render(ev), ev.type.value, ev.offset))
                yield "".join(out)
    except (AgentsCeleryError, redis.RedisError) as exc:
        yield error_frame(exc)

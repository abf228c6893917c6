"""Server-sent events: framing, the streaming response, and a log follower that ticks on idle streams.

A frame is ``id: <offset>\\nevent: <Name>\\ndata: <one-line JSON>\\n\\n`` (LF only: AG-UI's JS parser splits on
a bare blank line). Frames that are not events of the log (meta frames, synthesized AG-UI starts) carry no
``id:`` line, so the browser's ``Last-Event-ID`` is always the offset of the last real event it received.
An idle stream gets a ``: keep-alive`` comment every ``keepalive_seconds`` so proxies keep it open and a
client that went away is noticed (the write fails and the generator is closed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from typing import Any

import redis
from flask import Response

from ..errors import AgentsCeleryError
from ..eventlog import stream_id
from ..events import Event
from ..runtime import Runtime
from . import agui as agui_mod
from .agentos import AgentOSRenderer

#: Response headers of every event stream: no caching, no proxy buffering (nginx honours X-Accel-Buffering).
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
KEEP_ALIVE = ": keep-alive\n\n"
#: Entries read per round trip while replaying.
PAGE = 500


def frame(data: dict[str, Any], event: str | None = None, id: int | None = None) -> str:
    """One SSE frame; ``data`` is written as one line of compact JSON."""
    head = "" if id is None else f"id: {id}\n"
    if event:
        head += f"event: {event}\n"
    return f"{head}data: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n"


def sse_response(frames: Iterable[str], status: int = 200) -> Response:
    """A streaming ``text/event-stream`` response over ``frames``."""
    return Response(frames, status=status, mimetype="text/event-stream", headers=dict(HEADERS))


def _parse(entries: Any, run_id: str, session_id: str, agent_id: str) -> list[Event]:
    out = []
    for entry_id, fields in entries:
        raw_id = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
        raw = fields.get(b"event", fields.get("event"))
        out.append(Event.from_stored(int(raw_id.split("-", 1)[0]), raw, run_id, session_id, agent_id))
    return out


def follow(
    runtime: Runtime,
    run_id: str,
    after: int,
    *,
    until_pause: bool,
    keepalive_seconds: float = 15.0,
) -> Iterator[Event | None]:
    """The events with offset > ``after``, then live ones, until the run ends (or pauses, if asked).

    Yields ``None`` when nothing arrived for ``keepalive_seconds`` (the caller writes a keep-alive comment).
    Replay (XRANGE) and tail (XREAD BLOCK) start from the same stream id: no gap, no duplicate.
    """
    log = runtime.store.log
    info = log.info(run_id)
    key = runtime.store.keys.run(run_id).events
    block_ms = max(50, min(1000, int(keepalive_seconds * 1000)))
    last, idle_since = after, time.monotonic()
    while True:
        entries = runtime.redis.xrange(key, min=f"{last + 1}-0", count=PAGE)
        page = _parse(entries, run_id, info.session_id, info.agent_id)
        for ev in page:
            last = ev.offset
            yield ev
            if ev.is_terminal:
                return
        if len(page) == PAGE:
            continue
        if page:
            idle_since = time.monotonic()
        now = log.info(run_id)  # RunExpiredError if the log vanished while we waited
        if last >= now.last_offset and (now.status == "ended" or (until_pause and now.status == "paused")):
            return
        if last < now.last_offset:
            continue
        runtime.redis.xread({key: stream_id(last)}, count=1, block=block_ms)
        if time.monotonic() - idle_since >= keepalive_seconds:
            idle_since = time.monotonic()
            yield None


def error_frame(exc: BaseException) -> str:
    """A last frame (no ``id:``) telling the client the stream broke off; it should resume from its offset."""
    code = getattr(exc, "code", "stream_error")
    return frame({"event": "error", "detail": str(exc), "code": code}, "error")


def agentos_frames(
    runtime: Runtime,
    run_id: str,
    after: int,
    *,
    until_pause: bool = True,
    keepalive_seconds: float = 15.0,
    head: Iterable[dict[str, Any]] = (),
    subscribed: tuple[int, dict[str, Any]] | None = None,
) -> Iterator[str]:
    """Meta frames ``head`` (no ``id:``), then the run's events after ``after`` in the AgentOS dialect.

    ``subscribed = (offset, meta)``: send ``meta`` once the events up to ``offset`` went out (the end of the
    catch-up, where live events begin); the events come from one continuous read, so none falls in between.
    """

    def history() -> list[Event]:
        return runtime.store.log.read(run_id, -1, limit=after + 1) if after >= 0 else []

    renderer = AgentOSRenderer(history)
    for meta in head:
        yield frame(meta, meta["event"])
    mark = subscribed
    if mark is not None and after >= mark[0]:
        yield frame(mark[1], mark[1]["event"])
        mark = None
    try:
        for ev in follow(runtime, run_id, after, until_pause=until_pause, keepalive_seconds=keepalive_seconds):
            if ev is None:
                yield KEEP_ALIVE
                continue
            out = renderer.render(ev)
            if out is not None:
                yield frame(out, out["event"], ev.offset)
            if mark is not None and ev.offset >= mark[0]:
                yield frame(mark[1], mark[1]["event"])
                mark = None
    except (AgentsCeleryError, redis.RedisError) as exc:
        yield error_frame(exc)


def _safely(frames: Iterator[str | None]) -> Iterator[str]:
    """Keep-alive for ``None``, drop empty frames, end with an error frame if reading the log fails."""
    try:
        for f in frames:
            if f is None:
                yield KEEP_ALIVE
            elif f:
                yield f
    except (AgentsCeleryError, redis.RedisError) as exc:
        yield error_frame(exc)


def log_frames(
    runtime: Runtime, run_id: str, after: int, *, agui: bool, until_pause: bool, keepalive_seconds: float = 15.0
) -> Iterator[str]:
    """The run's events after ``after`` as stored (canonical) or as strict AG-UI 1.0 events."""

    def render(ev: Event | None, state: dict[str, bool]) -> str | None:
        if ev is None:
            return None
        if not agui:
            return frame(ev.to_dict(), ev.type.value, ev.offset)
        prelude = ""
        if not state.get("started"):
            state["started"] = True
            history = runtime.store.log.read(run_id, -1, limit=after + 1) if after >= 0 else []
            renderer = agui_mod.AguiRenderer(run_id, ev.session_id)
            prelude = "".join(frame(e, e["type"]) for e in renderer.prelude(history, ev))
        return prelude + frame(agui_mod.render(ev), ev.type.value, ev.offset)

    state: dict[str, bool] = {}
    yield from _safely(
        render(ev, state)
        for ev in follow(runtime, run_id, after, until_pause=until_pause, keepalive_seconds=keepalive_seconds)
    )

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

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import redis

from ..errors import AgentsCeleryError
from ..events import Event, EventType, WireJSON, tag_of
from ..storage.eventlog import AsyncEventLog, ChildPage, Entry, EventLog, Idle, LogInfo, Watching
from ..storage.keys import Keys
from .agentos.render import AgentOSRenderer
from .agui import render as agui_mod

#: Response headers of every event stream: no caching, no proxy buffering (nginx honours X-Accel-Buffering).
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
CONTENT_TYPE = "text/event-stream"
KEEP_ALIVE = ": keep-alive\n\n"
#: The keep-alive of a Responses stream: a comment line with no blank line after it. The openai SDK's SSE decoder
#: keeps the last ``id:`` it saw (as the SSE spec says) and dispatches an event at every blank line once it has
#: one, so ``: keep-alive`` and a blank line reached it as an event with empty data, which it failed to parse.
KEEP_ALIVE_LINE = ": keep-alive\n"
#: Longest XREAD BLOCK, in ms; the stream client's socket timeout must exceed it.
MAX_BLOCK_MS = 1000

Dialect = Literal["canonical", "agui", "agentos", "responses", "aisdk", "a2a"]
#: The types that end an AG-UI run (a segment of ours).
TERMINAL = ("RUN_FINISHED", "RUN_ERROR")
#: Events of the log before a stream's start read per round trip: they are folded (:class:`Prefix`), never all held.
PREFIX_PAGE = 500


@dataclass
class AguiSegment:
    """How the AG-UI endpoint presents one segment of a run (``POST /agui/<agent_id>``): under the client's
    ``threadId`` and ``runId``, ending at its first terminal event, with ``snapshots()`` (STATE_SNAPSHOT and
    MESSAGES_SNAPSHOT, read when the end comes) sent before a RUN_FINISHED. With ``error`` (message, code) the
    stream is RUN_STARTED then that RUN_ERROR, and the log is not read."""

    thread_id: str
    run_id: str
    snapshots: Callable[[int], list[dict[str, Any]]] | None = None
    error: tuple[str, str] | None = None

    def present(self, event: dict[str, Any]) -> dict[str, Any]:
        """``event`` under the client's ids (interrupts spelled as AG-UI 1.0 spells a tool call's)."""
        if event["type"] in ("RUN_STARTED", "RUN_FINISHED"):
            event = {**event, "threadId": self.thread_id, "runId": self.run_id}
        outcome = event.get("outcome")
        if isinstance(outcome, dict) and outcome.get("interrupts"):
            interrupts = [agui_mod.interrupt_view(i) for i in outcome["interrupts"]]
            event = {**event, "outcome": {**outcome, "interrupts": interrupts}}
        return event

    def refusal(self) -> str:
        assert self.error is not None
        now = int(time.time() * 1000)
        started = agui_mod.run_started(self.thread_id, self.run_id, now)
        error = agui_mod.run_error(*self.error, now)
        return frame(started, started["type"]) + frame(error, error["type"])


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


class Presenter(Protocol):
    """A dialect that renders pages of decoded events itself (the Responses API, :mod:`.responses.endpoint`): it reads
    the log from the start and keeps its own state; ``finished`` once its stream should end."""

    finished: bool

    def frames(self, events: list[Event]) -> str: ...

    def error(self, exc: BaseException) -> str: ...

    def needs_thread(self, page: Sequence[Entry]) -> bool:
        """Whether rendering ``page`` may call Redis (sync: under asyncio it goes to a thread): the Responses API
        saving a checkpoint, a workflow's presenter reading the log of a step's run."""
        ...


@runtime_checkable
class FollowsChildren(Protocol):
    """A presenter that shows child runs' work live (an AgentOS workflow stream, its agent steps' runs): the stream
    hands it the :class:`~agents_celery.storage.follow.Watching` its tail reads along, where it adds the children
    it follows, and their new entries come to :meth:`child_page`."""

    watching: Watching | None

    def child_page(self, page: ChildPage) -> str: ...


class Prefix:
    """What a stream that starts after offset N needs of the log up to N, folded as it is read (pages of
    :data:`PREFIX_PAGE`), so a client resuming deep in a long run holds one page, not the run's whole log:
    the tool calls' names and arguments and the decisions (AgentOS), what the last segment left open (the AG-UI
    prelude) and how many invocations of each child ended (an AG-UI parent's subagents)."""

    def __init__(self, dialect: Dialect, confirm: frozenset[str] = frozenset()) -> None:
        self.dialect = dialect
        self.agentos = AgentOSRenderer(None, confirm)
        self.opened = agui_mod.Opened()
        self.ended: Counter[str] = Counter()

    def see(self, page: Sequence[Event]) -> None:
        for ev in page:
            if self.dialect == "agentos":
                self.agentos.remember(ev)
            elif self.dialect == "agui":
                self.opened.see(ev)
                if ev.type in agui_mod.SUBAGENT_ENDS:
                    self.ended[ev.data.get("subagent_run_id", "")] += 1

    def wants(self, read: tuple[int, int], page: Sequence[Event], upto: int) -> tuple[int, int] | None:
        """Fold ``page`` (what ``read`` = (after, count) returned); (after, count) of the next read, None when the
        log up to ``upto`` has been read."""
        self.see([ev for ev in page if ev.offset <= upto])
        if len(page) < read[1]:
            return None  # the log ends before ``upto``
        after = page[-1].offset
        return (after, min(PREFIX_PAGE, upto - after)) if after < upto else None


class Renderer:
    """Turns one stream's pages of entries into SSE text, in one dialect (see :class:`LogStream`)."""

    def __init__(self, stream: LogStream, info: LogInfo, prefix: Prefix, watching: Watching | None = None) -> None:
        self.stream, self.info, self.prefix = stream, info, prefix
        self.wire = WireJSON(info.run_id, info.session_id, info.agent_id)
        self.agentos = prefix.agentos
        self.agui_started = False
        self.mark = stream.subscribed
        #: The segment's terminal event went out (AG-UI endpoint streams end there).
        self.finished = False
        #: Invocations of each child this stream closed so far (AG-UI: which segment of its log comes next).
        self.closed: dict[str, int] = {}
        #: Children whose current invocation is open in this stream: the last offset of their log shown.
        self.shown: dict[str, int] = {}
        #: The children the tail reads along (live: their work shows as it happens); None: not followed live.
        self.watching = watching
        if isinstance(stream.presenter, FollowsChildren):  # it adds and drops the children it follows
            stream.presenter.watching = watching

    def head(self) -> str:
        """The meta frames that open the stream."""
        out = [self.stream.prelude] if self.stream.prelude else []
        out += [frame(meta, meta["event"]) for meta in self.stream.head]
        if self.mark is not None and self.stream.after >= self.mark[0]:
            out.append(frame(self.mark[1], self.mark[1]["event"]))
            self.mark = None
        return "".join(out)

    def page(self, page: list[Entry] | ChildPage) -> str:
        presenter = self.stream.presenter
        if isinstance(page, ChildPage):
            if isinstance(presenter, FollowsChildren):
                return presenter.child_page(page)
            return "".join(self._child_page(page))
        if presenter is not None:
            text = presenter.frames([self.info.event(entry) for entry in page])
            self.finished = presenter.finished
            return text
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
                    opening = renderer.prelude(self.prefix.opened, ev)
                    out += [frame(self._present(e), e["type"]) for e in opening]
                    for e in opening:  # joined inside a child's invocation: its work so far, then live
                        if e["type"] == "SUBAGENT_STARTED":
                            out += self._open_child(e["subagentRunId"])
                out += self._agui(ev)
                if self.finished:
                    break
                continue
            rendered = self.agentos.render(ev)
            if rendered is not None:
                out.append(frame(rendered, rendered["event"], ev.position))
            if self.mark is not None and ev.offset >= self.mark[0]:
                out.append(frame(self.mark[1], self.mark[1]["event"]))
                self.mark = None
        return "".join(out)

    def _present(self, event: dict[str, Any]) -> dict[str, Any]:
        segment = self.stream.segment
        return event if segment is None else segment.present(event)

    def _agui(self, ev: Event) -> list[str]:
        rendered = self._present(agui_mod.render(ev))
        out = self._close_child(ev) if ev.type in agui_mod.SUBAGENT_ENDS else []
        segment = self.stream.segment
        if segment is not None and rendered["type"] in TERMINAL:
            self.finished = True
            if rendered["type"] == "RUN_FINISHED" and segment.snapshots is not None:
                out += [frame(e, e["type"]) for e in segment.snapshots(ev.timestamp)]
        out.append(frame(rendered, rendered["type"], ev.position))
        if ev.type is EventType.SUBAGENT_STARTED:
            out += self._open_child(ev.data.get("subagent_run_id", ""))
        return out

    # -- a child's work in its parent's AG-UI stream ------------------------------------------------------

    def _segment(self, child_id: str) -> int:
        """Which stretch of the child's log its current invocation is (one per invocation closed before)."""
        return self.prefix.ended[child_id] + self.closed.get(child_id, 0)

    def _open_child(self, child_id: str) -> list[str]:
        """A child's invocation opens in the stream: its work so far, then (live) what it adds as it comes."""
        read = self.stream.child_log
        if read is None:
            return []
        log = read(child_id)
        cut = agui_mod.segments(log)
        segment = self._segment(child_id)
        stretch = cut[segment] if segment < len(cut) else []
        events = [e for ev in stretch if (e := agui_mod.attribute(ev, child_id)) is not None]
        self.shown[child_id] = stretch[-1].offset if stretch else (log[-1].offset if log else -1)
        ended = any(ev.type in (EventType.RUN_FINISHED, EventType.RUN_ERROR) for ev in stretch)
        if self.watching is not None and not ended:
            self.watching.last[child_id] = self.shown[child_id]
        return [frame(e, e["type"]) for e in events]

    def _child_page(self, page: ChildPage) -> list[str]:
        """New entries of a watched child's log: its work, until the end of its current stretch."""
        child_id, out = page.run_id, list[str]()
        if child_id not in self.shown:
            return out
        for offset, stored in page.entries:
            ev = Event.from_stored(offset, stored, child_id, child_id, "")
            if ev.type in (EventType.RUN_FINISHED, EventType.RUN_ERROR):  # paused or ended: the parent says so
                if self.watching is not None:
                    self.watching.last.pop(child_id, None)
                break
            self.shown[child_id] = offset
            if (event := agui_mod.attribute(ev, child_id)) is not None:
                out.append(frame(event, event["type"]))
        return out

    def _close_child(self, ev: Event) -> list[str]:
        """Before the parent's end of a child's invocation: what the stream has not shown of its work yet."""
        read = self.stream.child_log
        child_id = ev.data.get("subagent_run_id", "")
        if read is None or not child_id:
            return []
        if self.watching is not None:
            self.watching.last.pop(child_id, None)
        after = self.shown.pop(child_id, -1)
        segment = self._segment(child_id)
        self.closed[child_id] = self.closed.get(child_id, 0) + 1
        return [frame(e, e["type"]) for e in agui_mod.attributed(read(child_id), child_id, segment, after)]

    def needs_thread(self, page: list[Entry] | ChildPage) -> bool:
        """Whether rendering ``page`` calls Redis (sync: under asyncio it goes to a thread): a presenter's own (the
        Responses API saving a checkpoint, a workflow's reading its steps' runs), the AG-UI endpoint's snapshots,
        or a child's log (the first page may re-open children; a SUBAGENT_* event opens or closes one)."""
        if isinstance(page, ChildPage):
            return False
        if self.stream.presenter is not None:
            return self.stream.presenter.needs_thread(page)
        segment = self.stream.segment
        if segment is not None and segment.snapshots is not None:
            return True
        if self.stream.child_log is None:
            return False
        return not self.agui_started or any('"SUBAGENT_' in entry[1] for entry in page)

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
    _: KW_ONLY
    #: End at a pause too (else only at the run's end).
    until_pause: bool
    keepalive_seconds: float = 15.0
    head: Sequence[dict[str, Any]] = ()
    subscribed: tuple[int, dict[str, Any]] | None = None
    confirm_tools: frozenset[str] = frozenset()
    info: LogInfo | None = None
    #: The AG-UI endpoint's presentation (dialect ``agui``): client ids, snapshots, one segment only.
    segment: AguiSegment | None = None
    #: Reads a child run's log (sync), so an AG-UI stream shows a child's work attributed to it before its
    #: parent's SUBAGENT_FINISHED / SUBAGENT_ERROR (None: it does not).
    child_log: Callable[[str], list[Event]] | None = None
    #: Renders the pages itself (dialects ``responses``, ``aisdk`` and ``a2a``: :mod:`.responses.endpoint`,
    #: :mod:`.aisdk`, :mod:`.a2a`).
    presenter: Presenter | None = None
    #: SSE text sent first, before any event (A2A: the ``Task`` as it stood when the stream's read began).
    prelude: str = ""

    @property
    def keep_alive(self) -> str:
        return KEEP_ALIVE_LINE if self.dialect == "responses" else KEEP_ALIVE

    @property
    def block_ms(self) -> int:
        return max(50, min(MAX_BLOCK_MS, int(self.keepalive_seconds * 1000)))

    def _prefix(self) -> Prefix:
        return Prefix(self.dialect, self.confirm_tools)

    def _first_read(self) -> tuple[int, int] | None:
        """(after, count) of the first read of the log before the stream's start; None: nothing to read."""
        folded = self.dialect not in ("canonical", "responses", "aisdk", "a2a")
        return (-1, min(PREFIX_PAGE, self.after + 1)) if self.after >= 0 and folded else None

    def _watching(self, keys: Keys) -> Watching | None:
        """What the tail reads along for a stream that shows child runs live: AG-UI's, or a presenter's that
        follows children (an AgentOS workflow stream shows its agent steps' runs); None: nothing."""
        follows = isinstance(self.presenter, FollowsChildren)
        return Watching(keys) if follows or (self.child_log is not None and self.dialect == "agui") else None

    def frames(self, log: EventLog) -> Iterator[str]:
        """The SSE text, read through ``log`` (sync: one kept connection of its client)."""
        if self.segment is not None and self.segment.error is not None:
            yield self.segment.refusal()
            return
        try:
            info = self.info or log.info(self.run_id)
            prefix, want = self._prefix(), self._first_read()
            while want is not None:  # page by page, each folded and let go
                want = prefix.wants(want, log.read(self.run_id, want[0], limit=want[1]), self.after)
            watching = self._watching(log.keys)
            renderer = Renderer(self, info, prefix, watching)
            if head := renderer.head():
                yield head
            pages = log.tail(
                self.run_id,
                self.after,
                until_pause=self.until_pause,
                block_ms=self.block_ms,
                info=info,
                idle_seconds=self.keepalive_seconds,
                watching=watching,
            )
            for page in pages:
                text = self.keep_alive if isinstance(page, Idle) else renderer.page(page)
                if text:
                    yield text
                if renderer.finished:
                    return
        except (AgentsCeleryError, redis.RedisError) as exc:
            yield error_frame(exc) if self.presenter is None else self.presenter.error(exc)

    async def aframes(self, log: AsyncEventLog) -> AsyncIterator[str]:
        """The SSE text, read through an asyncio ``log`` (ASGI: no thread held while the stream waits)."""
        if self.segment is not None and self.segment.error is not None:
            yield self.segment.refusal()
            return
        try:
            info = self.info or await log.info(self.run_id)
            prefix, want = self._prefix(), self._first_read()
            while want is not None:  # page by page, each folded and let go
                want = prefix.wants(want, await log.read(self.run_id, want[0], limit=want[1]), self.after)
            watching = self._watching(log.keys)
            renderer = Renderer(self, info, prefix, watching)
            if head := renderer.head():
                yield head
            pages = log.tail(
                self.run_id,
                self.after,
                until_pause=self.until_pause,
                block_ms=self.block_ms,
                info=info,
                idle_seconds=self.keepalive_seconds,
                watching=watching,
            )
            async for page in pages:
                if isinstance(page, Idle):
                    text = self.keep_alive
                elif renderer.needs_thread(page):
                    text = await asyncio.to_thread(renderer.page, page)  # snapshots or child logs read Redis
                else:
                    text = renderer.page(page)
                if text:
                    yield text
                if renderer.finished:
                    return
        except (AgentsCeleryError, redis.RedisError) as exc:
            yield error_frame(exc) if self.presenter is None else self.presenter.error(exc)

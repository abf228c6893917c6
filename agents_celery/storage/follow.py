"""Reading a run's event log: its entries, where it stands, and the one replay-then-tail loop.

Reading is one loop, :func:`follow_plan`, written once without I/O: it says which read to make next (an
XRANGE page, an XREAD BLOCK, the log's status) and hands out pages of entries. :func:`follow_sync` and
:func:`follow_async` make its reads (with a :class:`Watching`, child runs' logs are read in the same blocking
XREAD); :class:`~agents_celery.storage.eventlog.EventLog` tails through them, and so do the Runtime's streams,
the HTTP streams and the CLI. The stream entry id is ``<offset>-1``, so replay (XRANGE) and live tail (XREAD
BLOCK) start from the same id: no gap and no duplicate between the two.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis
import redis.asyncio as aredis

from ..errors import LogRewoundError, ValidationError
from ..events import Event, tag_of
from .connections import IdleCheck, is_cluster
from .keys import Keys
from .replies import as_text

LogStatus = Literal["live", "paused", "ended"]

#: Entries fetched per round trip, replaying (XRANGE) and live (XREAD).
PAGE = 1000
#: One stored entry: its offset and its stored JSON.
Entry = tuple[int, str]
#: On a Redis Cluster, a tail watching child runs blocks on its own log this long at a time, then looks at the
#: children's (one multi-stream XREAD needs one slot): a child's event reaches it within about this much.
CLUSTER_POLL_MS = 100


@dataclass(frozen=True)
class LogInfo:
    """Where a run's log stands."""

    run_id: str
    status: LogStatus
    next_offset: int
    session_id: str
    agent_id: str

    @property
    def last_offset(self) -> int:
        """Offset of the newest event, -1 when there is none."""
        return self.next_offset - 1

    def event(self, entry: Entry) -> Event:
        """The stored ``entry`` of this run as an :class:`Event`."""
        return Event.from_stored(entry[0], entry[1], self.run_id, self.session_id, self.agent_id)


def stream_id(after: int) -> str:
    """The stream id to read *after* offset ``after`` (``-1`` = from the start)."""
    return "0-0" if after < 0 else f"{after}-1"


def check_offset(after: int, name: str = "after") -> int:
    """``after`` if it is -1 (from the start) or an offset; ValidationError otherwise (every caller answers the
    same: the CLI, the Runtime, the HTTP front ends)."""
    if type(after) is not int or after < -1:
        raise ValidationError(f"{name} must be -1 (from the start) or an offset (an integer >= 0), got {after!r}")
    return after


def log_info(run_id: str, row: Sequence[Any]) -> LogInfo:
    """A run's :class:`LogInfo` from its record's ``log``, ``next``, ``session_id`` and ``agent_id`` fields."""
    status, nxt, session_id, agent_id = (as_text(v) if v is not None else "" for v in row)
    return LogInfo(run_id, status, int(nxt or 0), session_id, agent_id)  # type: ignore[arg-type]


def entries(raw: Iterable[Any]) -> list[Entry]:
    """Stream entries (as XRANGE / XREAD return them) as (offset, stored JSON) pairs."""
    out = []
    for entry_id, fields in raw:
        stored = fields.get(b"event") if b"event" in fields else fields.get("event")
        out.append((int(as_text(entry_id).split("-", 1)[0]), as_text(stored)))
    return out


def check_tag(run_id: str, offset: int, tag: str, found: list[Entry]) -> None:
    """LogRewoundError unless ``found`` (the entry read at ``offset``) still has the ``tag`` a reader saw."""
    if offset < 0 or (found and tag_of(found[0][1]) == tag):
        return
    raise LogRewoundError(
        f"run {run_id!r}: the log no longer holds the event you read at offset {offset} (Redis lost writes and "
        "the run went on from an earlier point); read the run again from the start",
        run_id,
        offset,
    )


# -- the one replay-then-tail loop ----------------------------------------------------------------------


@dataclass(frozen=True)
class XRange:
    """Read: the next page of stored entries from ``start`` on."""

    start: str


@dataclass(frozen=True)
class XRead:
    """Read: block up to ``block_ms`` for entries after ``last``."""

    last: str
    block_ms: int


class Status:
    """Read: the log's :class:`LogInfo`."""


class Idle:
    """Out: nothing arrived for the keep-alive interval (an HTTP stream writes a comment)."""


@dataclass(frozen=True)
class ChildPage:
    """Out: new entries of a child run's log a :class:`Watching` asked for (read along with the run's own)."""

    run_id: str
    entries: list[Entry]


class Watching:
    """Child runs' logs a tail reads along with its run's, in the same blocking XREAD: ``last`` maps a child run
    id to the last offset seen (whoever renders the pages adds and drops children as they come and go)."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self.last: dict[str, int] = {}

    def streams(self) -> dict[str, str]:
        """The XREAD streams of the watched children: their event keys and where to read after."""
        return {self.keys.run(child).events: stream_id(last) for child, last in self.last.items()}

    def split(self, reply: Any, key: str) -> tuple[Any, list[ChildPage]]:
        """An XREAD reply as the run's own part (for the plan) and the children's pages."""
        if not reply or not self.last:
            return reply, []
        owners = {self.keys.run(child).events: child for child in self.last}
        own, pages = [], []
        for stream, batch in reply.items() if isinstance(reply, dict) else reply:
            name = as_text(stream)
            if name == key:
                own.append((stream, batch))
            elif name in owners and (found := entries(batch)):
                pages.append(ChildPage(owners[name], found))
                self.last[owners[name]] = found[-1][0]
        return own, pages


#: What :func:`follow_plan` yields: a read to make (answered with its reply), a page out, or an idle tick.
Step = XRange | XRead | Status | Idle | list[Entry]

#: Stored types that can end a stream, as they open the stored JSON (RUN_FINISHED is a pause when its outcome
#: is an interrupt); everything else is decided without a parse.
_ENDS = ('{"type":"RUN_FINISHED"', '{"type":"RUN_ERROR"')


def follow_plan(
    after: int, *, until_pause: bool, block_ms: int = 1000, idle_seconds: float | None = None
) -> Generator[Step, Any, None]:
    """The entries with offset > ``after``, then live ones, until the run ends (or pauses, if asked).

    Replays with XRANGE pages, then blocks with XREAD from the last id seen, so there is no gap and no
    duplicate. The log's status is only read when XREAD times out (or at a pause that ends a page), to tell a
    finished run from a quiet one. With ``idle_seconds``, an :class:`Idle` comes out when nothing arrived for
    that long. A pause that a continue already followed is history, not the end of the stream.
    """
    last, idle_since = after, time.monotonic()
    while True:  # replay
        page = entries((yield XRange(f"{last + 1}-0")))
        if page:
            last = page[-1][0]
            cut, stop = yield from _cut(page, until_pause)
            yield cut
            if stop:
                return
        if len(page) < PAGE:
            break
    if (yield from _done(last, until_pause)):
        return
    idle_since = time.monotonic()
    while True:  # live
        reply = yield XRead(stream_id(last), block_ms)
        if not reply:
            if (yield from _done(last, until_pause)):
                return
            if idle_seconds is not None and time.monotonic() - idle_since >= idle_seconds:
                idle_since = time.monotonic()
                yield Idle()
            continue
        for _, batch in reply:
            page = entries(batch)
            if not page:
                continue
            last = page[-1][0]
            cut, stop = yield from _cut(page, until_pause)
            yield cut
            if stop:
                return
            idle_since = time.monotonic()


def _cut(page: list[Entry], until_pause: bool) -> Generator[Step, Any, tuple[list[Entry], bool]]:
    """``page`` up to its first terminal event, and whether the stream stops there. A pause that ends the page
    ends the stream when ``until_pause`` and the log says the run is still paused."""
    for i, (offset, stored) in enumerate(page):
        if not stored.startswith(_ENDS):
            continue
        ev = Event.from_stored(offset, stored, "", "", "")
        if ev.is_terminal:
            return page[: i + 1], True
        if until_pause and ev.is_pause and i + 1 == len(page) and (yield from _done(offset, until_pause)):
            return page, True
    return page, False


def _done(last: int, until_pause: bool) -> Generator[Step, Any, bool]:
    info: LogInfo = yield Status()  # RunExpiredError if the log vanished while we waited
    if last < info.last_offset:
        return False
    return info.status == "ended" or (until_pause and info.status == "paused")


def follow_sync(
    plan: Generator[Step, Any, None],
    client: redis.Redis,
    key: str,
    status: Any,
    idle_check: IdleCheck | None = None,
    watching: Watching | None = None,
) -> Iterator[list[Entry] | Idle | ChildPage]:
    """Make ``plan``'s reads on ``client`` (``status()`` reads the LogInfo); yield its pages and idle ticks.
    ``idle_check`` runs before each read: the caller may take its time between pages. With ``watching``, the
    blocking reads also read those children's logs, whose new entries come out as :class:`ChildPage`."""
    reply: Any = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration:
            return
        reply = None
        if isinstance(step, (list, Idle)):
            yield step
            continue
        if idle_check is not None:
            idle_check(client)
        if isinstance(step, XRange):
            reply = client.xrange(key, min=step.start, count=PAGE)
        elif isinstance(step, XRead):
            streams: dict[Any, Any] = {key: step.last, **(watching.streams() if watching is not None else {})}
            if len(streams) > 1 and is_cluster(client):
                reply = _xread_per_slot(client, key, streams, step.block_ms)
            else:
                reply = client.xread(streams, count=PAGE, block=step.block_ms)
            if len(streams) > 1 and watching is not None:
                reply, pages = watching.split(reply, key)
                yield from pages
        else:
            reply = status()


async def follow_async(
    plan: Generator[Step, Any, None], client: aredis.Redis, key: str, status: Any, watching: Watching | None = None
) -> AsyncIterator[list[Entry] | Idle | ChildPage]:
    """:func:`follow_sync` for asyncio code (``status`` is a coroutine function)."""
    reply: Any = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration:
            return
        reply = None
        if isinstance(step, (list, Idle)):
            yield step
            continue
        if isinstance(step, XRange):
            reply = await client.xrange(key, min=step.start, count=PAGE)
        elif isinstance(step, XRead):
            streams: dict[Any, Any] = {key: step.last, **(watching.streams() if watching is not None else {})}
            if len(streams) > 1 and is_cluster(client):
                reply = await _axread_per_slot(client, key, streams, step.block_ms)
            else:
                reply = await client.xread(streams, count=PAGE, block=step.block_ms)
            if len(streams) > 1 and watching is not None:
                reply, pages = watching.split(reply, key)
                for page in pages:
                    yield page
        else:
            reply = await status()


def _merged(replies: Iterable[Any]) -> list[Any]:
    """Single-stream XREAD replies as one multi-stream reply (a list of ``[stream, entries]``)."""
    out: list[Any] = []
    for reply in replies:
        if reply:
            out += list(reply.items()) if isinstance(reply, dict) else list(reply)
    return out


def _xread_per_slot(client: redis.Redis, key: str, streams: dict[Any, Any], block_ms: int) -> list[Any]:
    """A blocking XREAD of several runs' logs on a Redis Cluster, where each is in a slot of its own: every log
    without blocking (one pipeline: a round trip per node), then a block of :data:`CLUSTER_POLL_MS` on ``key``
    alone, until something came or ``block_ms`` passed."""
    deadline = time.monotonic() + block_ms / 1000
    while True:
        with client.pipeline(transaction=False) as pipe:
            for stream, last in streams.items():
                pipe.xread({stream: last}, count=PAGE)
            got = _merged(pipe.execute())
        if got:
            return got
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            return []
        own = client.xread({key: streams[key]}, count=PAGE, block=max(1, min(CLUSTER_POLL_MS, left_ms)))
        if own:
            return _merged([own])


async def _axread_per_slot(client: aredis.Redis, key: str, streams: dict[Any, Any], block_ms: int) -> list[Any]:
    """:func:`_xread_per_slot` for asyncio code."""
    deadline = time.monotonic() + block_ms / 1000
    while True:
        pipe = client.pipeline(transaction=False)
        for stream, last in streams.items():
            pipe.xread({stream: last}, count=PAGE)
        got = _merged(await pipe.execute())
        if got:
            return got
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            return []
        own = await client.xread({key: streams[key]}, count=PAGE, block=max(1, min(CLUSTER_POLL_MS, left_ms)))
        if own:
            return _merged([own])

"""The event log: one Redis Stream per run, with contiguous integer offsets.

Offsets (0, 1, 2, ...) are assigned inside Redis by a Lua script, never by the caller; the stream entry
id is ``<offset>-1``, so replay (XRANGE) and live tail (XREAD BLOCK) start from the same id and there is
no gap or duplicate between the two. Every append carries the run's lease token and is refused inside
Redis (:class:`~agents_celery.errors.FencedError`) when the token is not current. A live or paused run's
log is never trimmed; when the run ends, the retention starts.

Reading is one loop, :func:`follow_plan`, written once without I/O: it says which read to make next (an
XRANGE page, an XREAD BLOCK, the log's status) and hands out pages of entries. :func:`follow_sync` and
:func:`follow_async` make its reads; the Runtime's streams, the HTTP streams and the CLI all go through them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis
import redis.asyncio as aredis

from ..errors import LogRewoundError, RedisUnavailableError, RunExpiredError, RunNotFoundError, ValidationError
from ..events import Event, NewEvent, tag_of
from .connections import IdleCheck, ThreadClients, is_cluster, keeping_one, let_go, reconnect_if_closed
from .keys import Keys
from .scripts import refusal, register

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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _info(run_id: str, row: Sequence[Any]) -> LogInfo:
    status, nxt, session_id, agent_id = (_text(v) if v is not None else "" for v in row)
    return LogInfo(run_id, status, int(nxt or 0), session_id, agent_id)  # type: ignore[arg-type]


def entries(raw: Iterable[Any]) -> list[Entry]:
    """Stream entries (as XRANGE / XREAD return them) as (offset, stored JSON) pairs."""
    out = []
    for entry_id, fields in raw:
        stored = fields.get(b"event") if b"event" in fields else fields.get("event")
        out.append((int(_text(entry_id).split("-", 1)[0]), _text(stored)))
    return out


def _check_tag(run_id: str, offset: int, tag: str, found: list[Entry]) -> None:
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
            name = _text(stream)
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


class EventLog:
    """Append to and read from run event logs (sync, ``redis-py``)."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        *,
        retention_ms: int,
        tombstone_ms: int,
        own_connections: ThreadClients | None = None,
        idle_check: IdleCheck = reconnect_if_closed,
    ) -> None:
        self._redis = client
        #: Run before each read of a tail's kept connection (the worker's fast path polls the socket instead).
        self._idle_check = idle_check
        #: Appends and status changes go through the calling thread's own connection (a worker's).
        self._own = own_connections
        self._keys = keys
        self.retention_ms = retention_ms
        self.tombstone_ms = tombstone_ms
        self._create = register(client, "create")
        self._append = register(client, "append")
        self._set_status = register(client, "set_status")
        #: Called with the run id after a creation and a change of status (the failover fence, :mod:`.fence`).
        self.fence: Callable[[str], Any] | None = None

    @property
    def keys(self) -> Keys:
        """The key names of the logs it reads and writes."""
        return self._keys

    # -- writing ---------------------------------------------------------------------------------

    def create(
        self,
        run_id: str,
        session_id: str,
        agent_id: str,
        events: Sequence[NewEvent] = (),
        fields: dict[str, str] | None = None,
    ) -> int:
        """Create the log of a new run (status ``live``) with its first events; return the first offset."""
        k = self._keys.run(run_id)
        pairs = {"session_id": session_id, "agent_id": agent_id, **(fields or {})}
        args: list[str] = [str(len(pairs))]
        for key, value in pairs.items():
            args += [key, value]
        first = self._call(self._create, run_id, [k.run, k.events], args + [e.json for e in events])
        if self.fence:
            self.fence(run_id)
        return first

    def append(self, run_id: str, events: Sequence[NewEvent], token: str) -> int:
        """Append ``events`` in one round trip with contiguous offsets; return the first one.

        Raises:
            FencedError: ``token`` is not the run's current lease token. Nothing was written.
            RunFinishedError: the run has ended. RunNotFoundError: no such run.
        """
        k = self._keys.run(run_id)
        return self._call(self._append, run_id, [k.run, k.events, k.lease], [token] + [e.json for e in events], True)

    def append_many(self, batches: Sequence[tuple[str, Sequence[NewEvent], str]]) -> list[int | BaseException]:
        """:meth:`append` for several runs in one pipelined round trip (the same script calls, one per run):
        ``(run_id, events, token)`` each; per batch its first offset or the error :meth:`append` would raise. On a
        Redis Cluster (runs in many slots, a script not loaded on every node yet) one :meth:`append` each."""
        if is_cluster(self._redis):
            return [self._one(run_id, events, token) for run_id, events, token in batches]
        with self._redis.pipeline(transaction=False) as pipe:
            for run_id, events, token in batches:
                k = self._keys.run(run_id)
                self._append(keys=[k.run, k.events, k.lease], args=[token] + [e.json for e in events], client=pipe)
            try:
                replies = pipe.execute(raise_on_error=False)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                error = RedisUnavailableError(f"Redis does not answer: {exc}")
                return [error for _ in batches]
        out: list[int | BaseException] = []
        for (run_id, _, _), reply in zip(batches, replies, strict=True):
            if isinstance(reply, redis.ResponseError):
                out.append(refusal(reply, run_id) or reply)
            elif isinstance(reply, BaseException):
                out.append(reply)
            else:
                out.append(int(reply))
        return out

    def _one(self, run_id: str, events: Sequence[NewEvent], token: str) -> int | BaseException:
        try:
            return self.append(run_id, events, token)
        except Exception as exc:  # handed to that run's writer
            return exc

    def set_status(self, run_id: str, status: LogStatus, token: str, events: Sequence[NewEvent] = ()) -> int:
        """Move the log to ``status``, appending ``events`` atomically; ``ended`` starts the retention."""
        k = self._keys.run(run_id)
        keys = [k.run, k.events, k.lease, k.effects, k.gone, k.stop, k.messages, k.inbox]
        args = [token, status, str(self.retention_ms), str(self.tombstone_ms)] + [e.json for e in events]
        first = self._call(self._set_status, run_id, keys, args, True)
        if self.fence:
            self.fence(run_id)
        return first

    def _call(self, script: Any, run_id: str, keys: list[str], args: list[str], own: bool = False) -> int:
        client = self._own.get() if own and self._own is not None else None
        try:
            return int(script(keys=keys, args=args, client=client))
        except redis.ResponseError as exc:
            mapped = refusal(exc, run_id)
            if mapped is not None:
                raise mapped from None
            raise
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisUnavailableError(f"Redis does not answer: {exc}") from exc

    # -- reading ---------------------------------------------------------------------------------

    def info(self, run_id: str, client: redis.Redis | None = None) -> LogInfo:
        """Status and next offset of a run's log (read through ``client`` if given: a stream's own).

        Raises:
            RunNotFoundError: no such run ever existed. RunExpiredError: it existed and its retention passed.
        """
        k = self._keys.run(run_id)
        r = client or self._redis
        try:
            row = r.hmget(k.run, "log", "next", "session_id", "agent_id")
            if row[0] is None:
                if r.exists(k.gone):
                    raise RunExpiredError(f"run {run_id!r} has expired; its events are no longer kept")
                raise RunNotFoundError(f"run {run_id!r} does not exist")
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisUnavailableError(f"Redis does not answer: {exc}") from exc
        return _info(run_id, row)

    def read(self, run_id: str, after: int = -1, limit: int | None = None) -> list[Event]:
        """The events with offset > ``after`` (at most ``limit``), oldest first."""
        check_offset(after)
        info = self.info(run_id)
        raw: Any = self._redis.xrange(self._keys.run(run_id).events, min=f"{after + 1}-0", count=limit)
        return [info.event(e) for e in entries(raw)]

    def verify(self, run_id: str, offset: int, tag: str) -> None:
        """LogRewoundError unless the event at ``offset`` is still the one whose tag a reader saw."""
        raw: Any = self._redis.xrange(self._keys.run(run_id).events, min=stream_id(offset), max=stream_id(offset))
        _check_tag(run_id, offset, tag, entries(raw))

    def tail(
        self,
        run_id: str,
        after: int = -1,
        *,
        until_pause: bool = False,
        block_ms: int = 1000,
        info: LogInfo | None = None,
        idle_seconds: float | None = None,
        watching: Watching | None = None,
    ) -> Iterator[list[Entry] | Idle | ChildPage]:
        """Pages of the entries after ``after``, then live ones, until the run ends (or pauses, if asked); an
        :class:`Idle` tick when nothing arrived for ``idle_seconds``; with ``watching``, child runs' new entries
        as :class:`ChildPage`. See :func:`follow_plan`.

        The tail keeps one connection of the pool for all its reads (:func:`~.connections.keeping_one`) and
        looks at it before each (``idle_check``), as its reader may sit idle between pages.
        """
        check_offset(after)
        info = info or self.info(run_id)
        client = keeping_one(self._redis)
        plan = follow_plan(after, until_pause=until_pause, block_ms=block_ms, idle_seconds=idle_seconds)
        try:
            yield from follow_sync(
                plan,
                client,
                self._keys.run(run_id).events,
                lambda: self.info(run_id, client),
                self._idle_check,
                watching,
            )
        finally:
            let_go(client)  # closed, not left idle in the pool

    def events(
        self, run_id: str, after: int = -1, *, until_pause: bool = False, block_ms: int = 1000
    ) -> Iterator[Event]:
        """The events after ``after``, then live ones, until the run ends (or pauses, if asked)."""
        info = self.info(run_id)
        for page in self.tail(run_id, after, until_pause=until_pause, block_ms=block_ms, info=info):
            if isinstance(page, list):
                for entry in page:
                    yield info.event(entry)


class AsyncEventLog:
    """Read run event logs from asyncio code (``redis.asyncio``). Writing happens on workers (sync)."""

    @property
    def keys(self) -> Keys:
        """The key names of the logs it reads."""
        return self._keys

    def __init__(self, client: aredis.Redis, keys: Keys) -> None:
        self._redis = client
        self._keys = keys

    async def info(self, run_id: str) -> LogInfo:
        """See :meth:`EventLog.info`."""
        k = self._keys.run(run_id)
        try:
            row = await self._redis.hmget(k.run, "log", "next", "session_id", "agent_id")
            if row[0] is None:
                if await self._redis.exists(k.gone):
                    raise RunExpiredError(f"run {run_id!r} has expired; its events are no longer kept")
                raise RunNotFoundError(f"run {run_id!r} does not exist")
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisUnavailableError(f"Redis does not answer: {exc}") from exc
        return _info(run_id, row)

    async def read(self, run_id: str, after: int = -1, limit: int | None = None) -> list[Event]:
        """See :meth:`EventLog.read`."""
        check_offset(after)
        info = await self.info(run_id)
        raw: Any = await self._redis.xrange(self._keys.run(run_id).events, min=f"{after + 1}-0", count=limit)
        return [info.event(e) for e in entries(raw)]

    async def verify(self, run_id: str, offset: int, tag: str) -> None:
        """See :meth:`EventLog.verify`."""
        key = self._keys.run(run_id).events
        raw: Any = await self._redis.xrange(key, min=stream_id(offset), max=stream_id(offset))
        _check_tag(run_id, offset, tag, entries(raw))

    async def tail(
        self,
        run_id: str,
        after: int = -1,
        *,
        until_pause: bool = False,
        block_ms: int = 1000,
        info: LogInfo | None = None,
        idle_seconds: float | None = None,
        watching: Watching | None = None,
    ) -> AsyncIterator[list[Entry] | Idle | ChildPage]:
        """See :meth:`EventLog.tail`."""
        check_offset(after)
        plan = follow_plan(after, until_pause=until_pause, block_ms=block_ms, idle_seconds=idle_seconds)
        pages = follow_async(plan, self._redis, self._keys.run(run_id).events, lambda: self.info(run_id), watching)
        async for page in pages:
            yield page

    async def events(
        self, run_id: str, after: int = -1, *, until_pause: bool = False, block_ms: int = 1000
    ) -> AsyncIterator[Event]:
        """See :meth:`EventLog.events`."""
        info = await self.info(run_id)
        async for page in self.tail(run_id, after, until_pause=until_pause, block_ms=block_ms, info=info):
            if isinstance(page, list):
                for entry in page:
                    yield info.event(entry)

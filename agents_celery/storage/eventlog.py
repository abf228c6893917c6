"""The event log: one Redis Stream per run, with contiguous integer offsets.

Offsets (0, 1, 2, ...) are assigned inside Redis by a Lua script, never by the caller; the stream entry
id is ``<offset>-1``, so replay (XRANGE) and live tail (XREAD BLOCK) start from the same id and there is
no gap or duplicate between the two. Every append carries the run's lease token and is refused inside
Redis (:class:`~agents_celery.errors.FencedError`) when the token is not current. A live or paused run's
log is never trimmed; when the run ends, the retention starts.

Reading (:class:`LogInfo`, the entries, and the one replay-then-tail loop :func:`follow_plan` that every stream
goes through) is in :mod:`.follow`, re-exported here; this module holds the classes that write and read the logs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import redis
import redis.asyncio as aredis

from ..errors import RedisUnavailableError, RunExpiredError, RunNotFoundError
from ..events import Event, NewEvent, tag_of
from .connections import IdleCheck, ThreadClients, is_cluster, keeping_one, let_go, reconnect_if_closed
from .follow import (
    CLUSTER_POLL_MS,
    PAGE,
    ChildPage,
    Entry,
    Idle,
    LogInfo,
    LogStatus,
    Status,
    Step,
    Watching,
    XRange,
    XRead,
    check_offset,
    check_tag,
    entries,
    follow_async,
    follow_plan,
    follow_sync,
    log_info,
    stream_id,
)
from .keys import Keys
from .scripts import refusal, register

__all__ = [
    "CLUSTER_POLL_MS",
    "PAGE",
    "AsyncEventLog",
    "ChildPage",
    "Entry",
    "EventLog",
    "Idle",
    "LogInfo",
    "LogStatus",
    "Status",
    "Step",
    "Watching",
    "XRange",
    "XRead",
    "check_offset",
    "entries",
    "follow_async",
    "follow_plan",
    "follow_sync",
    "stream_id",
]


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
        reaped: bool = False,
    ) -> None:
        self._redis = client
        #: Whether the client's owner closes its pool's idle connections itself (the API's streams do): a tail's
        #: connection then goes back to the pool when the tail ends, for the next stream, instead of being closed.
        self._reaped = reaped
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
        keys, args = self.create_call(run_id, session_id, agent_id, events, fields)
        first = self._call(self._create, run_id, keys, args)
        if self.fence:
            self.fence(run_id)
        return first

    def create_call(
        self,
        run_id: str,
        session_id: str,
        agent_id: str,
        events: Sequence[NewEvent] = (),
        fields: dict[str, str] | None = None,
    ) -> tuple[list[str], list[str]]:
        """The keys and arguments of :meth:`create`'s script (:attr:`create_script`), to send it in a pipeline."""
        k = self._keys.run(run_id)
        pairs = {"session_id": session_id, "agent_id": agent_id, **(fields or {})}
        args: list[str] = [str(len(pairs))]
        for key, value in pairs.items():
            args += [key, value]
        return [k.run, k.events], args + [e.json for e in events]

    @property
    def create_script(self) -> Any:
        """The script :meth:`create` runs."""
        return self._create

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
        Redis Cluster (runs in many slots, a script not loaded on every node yet) one :meth:`append` each; a call
        that finds the script not loaded (Redis restarted) is made again on its own, which loads it."""
        if is_cluster(self._redis):
            return [self._one(run_id, events, token) for run_id, events, token in batches]
        sha = self._append.sha  # raw EVALSHA: a pipeline given the script object asks SCRIPT EXISTS first
        with self._redis.pipeline(transaction=False) as pipe:
            for run_id, events, token in batches:
                k = self._keys.run(run_id)
                pipe.evalsha(sha, 3, k.run, k.events, k.lease, token, *(e.json for e in events))
            try:
                replies = pipe.execute(raise_on_error=False)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                error = RedisUnavailableError(f"Redis does not answer: {exc}")
                return [error for _ in batches]
        out: list[int | BaseException] = []
        for (run_id, events, token), reply in zip(batches, replies, strict=True):
            if isinstance(reply, redis.exceptions.NoScriptError):  # Redis lost its scripts: this call loads it
                out.append(self._one(run_id, events, token))
            elif isinstance(reply, redis.ResponseError):
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
        keys = k.ending
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
        return log_info(run_id, row)

    def read(self, run_id: str, after: int = -1, limit: int | None = None, info: LogInfo | None = None) -> list[Event]:
        """The events with offset > ``after`` (at most ``limit``), oldest first (``info``: the log's, when the caller
        read it already)."""
        check_offset(after)
        info = info or self.info(run_id)
        raw: Any = self._redis.xrange(self._keys.run(run_id).events, min=f"{after + 1}-0", count=limit)
        return [info.event(e) for e in entries(raw)]

    def last_position(self, run_id: str) -> str:
        """``<offset>.<tag>`` of the log's newest event ("": none yet): the log's fingerprint. A reader that
        read to the end holds it; a different one means the log was rewritten (or went on) since."""
        try:
            raw: Any = self._redis.xrevrange(self._keys.run(run_id).events, count=1)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisUnavailableError(f"Redis does not answer: {exc}") from exc
        found = entries(raw)
        return f"{found[0][0]}.{tag_of(found[0][1])}" if found else ""

    def verify(self, run_id: str, offset: int, tag: str) -> None:
        """LogRewoundError unless the event at ``offset`` is still the one whose tag a reader saw."""
        raw: Any = self._redis.xrange(self._keys.run(run_id).events, min=stream_id(offset), max=stream_id(offset))
        check_tag(run_id, offset, tag, entries(raw))

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
        looks at it before each (``idle_check``), as its reader may sit idle between pages. At the end it closes
        it, or gives it back to the pool open when the pool's owner closes idle connections (``reaped``).
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
            let_go(client, keep=self._reaped)

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
        return log_info(run_id, row)

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
        check_tag(run_id, offset, tag, entries(raw))

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

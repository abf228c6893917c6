"""The event log: one Redis Stream per run, with contiguous integer offsets.

Offsets (0, 1, 2, ...) are assigned inside Redis by a Lua script, never by the caller; the stream entry
id is ``<offset>-1``, so replay (XRANGE) and live tail (XREAD BLOCK) start from the same id and there is
no gap or duplicate between the two. Every append carries the run's lease token and is refused inside
Redis (:class:`~agents_celery.errors.FencedError`) when the token is not current. A live or paused run's
log is never trimmed; when the run ends, the retention starts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis
import redis.asyncio as aredis

from ..errors import RedisUnavailableError, RunExpiredError, RunNotFoundError
from ..events import Event, NewEvent
from .connections import ThreadClients, keeping_one, reconnect_if_closed
from .keys import Keys
from .scripts import refusal, register

LogStatus = Literal["live", "paused", "ended"]

#: Entries fetched per XRANGE page while replaying.
PAGE = 1000


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


def stream_id(after: int) -> str:
    """The stream id to read *after* offset ``after`` (``-1`` = from the start)."""
    return "0-0" if after < 0 else f"{after}-1"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _info(run_id: str, row: Sequence[Any]) -> LogInfo:
    status, nxt, session_id, agent_id = (_text(v) if v is not None else "" for v in row)
    return LogInfo(run_id, status, int(nxt or 0), session_id, agent_id)  # type: ignore[arg-type]


def _events(entries: Iterable[Any], info: LogInfo) -> list[Event]:
    out = []
    for entry_id, fields in entries:
        offset = int(_text(entry_id).split("-", 1)[0])
        raw = fields.get(b"event") if b"event" in fields else fields.get("event")
        out.append(Event.from_stored(offset, raw, info.run_id, info.session_id, info.agent_id))
    return out


def _stops(event: Event, until_pause: bool, more_follow: bool) -> bool:
    # A pause that a continue already followed is history, not the end of the stream.
    return event.is_terminal or (until_pause and event.is_pause and not more_follow)


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
    ) -> None:
        self._redis = client
        #: Appends and status changes go through the calling thread's own connection (a worker's).
        self._own = own_connections
        self._keys = keys
        self.retention_ms = retention_ms
        self.tombstone_ms = tombstone_ms
        self._create = register(client, "create")
        self._append = register(client, "append")
        self._set_status = register(client, "set_status")

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
        return self._call(self._create, run_id, [k.run, k.events], args + [e.json for e in events])

    def append(self, run_id: str, events: Sequence[NewEvent], token: str) -> int:
        """Append ``events`` in one round trip with contiguous offsets; return the first one.

        Raises:
            FencedError: ``token`` is not the run's current lease token. Nothing was written.
            RunFinishedError: the run has ended. RunNotFoundError: no such run.
        """
        k = self._keys.run(run_id)
        return self._call(self._append, run_id, [k.run, k.events, k.lease], [token] + [e.json for e in events], True)

    def set_status(self, run_id: str, status: LogStatus, token: str, events: Sequence[NewEvent] = ()) -> int:
        """Move the log to ``status``, appending ``events`` atomically; ``ended`` starts the retention."""
        k = self._keys.run(run_id)
        keys = [k.run, k.events, k.lease, k.effects, k.gone, k.stop, k.messages]
        args = [token, status, str(self.retention_ms), str(self.tombstone_ms)] + [e.json for e in events]
        return self._call(self._set_status, run_id, keys, args, True)

    def _call(self, script: Any, run_id: str, keys: list[str], args: list[str], own: bool = False) -> int:
        client = self._own.get() if own and self._own is not None else None
        try:
            return int(script(keys=keys, args=args, client=client))
        except redis.ResponseError as exc:
            mapped = refusal(exc, run_id)
            if mapped is not None:
                raise mapped from None
            raise
        except redis.ConnectionError as exc:
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
        except redis.ConnectionError as exc:
            raise RedisUnavailableError(f"Redis does not answer: {exc}") from exc
        return _info(run_id, row)

    def read(self, run_id: str, after: int = -1, limit: int | None = None) -> list[Event]:
        """The events with offset > ``after`` (at most ``limit``), oldest first."""
        info = self.info(run_id)
        entries: Any = self._redis.xrange(self._keys.run(run_id).events, min=f"{after + 1}-0", count=limit)
        return _events(entries, info)

    def tail(self, run_id: str, after: int = -1, *, until_pause: bool = False, block_ms: int = 1000) -> Iterator[Event]:
        """Yield the events after ``after``, then live ones, until the run ends (or pauses, if asked).

        Replays with XRANGE, then blocks with XREAD from the last id seen: no gap, no duplicate. The tail
        keeps one connection of the pool for all its reads (:func:`~agents_celery.storage.connections.keeping_one`).
        """
        info = self.info(run_id)
        key = self._keys.run(run_id).events
        last = after
        client = keeping_one(self._redis)
        try:
            while True:  # replay
                reconnect_if_closed(client)  # the caller may take its time between events
                entries: Any = client.xrange(key, min=f"{last + 1}-0", count=PAGE)
                page = _events(entries, info)
                for i, event in enumerate(page):
                    last = event.offset
                    yield event
                    if _stops(event, until_pause, i + 1 < len(page) or len(page) == PAGE):
                        return
                if len(page) < PAGE:
                    break
            if self._caught_up_and_done(run_id, last, until_pause, client):
                return
            while True:  # live; the status is only looked at when XREAD times out
                reconnect_if_closed(client)
                reply: Any = client.xread({key: stream_id(last)}, count=PAGE, block=block_ms)
                if not reply and self._caught_up_and_done(run_id, last, until_pause, client):
                    return
                for _, batch in reply or []:
                    page = _events(batch, info)
                    for i, event in enumerate(page):
                        last = event.offset
                        yield event
                        if _stops(event, until_pause, i + 1 < len(page)):
                            return
        finally:
            client.close()

    def _caught_up_and_done(self, run_id: str, last: int, until_pause: bool, client: redis.Redis) -> bool:
        info = self.info(run_id, client)  # raises RunExpiredError if the log vanished while we waited
        if last < info.last_offset:
            return False
        return info.status == "ended" or (until_pause and info.status == "paused")


class AsyncEventLog:
    """Read run event logs from asyncio code (``redis.asyncio``). Writing happens on workers (sync)."""

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
        except redis.ConnectionError as exc:
            raise RedisUnavailableError(f"Redis does not answer: {exc}") from exc
        return _info(run_id, row)

    async def read(self, run_id: str, after: int = -1, limit: int | None = None) -> list[Event]:
        """See :meth:`EventLog.read`."""
        info = await self.info(run_id)
        entries: Any = await self._redis.xrange(self._keys.run(run_id).events, min=f"{after + 1}-0", count=limit)
        return _events(entries, info)

    async def tail(
        self, run_id: str, after: int = -1, *, until_pause: bool = False, block_ms: int = 1000
    ) -> AsyncIterator[Event]:
        """See :meth:`EventLog.tail`."""
        info = await self.info(run_id)
        key = self._keys.run(run_id).events
        last = after
        while True:
            entries: Any = await self._redis.xrange(key, min=f"{last + 1}-0", count=PAGE)
            page = _events(entries, info)
            for i, event in enumerate(page):
                last = event.offset
                yield event
                if _stops(event, until_pause, i + 1 < len(page) or len(page) == PAGE):
                    return
            if len(page) < PAGE:
                break
        if await self._caught_up_and_done(run_id, last, until_pause):
            return
        while True:
            reply: Any = await self._redis.xread({key: stream_id(last)}, count=PAGE, block=block_ms)
            if not reply and await self._caught_up_and_done(run_id, last, until_pause):
                return
            for _, batch in reply or []:
                page = _events(batch, info)
                for i, event in enumerate(page):
                    last = event.offset
                    yield event
                    if _stops(event, until_pause, i + 1 < len(page)):
                        return

    async def _caught_up_and_done(self, run_id: str, last: int, until_pause: bool) -> bool:
        info = await self.info(run_id)
        if last < info.last_offset:
            return False
        return info.status == "ended" or (until_pause and info.status == "paused")

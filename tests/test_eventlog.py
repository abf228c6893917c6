"""The event log against a real Redis: contiguous offsets, fencing, replay + live tail, retention."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import threading

import pytest
import redis
import redis.asyncio as aredis

from agents_celery.errors import (
    EventValidationError,
    FencedError,
    RunExpiredError,
    RunFinishedError,
    RunNotFoundError,
)
from agents_celery.events import EventType, make_event
from agents_celery.storage.eventlog import AsyncEventLog, EventLog
from agents_celery.storage.keys import Keys
from agents_celery.storage.leases import Leases

from .conftest import TEST_REDIS_URL, kill_connections, new_id, wait_for


def _delta(i: int, who: str = "w") -> object:
    return make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="m1", delta=f"{who}:{i}")


def _open_run(eventlog: EventLog, r: redis.Redis, keys: Keys) -> tuple[str, str]:
    run_id = new_id()
    eventlog.create(run_id, "s1", "agent", [make_event(EventType.RUN_STARTED, thread_id="s1", run_id=run_id)])
    token = Leases(r, keys).acquire(run_id, ttl_ms=60_000)
    assert token is not None
    return run_id, token


def _writer(prefix: str, run_id: str, token: str, who: str, count: int) -> None:
    client = redis.Redis.from_url(TEST_REDIS_URL)
    log = EventLog(client, Keys(prefix), retention_ms=60_000, tombstone_ms=60_000)
    i, batch = 0, 1
    while i < count:
        n = min(batch, count - i)
        log.append(run_id, [_delta(j, who) for j in range(i, i + n)], token)  # type: ignore[misc]
        i += n
        batch = batch % 17 + 1  # batches of 1..17 events, interleaving with the other writer
    client.close()


def test_two_processes_append_contiguous_offsets(eventlog: EventLog, r: redis.Redis, keys: Keys) -> None:
    run_id, token = _open_run(eventlog, r, keys)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(keys.prefix, run_id, token, who, 3000)) for who in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    events = eventlog.read(run_id)
    assert [e.offset for e in events] == list(range(6001))
    deltas = [e.data["delta"] for e in events[1:]]
    assert sorted(deltas) == sorted([f"a:{i}" for i in range(3000)] + [f"b:{i}" for i in range(3000)])
    assert [d for d in deltas if d.startswith("a:")] == [f"a:{i}" for i in range(3000)]  # each writer in order


def test_stale_token_is_refused_and_writes_nothing(eventlog: EventLog, r: redis.Redis, keys: Keys) -> None:
    run_id, token = _open_run(eventlog, r, keys)
    leases = Leases(r, keys)
    assert leases.release(run_id, token)
    new_token = leases.acquire(run_id, ttl_ms=60_000)
    assert new_token and new_token != token
    before = eventlog.info(run_id)
    with pytest.raises(FencedError):
        eventlog.append(run_id, [_delta(1)], token)
    with pytest.raises(FencedError):
        eventlog.set_status(run_id, "ended", token)
    after = eventlog.info(run_id)
    assert after == before
    assert r.xlen(keys.run(run_id).events) == 1
    assert eventlog.append(run_id, [_delta(1)], new_token) == 1


def _feed(eventlog: EventLog, run_id: str, token: str, total: int) -> None:
    i = 0
    while i < total:
        n = min(100, total - i)
        eventlog.append(run_id, [_delta(j) for j in range(i, i + n)], token)  # type: ignore[misc]
        i += n
    eventlog.set_status(run_id, "ended", token, [make_event(EventType.RUN_FINISHED, thread_id="s1", run_id=run_id)])


def test_tail_from_offset_sees_each_event_once(eventlog: EventLog, r: redis.Redis, keys: Keys) -> None:
    run_id, token = _open_run(eventlog, r, keys)
    eventlog.append(run_id, [_delta(i, "pre") for i in range(50)], token)  # type: ignore[misc]
    k = 20
    writer = threading.Thread(target=_feed, args=(eventlog, run_id, token, 10_000))
    writer.start()
    seen = [e.offset for e in eventlog.events(run_id, after=k, block_ms=200)]
    writer.join(timeout=60)
    end = 50 + 10_000 + 1  # RUN_STARTED at 0, 50 pre, 10,000 fed, RUN_FINISHED
    assert seen == list(range(k + 1, end + 1))


def test_a_tail_reads_on_one_connection(
    monkeypatch: pytest.MonkeyPatch, eventlog: EventLog, r: redis.Redis, keys: Keys
) -> None:
    """A tail keeps the connection it waits on (none taken from the pool per batch), connects it again when
    Redis dropped it between two reads, and gives it back at the end."""
    run_id, token = _open_run(eventlog, r, keys)  # the writer's client is ``r``; the reader has its own
    reader = redis.Redis.from_url(TEST_REDIS_URL)
    pool = reader.connection_pool
    checkout, checkin, taken, given_back = pool.get_connection, pool.release, [], []
    monkeypatch.setattr(pool, "get_connection", lambda *a, **k: taken.append(1) or checkout(*a, **k))
    monkeypatch.setattr(pool, "release", lambda conn: given_back.append(1) or checkin(conn))
    events = EventLog(reader, keys, retention_ms=60_000, tombstone_ms=60_000).events(run_id, block_ms=200)
    assert next(events).offset == 0
    for i in range(1, 6):
        eventlog.append(run_id, [_delta(i)], token)  # type: ignore[list-item]
        assert next(events).offset == i  # one live batch each
        if i == 3:  # Redis drops the tail's connection while the caller takes its time (a restart, a kill)
            assert kill_connections(r, "xread")
    done = make_event(EventType.RUN_FINISHED, thread_id="s1", run_id=run_id, outcome={"type": "success"})
    eventlog.set_status(run_id, "ended", token, [done])
    assert [e.offset for e in events] == [6]  # it connected again and missed nothing
    assert len(taken) == 2 and len(given_back) == 2  # the log's info, then the tail's own connection, once
    reader.close()


@pytest.mark.parametrize("reaped", [False, True])
def test_a_tail_s_connection_is_closed_at_its_end_unless_the_pool_is_reaped(
    reaped: bool, eventlog: EventLog, r: redis.Redis, keys: Keys
) -> None:
    """A tail closes its connection when it ends (no idle connection left for good); on a pool whose owner
    closes idle connections itself (the API's streams) it gives it back open, and the next tail reuses it."""
    run_id, token = _open_run(eventlog, r, keys)
    done = make_event(EventType.RUN_FINISHED, thread_id="s1", run_id=run_id, outcome={"type": "success"})
    eventlog.set_status(run_id, "ended", token, [done])
    name = f"tail-{new_id()[:8]}"
    reader = redis.Redis.from_url(TEST_REDIS_URL, client_name=name)
    log = EventLog(reader, keys, retention_ms=60_000, tombstone_ms=60_000, reaped=reaped)
    connected = lambda: sum(1 for c in r.client_list() if c.get("name") == name)  # noqa: E731
    ids = []
    try:
        for _ in range(3):
            assert [e.offset for e in log.events(run_id, block_ms=200)] == [0, 1]
            ids.append(reader.client_id())  # the pool's connection after the tail: the tail's, given back
        if reaped:
            assert len(set(ids)) == 1 and connected() == 1  # one connection, open, for every tail
        else:
            assert len(set(ids)) == 3  # each tail's connection was closed; the pool connected again
    finally:
        reader.close()


def test_async_tail_from_offset_sees_each_event_once(eventlog: EventLog, r: redis.Redis, keys: Keys) -> None:
    run_id, token = _open_run(eventlog, r, keys)
    writer = threading.Thread(target=_feed, args=(eventlog, run_id, token, 10_000))

    async def consume() -> list[int]:
        client = aredis.Redis.from_url(TEST_REDIS_URL)
        try:
            writer.start()
            return [e.offset async for e in AsyncEventLog(client, keys).events(run_id, after=7, block_ms=200)]
        finally:
            await client.aclose()

    seen = asyncio.run(asyncio.wait_for(consume(), timeout=60))
    writer.join(timeout=60)
    assert seen == list(range(8, 10_002))


def test_tail_until_pause_stops_at_the_latest_pause_only(eventlog: EventLog, r: redis.Redis, keys: Keys) -> None:
    run_id, token = _open_run(eventlog, r, keys)
    pause = make_event(
        EventType.RUN_FINISHED,
        thread_id="s1",
        run_id=run_id,
        outcome={"type": "interrupt", "interrupts": [{"id": "c1", "reason": "confirmation_required"}]},
    )
    eventlog.set_status(run_id, "paused", token, [pause])
    assert [e.offset for e in eventlog.events(run_id, until_pause=True, block_ms=100)] == [0, 1]
    eventlog.set_status(run_id, "live", token, [make_event(EventType.RUN_STARTED, thread_id="s1", run_id=run_id)])
    eventlog.set_status(run_id, "paused", token, [pause])
    assert [e.offset for e in eventlog.events(run_id, until_pause=True, block_ms=100)] == [0, 1, 2, 3]


def test_retention_starts_when_the_run_ends(eventlog: EventLog, r: redis.Redis, keys: Keys) -> None:
    run_id, token = _open_run(eventlog, r, keys)
    k = keys.run(run_id)
    eventlog.append(run_id, [_delta(1)], token)
    eventlog.set_status(run_id, "paused", token)
    assert r.pttl(k.run) == -1 and r.pttl(k.events) == -1  # live or paused: never expires
    short = EventLog(r, keys, retention_ms=300, tombstone_ms=60_000)
    short.set_status(run_id, "ended", token)
    assert 0 < r.pttl(k.events) <= 300
    with pytest.raises(RunFinishedError):
        eventlog.append(run_id, [_delta(2)], token)
    wait_for(lambda: not r.exists(k.events, k.run), timeout=5, what="retention to expire the log")
    with pytest.raises(RunExpiredError):
        eventlog.read(run_id)
    with pytest.raises(RunNotFoundError):
        eventlog.read(new_id())


def test_malformed_events_are_rejected_before_writing(eventlog: EventLog, r: redis.Redis, keys: Keys) -> None:
    run_id, token = _open_run(eventlog, r, keys)
    before = eventlog.info(run_id)
    bad = [
        lambda: make_event("NOT_A_TYPE"),
        lambda: make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="m", delta=""),
        lambda: make_event(EventType.TEXT_MESSAGE_CONTENT, message_id=3, delta="x"),
        lambda: make_event(EventType.TOOL_CALL_START, tool_call_id="c1"),  # tool_call_name missing
        lambda: make_event(EventType.RUN_FINISHED, thread_id="s", run_id="r", outcome={"type": "nope"}),
    ]
    for build in bad:
        with pytest.raises(EventValidationError):
            eventlog.append(run_id, [_delta(1), build()], token)  # type: ignore[list-item]
    assert eventlog.info(run_id) == before
    assert r.xlen(keys.run(run_id).events) == 1

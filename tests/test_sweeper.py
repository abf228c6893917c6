"""The sweeper's decisions against a real Redis, with the enqueue recorded instead of sent."""

from __future__ import annotations

import time

import redis

from agents_celery.engine.sweeper import sweep
from agents_celery.events import EventType, make_event
from agents_celery.runs import RunState, RunStatus
from agents_celery.settings import Settings
from agents_celery.storage.leases import Leases
from agents_celery.storage.store import RunStore

from .conftest import new_id


def _run(store: RunStore) -> str:
    run_id = new_id()
    state = RunState(run_id=run_id, agent_id="a", session_id="s")
    store.create(state, [make_event(EventType.RUN_STARTED, thread_id="s", run_id=run_id)])
    store.watch(run_id, -1)  # already due
    return run_id


def _private(settings: Settings) -> Settings:
    # Its own key space: the session's worker sweeps the shared one every few hundred ms.
    return settings.model_copy(update={"key_prefix": f"{settings.key_prefix}:sweep-{new_id()[:6]}"})


def test_sweeper_requeues_only_runs_whose_lease_is_free(r: redis.Redis, settings: Settings) -> None:
    store = RunStore(r, _private(settings))
    free, leased, ended = _run(store), _run(store), _run(store)
    token = Leases(r, store.keys).acquire(leased, 60_000)
    end_token = Leases(r, store.keys).acquire(ended, 60_000)
    assert token and end_token
    store.log.set_status(ended, "ended", end_token)
    sent: list[tuple[str, ...]] = []
    requeued = sweep(store, lambda *a: sent.append(a), now_ms=int(time.time() * 1000) + 10)
    assert free in requeued and leased not in requeued and ended not in requeued
    assert (free, 0, "a", store.settings.queue, "", "") in sent  # a run created without a queue: the default
    live = {m.decode() for m in r.zrange(store.keys.live, 0, -1)}
    assert ended not in live and leased in live and free in live
    # The free run's deadline moved by the enqueue grace; the leased one's by the lease TTL.
    assert r.zscore(store.keys.live, free) > time.time() * 1000


def test_one_sweep_per_interval_across_workers(r: redis.Redis, settings: Settings) -> None:
    store = RunStore(r, _private(settings))
    run_id = _run(store)
    r.delete(store.keys.sweeper)
    first: list[object] = []
    second: list[object] = []
    now = int(time.time() * 1000) + 10
    sweep(store, lambda *a: first.append(a), now_ms=now)
    sweep(store, lambda *a: second.append(a), now_ms=now)  # another worker in the same interval
    assert any(a[0] == run_id for a in first)  # type: ignore[index]
    assert second == []


def test_a_run_committed_just_now_is_left_to_its_queued_step(r: redis.Redis, settings: Settings) -> None:
    store = RunStore(r, _private(settings))
    run_id = _run(store)
    now = int(time.time() * 1000)
    r.hset(store.keys.run(run_id).run, "committed_ms", now - 100)  # its next step was enqueued 100 ms ago
    sent: list[object] = []
    assert sweep(store, lambda *a: sent.append(a), now_ms=now) == []
    assert sent == []
    # ... and is looked at again once the enqueue grace has passed.
    deadline = r.zscore(store.keys.live, run_id)
    assert deadline is not None and now < deadline <= now + settings.enqueue_grace_seconds * 1000 + 100


def test_a_backlog_holds_back_runs_never_picked_up_but_not_crashed_ones(r: redis.Redis, settings: Settings) -> None:
    store = RunStore(r, _private(settings))
    waiting, crashed = _run(store), _run(store)
    r.hset(store.keys.run(crashed).run, "attempt", 1)  # an attempt claimed it and its lease is gone
    sent: list[tuple[str, ...]] = []
    requeued = sweep(store, lambda *a: sent.append(a), now_ms=int(time.time() * 1000) + 10, backlog=lambda q: 7)
    assert requeued == [crashed]
    r.delete(store.keys.sweeper)
    requeued = sweep(store, lambda *a: sent.append(a), now_ms=int(time.time() * 1000) + 60_000, backlog=lambda q: 0)
    assert waiting in requeued  # the queue drained and the step still never started: enqueue it again


def test_the_worker_reads_its_queue_length_from_the_broker(fast_settings: Settings) -> None:
    from agents_celery.broker.celery_app import create_celery_app, extension

    app = create_celery_app(fast_settings.model_copy(update={"queue": f"backlog-{new_id()[:6]}"}), agents={})
    try:
        ext = extension(app)
        queue = ext.settings.queue
        assert ext.backlog(queue) == 0  # an unknown queue counts as empty (the sweeper fails open)
        for i in range(3):
            ext.enqueue(f"run{i}", 0, "nobody")  # no worker consumes this queue
        assert ext.backlog(queue) == 3
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge(ext.settings.queue)
    finally:
        app.close()  # its broker connections


def test_a_run_is_sent_again_to_its_own_queue_in_its_chain(r: redis.Redis, settings: Settings) -> None:
    """A step the sweeper sends again goes to the queue the run was created for, linked to the run's tasks."""
    store = RunStore(r, _private(settings))
    run_id = new_id()
    state = RunState(run_id=run_id, agent_id="a", session_id="s")
    fields = {"queue": "isolated", "root_task": "task-0", "last_task": "task-3"}
    store.create(state, [make_event(EventType.RUN_STARTED, thread_id="s", run_id=run_id)], fields)
    store.watch(run_id, -1)
    sent: list[tuple[str, ...]] = []
    asked: list[str] = []
    now = int(time.time() * 1000) + 60_000

    def backlog(queue: str) -> int:
        asked.append(queue)
        return 1  # its first step still waits there: no duplicate

    assert sweep(store, lambda *a: sent.append(a), now_ms=now, backlog=backlog) == []
    assert asked == ["isolated"] and sent == []
    r.delete(store.keys.sweeper)
    assert sweep(store, lambda *a: sent.append(a), now_ms=now + 10_000, backlog=lambda q: 0) == [run_id]
    assert sent == [(run_id, 0, "a", "isolated", "task-0", "task-3")]


def test_an_end_its_worker_did_not_follow_through_frees_the_session_for_the_next_run(
    r: redis.Redis, settings: Settings
) -> None:
    """A worker committed a run's end and died before following it through (session, line, indexes): the sweeper
    does what it would have done, so the run waiting for the session starts instead of waiting for ever."""
    store = RunStore(r, _private(settings))
    session, first, second = f"s-{new_id()[:8]}", new_id(), new_id()
    state = RunState(run_id=first, agent_id="a", session_id=session, messages=[{"role": "user", "content": "hi"}])
    store.create(state, [make_event(EventType.RUN_STARTED, thread_id=session, run_id=first)])
    assert store.sessions.take(session, first, None)
    waiting = RunState(run_id=second, agent_id="a", session_id=session, messages=[{"role": "user", "content": "next"}])
    store.create(waiting, [make_event(EventType.RUN_STARTED, thread_id=session, run_id=second)], {"waiting": "1"})
    store.sessions.wait_in_line(session, second)
    store.watch(second, 60)  # not due: only the ended run is looked at
    token = Leases(r, store.keys).acquire(first, 60_000)
    assert token
    answer = {"role": "assistant", "content": "hello"}
    done = state.model_copy(update={"messages": [*state.messages, answer], "output": "hello"})
    done = done.moved_to(RunStatus.RUNNING).moved_to(RunStatus.COMPLETED)
    finished = make_event(EventType.RUN_FINISHED, thread_id=session, run_id=first, outcome={"type": "success"})
    store.commit(done, token, 0, 1, [finished], "ended")  # ... and the worker dies here
    store.watch(first, -1)
    sent: list[tuple[str, ...]] = []
    sweep(store, lambda *a: sent.append(a), now_ms=int(time.time() * 1000) + 10)
    assert store.sessions.active(session) == second
    assert (second, 0, "a", store.settings.queue, "", "") in sent
    assert store.sessions.history(session) == [{"role": "user", "content": "hi"}, answer]
    assert first not in {m.decode() for m in r.zrange(store.keys.live, 0, -1)}

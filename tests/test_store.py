"""RunStore against a real Redis: a claim skips loading the state this process committed, and only then."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from agents_celery.broker.fastpaths import Sent
from agents_celery.engine.steps import step_started
from agents_celery.errors import FencedError, StateError
from agents_celery.events import EventType, make_event
from agents_celery.runs import RunState, RunStatus, ToolCall
from agents_celery.settings import Settings
from agents_celery.storage.leases import Leases
from agents_celery.storage.ledger import Effect
from agents_celery.storage.records import ClaimArgs, ClaimReply, CommitArgs
from agents_celery.storage.scripts import pipelined
from agents_celery.storage.store import Ack, RunStore

from .conftest import new_id, wait_for

pytestmark = pytest.mark.timeout(30)


STARTED = (step_started("model", 0, 1), step_started("tools", 0, 1))


def _run(store: RunStore) -> str:
    run_id = new_id()
    state = RunState(run_id=run_id, agent_id="a", session_id="s")
    store.create(state, [make_event(EventType.RUN_STARTED, thread_id="s", run_id=run_id)])
    return run_id


def _killed_before_it_runs(
    r: redis.Redis, send: Callable[[], Any], sent_of: Callable[[Any], Sent] = lambda call: call
) -> Any:
    """``send()`` a script call ahead, then kill the connection its reply would come on while Redis holds the
    command (CLIENT PAUSE WRITE holds scripts, not CLIENT KILL): the command never runs."""
    r.client_pause(2000, all=False)
    try:
        call = send()
        host, port = sent_of(call)._conn._sock.getsockname()[:2]
        r.client_kill(f"{host}:{port}")
    finally:
        r.client_unpause()
    return call


def _take_connection(client: redis.Redis) -> Any:
    """A connection out of ``client``'s pool (redis-py before 5.3 wants a command name; later ones warn)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return client.connection_pool.get_connection("PING")


def _cleanup(r: redis.Redis, store: RunStore, run_id: str) -> None:
    for key in vars(store.keys.run(run_id)).values():
        r.delete(key)


def test_a_claim_reuses_the_state_this_process_committed(r: redis.Redis, settings: Settings) -> None:
    store = RunStore(r, settings)
    run_id = _run(store)
    try:
        claim = store.claim(run_id, 0, "t0", STARTED)
        assert claim.state is not None and claim.state.messages == []
        committed = claim.state.model_copy(update={"messages": [{"role": "user", "content": "hi"}], "turns": 1})
        store.commit(committed, "t0", 0, 1, [], "live")
        again = store.claim(run_id, 1, "t1", STARTED)
        assert again.outcome == "OK" and again.state is not None
        assert again.state.messages == [{"role": "user", "content": "hi"}] and again.state.turns == 1
        assert again.state is store.states.get(run_id).state  # type: ignore[union-attr]  # not parsed again
    finally:
        _cleanup(r, store, run_id)


def test_a_commit_by_another_process_is_loaded_not_taken_from_memory(r: redis.Redis, settings: Settings) -> None:
    mine, theirs = RunStore(r, settings), RunStore(r, settings)
    run_id = _run(mine)
    try:
        claim = mine.claim(run_id, 0, "t0", STARTED)
        assert claim.state is not None
        mine.commit(claim.state.model_copy(update={"turns": 1}), "t0", 0, 1, [], "live")
        other = theirs.claim(run_id, 1, "t1", STARTED)
        assert other.state is not None and other.state.turns == 1
        theirs.commit(other.state.model_copy(update={"turns": 2}), "t1", 1, 2, [], "live")
        back = mine.claim(run_id, 2, "t2", STARTED)
        assert back.state is not None and back.state.turns == 2
        assert mine.states.get(run_id).state.turns == 1  # type: ignore[union-attr]  # the stale copy was not used
    finally:
        _cleanup(r, mine, run_id)


def test_runs_that_end_or_fail_to_commit_are_not_kept(r: redis.Redis, settings: Settings) -> None:
    store = RunStore(r, settings)
    run_id = _run(store)
    try:
        claim = store.claim(run_id, 0, "t0", STARTED)
        assert claim.state is not None
        store.commit(claim.state.moved_to(RunStatus.RUNNING), "t0", 0, 1, [], "live")
        assert store.states.get(run_id) is not None
        claim = store.claim(run_id, 1, "t1", STARTED)
        assert claim.state is not None
        with pytest.raises(StateError):  # a stale step number: refused, and forgotten
            store.commit(claim.state, "t1", 0, 2, [], "live")
        assert store.states.get(run_id) is None
        store.commit(claim.state.moved_to(RunStatus.COMPLETED), "t1", 1, 2, [], "ended")
        assert store.states.get(run_id) is None
        keeps_none = RunStore(r, settings, cached_states=0)  # what a Runtime uses: it never claims
        keeps_none.states.keep(run_id, "v", claim.state)
        assert keeps_none.states.get(run_id) is None
    finally:
        _cleanup(r, store, run_id)


def test_a_commit_pushes_the_next_task_only_if_it_succeeds(r: redis.Redis, settings: Settings) -> None:
    """With the broker in this Redis, the checkpoint and the next step's task are written by one script."""
    store = RunStore(r, settings)
    run_id = _run(store)
    queue = f"{settings.key_prefix}:test-queue-{new_id()[:6]}"
    try:
        claim = store.claim(run_id, 0, "t0", STARTED)
        assert claim.state is not None
        with pytest.raises(StateError):  # refused (stale step number): no task
            store.commit(claim.state, "t0", 5, 6, [], "live", task=(queue, "message-for-step-6"))
        assert r.llen(queue) == 0
        store.commit(claim.state, "t0", 0, 1, [], "live", task=(queue, "message-for-step-1"))
        assert r.lrange(queue, 0, -1) == [b"message-for-step-1"]
        assert r.hget(store.keys.run(run_id).run, "step") == b"1"
    finally:
        r.delete(queue)
        _cleanup(r, store, run_id)


def test_a_tool_step_claim_starts_its_calls_in_the_effect_ledger(r: redis.Redis, settings: Settings) -> None:
    store = RunStore(r, settings)
    run_id = _run(store)
    try:
        claim = store.claim(run_id, 0, "t0", STARTED)
        assert claim.state is not None and claim.effects == {}  # a model turn starts nothing
        calls = [
            ToolCall(id="call_a", name="noop"),
            ToolCall(id="call_b", name="noop", decision="rejected"),
            ToolCall(id="call_c", name="noop", error="bad arguments"),
            ToolCall(id="call_d", name="noop", result="done already"),
        ]
        store.commit(claim.state.model_copy(update={"next": "tools", "tool_calls": calls}), "t0", 0, 1, [], "live")
        first = store.claim(run_id, 1, "t1", STARTED)
        assert first.effects == {"call_a": None}  # started by this claim; the others never touch the ledger
        entry = json.loads(r.hget(store.keys.run(run_id).effects, "call_a"))  # type: ignore[arg-type]
        assert entry == {"status": "started", "token": "t1"}
        r.delete(store.keys.run(run_id).lease)  # the attempt dies before running the call
        second = store.claim(run_id, 1, "t2", STARTED)
        assert second.attempt == 2 and second.effects == {"call_a": Effect("started")}  # it may have run
        assert store.ledger.done(run_id, "call_a", "t2", "ok", None) is False  # not the attempt that started it
    finally:
        _cleanup(r, store, run_id)


def test_the_conversation_is_appended_not_rewritten(r: redis.Redis, settings: Settings) -> None:
    """Schema 2: the state JSON holds no messages; a commit appends new ones, and an edited one is replaced."""
    store = RunStore(r, settings)
    run_id = _run(store)
    k = store.keys.run(run_id)
    user = {"role": "user", "content": "hi"}
    try:
        claim = store.claim(run_id, 0, "t0", STARTED)
        assert claim.state is not None and claim.state.schema_version == 1  # created as schema 1, in one write
        first = claim.state.model_copy(update={"messages": [user]})
        store.commit(first, "t0", 0, 1, [], "live")
        assert "messages" not in json.loads(r.hget(k.run, "state"))  # type: ignore[arg-type]
        assert [json.loads(m) for m in r.lrange(k.messages, 0, -1)] == [user]

        claim = store.claim(run_id, 1, "t1", STARTED)
        assert claim.state is not None
        turn = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"arguments": "{}"}}]}
        second = claim.state.model_copy(update={"messages": [*claim.state.messages, turn]})
        assert second.message_changes() == (1, [turn])  # only the new message goes to Redis
        store.commit(second, "t1", 1, 2, [], "live")

        # Another process (a human editing the arguments) replaces the last message: the list follows.
        other = RunStore(r, settings, cached_states=0)
        loaded, step = other.load(run_id)
        assert loaded.messages == [user, turn] and step == 2
        edited = {**turn, "tool_calls": [{"id": "c1", "function": {"arguments": '{"x": 1}'}}]}
        token = "t-human"
        r.set(k.lease, token)
        other.commit(loaded.model_copy(update={"messages": [loaded.messages[0], edited]}), token, 2, 2, [], "live")
        assert [json.loads(m) for m in r.lrange(k.messages, 0, -1)] == [user, edited]
        # The worker's cached copy is stale now: its next claim loads the list again.
        claim = store.claim(run_id, 2, "t2", STARTED)
        assert claim.state is not None and claim.state.messages == [user, edited]
    finally:
        _cleanup(r, store, run_id)


def test_schema_1_can_still_be_written_for_a_rolling_upgrade(r: redis.Redis, settings: Settings) -> None:
    """AGENTS_CELERY_STATE_SCHEMA=1: commits keep the conversation inside the JSON, as 0.1 workers read it."""
    store = RunStore(r, settings.model_copy(update={"state_schema": 1}))
    run_id = _run(store)
    k = store.keys.run(run_id)
    user = {"role": "user", "content": "hi"}
    try:
        claim = store.claim(run_id, 0, "t0", STARTED)
        assert claim.state is not None
        store.commit(claim.state.model_copy(update={"messages": [user]}), "t0", 0, 1, [], "live")
        stored = json.loads(r.hget(k.run, "state"))  # type: ignore[arg-type]
        assert stored["schema_version"] == 1 and stored["messages"] == [user]
        assert r.llen(k.messages) == 0
        # A schema-2 worker reads it, and its commit converts the run.
        upgraded = RunStore(r, settings)
        claim = upgraded.claim(run_id, 1, "t1", STARTED)
        assert claim.state is not None and claim.state.messages == [user]
        upgraded.commit(claim.state, "t1", 1, 2, [], "live")
        assert "messages" not in json.loads(r.hget(k.run, "state"))  # type: ignore[arg-type]
        assert [json.loads(m) for m in r.lrange(k.messages, 0, -1)] == [user]
    finally:
        _cleanup(r, store, run_id)


def test_a_commit_acks_the_step_message_only_when_it_succeeds(r: redis.Redis, settings: Settings) -> None:
    store = RunStore(r, settings)
    run_id = _run(store)
    ack = Ack(f"{settings.key_prefix}:unacked_index", f"{settings.key_prefix}:unacked", "tag-1")
    r.zadd(ack.index_key, {"tag-1": 1.0, "tag-2": 1.0})
    r.hset(ack.hash_key, mapping={"tag-1": "message 1", "tag-2": "message 2"})
    try:
        claim = store.claim(run_id, 0, "t0", STARTED)
        assert claim.state is not None
        with pytest.raises(FencedError):
            store.commit(claim.state, "not-the-lease", 0, 1, [], "live", ack=ack)
        assert r.zscore(ack.index_key, "tag-1") is not None and r.hexists(ack.hash_key, "tag-1")  # refused: kept
        store.commit(claim.state, "t0", 0, 1, [], "live", ack=ack)
        assert r.zscore(ack.index_key, "tag-1") is None and not r.hexists(ack.hash_key, "tag-1")
        assert r.zscore(ack.index_key, "tag-2") is not None and r.hget(ack.hash_key, "tag-2") == b"message 2"
        assert int(r.hget(store.keys.run(run_id).run, "step") or -1) == 1  # type: ignore[arg-type]
    finally:
        _cleanup(r, store, run_id)
        r.delete(ack.index_key, ack.hash_key)


def test_a_tool_result_sent_ahead_is_in_the_ledger_before_its_reply_is_read(r: redis.Redis, settings: Settings) -> None:
    store = RunStore(r, settings, send_ahead=Sent.make)
    run_id = _run(store)
    effects = store.keys.run(run_id).effects
    try:
        r.hset(effects, "call_a", json.dumps({"status": "started", "token": "t1"}))
        sent = store.ledger.done_sent(run_id, "call_a", "t1", "ok", None)
        wait_for(lambda: r.hget(effects, "call_a") and b'"done"' in r.hget(effects, "call_a"), what="the result")
        assert sent.wait() == 1
        assert json.loads(r.hget(effects, "call_a"))["result"] == "ok"  # type: ignore[arg-type]
        in_use = len(r.connection_pool._in_use_connections)  # type: ignore[attr-defined]
        assert in_use == 0, "the connection went back to the pool"
        # A Redis that lost its scripts (restarted, SCRIPT FLUSH): the call runs again, loading the script.
        r.hset(effects, "call_b", json.dumps({"status": "started", "token": "t1"}))
        r.script_flush()
        assert store.ledger.done_sent(run_id, "call_b", "t1", "fine", "oops").wait() == 1
        assert json.loads(r.hget(effects, "call_b"))["error"] == "oops"  # type: ignore[arg-type]
        # Only the attempt that started a call records its result.
        assert store.ledger.done_sent(run_id, "call_b", "t2", "other", None).wait() == 0
    finally:
        _cleanup(r, store, run_id)


def test_a_tool_result_whose_connection_dies_before_the_reply_is_recorded_anyway(
    r: redis.Redis, settings: Settings
) -> None:
    store = RunStore(r, settings, send_ahead=Sent.make)
    run_id = _run(store)
    effects = store.keys.run(run_id).effects
    try:
        r.hset(effects, "call_a", json.dumps({"status": "started", "token": "t1"}))
        sent = _killed_before_it_runs(r, lambda: store.ledger.done_sent(run_id, "call_a", "t1", "ok", None))
        assert sent.wait() == 1  # the connection failed: run again on a fresh one
        assert json.loads(r.hget(effects, "call_a"))["result"] == "ok"  # type: ignore[arg-type]
        assert r.ping() and len(r.connection_pool._in_use_connections) == 0  # type: ignore[attr-defined]
    finally:
        _cleanup(r, store, run_id)


def test_a_claim_sent_during_a_commit_uses_its_state_only_once_that_commit_returned(
    r: redis.Redis, settings: Settings
) -> None:
    """The consumer may send step N+1's claim while step N's thread still reads its commit's reply: the
    claim names the version that commit writes, and the state is used only once the commit has returned."""
    store = RunStore(r, settings, send_ahead=Sent.make)
    run_id = _run(store)
    try:
        claim = store.claim(run_id, 0, "t0", STARTED)
        assert claim.state is not None
        store.commit(claim.state.model_copy(update={"turns": 1}), "t0", 0, 1, [], "live")
        entry = store.states.get(run_id)
        assert entry is not None and entry.committed
        entry.ready.clear()  # as if the commit's reply had not been read yet
        t0 = time.monotonic()  # before the timer starts: the claim may return the instant it fires
        threading.Timer(0.2, entry.ready.set).start()
        again = store.claim_read(store.claim_sent(run_id, 1, "t1", STARTED))
        assert again.outcome == "OK" and again.state is entry.state and time.monotonic() - t0 >= 0.2
        store.commit(again.state.model_copy(update={"turns": 2}), "t1", 1, 2, [], "live")
        entry = store.states.get(run_id)
        assert entry is not None
        entry.ready.clear()
        entry.committed = False  # the commit ran in Redis, but failed here (its reply was lost)
        threading.Timer(0.1, entry.ready.set).start()
        third = store.claim_read(store.claim_sent(run_id, 2, "t2", STARTED))
        assert third.state is not None and third.state is not entry.state and third.state.turns == 2  # read back
    finally:
        _cleanup(r, store, run_id)


def test_a_claim_sent_ahead_whose_reply_is_lost_says_busy(r: redis.Redis, settings: Settings) -> None:
    store = RunStore(r, settings, send_ahead=Sent.make)
    run_id = _run(store)
    try:
        sent = _killed_before_it_runs(r, lambda: store.claim_sent(run_id, 0, "t0", STARTED), lambda c: c.sent)
        assert store.claim_read(sent).outcome == "BUSY"  # not run again: a claim is not idempotent
        assert r.get(store.keys.run(run_id).lease) is None  # it never ran: the sweeper will send the step again
        assert store.claim(run_id, 0, "t1", STARTED).outcome == "OK"
    finally:
        _cleanup(r, store, run_id)


def test_a_claim_that_could_not_be_sent_ahead_is_made_the_ordinary_way(settings: Settings) -> None:
    client = redis.Redis.from_url(settings.redis_url, max_connections=1)
    store = RunStore(client, settings, send_ahead=Sent.make)
    run_id = _run(store)
    try:
        held = _take_connection(client)  # the pool's only connection: none for the claim
        sent = store.claim_sent(run_id, 0, "t0", STARTED)
        client.connection_pool.release(held)
        claim = store.claim_read(sent)  # nothing reached Redis, so the claim is simply made now
        assert claim.outcome == "OK" and claim.attempt == 1
    finally:
        _cleanup(client, store, run_id)
        client.close()


def test_a_worker_store_claims_appends_and_commits_on_the_thread_s_own_connection(
    monkeypatch: pytest.MonkeyPatch, r: redis.Redis, settings: Settings
) -> None:
    store = RunStore(redis.Redis.from_url(settings.redis_url), settings, own_connections=True)
    run_id = _run(store)
    pool = store.redis.connection_pool
    try:
        claim = store.claim(run_id, 0, "t0", STARTED)  # takes this thread's connection
        checkout = pool.get_connection
        taken: list[int] = []
        monkeypatch.setattr(pool, "get_connection", lambda *a, **k: taken.append(1) or checkout(*a, **k))
        store.log.append(run_id, [make_event(EventType.CUSTOM, name="n", value=1)], "t0")
        assert claim.state is not None
        store.commit(claim.state, "t0", 0, 1, [], "live")
        again = store.claim(run_id, 1, "t1", STARTED)
        assert again.outcome == "OK" and taken == []  # no checkout from the pool for any of them
        caller = RunStore(store.redis, settings)  # a Runtime's store: the shared pool, as before
        caller.log.append(run_id, [make_event(EventType.CUSTOM, name="n", value=2)], "t1")
        assert taken == [1]
    finally:
        _cleanup(r, store, run_id)
        store.redis.close()


def test_with_fast_paths_off_a_result_sent_ahead_is_written_at_once(r: redis.Redis, settings: Settings) -> None:
    from agents_celery.storage.pending import call_now

    store = RunStore(r, settings, send_ahead=call_now)
    run_id = _run(store)
    effects = store.keys.run(run_id).effects
    try:
        r.hset(effects, "call_a", json.dumps({"status": "started", "token": "t1"}))
        sent = store.ledger.done_sent(run_id, "call_a", "t1", "ok", None)
        assert json.loads(r.hget(effects, "call_a"))["result"] == "ok"  # type: ignore[arg-type]  # before wait()
        assert sent.wait() == 1 and len(r.connection_pool._in_use_connections) == 0  # type: ignore[attr-defined]
        assert store.ledger.done_sent(run_id, "call_a", "t2", "other", None).wait() == 0
    finally:
        _cleanup(r, store, run_id)


def _argv_names(script: str) -> list[str]:
    """The names a script gives ARGV 1, 2, ... in the ``local`` lines at its top."""
    import re
    from importlib.resources import files

    named: dict[int, str] = {}
    for line in files("agents_celery.storage").joinpath("lua", f"{script}.lua").read_text("utf-8").splitlines():
        if m := re.match(r"^local ([\w, ]+) = (.*\bARGV\[\d+\].*)$", line):
            values = re.findall(r"ARGV\[(\d+)\]", m[2])
            named.update(zip((int(v) for v in values), (n.strip() for n in m[1].split(",")), strict=True))
    assert sorted(named) == list(range(1, len(named) + 1))
    return [named[i] for i in sorted(named)]


def test_the_argument_records_are_the_names_the_scripts_give_their_argv_in_their_order() -> None:
    """CommitArgs and ClaimArgs build commit.lua's and claim.lua's ARGV by name: their fields are the locals the
    scripts name their ARGV by (``m`` is the count of ``messages``), in the same order, so neither side can move
    an argument alone."""
    import dataclasses

    fields = [f.name for f in dataclasses.fields(CommitArgs)]
    assert _argv_names("commit") == [*fields[:14], "m", *fields[14:18]]
    assert fields[18:] == ["messages", "events"]
    assert _argv_names("claim") == [f.name for f in dataclasses.fields(ClaimArgs)]
    args = CommitArgs("t", 3, 4, "{}", "ended", 10, 20, True, "model", 99, "sid", messages=["m1", "m2"], events=["e"])
    assert args.argv() == [
        *("t", "3", "4", "{}", "ended", "10", "20", "1", "model", "99", "sid", "", "", "-1", "2", "", "", "", ""),
        *("m1", "m2", "e"),
    ]
    assert CommitArgs(**{**dataclasses.asdict(args), "inbox_taken": 0}).argv()[17] == "0"  # 0 is checked, None not
    assert ClaimArgs("t", 2, 500, "{m}", "{t}").argv() == ["t", "2", "500", "{m}", "{t}", ""]


def test_the_claim_reply_is_read_by_name(r: redis.Redis, settings: Settings) -> None:
    store = RunStore(r, settings)
    run_id = _run(store)
    try:
        k = store.keys.run(run_id)
        keys = [k.run, k.lease, k.stop, k.events, k.effects, k.messages, k.inbox]
        args = ClaimArgs("t0", 0, 5000, STARTED[0].json, STARTED[1].json).argv()
        reply = ClaimReply.parse(store._claim(keys=keys, args=args))
        assert (reply.outcome, reply.attempt, reply.step_offset, reply.next_offset) == ("OK", 1, 1, 1)
        assert json.loads(reply.state_json)["run_id"] == run_id and reply.stop_reason == ""
        assert (reply.effects, reply.inbox, reply.blips) == ({}, 0, 0)
        assert ClaimReply.parse(store._claim(keys=keys, args=["t1", *args[1:]])) == ClaimReply("BUSY")
        assert ClaimReply.parse(store._claim(keys=keys, args=["t0", "7", *args[2:]])).outcome == "STALE"
    finally:
        _cleanup(r, store, run_id)


def test_script_calls_in_a_pipeline_take_one_round_trip_and_survive_lost_scripts(
    r: redis.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease keeper's renewals (``pipelined``) and ``append_many`` go as raw EVALSHA in one pipeline: a
    pipeline given script objects asks SCRIPT EXISTS first, a round trip of its own every time. A Redis that lost
    its scripts (restarted, SCRIPT FLUSH) gets each call again on its own, which loads it."""

    def no_script_exists(self: Any) -> None:
        raise AssertionError("a pipeline asked SCRIPT EXISTS: a round trip of its own")

    monkeypatch.setattr(redis.client.Pipeline, "load_scripts", no_script_exists)
    store = RunStore(r, settings)
    renewal = Leases(r, store.keys).renew_script
    run_id = _run(store)
    lease = store.keys.run(run_id).lease
    try:
        assert store.claim(run_id, 0, "t0", STARTED).outcome == "OK"
        for flushed in (False, True):
            if flushed:
                r.script_flush()
            r.pexpire(lease, 1000)
            renew, stale = (renewal, [lease], ["t0", 60_000]), (renewal, [lease], ["not-ours", 60_000])
            assert pipelined(r, [renew, stale], [("EXISTS", store.keys.run(run_id).stop)]) == [0, 1, 0]
            assert r.pttl(lease) > 50_000
        r.script_flush()
        done = make_event(EventType.CUSTOM, name="note", value=1)
        first, refused = store.log.append_many([(run_id, [done, done], "t0"), (run_id, [done], "not-ours")])
        assert isinstance(first, int) and isinstance(refused, FencedError)
        assert [e.type for e in store.log.read(run_id, after=first - 1)] == [EventType.CUSTOM, EventType.CUSTOM]
    finally:
        _cleanup(r, store, run_id)


def test_a_commit_notes_the_children_its_next_step_waits_for(r: redis.Redis, settings: Settings) -> None:
    """``awaiting`` is written by the commit script itself (no round trip before it): set, left alone, cleared; a
    refused commit notes nothing."""
    store = RunStore(r, settings)
    run_id = _run(store)
    record = store.keys.run(run_id).run
    try:
        state = store.claim(run_id, 0, "t0", STARTED).state
        assert state is not None
        with pytest.raises(FencedError):
            store.commit(state, "not-ours", 0, 1, [], "live", release=False, awaiting=["c1"])
        assert r.hget(record, "awaiting") is None
        store.commit(state, "t0", 0, 1, [], "live", release=False, awaiting=["c1", "c2"])
        assert r.hget(record, "awaiting") == b"c1,c2"
        store.commit(state, "t0", 1, 2, [], "live", release=False)
        assert r.hget(record, "awaiting") == b"c1,c2"
        store.commit(state, "t0", 2, 3, [], "live", awaiting=[])
        assert r.hget(record, "awaiting") is None
    finally:
        _cleanup(r, store, run_id)


def test_a_child_run_is_created_and_indexed_in_one_round_trip(
    r: redis.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``create_indexed``: the run and its index entries in one pipeline (no SCRIPT EXISTS before it); a second
    call finds it (StateError) and indexes it again; a Redis that lost its scripts gets the script loaded."""

    def no_script_exists(self: Any) -> None:
        raise AssertionError("a pipeline asked SCRIPT EXISTS: a round trip of its own")

    monkeypatch.setattr(redis.client.Pipeline, "load_scripts", no_script_exists)
    store = RunStore(r, settings)
    ids = [new_id(), new_id()]
    try:
        for run_id, flushed in zip(ids, (False, True), strict=True):
            if flushed:
                r.script_flush()
            state = RunState(run_id=run_id, agent_id="a", session_id=run_id)
            first = make_event(EventType.RUN_STARTED, thread_id=run_id, run_id=run_id)
            store.create_indexed(state, [first], {"queue": "q"}, 5.0)
            assert store.load(run_id)[0].agent_id == "a" and store.run_fields(run_id, "queue") == ["q"]
            live = r.zscore(store.live_key(run_id), run_id)
            assert live is not None and live > time.time() * 1000 + 3000
            r.zrem(store.live_key(run_id), run_id)
            with pytest.raises(StateError):
                store.create_indexed(state, [first], {"queue": "q"}, 5.0)
            assert r.zscore(store.live_key(run_id), run_id) is not None  # indexed again
            assert [e.type for e in store.log.read(run_id)] == [EventType.RUN_STARTED]
    finally:
        for run_id in ids:
            _cleanup(r, store, run_id)
            r.zrem(store.live_key(run_id), run_id)

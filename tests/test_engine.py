"""The engine end to end: a real worker process, real Redis, the real openai SDK against a local server."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest
import redis

from agents_celery import Decision, Runtime
from agents_celery.errors import (
    DecisionError,
    RunBusyError,
    RunFinishedError,
    RunNotPausedError,
    SessionBusyError,
    ToolArgumentsError,
    UnknownAgentError,
    ValidationError,
)
from agents_celery.events import Event, EventType
from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing.openai_server import FailingResponder, FakeReply, ScriptResponder

from .conftest import TEST_REDIS_URL, kill_connections, wait_for
from .support.invariants import assert_run_sound, counter_of


def events_of(runtime: Runtime, run_id: str, until_pause: bool = True) -> list[Event]:
    return list(runtime.get_stream(run_id).events(until_pause=until_pause))


def text_of(events: list[Event]) -> str:
    return "".join(e.data["delta"] for e in events if e.type is EventType.TEXT_MESSAGE_CONTENT)


def count(r: redis.Redis, prefix: str, name: str) -> int:
    return counter_of(r, prefix)(name)


def test_streaming_text(runtime: Runtime, script: Any) -> None:
    script("Hello there, durable world!")
    stream = runtime.stream("fake", "Say hello")
    events = events_of(runtime, stream.id)
    assert_run_sound(events)
    assert events[0].type is EventType.RUN_STARTED
    assert events[-1].type is EventType.RUN_FINISHED and events[-1].data["outcome"]["type"] == "success"
    assert text_of(events) == "Hello there, durable world!"
    view = runtime.get(stream.id)
    assert view.status == "completed" and view.output == "Hello there, durable world!"


def test_tool_call_then_answer(runtime: Runtime, script: Any, r: redis.Redis, key_prefix: str) -> None:
    before = count(r, key_prefix, "get_time")
    script(ScriptedTurn("", [ScriptedToolCall("get_time", {"timezone": "CET"})]), "It is noon.")
    stream = runtime.stream("fake", "What time is it?")
    events = events_of(runtime, stream.id)
    assert_run_sound(events, tool_counts={"get_time": before + 1}, counter=counter_of(r, key_prefix))
    results = [e for e in events if e.type is EventType.TOOL_CALL_RESULT]
    assert [r.data["content"] for r in results] == ["12:00 in CET"]
    assert text_of(events) == "It is noon."


def test_parallel_tool_calls(runtime: Runtime, script: Any) -> None:
    calls = [ScriptedToolCall("add", {"a": 1, "b": 2}), ScriptedToolCall("add", {"a": 40, "b": 2})]
    script(ScriptedTurn("Adding.", calls), "3 and 42.")
    stream = runtime.stream("fake", "add things")
    events = events_of(runtime, stream.id)
    starts = [e for e in events if e.type is EventType.TOOL_CALL_START]
    assert len(starts) == 2
    results = {e.data["tool_call_id"]: e.data["content"] for e in events if e.type is EventType.TOOL_CALL_RESULT}
    assert sorted(results.values()) == ["3", "42"]
    assert runtime.get(stream.id).status == "completed"


def test_invalid_tool_arguments_are_fed_back(runtime: Runtime, script: Any, fake_openai: Any) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("add", {"a": "not a number", "b": 2})]), "Sorry.")
    stream = runtime.stream("fake", "add badly")
    events = events_of(runtime, stream.id)
    result = next(e for e in events if e.type is EventType.TOOL_CALL_RESULT)
    assert "a" in result.data["content"] and result.data["content"].startswith("Error")
    last_request = fake_openai.requests[-1]
    tool_msg = [m for m in last_request["messages"] if m["role"] == "tool"][-1]
    assert tool_msg["content"] == result.data["content"]
    assert runtime.get(stream.id).status == "completed"


def test_model_500_then_success(runtime: Runtime, fake_openai: Any) -> None:
    fake_openai.responder = FailingResponder(ScriptResponder(["Recovered."]), failures=2, status=500)
    stream = runtime.stream("fake", "flaky")
    events = events_of(runtime, stream.id)
    retries = [e for e in events if e.type is EventType.CUSTOM and e.data["name"] == "model_retry"]
    assert len(retries) == 2
    assert text_of(events) == "Recovered."
    assert runtime.get(stream.id).status == "completed"


def test_model_failing_for_good(runtime: Runtime, fake_openai: Any) -> None:
    fake_openai.responder = lambda request: FakeReply(status=503, error="upstream overloaded")
    stream = runtime.stream("fake", "doomed")
    events = events_of(runtime, stream.id)
    assert events[-1].type is EventType.RUN_ERROR
    assert "upstream overloaded" in events[-1].data["message"]
    view = runtime.get(stream.id)
    assert view.status == "failed" and view.error and "upstream overloaded" in view.error["message"]


def test_model_bad_request_fails_without_retry(runtime: Runtime, fake_openai: Any) -> None:
    fake_openai.responder = lambda request: FakeReply(status=400, error="bad model")
    stream = runtime.stream("fake", "doomed")
    events = events_of(runtime, stream.id)
    assert not [e for e in events if e.type is EventType.CUSTOM]
    assert events[-1].type is EventType.RUN_ERROR


def _pause(runtime: Runtime, script: Any, path: str) -> tuple[str, list[Event]]:
    script(ScriptedTurn("Deleting.", [ScriptedToolCall("delete_file", {"path": path})]), "Done deleting.")
    stream = runtime.stream("fake", f"delete {path}")
    events = events_of(runtime, stream.id)
    assert events[-1].is_pause
    view = runtime.get(stream.id)
    assert view.status == "paused" and [c.name for c in view.pending] == ["delete_file"]
    return stream.id, events


def test_hitl_approve(runtime: Runtime, script: Any, r: redis.Redis, key_prefix: str) -> None:
    run_id, first = _pause(runtime, script, "/tmp/a")
    interrupt = first[-1].data["outcome"]["interrupts"][0]
    assert interrupt["reason"] == "confirmation_required"
    assert count(r, key_prefix, "delete_file:/tmp/a") == 0
    runtime.continue_run(run_id)
    events = events_of(runtime, run_id)
    assert_run_sound(events)
    assert events[len(first)].type is EventType.RUN_STARTED  # the continuation starts a new AG-UI run segment
    assert runtime.get(run_id).status == "completed"
    assert count(r, key_prefix, "delete_file:/tmp/a") == 1


def test_hitl_reject_with_note(
    runtime: Runtime, script: Any, r: redis.Redis, key_prefix: str, fake_openai: Any
) -> None:
    run_id, _ = _pause(runtime, script, "/tmp/b")
    call_id = runtime.get(run_id).pending[0].id
    runtime.continue_run(run_id, [Decision(call_id, confirmed=False, note="keep it")])
    events = events_of(runtime, run_id)
    result = next(e for e in events if e.type is EventType.TOOL_CALL_RESULT)
    assert "rejected" in result.data["content"] and "keep it" in result.data["content"]
    assert count(r, key_prefix, "delete_file:/tmp/b") == 0
    tool_msgs = [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "tool"]
    assert "rejected" in tool_msgs[-1]["content"]


def test_hitl_edited_arguments(runtime: Runtime, script: Any, r: redis.Redis, key_prefix: str) -> None:
    run_id, _ = _pause(runtime, script, "/tmp/c")
    call_id = runtime.get(run_id).pending[0].id
    with pytest.raises(ToolArgumentsError):
        runtime.continue_run(run_id, [{"tool_call_id": call_id, "confirmed": True, "tool_args": {"path": 7}}])
    assert runtime.get(run_id).status == "paused"  # untouched
    runtime.continue_run(run_id, [{"tool_call_id": call_id, "confirmed": True, "tool_args": {"path": "/tmp/c2"}}])
    events = events_of(runtime, run_id)
    result = next(e for e in events if e.type is EventType.TOOL_CALL_RESULT)
    assert result.data["content"] == "deleted /tmp/c2"
    assert count(r, key_prefix, "delete_file:/tmp/c") == 0 and count(r, key_prefix, "delete_file:/tmp/c2") == 1


def test_hitl_bad_decisions_change_nothing(runtime: Runtime, script: Any) -> None:
    run_id, _ = _pause(runtime, script, "/tmp/d")
    before = runtime.get(run_id)
    with pytest.raises(DecisionError):
        runtime.continue_run(run_id, [{"tool_call_id": "nope", "confirmed": True}])
    with pytest.raises(DecisionError):
        runtime.continue_run(run_id, [{"confirmed": True}])
    after = runtime.get(run_id)
    assert after.status == "paused" and after.last_offset == before.last_offset
    runtime.stop(run_id)


def test_double_continue(runtime: Runtime, script: Any, r: redis.Redis, key_prefix: str) -> None:
    run_id, _ = _pause(runtime, script, "/tmp/e")
    # A second caller holding the lease at the same moment is refused ...
    token = wait_for(lambda: runtime.leases.acquire(run_id, 5000), what="the worker to release the lease")
    with pytest.raises(RunBusyError):
        runtime.continue_run(run_id)
    runtime.leases.release(run_id, token)
    # ... and once one continue went through, the other finds the run no longer paused.
    runtime.continue_run(run_id)
    with pytest.raises(RunNotPausedError):
        runtime.continue_run(run_id)
    events_of(runtime, run_id)
    assert count(r, key_prefix, "delete_file:/tmp/e") == 1


def test_stop_while_paused(runtime: Runtime, script: Any) -> None:
    run_id, _ = _pause(runtime, script, "/tmp/f")
    runtime.stop(run_id)
    events = events_of(runtime, run_id)
    assert events[-1].type is EventType.RUN_FINISHED and events[-1].data["outcome"]["type"] == "cancelled"
    # AG-UI allows only a new RUN_STARTED after the pause's RUN_FINISHED: the cancellation opens one.
    assert events[-3].is_pause and events[-2].type is EventType.RUN_STARTED
    assert runtime.get(run_id).status == "cancelled"
    with pytest.raises(RunFinishedError):
        runtime.stop(run_id)


def test_stop_while_streaming(runtime: Runtime, script: Any) -> None:
    script(" ".join(f"word{i}" for i in range(400)), token_delay=0.01)
    stream = runtime.stream("fake", "talk a lot")
    seen = []
    for event in stream.events():
        seen.append(event)
        if event.type is EventType.TEXT_MESSAGE_CONTENT and len(seen) == 5:
            runtime.stop(stream.id)
    assert seen[-1].data["outcome"]["type"] == "cancelled"
    types = [e.type for e in seen]
    assert EventType.TEXT_MESSAGE_END in types  # the open message was closed before the end
    assert len([t for t in types if t is EventType.TEXT_MESSAGE_CONTENT]) < 400
    assert runtime.get(stream.id).status == "cancelled"


def test_stop_while_running_a_tool(runtime: Runtime, script: Any, r: redis.Redis, key_prefix: str) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("slow_count", {"key": "stop-tool", "seconds": 1.0})]), "never said")
    stream = runtime.stream("fake", "slow")
    wait_for(lambda: count(r, key_prefix, "stop-tool") == 1, what="the tool to start")
    runtime.stop(stream.id)
    events = events_of(runtime, stream.id)
    assert events[-1].data["outcome"]["type"] == "cancelled"
    assert "never said" not in text_of(events)
    assert count(r, key_prefix, "stop-tool") == 1


def test_stop_while_queued_never_starts(fast_settings: Any, script: Any, fake_openai: Any) -> None:
    # No worker serves this queue, so the run stays queued until the stop ends it.
    settings = fast_settings.model_copy(update={"queue": "nobody-listens-here"})
    runtime = Runtime(settings=settings)
    stream = runtime.stream("fake", "never runs")
    assert runtime.get(stream.id).status == "queued"
    calls = fake_openai.calls
    runtime.stop(stream.id)
    events = events_of(runtime, stream.id)
    assert [e.type for e in events] == [EventType.RUN_STARTED, EventType.RUN_FINISHED]
    assert runtime.get(stream.id).status == "cancelled" and fake_openai.calls == calls
    runtime.close()


def test_stop_requested_before_the_run_exists(runtime: Runtime, script: Any, worker: Any) -> None:
    script("should not be said")
    run_id = "f" * 32
    runtime.store.request_stop(run_id)
    assert runtime.store.stop_requested(run_id)


def test_sessions_share_history(runtime: Runtime, script: Any, fake_openai: Any) -> None:
    script("First answer.")
    first = runtime.stream("fake", "first question")
    events_of(runtime, first.id)
    script("Second answer.")
    second = runtime.stream("fake", "second question", session_id=first.session_id)
    events_of(runtime, second.id)
    sent = [m.get("content") for m in fake_openai.requests[-1]["messages"]]
    assert sent[-3:] == ["first question", "First answer.", "second question"]


def test_session_busy_is_refused(runtime: Runtime, script: Any) -> None:
    run_id, _ = _pause(runtime, script, "/tmp/g")
    session = runtime.get(run_id).session_id
    with pytest.raises(SessionBusyError):
        runtime.stream("fake", "interleave", session_id=session)
    runtime.stop(run_id)
    script("ok")
    later = runtime.stream("fake", "now it works", session_id=session)
    events_of(runtime, later.id)


def test_duplicate_step_delivery_does_nothing(runtime: Runtime, script: Any, r: redis.Redis, key_prefix: str) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("slow_count", {"key": "dup"})]), "done")
    stream = runtime.stream("fake", "dup")
    events = events_of(runtime, stream.id)
    for step in range(3):  # redeliver every committed step, twice
        runtime._resend(stream.id, step, "fake")
        runtime._resend(stream.id, step, "fake")
    script("probe answer")
    probe = runtime.stream("fake", "probe")  # a later run on the same worker: the redeliveries were handled first
    events_of(runtime, probe.id)
    assert events_of(runtime, stream.id) == events
    assert count(r, key_prefix, "dup") == 1
    call_id = next(e.data["tool_call_id"] for e in events if e.type is EventType.TOOL_CALL_RESULT)
    keys = [k.decode() for k in r.lrange(f"{key_prefix}:test:count:dup:idem", 0, -1)]
    assert keys == [f"{stream.id}:{call_id}"]  # the tool got the idempotency key run_id:tool_call_id


class Monitor:
    """Redis MONITOR in a thread: every command on the test database, with where it ran (``lua`` or a client)."""

    def __init__(self, r: redis.Redis) -> None:
        self.client = redis.Redis.from_url(TEST_REDIS_URL)
        self.db = r.connection_pool.connection_kwargs.get("db", 0)
        self.seen: list[tuple[str, str]] = []
        self.marker = f"monitor-stop-{time.monotonic_ns()}"
        self.monitor = self.client.monitor().__enter__()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            command = self.monitor.next_command()
            if self.marker in command["command"]:
                return
            if command["db"] == self.db:
                self.seen.append((command["client_type"], command["command"]))

    def stop(self, r: redis.Redis) -> list[tuple[str, str]]:
        r.echo(self.marker)
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "the monitor did not see its stop marker"
        self.monitor.__exit__()
        self.client.close()
        return self.seen


def test_the_commit_acks_the_step_message(runtime: Runtime, script: Any, r: redis.Redis) -> None:
    """The broker is the state Redis here: each step's message leaves kombu's unacked keys inside the commit
    script, and the worker does not ack it again with a round trip of its own."""
    script(ScriptedTurn("", [ScriptedToolCall("add", {"a": 1, "b": 2})]), "3")
    monitor = Monitor(r)
    try:
        stream = runtime.stream("fake", "add")
        events = events_of(runtime, stream.id)
        # Celery acks after the task returns: wait for the last step's message to leave the unacked hash.
        wait_for(lambda: not any(stream.id in v.decode() for v in r.hvals("unacked")), what="the last ack")
    finally:
        seen = monitor.stop(r)
    assert events[-1].type is EventType.RUN_FINISHED
    steps = sum(1 for e in events if e.type is EventType.STEP_STARTED)
    tags = [cmd.split()[2] for _, cmd in seen if cmd.startswith("HSET unacked ") and stream.id in cmd]
    assert len(tags) == steps == 3  # model turn, tool step, model turn: one delivered message each
    for tag in tags:
        removals = [where for where, cmd in seen if cmd.startswith("ZREM unacked_index ") and tag in cmd]
        assert removals == ["lua"], f"message {tag} was acked by {removals}"


def test_a_refused_commit_leaves_its_message_to_the_ordinary_ack(
    runtime: Runtime, script: Any, r: redis.Redis, worker: Any
) -> None:
    """The worker frees a message's prefetch slot as it sends the commit that acks it. When that commit is
    refused (here: a stranger took the lease), the message is still removed from kombu's unacked keys, by
    the worker itself, and the worker goes on consuming."""
    script(ScriptedTurn("", [ScriptedToolCall("steal_lease", {"ms": 300})]), "done")
    monitor = Monitor(r)
    try:
        stream = runtime.stream("fake", "steal")
        events = events_of(runtime, stream.id)  # the sweeper retries the tool step after the stranger's lease
        wait_for(lambda: not any(stream.id in v.decode() for v in r.hvals("unacked")), what="the last ack")
    finally:
        seen = monitor.stop(r)
    assert events[-1].type is EventType.RUN_FINISHED and runtime.get(stream.id).status == "completed"
    tags = [cmd.split()[2] for _, cmd in seen if cmd.startswith("HSET unacked ") and stream.id in cmd]
    removals = {tag: [w for w, cmd in seen if cmd.startswith("ZREM unacked_index ") and tag in cmd] for tag in tags}
    assert sorted(removals.values()) == [["lua"]] * (len(tags) - 1) + [["tcp"]], removals
    refused = next(tag for tag, where in removals.items() if where == ["tcp"])
    assert f"step message {refused}: its commit did not ack it" in worker.output()


def test_step_threads_reconnect_after_redis_dropped_their_connections(
    runtime: Runtime, script: Any, r: redis.Redis, key_prefix: str
) -> None:
    """A worker's step threads keep their own Redis connection. When Redis drops those (a restart, CLIENT
    KILL, an idle timeout), the next claim, commit or append on them connects again first: runs carry on
    with no step failing and retried, every event arrives once, and no tool runs twice."""
    key = f"reconnect-{uuid.uuid4().hex[:8]}"

    def run_once() -> None:
        script(ScriptedTurn("", [ScriptedToolCall("slow_count", {"key": key})]), "counted.")
        events = events_of(runtime, runtime.stream("fake", "count").id)
        assert_run_sound(events)
        assert events[-1].type is EventType.RUN_FINISHED and events[-1].data["outcome"]["type"] == "success"
        attempts = [e.data["metadata"]["attempt"] for e in events if e.type is EventType.STEP_STARTED]
        assert attempts == [1, 1, 1]  # no step failed on a dropped connection and had to be tried again

    run_once()  # the worker's step threads now hold their own connections
    killed = kill_connections(r, "evalsha", "eval")
    assert killed, "no connection whose last command was a script: the worker's step threads hold none?"
    for _ in range(3):  # nine steps over the worker's four threads: most land on a dropped connection
        run_once()
    assert count(r, key_prefix, key) == 4


def test_bad_input_changes_nothing(runtime: Runtime) -> None:
    with pytest.raises(UnknownAgentError):
        runtime.stream("no-such-agent", "hi")
    with pytest.raises(ValidationError):
        runtime.stream("fake", "   ")


def test_offline_agent_with_scripted_model(runtime: Runtime) -> None:
    view = runtime.run("offline", "what time is it?", timeout=30)
    assert view.status == "completed" and view.output == "It is 12:00 UTC."


def test_manifests_published_in_module_order(runtime: Runtime) -> None:
    names = [m["name"] for m in runtime.agents()]
    assert names.index("fake") < names.index("offline")
    fake = runtime.agent_manifest("fake")
    confirm = {t["name"]: t["requires_confirmation"] for t in fake["tools"]}
    assert confirm["delete_file"] is True and confirm["get_time"] is False
    assert json.dumps(fake)


def test_lease_keeper_renews_and_notices_stop(r: redis.Redis, fast_settings: Any) -> None:
    from agents_celery.storage.leases import LeaseKeeper, Leases
    from agents_celery.storage.store import RunStore

    store = RunStore(r, fast_settings)
    leases = Leases(r, store.keys)
    run_id = "k" * 32
    token = leases.acquire(run_id, 300)
    assert token
    keeper = LeaseKeeper(leases, ttl_ms=300, renew=0.05, poll=0.02)
    holding = keeper.hold(run_id, token)
    try:
        t0 = time.monotonic()
        # Renewed for well past the 300 ms TTL: still ours.
        wait_for(lambda: holding.renewed > t0 + 0.6, timeout=5, what="renewals past the TTL")
        assert r.get(store.keys.run(run_id).lease) == token.encode() and not holding.lost.is_set()
        store.request_stop(run_id)
        wait_for(holding.stop.is_set, timeout=2, what="the stop request to be seen")
        r.set(store.keys.run(run_id).lease, "someone-else")
        wait_for(holding.lost.is_set, timeout=2, what="the lost lease to be noticed")
    finally:
        keeper.drop(holding)
        keeper.close()
        r.delete(store.keys.run(run_id).lease, store.keys.run(run_id).stop)


def test_lease_keeper_checks_every_stop_in_one_command(
    r: redis.Redis, fast_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A beat reads the stop keys of every held lease with one MGET (a thousand EXISTS per poll were half the
    keeper's CPU on a gevent worker) and wakes only the steps whose run was asked to stop."""
    from agents_celery.storage import leases as leases_module
    from agents_celery.storage.leases import LeaseKeeper, Leases
    from agents_celery.storage.store import RunStore

    store = RunStore(r, fast_settings)
    leases = Leases(r, store.keys)
    runs = [c * 32 for c in "mnop"]
    checks: list[list[tuple[Any, ...]]] = []
    real = leases_module.pipelined

    def spy(client: Any, calls: Any, before: Any = (), after: Any = ()) -> list[Any]:
        checks.append([tuple(command[:1]) for command in before])
        return real(client, calls, before, after)

    monkeypatch.setattr(leases_module, "pipelined", spy)
    keeper = LeaseKeeper(leases, ttl_ms=5000, renew=1.0, poll=0.02)
    holdings = [keeper.hold(run_id, leases.acquire(run_id, 5000) or "") for run_id in runs]
    try:
        store.request_stop(runs[1])
        wait_for(holdings[1].stop.is_set, timeout=5, what="the stop request to be seen")
        assert not any(h.stop.is_set() for i, h in enumerate(holdings) if i != 1)
        assert checks and all(beat == [("MGET",)] for beat in checks), checks[:3]
    finally:
        for h in holdings:
            keeper.drop(h)
        keeper.close()
        for run_id in runs:
            r.delete(store.keys.run(run_id).lease, store.keys.run(run_id).stop)


def _leased_log(r: redis.Redis, settings: Any, run_id: str) -> tuple[Any, str, str, Any]:
    """A run's event log with its first event and a lease: the store, the id, the token, and how many events it has."""
    from agents_celery.events import make_event
    from agents_celery.storage.leases import Leases
    from agents_celery.storage.store import RunStore

    store = RunStore(r, settings)
    store.log.create(run_id, "s", "a", [make_event(EventType.RUN_STARTED, thread_id="s", run_id=run_id)])
    token = Leases(r, store.keys).acquire(run_id, 10_000)
    assert token
    return store, run_id, token, lambda: store.log.info(run_id).next_offset


def test_event_writer_writes_trickles_at_once_and_batches_bursts(r: redis.Redis, fast_settings: Any) -> None:
    from agents_celery.engine.writer import BURST, EventWriter, _flusher
    from agents_celery.events import make_event

    store, run_id, token, written = _leased_log(r, fast_settings, "w" * 32)
    # The flusher is kept busy throughout the first writer: what it writes, its own thread wrote.
    started, release = threading.Event(), threading.Event()

    class Busy:
        def _flush_pending(self) -> None:
            started.set()
            release.wait(10)

    _flusher().submit(Busy())  # type: ignore[arg-type]
    assert started.wait(5)
    try:
        with EventWriter(store.log, run_id, token) as writer:
            born = time.monotonic()
            wait_for(lambda: time.monotonic() - born > BURST, timeout=1, what="a model's first token to be due")
            writer.emit(make_event(EventType.TEXT_MESSAGE_START, message_id="m"))
            assert written() == 2  # written before emit returned: no thread hand-off
            for i in range(500):  # a burst from the step's own thread: kept for it, no flusher
                writer.emit(make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="m", delta=f"t{i} "))
            kept = written()
            assert kept < 502
            writer.stand_by()  # about to wait: it writes what it kept, itself, in one round trip
            assert written() == 502
            writer.resume()
    finally:
        release.set()
    events = store.log.read(run_id)
    assert [e.offset for e in events] == list(range(502))
    assert [e.data["delta"] for e in events[2:]] == [f"t{i} " for i in range(500)]
    # While the step's thread stands by, another thread's burst goes to the flusher; while it works, a burst of
    # its own waits for it, and what is still pending at its end goes to the commit.
    with EventWriter(store.log, run_id, token) as writer:
        writer.stand_by()
        other = threading.Thread(
            target=lambda: [
                writer.emit(make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="m", delta=f"o{i} "))
                for i in range(300)
            ]
        )
        other.start()
        other.join(10)
        wait_for(lambda: written() == 802, timeout=5, what="the flusher to write the other thread's burst")
        writer.resume()
        for i in range(300):
            writer.emit(make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="m", delta=f"u{i} "))
        taken = writer.take()
        with pytest.raises(RuntimeError):
            writer.emit(make_event(EventType.TEXT_MESSAGE_END, message_id="m"))
    direct = 300 - len(taken)  # the first may go at once, when it came BURST after the flusher's last write
    assert direct <= 1 and [json.loads(e.json)["delta"] for e in taken] == [f"u{i} " for i in range(direct, 300)]
    after = [e.data["delta"] for e in store.log.read(run_id, after=501)]
    assert after == [f"o{i} " for i in range(300)] + [f"u{i} " for i in range(direct)]
    for key in vars(store.keys.run(run_id)).values():
        r.delete(key)


def test_a_step_waiting_on_a_call_writes_what_it_kept(r: redis.Redis, fast_settings: Any) -> None:
    """A call that takes longer than BRIEF: the step's thread writes its kept burst while it waits (the reader sees
    it before the call returns); a call's own burst in its first BRIEF is kept for the step's commit."""
    from agents_celery.engine.calls import Watch, run_call
    from agents_celery.engine.writer import EventWriter
    from agents_celery.events import make_event

    store, run_id, token, written = _leased_log(r, fast_settings, "x" * 32)
    content = lambda i: make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="m", delta=f"{i} ")  # noqa: E731
    with EventWriter(store.log, run_id, token) as writer:
        watch = Watch(threading.Event(), threading.Event(), 1.0, 0.05, writer)
        for i in range(50):
            writer.emit(content(i))
        assert written() < 51  # kept: at most the first went at once

        def slow() -> str:
            wait_for(lambda: written() == 51, timeout=5, what="the kept burst to be written while the step waits")
            return "done"

        assert run_call(slow, watch, what="slow") == "done"
        writer.waiting_briefly(True)  # as run_call does for a call's first BRIEF: its burst waits for the step
        other = threading.Thread(target=lambda: [writer.starting(), *(writer.emit(content(i)) for i in range(50, 80))])
        other.start()
        other.join(10)
        writer.resume()
        direct = written() - 51  # the first may go at once, when the thread came to it BURST after starting()
        assert direct in (0, 1)
        assert [json.loads(e.json)["delta"] for e in writer.take()] == [f"{i} " for i in range(50 + direct, 80)]
    for key in vars(store.keys.run(run_id)).values():
        r.delete(key)


def test_run_is_caller_bound_a_timeout_stops_it(runtime: Runtime, script: Any) -> None:
    from agents_celery.errors import RunTimeoutError

    script(" ".join(f"slow{i}" for i in range(300)), token_delay=0.02)
    with pytest.raises(RunTimeoutError) as info:
        runtime.run("fake", "take your time", timeout=0.5)
    assert isinstance(info.value, TimeoutError)
    run_id = info.value.run_id
    wait_for(lambda: runtime.get(run_id).status == "cancelled", what="the timed-out run to be cancelled")
    events = events_of(runtime, run_id)
    assert events[-1].data["outcome"]["type"] == "cancelled"
    assert len([e for e in events if e.type is EventType.TEXT_MESSAGE_CONTENT]) < 300


def test_a_timeout_holds_when_the_run_says_nothing(runtime: Runtime, fake_openai: Any) -> None:
    """A model that never sends a token: no event comes after the step's start, and ``run(timeout=...)`` still
    gives up on time (it waited for the next event before, with no limit)."""
    import time

    from agents_celery.errors import RunTimeoutError
    from agents_celery.testing import FakeReply

    fake_openai.responder = lambda request: FakeReply(hang=True)
    t0 = time.monotonic()
    with pytest.raises(RunTimeoutError) as info:
        runtime.run("fake", "are you there?", timeout=1.0)
    assert time.monotonic() - t0 < 5
    wait_for(lambda: runtime.get(info.value.run_id).status == "cancelled", what="the timed-out run to be cancelled")


def test_async_events_follow_a_run(runtime: Runtime, script: Any) -> None:
    import asyncio

    script("Async hello.")
    stream = runtime.stream("fake", "async please")

    async def collect() -> list[Event]:
        return [e async for e in stream.aevents()]

    events = asyncio.run(asyncio.wait_for(collect(), timeout=30))
    assert_run_sound(events)
    assert text_of(events) == "Async hello." and events[-1].type is EventType.RUN_FINISHED


def test_bad_configuration_fails_at_once() -> None:
    from agents_celery.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="AGENTS_CELERY_REDIS_URL"):
        Runtime(redis_url="http://not-redis:80")


def test_async_tool_runs_on_the_worker(runtime: Runtime, script: Any, r: redis.Redis, key_prefix: str) -> None:
    before = count(r, key_prefix, "async_lookup")
    script(ScriptedTurn("", [ScriptedToolCall("async_lookup", {"word": "durable"})]), "Looked up.")
    stream = runtime.stream("fake", "look it up")
    events = events_of(runtime, stream.id)
    assert [e.data["content"] for e in events if e.type is EventType.TOOL_CALL_RESULT] == ["DURABLE"]
    assert count(r, key_prefix, "async_lookup") == before + 1


def test_a_hook_raising_stop_step_fails_the_run(runtime: Runtime, script: Any) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("guarded", {"path": "/etc"})]), "never")
    stream = runtime.stream("fake", "touch /etc")
    events = events_of(runtime, stream.id)
    assert events[-1].type is EventType.RUN_ERROR and "policy forbids" in events[-1].data["message"]
    assert not [e for e in events if e.type is EventType.TOOL_CALL_RESULT]
    assert runtime.get(stream.id).status == "failed"


def test_an_unexpected_error_fails_the_run_at_once_with_its_reason(runtime: Runtime) -> None:
    stream = runtime.stream("broken", "hello")
    events = events_of(runtime, stream.id)
    assert events[-1].type is EventType.RUN_ERROR and "KeyError" in events[-1].data["code"]
    assert "choices" in events[-1].data["message"]
    attempts = [e.data["metadata"]["attempt"] for e in events if e.type is EventType.STEP_STARTED]
    assert attempts == [1]  # not retried: another attempt would fail the same way
    assert runtime.get(stream.id).error == {"type": "KeyError", "message": "'choices'"}


def test_a_run_of_an_agent_this_engine_does_not_serve_fails_with_the_reason(fast_settings: Any) -> None:
    """A step whose agent the engine does not serve (a worker started without its module) fails the run at once,
    naming the agent, as a well-formed log."""
    from agents_celery import Agent, ScriptedModel
    from agents_celery.testing import InlineRunner

    from .support.invariants import assert_run_sound

    ghost = Agent(name="ghost", instructions="Boo.", model=ScriptedModel(["boo"]))
    with InlineRunner([ghost], settings=fast_settings) as runner:
        runner.engine.agents = {}  # the worker serving it is gone; this one serves other agents
        view = runner.run("ghost", "hi")
        assert view.status == "failed" and view.error is not None, view
        assert view.error["type"] == "ConfigurationError" and "serves agent 'ghost'" in view.error["message"]
        assert_run_sound(runner.events(view.run_id))

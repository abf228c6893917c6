"""Crash recovery with real worker processes killed for real (kill -9, SIGSTOP, SIGTERM).

Each test checks what DESIGN.md promises: the run completes once, offsets run 0..end with no gap or
duplicate, every completed tool ran exactly once, the answer is complete, and the stream stays a valid
AG-UI sequence (everything opened is closed before the run finishes).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from agents_celery import Runtime
from agents_celery.events import Event, EventType
from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing.openai_server import ScriptResponder

from .conftest import SEPARATE_BROKER_URL, TEST_REDIS_URL, all_events, wait_event, wait_for
from .support.invariants import assert_run_sound, counter_of
from .support.workers import Deployment

pytestmark = pytest.mark.slow

LONG_TEXT = " ".join(f"token{i}" for i in range(120))


@pytest.fixture(params=["fast paths", "public APIs only"])
def cluster(request: pytest.FixtureRequest, key_prefix: str, deploy: Any, crash_versions_seam: None) -> Deployment:
    """Workers on a private queue (the session's worker never picks these runs up), with the fast paths on, then
    the same test again with them off (AGENTS_CELERY_FAST_PATHS=0)."""
    fast = "1" if request.param == "fast paths" else "0"
    cluster: Deployment = deploy("recovery", {"AGENTS_CELERY_FAST_PATHS": fast}, prefix=key_prefix)
    return cluster


@pytest.fixture
def rt(fast_settings: Any, cluster: Deployment) -> Iterator[Runtime]:
    runtime = Runtime(settings=fast_settings.model_copy(update={"queue": cluster.queue}))
    yield runtime
    runtime.close()


def counter(r: redis.Redis, prefix: str, name: str) -> int:
    return counter_of(r, prefix)(name)


def worker_of(r: redis.Redis, prefix: str, run_id: str) -> int:
    return int(wait_for(lambda: r.get(f"{prefix}:test:pid:{run_id}"), what="a worker to start the run"))


def arm(r: redis.Redis, prefix: str, point: str, run_id: str) -> None:
    r.set(f"{prefix}:test:crash:{point}:{run_id}", 1, ex=600)


def last_message_text(events: list[Event]) -> str:
    last_id = [e.data["message_id"] for e in events if e.type is EventType.TEXT_MESSAGE_START][-1]
    return "".join(
        e.data["delta"] for e in events if e.type is EventType.TEXT_MESSAGE_CONTENT and e.data["message_id"] == last_id
    )


def test_kill_during_model_streaming(
    rt: Runtime, cluster: Deployment, fake_openai: Any, r: redis.Redis, key_prefix: str
) -> None:
    cluster.start(2)
    fake_openai.responder = ScriptResponder([LONG_TEXT], token_delay=0.02)
    stream = rt.stream("fake", "talk")
    wait_event(rt, stream.id, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT and e.offset > 10)
    victim = cluster.by_pid(worker_of(r, key_prefix, stream.id))
    victim.kill()
    killed = time.monotonic()
    events = all_events(rt, stream.id)
    recovered = next(e for e in events if e.type is EventType.CUSTOM and e.data["name"] == "attempt_abandoned")
    print(f"\nrecovery after kill -9 during streaming: {time.monotonic() - killed:.2f}s to finish")
    assert_run_sound(events)
    assert recovered.data["value"]["next_attempt"] == 2
    retried = [e for e in events if e.type is EventType.STEP_STARTED and e.data["metadata"]["attempt"] == 2]
    assert len(retried) == 1
    assert last_message_text(events) == LONG_TEXT
    view = rt.get(stream.id)
    assert view.status == "completed" and view.output == LONG_TEXT
    assistant = [m for m in view.messages if m["role"] == "assistant"]
    assert [m["content"] for m in assistant] == [LONG_TEXT]  # only the committed message entered history


def test_kill_during_tool_asks_before_running_again(
    rt: Runtime, cluster: Deployment, fake_openai: Any, r: redis.Redis, key_prefix: str
) -> None:
    cluster.start(2)
    key = f"tool-{uuid.uuid4().hex[:6]}"
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("", [ScriptedToolCall("slow_count", {"key": key, "seconds": 30})]), "All done."]
    )
    stream = rt.stream("fake", "count slowly")
    wait_for(lambda: counter(r, key_prefix, key) == 1, what="the tool to start")
    cluster.by_pid(worker_of(r, key_prefix, stream.id)).kill()
    killed = time.monotonic()
    events = all_events(rt, stream.id)  # ends at the pause
    print(f"\nkill -9 during a tool: paused for a human after {time.monotonic() - killed:.2f}s")
    assert events[-1].is_pause
    interrupt = events[-1].data["outcome"]["interrupts"][0]
    assert interrupt["reason"] == "may_have_run"
    assert counter(r, key_prefix, key) == 1  # not re-run behind the user's back
    rt.continue_run(stream.id, [{"tool_call_id": interrupt["tool_call_id"], "confirmed": False}])
    events = all_events(rt, stream.id)
    assert_run_sound(events, tool_counts={key: 1}, counter=counter_of(r, key_prefix))
    assert rt.get(stream.id).status == "completed"


def live(cluster: Deployment, n: int = 2) -> None:
    """Start workers until ``n`` are alive."""
    dead = sum(w.proc.poll() is not None for w in cluster.workers)
    if len(cluster.workers) - dead < n:
        cluster.start(n - (len(cluster.workers) - dead))


def test_an_approved_rerun_that_dies_with_its_worker_asks_again(
    rt: Runtime, cluster: Deployment, fake_openai: Any, r: redis.Redis, key_prefix: str
) -> None:
    """An approval authorises one execution: the tool kills its worker on its first two executions, so the
    run pauses as "may have run" twice, and runs the call once per approval, never more."""
    key = f"die2-{uuid.uuid4().hex[:6]}"
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("", [ScriptedToolCall("die_twice", {"key": key})]), "All done."]
    )
    live(cluster)
    stream = rt.stream("fake", "die twice")
    for approval in (1, 2):
        wait_for(lambda: rt.get(stream.id).status in ("paused", "completed"), timeout=60, what="a pause")
        assert rt.get(stream.id).status == "paused", f"approval {approval - 1} ran the call more than once"
        (call,) = rt.store.load(stream.id)[0].pending
        assert call.pause_reason == "may_have_run"
        assert counter(r, key_prefix, key) == approval  # one execution per approval (and the first)
        live(cluster)
        rt.continue_run(stream.id, [{"tool_call_id": call.id, "confirmed": True}])
    wait_for(lambda: rt.get(stream.id).status == "completed", timeout=60, what="the run's end")
    assert counter(r, key_prefix, key) == 3
    events = all_events(rt, stream.id)
    results = [e for e in events if e.type is EventType.TOOL_CALL_RESULT]
    assert [e.data["content"] for e in results] == [f"survived {key}"]


def test_kill_during_idempotent_tool_reruns_it(
    rt: Runtime, cluster: Deployment, fake_openai: Any, r: redis.Redis, key_prefix: str
) -> None:
    cluster.start(2)
    key = f"idem-{uuid.uuid4().hex[:6]}"
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("", [ScriptedToolCall("idempotent_count", {"key": key, "seconds": 30})]), "All done."]
    )
    stream = rt.stream("fake", "count idempotently")
    wait_for(lambda: counter(r, key_prefix, key) == 1, what="the tool to start")
    cluster.by_pid(worker_of(r, key_prefix, stream.id)).kill()
    wait_for(lambda: counter(r, key_prefix, key) == 2, timeout=20, what="the re-run on the other worker")
    r.set(f"{key_prefix}:test:count:{key}", 2)
    # The second run sleeps 30 s too; stop waiting for it by checking the invariants of what exists so far.
    rt.stop(stream.id)
    events = all_events(rt, stream.id)
    assert_run_sound(events)


def test_kill_after_tool_finished_reuses_its_result(
    rt: Runtime, cluster: Deployment, fake_openai: Any, r: redis.Redis, key_prefix: str
) -> None:
    cluster.start(2)
    key = f"done-{uuid.uuid4().hex[:6]}"
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("", [ScriptedToolCall("slow_count", {"key": key})]), "All done."]
    )
    run_id_holder: dict[str, str] = {}
    stream = rt.stream("fake", "count once")
    run_id_holder["id"] = stream.id
    arm(r, key_prefix, "after_tool", stream.id)
    events = all_events(rt, stream.id)
    # The ledger's result was reused, the tool did not run again.
    assert_run_sound(events, tool_counts={key: 1}, counter=counter_of(r, key_prefix))
    assert rt.get(stream.id).status == "completed"
    assert any(e.type is EventType.CUSTOM and e.data["name"] == "attempt_abandoned" for e in events)


@pytest.mark.parametrize("broker", ["same Redis", "separate Redis"])
def test_kill_between_commit_and_enqueue(
    broker: str, fast_settings: Any, fake_openai: Any, r: redis.Redis, key_prefix: str, deploy: Any
) -> None:
    """Killed right after a commit. With the broker in the same Redis, the commit pushed the next task
    itself; with a broker elsewhere, the task was never sent and the sweeper sends it. (Even a pushed task
    can be lost: the Redis transport loses a message a dying worker's BRPOP took before recording it as
    unacked. The sweeper covers that too: seen here as a 2 s pause.)"""
    url = TEST_REDIS_URL if broker == "same Redis" else SEPARATE_BROKER_URL
    cluster = deploy("recovery", prefix=key_prefix, broker_url=url)
    rt = Runtime(settings=fast_settings.model_copy(update={"queue": cluster.queue, "broker_url": url}))
    try:
        cluster.start(2)
        key = f"gap-{uuid.uuid4().hex[:6]}"
        fake_openai.responder = ScriptResponder(
            [ScriptedTurn("", [ScriptedToolCall("slow_count", {"key": key})]), "Finished."]
        )
        stream = rt.stream("fake", "commit then die")
        arm(r, key_prefix, "after_commit", stream.id)
        start = time.monotonic()
        events = all_events(rt, stream.id)
        elapsed = time.monotonic() - start
        print(f"\nkill -9 between commit and enqueue ({broker}): finished after {elapsed:.2f}s")
        assert_run_sound(events, tool_counts={key: 1}, counter=counter_of(r, key_prefix))
        assert rt.get(stream.id).status == "completed"
        assert last_message_text(events) == "Finished."
    finally:
        rt.close()


def test_zombie_worker_writes_are_refused(
    rt: Runtime, cluster: Deployment, fake_openai: Any, r: redis.Redis, key_prefix: str
) -> None:
    cluster.start(2)
    fake_openai.responder = ScriptResponder([LONG_TEXT], token_delay=0.01)
    stream = rt.stream("fake", "talk then freeze")
    wait_event(rt, stream.id, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT and e.offset > 5)
    zombie = cluster.by_pid(worker_of(r, key_prefix, stream.id))
    zombie.kill(signal.SIGSTOP)
    try:
        events = all_events(rt, stream.id)  # the other worker takes over after the lease expires
    finally:
        zombie.kill(signal.SIGCONT)
    wait_for(lambda: "lost the lease" in zombie.output(), timeout=20, what="the zombie to notice it lost the lease")
    after = all_events(rt, stream.id)
    assert after == events  # nothing written after it woke up
    assert_run_sound(events)
    assert rt.get(stream.id).status == "completed" and last_message_text(events) == LONG_TEXT


def test_sigterm_loses_nothing(
    rt: Runtime, cluster: Deployment, fake_openai: Any, r: redis.Redis, key_prefix: str
) -> None:
    cluster.start(2)
    fake_openai.responder = ScriptResponder([LONG_TEXT], token_delay=0.01)
    stream = rt.stream("fake", "deploy now")
    wait_event(rt, stream.id, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT)
    cluster.by_pid(worker_of(r, key_prefix, stream.id)).kill(signal.SIGTERM)
    events = all_events(rt, stream.id)
    assert_run_sound(events)
    assert rt.get(stream.id).status == "completed" and last_message_text(events) == LONG_TEXT


def test_step_that_always_crashes_fails_the_run(
    fast_settings: Any, key_prefix: str, fake_openai: Any, r: redis.Redis, deploy: Any
) -> None:
    c = deploy("recovery", {"AGENTS_CELERY_MAX_STEP_ATTEMPTS": "2"}, prefix=key_prefix)
    runtime = Runtime(settings=fast_settings.model_copy(update={"queue": c.queue}))
    try:
        c.start(1)
        fake_openai.responder = ScriptResponder([ScriptedTurn("", [ScriptedToolCall("crash_worker", {})]), "never"])
        stream = runtime.stream("fake", "crash forever")
        deadline = time.monotonic() + 60
        while runtime.get(stream.id).status != "failed":  # keep one worker alive: each attempt kills it
            assert time.monotonic() < deadline, "run was not failed after its attempts ran out"
            for w in c.workers:
                if w.proc.poll() is not None and not getattr(w, "replaced", False):
                    w.replaced = True  # type: ignore[attr-defined]
                    c.start(1)
            time.sleep(0.05)
        events = all_events(runtime, stream.id)
        assert_run_sound(events)
        assert events[-1].type is EventType.RUN_ERROR and events[-1].data["code"] == "abandoned"
    finally:
        runtime.close()


@pytest.mark.serial  # its deadlines assume the machine to itself: runs alone, after the parallel tiers
@pytest.mark.timeout(300)
def test_soak_runs_survive_a_worker_killed_every_few_seconds(
    fast_settings: Any, key_prefix: str, fake_openai: Any, r: redis.Redis, deploy: Any
) -> None:
    c = deploy("recovery", {"AGENTS_CELERY_MAX_STEP_ATTEMPTS": "20"}, prefix=key_prefix)
    runtime = Runtime(settings=fast_settings.model_copy(update={"queue": c.queue}))
    tag = uuid.uuid4().hex[:6]

    def responder(request: dict[str, Any]) -> Any:
        # Tools of 2 s: the soak lasts ~15 s, long enough for 3 kills or more however fast a worker starts (with
        # 1 s tools and workers forked ready in ~1 s, the 30 runs could end after 2).
        user = [m["content"] for m in request["messages"] if m["role"] == "user"][-1]
        turns = [
            ScriptedTurn(
                "Working. ", [ScriptedToolCall("slow_count", {"key": f"soak-{tag}-{user}-{part}", "seconds": 2})]
            )
            for part in ("a", "b")
        ] + [ScriptedTurn(f"Done with {user}.")]
        return ScriptResponder(turns, token_delay=0.005)(request)

    fake_openai.responder = responder
    try:
        c.start(3)
        runs = [runtime.stream("fake", f"job{i}").id for i in range(30)]
        kills = 0
        deadline = time.monotonic() + 240
        next_kill = time.monotonic() + 1
        declined: set[str] = set()
        while True:
            views = [runtime.get(rid) for rid in runs]
            for v in views:  # a tool interrupted mid-run is surfaced; the operator declines re-running it
                if v.status == "paused" and v.pending:
                    declined.update(str(p.args.get("key")) for p in v.pending)
                    runtime.continue_run(v.run_id, [{"tool_call_id": p.id, "confirmed": False} for p in v.pending])
            if all(v.status.is_final for v in views):
                break
            assert time.monotonic() < deadline, f"soak did not finish: {[v.status.value for v in views]}"
            if time.monotonic() > next_kill:
                alive = [w for w in c.workers if w.proc.poll() is None]
                alive[kills % len(alive)].kill()
                kills += 1
                c.start(1)
                next_kill = time.monotonic() + 1.5
            time.sleep(0.1)
        print(f"\nsoak: 30 runs, {kills} workers killed with -9")
        for i, rid in enumerate(runs):
            events = all_events(runtime, rid)
            assert_run_sound(events)
            assert runtime.get(rid).status == "completed", rid
            for part in ("a", "b"):
                key = f"soak-{tag}-job{i}-{part}"
                # Never twice; once, unless the call was declined after a kill that may have come before the
                # tool's first line (the ledger said "started", the tool had not counted yet).
                assert counter(r, key_prefix, key) == 1 or (key in declined and counter(r, key_prefix, key) == 0)
        assert kills >= 3
    finally:
        runtime.close()


def test_kill_with_rabbitmq_broker(
    key_prefix: str, fake_openai: Any, fast_settings: Any, r: redis.Redis, deploy: Any
) -> None:
    amqp = os.environ.get("AGENTS_CELERY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
    # A key prefix of its own: the session's worker (Redis broker) sweeps its prefix's runs and would re-send
    # this one to the Redis broker, where nobody listens. One prefix, one broker (docs/operations.md).
    prefix = f"{key_prefix}-amqp"
    c = deploy("recovery", prefix=prefix, broker_url=amqp)
    update = {"queue": c.queue, "broker_url": amqp, "key_prefix": prefix}
    runtime = Runtime(settings=fast_settings.model_copy(update=update))
    try:
        c.start(2)
        fake_openai.responder = ScriptResponder([LONG_TEXT], token_delay=0.02)
        stream = runtime.stream("fake", "talk over amqp")
        wait_event(runtime, stream.id, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT and e.offset > 10)
        c.by_pid(worker_of(r, prefix, stream.id)).kill()
        events = all_events(runtime, stream.id)
        assert_run_sound(events)
        assert runtime.get(stream.id).status == "completed" and last_message_text(events) == LONG_TEXT
    finally:
        runtime.close()


def test_prefork_pool_child_killed_mid_tool(
    rt: Runtime, cluster: Deployment, fake_openai: Any, r: redis.Redis, key_prefix: str
) -> None:
    """Celery's default pool: a pool child killed with -9 mid-tool; the parent replaces it and the run recovers."""
    worker = cluster.worker(concurrency=2, pool="prefork")
    key = f"prefork-{uuid.uuid4().hex[:6]}"
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("", [ScriptedToolCall("idempotent_count", {"key": key, "seconds": 3})]), "All done."]
    )
    stream = rt.stream("fake", "count in a pool child")
    wait_for(lambda: counter(r, key_prefix, key) == 1, what="the tool to start in a pool child")
    child = worker_of(r, key_prefix, stream.id)
    assert child != worker.proc.pid  # the step runs in a child, not in the worker's main process
    os.kill(child, signal.SIGKILL)
    wait_for(lambda: counter(r, key_prefix, key) == 2, timeout=30, what="the re-run in another pool child")
    assert worker.proc.poll() is None  # the worker itself lived on
    events = all_events(rt, stream.id)
    # Declared idempotent: re-run once, after the crash.
    assert_run_sound(events, tool_counts={key: 2}, counter=counter_of(r, key_prefix))
    assert rt.get(stream.id).status == "completed" and last_message_text(events) == "All done."

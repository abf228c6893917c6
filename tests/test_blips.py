"""Connection blips are not the run's failure (DESIGN rule 9): resets of every worker connection to Redis, many
times in one streamed turn, cost no attempt of the step's budget; the run completes in seconds, its log is
contiguous and its tool runs once."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from typing import Any
from urllib.parse import urlparse

import pytest
import redis

from agents_celery import Runtime, ScriptedToolCall, ScriptedTurn
from agents_celery.engine.steps import step_started
from agents_celery.events import EventType, make_event
from agents_celery.runs import RunState, RunStatus
from agents_celery.settings import Settings
from agents_celery.storage.connections import ThreadClients
from agents_celery.storage.store import RunStore

from .conftest import TEST_BROKER_URL, TEST_REDIS_URL, new_id, wait_for
from .support.faults import ResettingProxy
from .support.invariants import assert_run_sound, counter_of

pytestmark = pytest.mark.timeout(90)

TEXT = " ".join(f"word{i}" for i in range(60))


def _redis_behind(proxy: ResettingProxy) -> str:
    """The test Redis's URL, through ``proxy`` (same database)."""
    return proxy.url(path=urlparse(TEST_REDIS_URL).path or "/0")


def _contents(runtime: Runtime, run_id: str) -> int:
    return sum(1 for e in runtime.store.log.read(run_id) if e.type is EventType.TEXT_MESSAGE_CONTENT)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("resets", "half_open", "fast"),
    [(1, True, "1"), (2, True, "1"), (5, True, "1"), (2, True, "0")],
    ids=["1 reset", "2 resets", "5 resets", "2 resets, public APIs only"],
)
def test_resets_of_every_worker_connection_during_a_turn_cost_no_attempt(
    worker_env: dict[str, str], deploy: Any, script: Any, r: Any, resets: int, half_open: bool, fast: str
) -> None:
    """Every connection of the worker to Redis is reset ``resets`` times while one turn streams (half-open: the
    proxy forgets them, as a load balancer that lost its state, and each idle one fails on its next command).
    Each reset kills the streaming attempt; none counts against ``max_step_attempts`` (3), so even 5 in a row
    end ``completed``, within 15 s, with every offset once and the turn's tool run once."""
    upstream = urlparse(TEST_REDIS_URL)
    proxy = ResettingProxy((upstream.hostname or "127.0.0.1", upstream.port or 6379))
    own = deploy("blips", prefix=worker_env["AGENTS_CELERY_KEY_PREFIX"])
    worker = own.worker({"AGENTS_CELERY_REDIS_URL": _redis_behind(proxy), "AGENTS_CELERY_FAST_PATHS": fast})
    runtime = own.runtime
    key = f"blip-{uuid.uuid4().hex[:6]}"
    prefix = worker_env["AGENTS_CELERY_KEY_PREFIX"]
    try:
        # Warm: four runs at once, so each of the worker's four threads keeps a connection of its own, as a
        # worker that has been serving for a while does; a reset leaves every one of them broken.
        script("warm", token_delay=0.1)
        warm = [runtime.stream("fake", "warm up") for _ in range(4)]
        wait_for(lambda: all(runtime.get(w.run_id).status.is_final for w in warm), timeout=20, what="warm-up")
        script(ScriptedTurn(TEXT, [ScriptedToolCall("slow_count", {"key": key})]), "Done.", token_delay=0.02)
        t0 = time.monotonic()
        stream = runtime.stream("fake", "talk for a while, then count")
        seen = 0
        for n in range(resets):
            # the current attempt is streaming: 8 more tokens since the last reset
            seen = wait_for(
                lambda s=seen: (c := _contents(runtime, stream.run_id)) >= s + 8 and c,
                timeout=15,
                what=f"an attempt to stream before reset {n + 1}",
            )
            assert proxy.reset(half_open=half_open) > 0
        wait_for(lambda: runtime.get(stream.run_id).status.is_final, timeout=20, what="the run to end")
        took = time.monotonic() - t0
        view = runtime.get(stream.run_id)
        assert view.status == "completed", (view.status, view.error, worker.output()[-3000:])
        assert took < 15, took
        assert view.output == "Done."
        events = runtime.store.log.read(stream.run_id)
        assert_run_sound(events, tool_counts={key: 1}, counter=counter_of(r, prefix))  # the tool ran once
        assert events[-1].type is EventType.RUN_FINISHED and events[-1].data["outcome"]["type"] == "success"
        abandoned = [e for e in events if e.type is EventType.CUSTOM and e.data.get("name") == "attempt_abandoned"]
        assert len(abandoned) == resets, [e.data for e in abandoned]  # one attempt per reset, none per stale connection
    finally:
        worker.stop()
        proxy.close()


# -- the store's side, without a worker ---------------------------------------------------------------------

STARTED = (step_started("model", 0, 1), step_started("tools", 0, 1))


def _run(store: RunStore) -> str:
    run_id = new_id()
    state = RunState(run_id=run_id, agent_id="a", session_id="s")
    store.create(state, [make_event(EventType.RUN_STARTED, thread_id="s", run_id=run_id)])
    return run_id


def _cleanup(r: redis.Redis, store: RunStore, run_id: str) -> None:
    for key in vars(store.keys.run(run_id)).values():
        r.delete(key)


def test_a_blip_is_numbered_but_not_counted_and_its_budget_is_bounded(r: redis.Redis, settings: Settings) -> None:
    """An attempt given back as a blip frees the lease; the next claim is attempt 2 but counted as 1. Past
    ``max_step_blips`` a give-back counts; a lease that is not ours is not given back; a new step starts over."""
    store = RunStore(r, settings.model_copy(update={"max_step_blips": 2}))
    run_id = _run(store)
    try:
        assert store.claim(run_id, 0, "t1", STARTED).counted == 1
        assert store.give_back(run_id, 0, "t1") is True
        assert not r.exists(store.keys.run(run_id).lease)
        second = store.claim(run_id, 0, "t2", STARTED)
        assert (second.attempt, second.blips, second.counted) == (2, 1, 1)
        assert store.give_back(run_id, 0, "someone else's") is False  # not ours: nothing changes
        assert store.give_back(run_id, 0, "t2") is True
        third = store.claim(run_id, 0, "t3", STARTED)
        assert (third.attempt, third.blips, third.counted) == (3, 2, 1)
        assert store.give_back(run_id, 0, "t3") is False  # the budget of blips is spent: this one counts
        fourth = store.claim(run_id, 0, "t4", STARTED)
        assert (fourth.attempt, fourth.blips, fourth.counted) == (4, 2, 2)
        assert fourth.state is not None
        store.commit(fourth.state.moved_to(RunStatus.RUNNING), "t4", 0, 1, [], "live")
        fresh = store.claim(run_id, 1, "t5", STARTED)
        assert (fresh.attempt, fresh.blips) == (1, 0)  # a new step: attempts and blips start over
    finally:
        _cleanup(r, store, run_id)


class _LosesReply:
    """The commit script, run for real (or not) and then failing like a reset connection, once."""

    def __init__(self, script: Any, runs: bool) -> None:
        self.script, self.runs, self.calls = script, runs, 0

    def __call__(self, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            if self.runs:
                self.script(**kwargs)
            raise redis.ConnectionError("Connection reset by peer")
        return self.script(**kwargs)


@pytest.mark.parametrize("ran", [True, False], ids=["reply lost", "never ran"])
def test_a_commit_hit_by_a_connection_error_is_applied_once(r: redis.Redis, settings: Settings, ran: bool) -> None:
    """A commit whose reply was lost is recognised by its state version (not sent again, which the
    compare-and-set would refuse); one that never ran is sent once more. Either way it is applied once."""
    store = RunStore(r, settings)
    run_id = _run(store)
    try:
        claim = store.claim(run_id, 0, "t1", STARTED)
        assert claim.state is not None
        store._commit = lossy = _LosesReply(store._commit, runs=ran)  # type: ignore[method-assign]
        event = make_event(EventType.CUSTOM, name="once", value=1)
        store.commit(claim.state.moved_to(RunStatus.RUNNING), "t1", 0, 1, [event], "live")
        assert lossy.calls == (1 if ran else 2)
        state, step = store.load(run_id)
        assert (step, state.status) == (1, RunStatus.RUNNING)
        events = store.log.read(run_id)
        assert [e.data.get("name") for e in events].count("once") == 1
        assert [e.offset for e in events] == list(range(len(events)))
    finally:
        _cleanup(r, store, run_id)


def test_a_connection_error_renews_every_threads_kept_connection() -> None:
    """After :meth:`ThreadClients.renew` a thread's kept connection is made again before its next command (one
    broken by a half-open reset shows nothing until it is used)."""
    clients = ThreadClients(redis.Redis.from_url(TEST_REDIS_URL))
    ids = [int(clients.get().client_id()) for _ in range(2)]
    assert ids[0] == ids[1]  # kept
    clients.renew()
    assert int(clients.get().client_id()) != ids[1]  # made again
    clients.shared.close()


def test_a_step_sent_again_is_not_sent_once_more_while_that_copy_is_unclaimed(
    r: redis.Redis, settings: Settings
) -> None:
    """A consumer that went deaf (its broker connection half-open) leaves the sweeper's copy in the queue: later
    sweeps send no other copy until a claim took it (and its attempt died: then it goes again)."""
    from agents_celery.engine.sweeper import sweep

    private = settings.model_copy(update={"key_prefix": f"{settings.key_prefix}:resend-{new_id()[:6]}"})
    store = RunStore(r, private)
    run_id = _run(store)
    sent: list[tuple[Any, ...]] = []

    def sweep_later(seconds: float) -> list[str]:
        r.delete(store.keys.sweeper)  # another interval
        return sweep(store, lambda *a: sent.append(a), now_ms=int((time.time() + seconds) * 1000), backlog=lambda q: 0)

    try:
        store.watch(run_id, -1)
        assert sweep_later(0.01) == [run_id]
        for later in (10, 20, 25):  # grace after grace, the copy sits in a queue nobody hears
            assert sweep_later(later) == []
        assert len(sent) == 1
        claim = store.claim(run_id, 0, "t1", STARTED)  # heard at last; that attempt then dies
        assert claim.outcome == "OK"
        r.delete(store.keys.run(run_id).lease)
        assert sweep_later(60) == [run_id]
        assert len(sent) == 2
    finally:
        _cleanup(r, store, run_id)
        r.delete(store.keys.sweeper, store.keys.live)


# -- the broker's connections -------------------------------------------------------------------------------


def test_our_broker_connection_gets_short_health_checks_a_hosts_own_is_left_alone(settings: Settings) -> None:
    """kombu drops a consumer's stale BRPOP after ``1 + 2 * health_check_interval`` s: ours is 3 (7 s, not 51), on
    our own app and on a host app whose broker we set; what a host set itself wins; its own broker is its own."""
    from celery import Celery

    from agents_celery.broker.celery_app import BROKER_HEALTH, configure, create_celery_app
    from agents_celery.broker.fastpaths import DirectPublisher
    from agents_celery.broker.publisher import STEP_TASK

    apps = [create_celery_app(settings, agents={})]
    try:
        assert apps[0].conf.broker_transport_options == BROKER_HEALTH
        assert DirectPublisher(apps[0], STEP_TASK).route(settings.queue) is not None  # still the fast publish
        apps.append(Celery("brokerless", set_as_current=False))
        apps[-1].conf.broker_transport_options = {"health_check_interval": 10}
        configure(apps[-1], settings, agents={})
        assert apps[-1].conf.broker_transport_options == {**BROKER_HEALTH, "health_check_interval": 10}
        apps.append(Celery("own", broker=TEST_BROKER_URL, set_as_current=False))
        configure(apps[-1], settings, agents={})
        assert not apps[-1].conf.broker_transport_options
        from kombu.exceptions import OperationalError

        from agents_celery.broker.extension import broker_blips

        blips = broker_blips(apps[-1])
        assert OperationalError in blips and redis.ConnectionError in blips  # what losing the broker raises
        assert OSError not in blips  # what a bug raises too
    finally:
        for app in apps:
            app.close()


@pytest.mark.slow
def test_a_broker_reset_delays_a_run_by_seconds_and_queues_few_duplicates(
    worker_env: dict[str, str], deploy: Any, script: Any, r: Any
) -> None:
    """The worker reaches the broker through a proxy that forgets every connection (half-open) while a turn
    streams: its consumer's waiting BRPOP will never be answered. kombu's stale-BRPOP check drops it after
    ``brpop_timeout + 2 * health_check_interval`` (51 s by kombu's default; a few seconds by ours), and until then
    the sweeper does not pile copies of the step into the queue. The run completes within 15 s of the reset."""
    upstream = urlparse(TEST_BROKER_URL)
    proxy = ResettingProxy((upstream.hostname or "127.0.0.1", upstream.port or 6379))
    own = deploy("brokerblip", prefix=worker_env["AGENTS_CELERY_KEY_PREFIX"])
    queue = own.queue
    worker = own.worker({"CELERY_BROKER_URL": proxy.url(path=upstream.path or "/0")})
    runtime = own.runtime  # publishes to the broker itself
    key = f"bblip-{uuid.uuid4().hex[:6]}"
    prefix = worker_env["AGENTS_CELERY_KEY_PREFIX"]
    broker = redis.Redis.from_url(TEST_BROKER_URL)
    try:
        script(ScriptedTurn(TEXT, [ScriptedToolCall("slow_count", {"key": key})]), "Done.", token_delay=0.02)
        stream = runtime.stream("fake", "talk for a while, then count")
        wait_for(lambda: _contents(runtime, stream.run_id) >= 8, timeout=15, what="the turn to stream")
        assert proxy.reset(half_open=True) > 0
        t0 = time.monotonic()
        copies: list[int] = []  # the most copies of one step in the queue, at each look

        def ended() -> bool:
            queued = Counter(
                tuple(json.loads(m)["headers"]["argsrepr"][1:-1].split(", ")) for m in broker.lrange(queue, 0, -1)
            )
            copies.append(max(queued.values(), default=0))
            return runtime.get(stream.run_id).status.is_final

        wait_for(ended, timeout=70, interval=0.05, what="the run to end")
        took = time.monotonic() - t0
        view = runtime.get(stream.run_id)
        assert view.status == "completed", (view.status, view.error, worker.output()[-3000:])
        assert took < 15, took
        # Messages whose acks were lost come back when the consumer reconnects (Celery's at-least-once); copies the
        # sweeper sent are held back while one is queued: never more than two of one step at a time.
        assert max(copies) <= 2, copies
        events = runtime.store.log.read(stream.run_id)
        assert_run_sound(events, tool_counts={key: 1}, counter=counter_of(r, prefix))
    finally:
        broker.close()
        worker.stop()
        proxy.close()


def test_a_tool_step_given_back_before_its_call_ran_runs_it_next_time(r: redis.Redis, settings: Settings) -> None:
    """The claim of a tool step starts its calls in the effect ledger. When Redis fails before a call was invoked,
    the attempt's give-back forgets those entries: the next attempt runs the call (once), instead of pausing the
    run to ask a human whether a call that never ran may have run."""
    from agents_celery import Agent, ScriptedModel, tool
    from agents_celery.engine.engine import Engine

    ran: list[str] = []

    @tool
    def note(text: str) -> str:
        """Notes something down."""
        ran.append(text)
        return "noted"

    model = ScriptedModel([ScriptedTurn("", [ScriptedToolCall("note", {"text": "x"})]), "Done."])
    agent = Agent(name="blipper", instructions="Note.", model=model, tools=[note])
    private = settings.model_copy(update={"key_prefix": f"{settings.key_prefix}:ledger-{new_id()[:6]}"})
    store = RunStore(redis.Redis.from_url(TEST_REDIS_URL), private, own_connections=True)
    sent: list[tuple[str, int, str]] = []
    engine = Engine(store, {"blipper": agent}, lambda *a: sent.append(a))
    run_id = new_id()
    state = RunState(run_id=run_id, agent_id="blipper", session_id="s", messages=[{"role": "user", "content": "go"}])
    store.create(state, [make_event(EventType.RUN_STARTED, thread_id="s", run_id=run_id)])
    try:
        assert engine.execute(run_id, 0) == "committed"  # the turn asks for the call
        decide = engine._decide

        def blip(*args: Any) -> Any:
            raise redis.ConnectionError("Connection reset by peer")

        engine._decide = blip  # type: ignore[method-assign]
        assert engine.execute(run_id, 1) == "given back"  # after the claim started the call, before it ran
        assert sent[-1] == (run_id, 1, "blipper") and not ran  # sent again at once
        engine._decide = decide  # type: ignore[method-assign]
        assert engine.execute(run_id, 1) == "committed"
        assert ran == ["x"]
        assert engine.execute(run_id, 2) == "committed"
        view, _ = store.load(run_id)
        assert view.status == RunStatus.COMPLETED, view.status
    finally:
        engine.keeper.close()
        _cleanup(r, store, run_id)
        store.redis.close()


def test_a_redis_that_keeps_failing_ends_the_run_after_the_blips_and_the_attempts(
    r: redis.Redis, settings: Settings
) -> None:
    """Blips are bounded: past ``max_step_blips`` they count as attempts, and the run fails with
    AbandonedRunError saying how many were connection errors, instead of retrying for ever."""
    from agents_celery import Agent, ScriptedModel
    from agents_celery.engine.engine import Engine

    agent = Agent(name="never", instructions="-", model=ScriptedModel(["never said"]))
    private = settings.model_copy(
        update={"key_prefix": f"{settings.key_prefix}:budget-{new_id()[:6]}", "max_step_blips": 2}
    )
    store = RunStore(redis.Redis.from_url(TEST_REDIS_URL), private, own_connections=True)
    engine = Engine(store, {"never": agent}, lambda *a: None)
    run_id = new_id()
    state = RunState(run_id=run_id, agent_id="never", session_id="s", messages=[{"role": "user", "content": "go"}])
    store.create(state, [make_event(EventType.RUN_STARTED, thread_id="s", run_id=run_id)])
    decide = engine._decide

    def blip(*args: Any) -> Any:
        raise redis.ConnectionError("Connection reset by peer")

    try:
        engine._decide = blip  # type: ignore[method-assign]
        outcomes = [engine.execute(run_id, 0) for _ in range(2 + 3)]  # two blips, then three counted attempts
        assert outcomes == ["given back"] * 5
        engine._decide = decide  # type: ignore[method-assign]
        assert engine.execute(run_id, 0) == "committed"
        view, _ = store.load(run_id)
        assert view.status == RunStatus.FAILED
        assert view.error is not None and view.error.type == "AbandonedRunError"
        assert "attempted 3 times without committing (and interrupted 2 times by connection errors)" in str(
            view.error.message
        )
    finally:
        engine.keeper.close()
        _cleanup(r, store, run_id)
        store.redis.close()

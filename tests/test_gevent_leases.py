"""Leases on a busy gevent worker: a sync tool that computes without yielding holds the hub, every greenlet of the
process with it; the lease keeper beats from an OS thread of its own, so the leases of that run and of the runs
streaming beside it never expire, and nothing is retried (issue #32).

On the keeper as a greenlet (before) the compute below outlived the lease: its commit was refused and the step
ran a second attempt.

And what a busy hub does after the work: a commit that reaches Redis long after the step's work ended still holds
its lease (in process, the delay made by the delivery).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from agents_celery import ScriptedToolCall
from agents_celery.events import EventType
from agents_celery.storage.keys import Keys
from agents_celery.testing.openai_server import FakeReply, turn_index

from .conftest import all_events, wait_for
from .support.invariants import assert_run_sound, counter_of

pytestmark = pytest.mark.timeout(120)

#: The default lease TTL and heartbeat (5 s, 1 s) scaled down by the same ratio to keep the test short.
TTL, HEARTBEAT = 2.0, 0.4
#: How long the tool computes without yielding: twice the TTL.
COMPUTE = 2 * TTL
#: Runs streaming beside it on the same worker: 60 tokens 0.05 s apart (3 s, plus the compute they wait out).
STREAMS, TOKENS, TOKEN_DELAY = 8, 60, 0.05


def compute_or_stream(request: dict[str, Any]) -> FakeReply:
    """``compute:<key>``: the ``compute`` tool for :data:`COMPUTE` seconds, then a short answer; anything else: a
    streamed answer of :data:`TOKENS` tokens."""
    messages = request.get("messages") or []
    key = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
    if key == "warm up":
        return FakeReply(text="Warm.")
    if not key.startswith("compute:"):
        return FakeReply(text=" ".join(["word"] * TOKENS), token_delay=TOKEN_DELAY)
    if turn_index(messages) > 0:
        return FakeReply(text="Computed.")
    return FakeReply(tool_calls=(ScriptedToolCall("compute", {"key": key, "seconds": COMPUTE}, "call_c"),))


def _written(r: Any, keys: Keys, run_id: str) -> int:
    """How many events the run's log holds."""
    return int(r.hget(keys.run(run_id).run, "next") or 0)


def _ended(rt: Any, run_id: str) -> Any:
    view = rt.get_stream(run_id).get()
    return view if view.status.value in ("completed", "failed", "cancelled") else None


@pytest.mark.serial  # its deadlines assume the machine to itself: runs alone, after the parallel tiers
def test_a_tool_computing_past_the_ttl_keeps_every_lease_on_a_gevent_worker(
    deploy: Any, fake_openai: Any, r: Any
) -> None:
    """While the tool computes for twice the TTL the run's lease stays the same token in Redis (probed from here),
    the streaming runs keep theirs, and afterwards every step has exactly one attempt and the tool ran once."""
    timings = {"AGENTS_CELERY_LEASE_TTL_SECONDS": str(TTL), "AGENTS_CELERY_HEARTBEAT_SECONDS": str(HEARTBEAT)}
    own = deploy("gevent-leases", timings)
    fake_openai.responder = compute_or_stream
    own.worker(pool="gevent", concurrency=50)
    rt, keys, count = own.runtime, Keys(own.prefix), counter_of(r, own.prefix)

    # One run first: a worker's first model turns import and build the openai SDK's models, seconds of CPU on a
    # loaded machine, and a step claimed meanwhile but not yet handed to the keeper could lose its lease (the window
    # docs/scaling.md names), which is not what this test is about.
    warm = rt.stream("fake", "warm up").id
    wait_for(lambda: _ended(rt, warm), timeout=30, what="the warm-up run to end")
    streams = [rt.stream("fake", f"stream {i}").id for i in range(STREAMS)]
    # Streaming (a few tokens written): their steps are the keeper's by then (a step claimed but not yet held when
    # the hub stops is not: see docs/scaling.md).
    wait_for(lambda: all(_written(r, keys, i) >= 6 for i in streams), timeout=20, what="the streams to stream")
    run_id = rt.stream("fake", "compute:c1").id
    lease = keys.run(run_id).lease
    wait_for(lambda: count("compute:c1"), timeout=20, what="the tool to start computing")
    token = r.get(lease)
    t0 = time.monotonic()
    # Probe the lease until the tool is done: it must be the same token every time (expired: None). A probe counts
    # only if the tool was still computing after it (the step releases the lease as soon as it commits).
    seen: list[bytes | None] = []

    def computed() -> bool:
        value = r.get(lease)
        if count("compute:c1:done"):
            return True
        seen.append(value)
        return False

    wait_for(computed, timeout=COMPUTE + 15, interval=0.05, what="the tool to finish computing")
    took = time.monotonic() - t0
    assert token is not None and took >= COMPUTE - 0.5, (token, took)
    assert set(seen) == {token}, f"the lease changed while the tool computed {took:.1f}s: {Counter(seen)}"

    for i in [*streams, run_id]:
        view = wait_for(lambda i=i: _ended(rt, i), timeout=30, what=f"run {i} to end: {own.workers[0].output()}")
        assert view.status.value == "completed", (view.status, view.error)
        events = all_events(rt, i, timeout=10)
        tools = {"compute:c1": 1, "compute:c1:done": 1} if i == run_id else None
        assert_run_sound(events, tool_counts=tools, counter=count)
        starts = Counter(e.data["step_name"] for e in events if e.type is EventType.STEP_STARTED)
        again = f"run {i}: a step was attempted again (a lease expired): {starts}\n{own.workers[0].output()}"
        assert set(starts.values()) == {1}, again


def test_the_lease_is_renewed_until_the_commit_gives_it_up(settings: Any) -> None:
    """A step whose commit reaches Redis long after its work ended (a greenlet waiting for a busy hub: seconds with
    a thousand runs ending together) still holds its lease then. The keeper stopped renewing it when the work
    ended: the lease expired before the commit, which was refused ("lost the lease"), and the turn ran again."""
    from contextlib import contextmanager

    from agents_celery import Agent, ScriptedModel
    from agents_celery.engine.attempt import Delivery
    from agents_celery.testing import InlineRunner

    ttl = 0.4
    timings = {"lease_ttl_seconds": ttl, "heartbeat_seconds": 0.1, "stop_poll_seconds": 0.05}

    class Late(Delivery):
        """Its commit is sent three TTLs after the step's work ended."""

        @contextmanager
        def committing(self, run_id: str, next_step: int, agent_id: str, push_next: bool) -> Any:
            with super().committing(run_id, next_step, agent_id, push_next) as carried:
                time.sleep(3 * ttl)  # the delay under test (the hub elsewhere), not a wait for an outcome
                yield carried

    agent = Agent("late", model=ScriptedModel(["Committed late."]))
    with InlineRunner([agent], settings=settings.model_copy(update=timings)) as runner:
        run_id = runner.stream("late", "hi").run_id
        runner._queue.clear()  # the step is run here, with the late delivery
        assert runner.engine.execute(run_id, 0, Late()) == "committed"
        view = runner.get(run_id)
        assert view.status.value == "completed" and view.output == "Committed late."
        assert [e.type for e in runner.events(run_id)].count("STEP_STARTED") == 1

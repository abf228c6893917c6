"""``agents-celery worker --pool gevent``: steps run as greenlets of one process, many at once.

Before the command monkey-patched, a gevent worker received a step and never ran it (the consumer's blocking
loop starved the hub: the run stayed ``queued``). These tests run real gevent workers: tools (sync, async,
one past its timeout), a stop while a tool hangs, and (slow) a thousand runs streaming at once on one process,
a hundred of them stopped mid-stream, then the worker killed -9 and every run recovered on a second one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from agents_celery import ScriptedToolCall
from agents_celery.events import EventType
from agents_celery.testing.openai_server import FakeReply, server_process, turn_index

from .conftest import all_events, wait_for
from .support.invariants import assert_run_sound, counter_of

pytestmark = pytest.mark.timeout(180)

#: A stop is seen within the stop poll, and a call gets this grace before the step walks away from it.
GRACE = 0.2


def _user_text(request: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(request.get("messages") or []) if m.get("role") == "user")


def tools_then_text(request: dict[str, Any]) -> FakeReply:
    """Turn 0: three tools side by side (a 1 s sync tool, an async one, one past its 0.5 s timeout), or ``hang``
    for a message ``hang:<key>``; then a streamed answer."""
    messages = request.get("messages") or []
    key = _user_text(request)
    if turn_index(messages) > 0:
        return FakeReply(text="All three tools answered.", token_delay=0.01)
    if key.startswith("hang:"):
        return FakeReply(tool_calls=(ScriptedToolCall("hang", {"key": key}, "call_h"),))
    calls = (
        ScriptedToolCall("slow_count", {"key": key, "seconds": 1.0}, "call_s"),
        ScriptedToolCall("async_lookup", {"word": key}, "call_a"),
        ScriptedToolCall("slow_lookup", {"word": key}, "call_t"),
    )
    return FakeReply(tool_calls=calls)


@pytest.fixture
def gevent_deployment(deploy: Any, fake_openai: Any) -> Any:
    # Twenty runs each walk away from a call past its timeout at once: more than the default cap on calls walked
    # away from (16), which would refuse steps until those calls return (docs/scaling.md says to raise it here).
    settings = {"AGENTS_CELERY_STOP_GRACE_SECONDS": str(GRACE), "AGENTS_CELERY_MAX_ABANDONED_THREADS": "64"}
    own = deploy("gevent", settings)
    fake_openai.responder = tools_then_text
    own.worker(pool="gevent", concurrency=200)
    return own


def test_a_gevent_worker_runs_steps_side_by_side(gevent_deployment: Any, r: Any) -> None:
    """Twenty runs, each with a 1 s tool: together in less than the 20 s they would take one at a time; each
    tool ran once, the async tool ran under the greenlet's own loop, the one past its timeout was abandoned."""
    own, rt = gevent_deployment, gevent_deployment.runtime
    t0 = time.monotonic()
    ids = [rt.stream("fake", f"k{i}").id for i in range(20)]
    views = [wait_for(lambda i=i: _ended(rt, i), timeout=30, what=f"run {i} to end") for i in ids]
    took = time.monotonic() - t0
    assert [v.status.value for v in views] == ["completed"] * 20, [(v.status, v.error) for v in views]
    assert took < 18, f"20 runs with a 1 s tool each took {took:.1f}s on one gevent worker: not side by side"
    count = counter_of(r, own.prefix)
    for i, run_id in enumerate(ids):
        events = all_events(rt, run_id, timeout=10)
        assert_run_sound(events, tool_counts={f"k{i}": 1}, counter=count)
        results = {e.data["tool_call_id"]: e.data["content"] for e in events if e.type is EventType.TOOL_CALL_RESULT}
        assert results["call_a"] == f"K{i}"
        assert "did not finish within 0.5s" in results["call_t"]
    assert count("async_lookup") == 20


def test_stop_ends_a_run_whose_tool_hangs_on_a_gevent_worker(gevent_deployment: Any, r: Any) -> None:
    own, rt = gevent_deployment, gevent_deployment.runtime
    run_id = rt.stream("fake", "hang:g1").id
    count = counter_of(r, own.prefix)
    wait_for(lambda: count("hang:hang:g1"), timeout=15, what="the tool to start")
    t0 = time.monotonic()
    rt.stop(run_id)
    view = wait_for(lambda: _ended(rt, run_id), timeout=10, what="the stopped run to end")
    took = time.monotonic() - t0
    assert view.status.value == "cancelled"
    bound = own.settings.stop_poll_seconds + GRACE + 2.0
    assert took < bound, f"stop took {took:.2f}s (bound {bound:.2f}s)"
    assert_run_sound(all_events(rt, run_id, timeout=10))
    # The worker's greenlets still serve: a new run completes.
    after = rt.stream("fake", "k-after").id
    view = wait_for(lambda: _ended(rt, after), timeout=30, what=f"a later run to end: {own.workers[0].output()}")
    assert view.status.value == "completed"


def _ended(rt: Any, run_id: str) -> Any:
    view = rt.get_stream(run_id).get()
    return view if view.status.value in ("completed", "failed", "cancelled") else None


# -- a thousand runs in flight on one process ---------------------------------------------------------------

RUNS = 1000
STOPPED = 100
#: Seconds a hundred stops may take past the stop poll and grace, on a process streaming the others.
STOP_SLACK = 8.0
#: The share of the runs that must hold their lease at once on the one process (a floor for a shared 2-core
#: machine: an idle one holds most of them; the test prints the peak).
IN_FLIGHT = 0.10
#: The fake model: 50 tokens, 0.1 s apart (5 s a turn).
TOKENS, TOKEN_DELAY = 50, 0.1
#: Timings for a thousand runs on one busy process: the default lease TTL and heartbeat (the keeper beats from an OS
#: thread however busy the hub is; the tests' usual ones are 2 s / 0.4 s), a stop poll and a sweep faster than the
#: defaults to keep the test short.
BIG = {
    "AGENTS_CELERY_LEASE_TTL_SECONDS": "5",
    "AGENTS_CELERY_HEARTBEAT_SECONDS": "1",
    "AGENTS_CELERY_STOP_POLL_SECONDS": "0.25",
    "AGENTS_CELERY_STOP_GRACE_SECONDS": str(GRACE),
    "AGENTS_CELERY_SWEEP_INTERVAL_SECONDS": "0.5",
    "AGENTS_CELERY_ENQUEUE_GRACE_SECONDS": "15",
}


@pytest.fixture(scope="module")
def streaming_server() -> Iterator[str]:
    """The fake OpenAI server in a process of its own (a thread per stream: a thousand at once), so its work
    does not share the test's interpreter; every request is answered with 50 tokens over 5 s."""
    with server_process(TOKENS, TOKEN_DELAY) as url:
        yield url


def _probe(r: Any, keys: Any, ids: list[str]) -> tuple[int, int]:
    """(runs holding a lease now, runs whose log has ended), in one round trip."""
    with r.pipeline(transaction=False) as pipe:
        for run_id in ids:
            pipe.exists(keys.run(run_id).lease)
            pipe.hget(keys.run(run_id).run, "log")
        replies = pipe.execute()
    return sum(bool(x) for x in replies[0::2]), sum(x == b"ended" for x in replies[1::2])


def _mid_stream(r: Any, keys: Any, ids: list[str]) -> list[str]:
    """The runs mid-stream: holding their lease, with 10 to 39 of their ~55 events written (streaming, not
    waiting for the process to get to their turn's request)."""
    with r.pipeline(transaction=False) as pipe:
        for run_id in ids:
            pipe.exists(keys.run(run_id).lease)
            pipe.hget(keys.run(run_id).run, "next")
        replies = pipe.execute()
    pairs = zip(ids, replies[0::2], replies[1::2], strict=True)
    return [run_id for run_id, held, offset in pairs if held and 10 <= int(offset or 0) < 40]


@pytest.mark.serial  # its deadlines assume the machine to itself: runs alone, after the parallel tiers
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_thousand_runs_stream_at_once_on_one_gevent_worker(deploy: Any, streaming_server: str, r: Any) -> None:
    """1,000 runs on one ``--pool gevent --concurrency 1000`` process: most of them in flight at once; 100 stopped
    mid-stream end cancelled within the bound; the worker killed -9 mid-way, a second one finishes every run; every
    log is sound (contiguous offsets, a valid sequence, the killed attempts closed)."""
    from agents_celery.storage.keys import Keys

    own = deploy("gevent1k", {**BIG, "FAKE_OPENAI_URL": streaming_server})
    rt, keys = own.runtime, Keys(own.prefix)
    from .agents.fixture import fake  # by object: no worker has published its manifest yet

    ids = [rt.stream(fake, f"hello {i}").id for i in range(RUNS)]  # queued: the worker finds them all waiting
    t0 = time.monotonic()
    first = own.worker(pool="gevent", concurrency=RUNS)
    # Many in flight at once on the one process (each holds its lease while its turn streams).
    peak = 0

    def many_in_flight() -> bool:
        nonlocal peak
        peak = max(peak, _probe(r, keys, ids)[0])
        return peak >= IN_FLIGHT * RUNS

    try:
        wait_for(many_in_flight, timeout=40, interval=0.2)
    except AssertionError:
        raise AssertionError(f"never {IN_FLIGHT * RUNS:.0f} runs in flight at once: at most {peak}") from None
    in_flight_after = time.monotonic() - t0

    # Stop 100 runs mid-stream (10 to 39 of their ~55 events written).
    def enough_mid_stream() -> list[str] | None:
        mid = _mid_stream(r, keys, ids)
        return mid[:STOPPED] if len(mid) >= STOPPED else None

    stopped = wait_for(enough_mid_stream, timeout=30, interval=0.1, what=f"{STOPPED} runs mid-stream")
    t_stop = time.monotonic()
    for run_id in stopped:
        rt.stop(run_id)
    # The bound: each streaming turn sees its stop within a stop poll and ends at its next chunk; the rest is the
    # time a process busy with hundreds of streams (on a shared 2-core machine) takes to get to them.
    bound = own.settings.stop_poll_seconds + GRACE + STOP_SLACK
    try:
        wait_for(lambda: _probe(r, keys, stopped)[1] == STOPPED, timeout=bound, interval=0.1)
    except AssertionError:
        ended = _probe(r, keys, stopped)[1]
        raise AssertionError(f"{STOPPED - ended} of {STOPPED} stopped runs still live after {bound:.2f}s") from None
    stop_took = time.monotonic() - t_stop

    # Kill -9 the worker while the others are mid-stream; a second one recovers all of them.
    # ... once dozens are mid-stream again (the stops took most of those in flight; a process bound by CPU per
    # token and per step start takes new ones in as it can), with most of the runs still to end.
    def crash_ready() -> bool:
        live, ended = _probe(r, keys, ids)
        return live >= 50 and ended < RUNS - 100

    try:
        wait_for(crash_ready, timeout=30, interval=0.1)
    except AssertionError:
        live, ended = _probe(r, keys, ids)
        raise AssertionError(f"too late for the crash: {live} live, {ended} ended") from None
    first.kill()
    own.worker(pool="gevent", concurrency=RUNS)
    wait_for(lambda: _probe(r, keys, ids)[1] == RUNS, timeout=150, interval=0.5, what="every run to end")
    took = time.monotonic() - t0
    views = {run_id: rt.get_stream(run_id).get() for run_id in ids}
    statuses = {run_id: v.status.value for run_id, v in views.items()}
    assert {statuses[i] for i in stopped} == {"cancelled"}, [views[i] for i in stopped if statuses[i] != "cancelled"]
    others = [i for i in ids if i not in set(stopped)]
    bad = [(i, statuses[i], views[i].error) for i in others if statuses[i] != "completed"]
    assert not bad, bad[:5]
    retried = 0
    for run_id in ids:
        events = all_events(rt, run_id, timeout=10)
        assert_run_sound(events)
        retried += sum(1 for e in events if e.type is EventType.STEP_STARTED) > 1
    assert retried > 0, "the kill interrupted no run"
    print(
        f"\n{RUNS} runs: {peak} in flight at once (after {in_flight_after:.1f}s); {STOPPED} stopped in"
        f" {stop_took:.2f}s; {retried} retried after the kill; all ended after {took:.1f}s"
    )

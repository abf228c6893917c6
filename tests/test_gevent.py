"""``agents-celery worker --pool gevent``: steps run as greenlets of one process, many at once.

Before the command monkey-patched, a gevent worker received a step and never ran it (the consumer's blocking
loop starved the hub: the run stayed ``queued``). These tests run real gevent workers: tools (sync, async,
one past its timeout), a stop while a tool hangs, and (slow) a thousand runs streaming at once on one process,
a hundred of them stopped mid-stream, then the worker killed -9 and every run recovered on a second one.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from agents_celery import ScriptedToolCall
from agents_celery.events import EventType
from agents_celery.testing.openai_server import FakeReply, turn_index

from .conftest import all_events, wait_for
from .invariants import assert_run_sound, counter_of

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
    own = deploy("gevent", {"AGENTS_CELERY_STOP_GRACE_SECONDS": str(GRACE)})
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

"""Calls a step walked away from keep their threads until they return: a worker caps them
(``max_abandoned_threads``) and refuses new steps rather than grow a thread per stop without end. The refusal is
in its log and its metrics (``agents_celery_metrics``), and a refused step is handed back unclaimed."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from celery import Celery

from agents_celery import Runtime, ScriptedToolCall
from agents_celery.testing.openai_server import FakeReply, turn_index

from .conftest import TEST_BROKER_URL, TEST_REDIS_URL, wait_for
from .support.workers import Deployment, Worker

pytestmark = pytest.mark.timeout(120)

CAP = 2
#: The worker's pool threads.
POOL = 4


def hang_then_done(request: dict[str, Any]) -> FakeReply:
    """Turn 0: call ``hang`` with the user's message as its key (a tool that never returns), or ``slow_count``
    for 3 s when the message is ``slow:<key>``, or just answer when it is ``hello``; then a text turn."""
    messages = request.get("messages") or []
    key = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
    if turn_index(messages) > 0 or key == "hello":
        return FakeReply(text="Done.")
    if key.startswith("slow:"):
        return FakeReply(text="", tool_calls=(ScriptedToolCall("slow_count", {"key": key, "seconds": 3}, "call_1"),))
    return FakeReply(text="", tool_calls=(ScriptedToolCall("hang", {"key": key}, f"call_{key}"),))


@pytest.fixture
def deployment(fake_openai: Any, deploy: Any, request: pytest.FixtureRequest) -> tuple[Worker, Runtime, str]:
    cap = getattr(request, "param", CAP)
    extra = {"AGENTS_CELERY_MAX_ABANDONED_THREADS": str(cap), "AGENTS_CELERY_STOP_GRACE_SECONDS": "0.1"}
    own: Deployment = deploy("hung", extra)
    fake_openai.responder = hang_then_done
    return own.worker(concurrency=POOL), own.runtime, own.prefix


def metrics(worker: Worker) -> dict[str, int]:
    app = Celery("probe", broker=TEST_BROKER_URL, set_as_current=False)
    try:
        for _ in range(5):  # a broadcast reply can miss its short window on a busy machine
            for reply in app.control.broadcast("agents_celery_metrics", reply=True, timeout=2):
                for name, answer in reply.items():
                    if name.startswith(f"{worker.name}@"):
                        return dict(answer)
        raise AssertionError(f"no metrics from {worker.name}")
    finally:
        app.close()


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith("Threads:")))


def test_abandoned_threads_are_capped_and_new_steps_refused(deployment: tuple[Worker, Runtime, str]) -> None:
    worker, runtime, prefix = deployment
    r = redis.Redis.from_url(TEST_REDIS_URL)

    def started(key: str) -> int:
        return int(r.get(f"{prefix}:test:count:hang:{key}") or 0)

    def ended(run_id: str) -> bool:
        return runtime.get(run_id).status == "cancelled"

    for _ in range(CAP):  # each stop leaves one call hung on its thread
        key = uuid.uuid4().hex[:8]
        run_id = runtime.stream("fake", key).id
        wait_for(lambda k=key: started(k) == 1, timeout=15, what="the hanging tool to start")
        runtime.stop(run_id)
        wait_for(lambda rid=run_id: ended(rid), timeout=10, what="the stopped run to end")
    at_cap = metrics(worker)
    assert at_cap["abandoned_running"] == CAP and at_cap["refused_steps"] == 0, at_cap
    threads = threads_of(worker.proc.pid)

    refused = {uuid.uuid4().hex[:8]: "" for _ in range(3)}
    for key in refused:
        refused[key] = runtime.stream("fake", key).id
    for run_id in refused.values():
        what = f"run {run_id} to be refused"
        wait_for(lambda rid=run_id: f"run={rid} step=0: refused" in worker.log.read_text(), timeout=15, what=what)
    wait_for(lambda: "handed back" in worker.log.read_text() and metrics(worker)["refused_steps"] >= 3, timeout=10)
    # a refused step is handed back unclaimed: its run waits (queued) and its tool never started
    assert all(runtime.get(run_id).status == "queued" for run_id in refused.values())
    assert all(started(key) == 0 for key in refused)
    after = metrics(worker)
    assert after["abandoned_running"] == CAP and after["call_threads"] == at_cap["call_threads"], (at_cap, after)
    # Celery's thread pool starts its (4) threads lazily, as deliveries arrive: those may appear now; a thread per
    # refused step may not (call_threads above is the exact count of the threads calls hold).
    assert threads_of(worker.proc.pid) <= threads + POOL, "the worker grew threads while it refused"
    line = next(x for x in worker.log.read_text().splitlines() if ": refused" in x)
    assert "WARNING" in line and f"max_abandoned_threads={CAP}" in line, line
    for run_id in refused.values():  # nobody works on them: a stop ends them at once
        runtime.stop(run_id)
        assert ended(run_id)
    r.close()


@pytest.mark.parametrize("deployment", [1], indirect=True)
def test_a_refused_step_runs_once_an_abandoned_call_returns(deployment: tuple[Worker, Runtime, str]) -> None:
    """Refused is not lost: once the abandoned call returns (3 s) its thread is free again, and the sweeper's
    next send of the refused step is served."""
    worker, runtime, prefix = deployment
    r = redis.Redis.from_url(TEST_REDIS_URL)
    key = f"slow:{uuid.uuid4().hex[:8]}"
    slow = runtime.stream("fake", key).id
    wait_for(lambda: r.get(f"{prefix}:test:count:{key}"), timeout=15, what="the slow tool to start")
    runtime.stop(slow)
    wait_for(lambda: runtime.get(slow).status == "cancelled", timeout=10, what="the stopped run to end")
    waiting = runtime.stream("fake", "hello").id
    what = "the new run to be refused"
    wait_for(lambda: f"run={waiting} step=0: refused" in worker.log.read_text(), timeout=10, what=what)
    # the sweeper's next send after the abandoned call returns: seconds here, over 20 s once on a CI machine
    # running three test processes (the newest-versions suite)
    wait_for(lambda: runtime.get(waiting).status == "completed", timeout=60, what="the refused run to complete")
    assert "an abandoned call returned at last" in worker.log.read_text()
    assert metrics(worker)["abandoned_running"] == 0
    r.close()

"""Workflows survive kill -9 in every kind of step: the workflow's own step, a function step (after it ran: its
result is reused; while it ran: the workflow asks before running it again), an agent step's tool (run once) and an
agent step's model turn (retried). Each test has a deployment of its own and keeps one worker alive at a time: when
the worker dies (a kill armed in Redis, tests/agents/fixture.py's CrashHooks and tests/agents/workflows.py's
steps), another starts, as an operator's supervisor would."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agents_celery import RunStatus, RunView
from agents_celery.engine.children import child_run_id
from agents_celery.events import EventType
from agents_celery.runtime.admission import idempotent_run_id
from agents_celery.testing.openai_server import FakeReply

from .conftest import wait_event, wait_for
from .support.invariants import assert_run_sound
from .support.workers import Deployment, Worker
from .test_workflows import by_agent, count, log_of, outputs_of, researches, steps_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def talks(turn: int, message: str) -> FakeReply:
    """An answer streamed slowly (two seconds), so a test can kill the worker in the middle of it."""
    return FakeReply(text="Piece: " + " ".join(f"w{i}" for i in range(40)), token_delay=0.05)


@pytest.fixture
def own(deploy: Any) -> Deployment:
    deployment: Deployment = deploy("wfcrash")
    return deployment


def arm(own: Deployment, point: str, run_id: str) -> None:
    """Kill the worker at ``point`` of run ``run_id`` (once)."""
    own.runtime.redis.set(f"{own.prefix}:test:crash:{point}:{run_id}", 1, ex=600)


def keep_one_worker(own: Deployment, run_id: str, until: Any, worker: Worker | None = None) -> tuple[int, Worker]:
    """Start a worker whenever the last one died (``worker``: the one alive now), until ``until(view)`` holds for
    the run; how many died, and the worker alive then."""
    died = 0
    worker = worker or own.worker()

    def settled() -> RunView | None:
        nonlocal worker, died
        if worker.proc.poll() is not None:
            died += 1
            worker = own.worker()
        view = own.runtime.get(run_id)
        return view if until(view) else None

    wait_for(settled, timeout=120, interval=0.1, what="the run, with workers dying")
    return died, worker


def the_end(view: RunView) -> bool:
    return view.status.is_final


def test_kill_in_every_kind_of_step_of_research_count_write(own: Deployment, fake_openai: Any) -> None:
    runtime = own.runtime
    key = f"rcw-{uuid.uuid4().hex[:8]}"
    run_id = idempotent_run_id(key, None)
    research, write = child_run_id(run_id, "step:research"), child_run_id(run_id, "step:write")
    fake_openai.responder = by_agent(scout=researches(key), author=talks)
    arm(own, "after_commit", run_id)  # the workflow's first step (it started the research) committed
    arm(own, "after_tool", research)  # the research agent's tool ran and was recorded
    arm(own, "after_tool", run_id)  # the count function ran and was recorded
    worker = own.worker()
    wait_for(lambda: runtime.store.agents.get("research-count-write"), what="the workflow to be published")
    runtime.stream("research-count-write", "tides", idempotency_key=key)
    died = 0

    def writer_streams() -> bool:
        nonlocal worker, died
        if worker.proc.poll() is not None:
            died += 1
            worker = own.worker()
        return runtime.store.run_fields(write, "log")[0] is not None

    wait_for(writer_streams, timeout=90, interval=0.1, what="the write step to start")
    wait_event(runtime, write, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT)
    worker.kill()  # in the middle of the writer's answer
    died += 1 + keep_one_worker(own, run_id, the_end)[0]
    view = runtime.get(run_id)
    assert view.status is RunStatus.COMPLETED, view.error
    assert died == 4 and view.output.startswith("Piece: w0 w1") and view.output.endswith("w39")
    assert count(runtime, key) == 1  # the research agent's tool: once
    assert count(runtime, f"count:{run_id}") == 1  # the count function: once, its recorded result reused
    log = log_of(runtime, run_id)
    assert_run_sound(log)
    assert outputs_of(log)["count"] == {"words": 5}
    assert [n for kind, n in steps_of(log) if kind == "finished"][-2:] == ["count", "write"]
    for kid in (research, write):
        child_log = log_of(runtime, kid)
        assert_run_sound(child_log)
        assert any(e.data.get("name") == "attempt_abandoned" for e in child_log)  # retried after its kill
        assert [e.type for e in child_log].count(EventType.RUN_STARTED) == 1  # started once
    assert sum(1 for e in log if e.data.get("name") == "attempt_abandoned") == 1  # the count step's attempt


def test_kill_in_every_kind_of_step_of_a_parallel_then_a_writer(own: Deployment, fake_openai: Any) -> None:
    runtime = own.runtime
    key = f"par-{uuid.uuid4().hex[:8]}"
    run_id = idempotent_run_id(key, None)
    scout, analyst = child_run_id(run_id, "step:scout"), child_run_id(run_id, "step:analyst")
    write = child_run_id(run_id, "step:write")
    # The analyst says five words 0.4 s apart before its tool call: the kill after the scout's tool finds it talking
    # (its turn is retried), never inside its own tool (which would ask a human too).
    slowly = researches(f"{key}:a", token_delay=0.4, first="Let me look into it")
    fake_openai.responder = by_agent(scout=researches(f"{key}:s", seconds=0.5), analyst=slowly, author=talks)
    arm(own, "after_tool", run_id)  # the gather function ran and was recorded
    arm(own, "in:tally", run_id)  # the tally function dies while it runs (after counting itself)
    arm(own, "after_tool", scout)  # a researcher's tool ran and was recorded
    worker = own.worker()
    wait_for(lambda: runtime.store.agents.get("two-researchers"), what="the workflow to be published")
    runtime.stream("two-researchers", "reefs", idempotency_key=key)
    worker.proc.wait(timeout=60)  # the first kill
    died, worker = keep_one_worker(own, run_id, lambda v: v.status is RunStatus.PAUSED)
    died += 1
    view = runtime.get(run_id)
    (held,) = view.pending  # the tally may have run in the attempt that died: a human decides
    assert held.id == "step:tally" and held.pause_reason == "may_have_run"
    assert count(runtime, f"tally:{run_id}") == 1 and runtime.get(scout).status is RunStatus.COMPLETED
    runtime.continue_run(run_id, [{"tool_call_id": "step:tally", "confirmed": True}])
    wait_for(lambda: runtime.store.run_fields(write, "log")[0] is not None, timeout=60, what="the writer")
    wait_event(runtime, write, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT)
    worker.kill()  # in the middle of the writer's answer
    died += 1 + keep_one_worker(own, run_id, the_end)[0]
    view = runtime.get(run_id)
    assert view.status is RunStatus.COMPLETED, view.error
    assert died == 4 and view.output.endswith("w39")
    assert count(runtime, f"gather:{run_id}") == 1  # recorded before the kill: reused
    assert count(runtime, f"tally:{run_id}") == 2  # run again once, because a human approved it
    assert count(runtime, f"{key}:s") == 1 and count(runtime, f"{key}:a") == 1  # each researcher's tool once
    log = log_of(runtime, run_id)
    assert_run_sound(log)
    assert outputs_of(log)["tally"] == "tallied reefs"
    for kid in (scout, analyst, write):
        child_log = log_of(runtime, kid)
        assert_run_sound(child_log)
        assert [e.type for e in child_log].count(EventType.RUN_STARTED) == 1

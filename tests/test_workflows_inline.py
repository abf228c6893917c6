"""A workflow's agent steps run on the worker that ran the step before, with no broker hop between them
(agents_celery/engine/inline.py): the workflow's step commits, the first step of the child run it waits for runs on
the same thread, and the child's end wakes the workflow's next step there too. The Celery task each step ran in is
recorded by tests/agents/workflows.py's TaskHooks, on a worker of the test's own (one thread, so no other thread can
take a child's step meanwhile). A kill -9 in the middle of such a step still ends the workflow, each step once."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agents_celery import RunStatus, Runtime
from agents_celery.engine.children import child_run_id
from agents_celery.engine.inline import INLINE_STEPS
from agents_celery.events import EventType
from agents_celery.runtime.admission import idempotent_run_id

from .conftest import wait_for
from .support.invariants import assert_run_sound
from .support.workers import Deployment
from .test_workflows import ended, log_of, steps_of
from .test_workflows_crash import arm, keep_one_worker, the_end

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

#: A lease long enough that a loaded machine never runs past the half of it a chain of steps run here may take.
LONG_LEASE = {"AGENTS_CELERY_LEASE_TTL_SECONDS": "8", "AGENTS_CELERY_HEARTBEAT_SECONDS": "1"}


@pytest.fixture
def own(deploy: Any) -> Deployment:
    deployment: Deployment = deploy("wfinline", LONG_LEASE)
    return deployment


def tasks(runtime: Runtime, run_id: str) -> dict[str, str]:
    """The Celery task each attempt of the run's steps ran in: ``<step>:<attempt>`` -> task id."""
    raw = runtime.redis.hgetall(f"{runtime.settings.key_prefix}:test:count:task:{run_id}")
    return {k.decode(): v.decode() for k, v in raw.items()}


def published(runtime: Runtime, name: str) -> None:
    wait_for(lambda: runtime.store.agents.get(name), what=f"{name} to be published")


def completed_on_one_thread(own: Deployment, workflow: str) -> tuple[Runtime, str, Any]:
    """A run of ``workflow`` on a worker of one thread, to its end (completed): the runtime, run id and view."""
    runtime = own.runtime
    own.worker(concurrency=1)
    published(runtime, workflow)
    run_id = runtime.stream(workflow, "go").id
    view = ended(runtime, run_id)
    assert view.status is RunStatus.COMPLETED, view.error
    return runtime, run_id, view


def test_three_agent_steps_run_on_the_thread_of_the_step_before(own: Deployment) -> None:
    runtime, run_id, view = completed_on_one_thread(own, "three-echoes")
    assert view.output == "echoed"
    mine = tasks(runtime, run_id)
    assert sorted(mine) == ["0:1", "1:1", "2:1", "3:1"]  # four steps of the workflow, each once
    (delivered,) = set(mine.values())  # the first step's delivery ran them all: each later one was woken here
    for i in range(3):
        kid = child_run_id(run_id, f"step:e{i}")
        assert runtime.get(kid).status is RunStatus.COMPLETED
        # The child's one step ran once, in that same task (it has no message of its own: nothing else claimed it).
        assert tasks(runtime, kid) == {"0:1": delivered}
        assert_run_sound(log_of(runtime, kid))
    log = log_of(runtime, run_id)
    assert_run_sound(log)
    assert steps_of(log) == [(kind, f"e{i}") for i in range(3) for kind in ("started", "finished")]


def test_a_long_workflow_goes_through_the_broker_past_the_bound(own: Deployment) -> None:
    runtime, run_id, _ = completed_on_one_thread(own, "echo-loop")
    mine = tasks(runtime, run_id)
    assert sorted(mine, key=lambda k: int(k.split(":")[0])) == [f"{s}:1" for s in range(13)]
    # Each delivery runs its own step and INLINE_STEPS more (a child's step, the workflow's step it wakes, ...),
    # then sends the next: the workflow's steps ran in several tasks, none in more than the bound allows.
    ran = list(mine.values())
    for i in range(1, 13):
        ran += tasks(runtime, child_run_id(run_id, f"step:again@{i}")).values()
    by_task = {task: ran.count(task) for task in ran}
    assert len(by_task) > 1 and max(by_task.values()) <= INLINE_STEPS + 1
    assert_run_sound(log_of(runtime, run_id))


def test_kill_in_a_child_step_run_on_the_thread_of_the_step_before(own: Deployment) -> None:
    runtime = own.runtime
    key = f"inl-{uuid.uuid4().hex[:8]}"
    run_id = idempotent_run_id(key, None)
    middle = child_run_id(run_id, "step:e1")
    arm(own, "model", middle)  # the worker dies as the second agent step calls its model
    worker = own.worker(concurrency=1)
    published(runtime, "three-echoes")
    runtime.stream("three-echoes", "go", idempotency_key=key)
    worker.proc.wait(timeout=60)
    died = 1 + keep_one_worker(own, run_id, the_end)[0]
    view = runtime.get(run_id)
    assert view.status is RunStatus.COMPLETED, view.error
    assert died == 1 and view.output == "echoed"
    mine, its = tasks(runtime, run_id), tasks(runtime, middle)
    # The attempt that died ran in the task of the workflow's step that started the child (woken by the first
    # child's end, in the first step's task); the retry, after the lease expired, in a task of its own, where the
    # child's end woke the workflow's next step.
    assert sorted(its) == ["0:1", "0:2"]
    assert its["0:1"] == mine["1:1"] == mine["0:1"]
    assert its["0:2"] != its["0:1"] and mine["2:1"] == its["0:2"]
    child_log = log_of(runtime, middle)
    assert_run_sound(child_log)
    assert [e.type for e in child_log].count(EventType.RUN_STARTED) == 1
    assert any(e.data.get("name") == "attempt_abandoned" for e in child_log)
    log = log_of(runtime, run_id)
    assert_run_sound(log)
    assert steps_of(log) == [(kind, f"e{i}") for i in range(3) for kind in ("started", "finished")]
    for i in (0, 2):
        assert list(tasks(runtime, child_run_id(run_id, f"step:e{i}"))) == ["0:1"]  # the others: one attempt

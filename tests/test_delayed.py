"""Delayed runs (``start_after`` / ``start_at``): ``scheduled`` until their time, listed, cancellable, and started
by whichever worker's sweeper is up then (the delay lives in Redis, not in a worker's memory). Real workers,
real Redis, a real kill -9."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents_celery import RunStatus, Runtime, ValidationError
from agents_celery.events import EventType

from .conftest import wait_for
from .support.invariants import assert_run_sound
from .support.workers import Deployment


@pytest.fixture
def own(deploy: Any) -> Deployment:
    """A key prefix and queue of their own, so these workers can die without touching the shared one."""
    deployment: Deployment = deploy("delay")
    return deployment


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_delayed_run_starts_on_time_across_a_worker_restart(own: Deployment) -> None:
    runtime = own.runtime
    first = own.worker()
    try:
        wait_for(lambda: runtime.store.agents.get("offline") is not None, what="the agents to be published")
        start = time.time() + 4
        delayed = runtime.stream("offline", "hello later", start_at=start)
        dropped = runtime.stream("offline", "never mind", start_after=60)
        assert runtime.get(delayed.id).status is RunStatus.SCHEDULED
        listed = {r.run_id for r in runtime.runs(status="scheduled").runs}
        assert {delayed.id, dropped.id} <= listed
        assert runtime.stop(dropped.id).status is RunStatus.CANCELLED  # cancellable while it waits
        first.kill()  # the worker that saw it created dies; another comes up before its time
    finally:
        first.stop()
    second = own.worker()
    try:
        view = wait_for(
            lambda: (v := runtime.get(delayed.id)).status.is_final and v, timeout=30, what="the delayed run to end"
        )
        assert view.status is RunStatus.COMPLETED
        events = list(delayed.events(until_pause=False))
        step = next(e for e in events if e.type is EventType.STEP_STARTED)
        assert step.timestamp >= int(start * 1000)  # not one step before its time
        assert_run_sound(events)
        assert runtime.get(dropped.id).status is RunStatus.CANCELLED
        assert not any(e.type is EventType.STEP_STARTED for e in dropped.events(until_pause=False))
        assert delayed.id not in {r.run_id for r in runtime.runs(status="scheduled").runs}
    finally:
        second.stop()


def test_bad_delays_are_refused(runtime: Runtime) -> None:
    with pytest.raises(ValidationError, match="start_after"):
        runtime.stream("offline", "hi", start_after=-1)
    with pytest.raises(ValidationError, match="not both"):
        runtime.stream("offline", "hi", start_after=1, start_at=time.time())
    with pytest.raises(ValidationError, match="time zone"):
        runtime.stream("offline", "hi", start_at=datetime.now() + timedelta(seconds=5))
    # A start time already past starts the run now.
    past = runtime.stream("offline", "hi", start_at=datetime.now(UTC) - timedelta(seconds=5))
    wait_for(lambda: runtime.get(past.id).status is RunStatus.COMPLETED, what="the run to complete")

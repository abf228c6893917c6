"""What a new run does when its session is busy (``multitask_strategy``): reject, enqueue (wait in line, start
after, seeing the history as it is then), interrupt (stop the live run, then start). Real worker, real Redis."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from agents_celery import RunStatus, Runtime, SessionBusyError, ValidationError
from agents_celery.events import EventType

from .conftest import wait_event, wait_for
from .support.apis import SharedApis

pytestmark = pytest.mark.timeout(90)
WORDS = " ".join(f"w{i}" for i in range(40))


def ended(runtime: Runtime, *run_ids: str) -> None:
    wait_for(lambda: all(runtime.get(r).status.is_final for r in run_ids), timeout=45, what=f"{run_ids} to end")


def first(runtime: Runtime, run_id: str, kind: EventType) -> int:
    """When the run's first event of ``kind`` was written (ms)."""
    return next(e.timestamp for e in runtime.get_stream(run_id).events(until_pause=False) if e.type is kind)


def test_enqueued_runs_wait_in_line_and_see_the_history_then(runtime: Runtime, script: Any, fake_openai: Any) -> None:
    script(WORDS, token_delay=0.03)
    session = uuid.uuid4().hex
    live = runtime.stream("fake", "first question", session_id=session)
    with pytest.raises(SessionBusyError):
        runtime.stream("fake", "rejected", session_id=session)  # the default strategy
    second = runtime.stream("fake", "second question", session_id=session, multitask_strategy="enqueue")
    third = runtime.stream("fake", "third question", session_id=session, multitask_strategy="enqueue")
    dropped = runtime.stream("fake", "never mind", session_id=session, multitask_strategy="enqueue")
    assert runtime.get(second.id).status is RunStatus.QUEUED
    assert runtime.stop(dropped.id).status is RunStatus.CANCELLED  # a waiting run can be stopped
    ended(runtime, live.id, second.id, third.id)
    assert [runtime.get(r).status for r in (live.id, second.id, third.id)] == [RunStatus.COMPLETED] * 3
    # In line: each started after the one before it ended.
    assert first(runtime, second.id, EventType.STEP_STARTED) >= first(runtime, live.id, EventType.RUN_FINISHED)
    assert first(runtime, third.id, EventType.STEP_STARTED) >= first(runtime, second.id, EventType.RUN_FINISHED)
    assert not any(e.type is EventType.STEP_STARTED for e in dropped.events(until_pause=False))
    # The third run's model saw the conversation as it was when it started: both earlier runs' turns.
    seen = [m.get("content") for m in fake_openai.requests[-1]["messages"] if m.get("role") == "user"]
    assert seen == ["first question", "second question", "third question"]
    assert runtime.session(session).active_run_id is None


def test_interrupt_stops_the_live_run_then_starts(runtime: Runtime, script: Any) -> None:
    script(WORDS, token_delay=0.05)
    session = uuid.uuid4().hex
    live = runtime.stream("fake", "a long answer please", session_id=session)
    wait_event(runtime, live.id, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT)
    newer = runtime.stream("fake", "forget that", session_id=session, multitask_strategy="interrupt")
    ended(runtime, live.id, newer.id)
    assert runtime.get(live.id).status is RunStatus.CANCELLED
    last = list(live.events(until_pause=False))[-1]
    assert last.type is EventType.RUN_FINISHED and last.data["outcome"]["type"] == "cancelled"
    assert runtime.get(newer.id).status is RunStatus.COMPLETED
    assert first(runtime, newer.id, EventType.STEP_STARTED) >= last.timestamp


def test_a_bad_strategy_is_refused(runtime: Runtime) -> None:
    with pytest.raises(ValidationError, match="multitask_strategy"):
        runtime.stream("offline", "hi", multitask_strategy="rollback")


@pytest.mark.parametrize("django", [False, True], ids=["flask", "django"])
def test_strategies_over_http(apis: SharedApis, script: Any, django: bool) -> None:
    server = apis.get("django" if django else "flask")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        script(WORDS, token_delay=0.03)
        session = uuid.uuid4().hex
        body = {"message": "one", "stream": False, "background": True, "session_id": session}
        live = client.post("/agents/fake/runs", json=body).json()["run_id"]
        assert client.post("/agents/fake/runs", json=body).status_code == 409
        queued = client.post("/agents/fake/runs", json={**body, "multitask_strategy": "enqueue"})
        assert queued.status_code == 202 and queued.json()["status"] == "queued"
        bad = client.post("/agents/fake/runs", json={**body, "multitask_strategy": "rollback"})
        assert bad.status_code == 422
        waiting = queued.json()["run_id"]
        done = {live, waiting}
        wait_for(
            lambda: {r for r in done if client.get(f"/runs/{r}").json()["status"] == "completed"} == done,
            timeout=45,
            what="both runs to complete",
        )

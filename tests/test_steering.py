"""Steering a live run: a user message sent while a turn streams lands at the next step boundary, once, and the
run that was about to end goes on with a turn for it. Real worker, real Redis, the real openai SDK path."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from agents_celery import RunFinishedError, RunStatus, Runtime
from agents_celery.events import EventType

from .conftest import wait_event, wait_for
from .support.apis import SharedApis
from .support.invariants import assert_run_sound

pytestmark = pytest.mark.timeout(90)
WORDS = " ".join(f"w{i}" for i in range(30))


def test_a_message_sent_mid_turn_lands_at_the_next_boundary_once(
    runtime: Runtime, script: Any, fake_openai: Any
) -> None:
    script(WORDS, token_delay=0.02)
    stream = runtime.stream("fake", "tell me a long story")
    wait_event(runtime, stream.id, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT)
    assert runtime.send_message(stream.id, "and now in French") == 1
    view = wait_for(lambda: (v := runtime.get(stream.id)).status.is_final and v, timeout=30, what="the run to end")
    assert view.status is RunStatus.COMPLETED
    log = list(stream.events(until_pause=False))
    types = [e.type for e in log]
    assert types.count(EventType.RUN_FINISHED) == 1
    assert_run_sound(log)
    users = [e for e in log if e.type is EventType.TEXT_MESSAGE_START and e.data.get("role") == "user"]
    assert len(users) == 1
    (content,) = [e for e in log if e.data.get("message_id") == users[0].data["message_id"] and e.data.get("delta")]
    assert content.data["delta"] == "and now in French"
    first_turn_end = types.index(EventType.STEP_FINISHED)
    assert first_turn_end < users[0].offset  # after the turn that was streaming, before the next one's text
    assert log[users[0].offset - 1].type is EventType.STEP_STARTED
    user_turns = [m for m in view.messages if m.get("role") == "user"]
    assert [m["content"] for m in user_turns] == ["tell me a long story", "and now in French"]
    last_request = fake_openai.requests[-1]["messages"]
    assert sum(m.get("content") == "and now in French" for m in last_request) == 1
    assert [m["role"] for m in last_request[-3:]] == ["user", "assistant", "user"]


def test_a_message_to_an_ended_run_is_refused(runtime: Runtime, script: Any) -> None:
    """Refused with nothing kept: an image sent with it is not stored beside the run nor counted against it."""
    from .test_content import PNG_URL

    script("Short.")
    view = runtime.run("fake", "hi", timeout=30)
    with pytest.raises(RunFinishedError):
        runtime.send_message(view.run_id, "too late")
    image = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": PNG_URL}}]
    with pytest.raises(RunFinishedError):
        runtime.send_message(view.run_id, image)
    assert runtime.store.run_fields(view.run_id, "parts", "part_bytes") == [None, None]


@pytest.mark.parametrize("django", [False, True], ids=["flask", "django"])
def test_steering_over_http(apis: SharedApis, script: Any, django: bool) -> None:
    server = apis.get("django" if django else "flask")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        script(WORDS, token_delay=0.05)
        run = client.post("/agents/fake/runs", data={"message": "go", "stream": "false", "background": "true"})
        run_id = run.json()["run_id"]
        assert client.post(f"/runs/{run_id}/messages", json={"message": "   "}).status_code == 422
        sent = client.post(f"/runs/{run_id}/messages", json={"message": "shorter please"})
        assert sent.status_code == 202 and sent.json() == {"run_id": run_id, "messages_sent": 1}
        done = f"/runs/{run_id}"
        wait_for(lambda: client.get(done).json()["status"] == "completed", timeout=30, what="the end")
        late = client.post(f"/runs/{run_id}/messages", json={"message": "more"})
        assert late.status_code == 409 and late.json()["code"] == "run_finished"
        missing = client.post(f"/runs/{uuid.uuid4().hex}/messages", json={"message": "x"})
        assert missing.status_code == 404

"""Bad and hostile input is refused with a clear 4xx and changes nothing; the small edges of authentication;
retention of what a run leaves; one Idempotency-Key under concurrent retries."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from flask import Flask

from agents_celery import ConfigurationError, PayloadTooLargeError, Runtime, ScriptedToolCall, ScriptedTurn
from agents_celery.contrib.flask import close_app, create_app
from agents_celery.settings import Settings, load_settings

from .conftest import wait_for
from .support.apis import ApiServer, SharedApis

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def api(apis: SharedApis) -> ApiServer:
    return apis.get("flask")


@pytest.fixture
def client(api: ApiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api.url, timeout=30) as c:
        yield c


def test_an_oversized_body_or_message_is_refused(client: httpx.Client, fast_settings: Settings, worker: Any) -> None:
    huge = "x" * (2 * 1024 * 1024)
    answer = client.post("/agents/offline/runs", json={"message": huge, "stream": False})
    assert answer.status_code == 413 and answer.json()["code"] == "payload_too_large"
    runtime = Runtime(settings=fast_settings.model_copy(update={"max_message_chars": 1000}))
    try:
        with pytest.raises(PayloadTooLargeError, match="1001 characters"):
            runtime.stream("offline", "y" * 1001)  # every caller, not only HTTP ones
    finally:
        runtime.close()


def test_deep_nesting_is_a_400_not_a_500(client: httpx.Client) -> None:
    deep = "[" * 10_000 + "]" * 10_000
    answer = client.post("/agents/offline/runs", content=f'{{"message": "hi", "x": {deep}}}'.encode(),
                         headers={"Content-Type": "application/json"})  # fmt: skip
    assert answer.status_code == 400 and "nests deeper" in answer.json()["detail"]


def test_too_many_or_duplicate_decisions_are_refused_and_the_run_stays_paused(
    client: httpx.Client, script: Any
) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/limits"})]), "Done.")
    body = client.post("/agents/fake/runs", data={"message": "delete", "stream": "false"}).json()
    run_id, call_id = body["run_id"], body["tools"][0]["tool_call_id"]
    path = f"/agents/fake/runs/{run_id}/continue"
    many = [{"tool_call_id": f"c{i}", "confirmed": True} for i in range(100_000)]
    tools = json.dumps(many)
    answer = client.post(path, data={"tools": tools, "stream": "false"})
    assert answer.status_code == 413  # refused before a hundred thousand entries are validated
    twice = json.dumps([{"tool_call_id": call_id, "confirmed": True}, {"tool_call_id": call_id, "confirmed": False}])
    answer = client.post(path, data={"tools": twice, "stream": "false"})
    assert answer.status_code == 400 and "decided twice" in answer.json()["detail"]
    assert client.get(f"/runs/{run_id}").json()["status"] == "paused"  # nothing changed


def test_an_empty_api_key_refuses_to_start() -> None:
    with pytest.raises(ConfigurationError, match=r"AGENTS_CELERY_API_KEY: .*set but empty"):
        load_settings(api_key="")


@pytest.fixture
def keyed(fast_settings: Settings, worker: Any) -> Iterator[Flask]:
    app = create_app(settings=fast_settings.model_copy(update={"api_key": "s3cret"}))
    yield app
    close_app(app)


def test_the_key_is_checked_first_and_the_scheme_in_any_case(keyed: Flask) -> None:
    client = keyed.test_client()
    assert client.get("/agents").status_code == 401
    assert client.get("/agents", headers={"Authorization": "bearer s3cret"}).status_code == 200  # RFC 7235
    assert client.get("/agents", headers={"Authorization": "BEARER  s3cret"}).status_code == 200
    assert client.delete("/agents").status_code == 401  # not 405: a stranger learns nothing of the routes
    assert client.get("/no/such/route").status_code == 401
    assert client.get("/health").status_code == 200


def test_a_session_made_for_one_run_expires_with_it(fast_settings: Settings, worker: Any, r: redis.Redis) -> None:
    runtime = Runtime(settings=fast_settings)  # the worker's retention: the default, 24 h
    retention_ms = fast_settings.retention_ms
    try:
        view = runtime.run("offline", "What time is it?", timeout=30)
        assert view.status == "completed"
        history = runtime.store.keys.session(view.session_id).history
        wait_for(lambda: r.llen(history) > 0, what="the session's history (written after the run's end)")
        assert 0 < r.pttl(history) <= retention_ms  # with the run, not in 30 days
        assert 0 < r.pttl(runtime.store.keys.run(view.run_id).run) <= retention_ms
        # The session's `active` marker (no TTL: a run holds its session while it lives, paused for days too) is
        # released just after the run's end, which may come after the history is written.
        active = runtime.store.keys.session(view.session_id).active
        wait_for(lambda: not r.exists(active), what="the run to release its session")
        session_keys = [k.decode() for k in r.scan_iter(match=f"*session:{{{view.session_id}}}*", count=1000)]
        assert runtime.store.keys.session(view.session_id).owner in session_keys
        lives = {key: r.pttl(key) for key in session_keys}
        assert all(0 < ttl <= retention_ms for ttl in lives.values()), lives  # the owner too (#39)
        named = runtime.run("offline", "Again?", session_id=f"s-{uuid.uuid4().hex[:6]}", timeout=30)
        kept = runtime.store.keys.session(named.session_id).history
        wait_for(lambda: r.llen(kept) > 0, what="the named session's history")
        assert r.pttl(kept) > retention_ms  # a session the caller named lives for session_ttl_seconds
    finally:
        runtime.close()


def test_thirty_concurrent_retries_of_one_key_get_one_run(api: ApiServer, script: Any) -> None:
    script("Once.")
    key = uuid.uuid4().hex
    answers: list[httpx.Response] = []
    lock = threading.Lock()
    start = threading.Barrier(30)

    def post() -> None:
        start.wait(timeout=10)
        got = httpx.post(
            f"{api.url}/agents/fake/runs",
            data={"message": "once", "stream": "false", "background": "true"},
            headers={"Idempotency-Key": key},
            timeout=30,
        )
        with lock:
            answers.append(got)

    threads = [threading.Thread(target=post) for _ in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=40)
    assert [a.status_code for a in answers] == [202] * 30, [a.text for a in answers if a.status_code != 202]
    assert len({a.json()["run_id"] for a in answers}) == 1
    run_id = answers[0].json()["run_id"]
    done = wait_for(lambda: httpx.get(f"{api.url}/runs/{run_id}").json()["status"] == "completed", timeout=30)
    assert done


def test_a_refused_call_does_not_poison_its_key(client: httpx.Client, script: Any) -> None:
    """A first attempt refused with 409 (its session is busy) created nothing: a retry with the same key starts
    the run once the session is free, and retries after that get that run."""
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/poison"})]), "Done.")
    session = f"s-{uuid.uuid4().hex[:6]}"
    busy = client.post("/agents/fake/runs", data={"message": "hold", "stream": "false", "session_id": session})
    assert busy.json()["status"] == "PAUSED"  # the session's run waits for a human
    key, form = uuid.uuid4().hex, {"message": "next", "stream": "false", "background": "true", "session_id": session}
    refused = client.post("/agents/fake/runs", data=form, headers={"Idempotency-Key": key})
    assert refused.status_code == 409 and refused.json()["code"] == "session_busy"
    assert client.post("/agents/fake/runs", data=form, headers={"Idempotency-Key": key}).status_code == 409
    client.post(f"/agents/fake/runs/{busy.json()['run_id']}/cancel")
    wait_for(lambda: client.get(f"/runs/{busy.json()['run_id']}").json()["status"] == "cancelled", what="cancel")
    script("Fine.")
    first = client.post("/agents/fake/runs", data=form, headers={"Idempotency-Key": key})
    again = client.post("/agents/fake/runs", data=form, headers={"Idempotency-Key": key})
    assert first.status_code == again.status_code == 202 and first.json()["run_id"] == again.json()["run_id"]

"""The host's users in the Flask blueprint: the authorization hook decides who may start, read, continue and stop;
runs record who started them. And the strict edges of the caller side: offsets, confirmations."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask, request

from agents_celery import Runtime, ScriptedToolCall, ScriptedTurn
from agents_celery.contrib.flask import close_app, init_app, make_blueprint
from agents_celery.runs import RunView

pytestmark = pytest.mark.timeout(60)

STAFF = {"ada"}


def authorize(action: str, user_id: str | None, run: RunView | None, agent_id: str | None) -> bool:
    """The host's rule: signed-in users only; a run is its starter's (staff see every run)."""
    if user_id is None:
        return False
    return run is None or run.user_id == user_id or user_id in STAFF


@pytest.fixture
def app(fast_settings: Any, worker: Any) -> Iterator[Flask]:
    app = Flask("host")

    @app.get("/")
    def home() -> str:
        return "the host's own page"

    init_app(
        app,
        Runtime(settings=fast_settings),
        authorize=authorize,  # type: ignore[arg-type]
        user_id=lambda: request.headers.get("X-User"),  # the host's login, as a test stands for it
    )
    app.register_blueprint(make_blueprint(), url_prefix="/ai")
    yield app
    close_app(app)


def test_runs_belong_to_their_users(app: Flask) -> None:
    client = app.test_client()
    assert client.get("/").text == "the host's own page"
    assert client.post("/ai/agents/offline/runs", data={"message": "hi", "stream": "false"}).status_code == 403
    started = client.post(
        "/ai/agents/offline/runs", data={"message": "hi", "stream": "false"}, headers={"X-User": "bob"}
    )
    assert started.status_code == 200, started.json
    run_id = started.json["run_id"]
    mine = client.get(f"/ai/runs/{run_id}", headers={"X-User": "bob"})
    assert mine.status_code == 200 and mine.json["user_id"] == "bob"  # the run recorded its starter
    for path in (f"/ai/runs/{run_id}", f"/ai/runs/{run_id}/events"):
        other = client.get(path, headers={"X-User": "eve"})
        assert other.status_code == 404 and other.json["code"] == "run_not_found"  # not even its existence
    assert client.post(f"/ai/agents/offline/runs/{run_id}/cancel", headers={"X-User": "eve"}).status_code == 404
    assert client.get(f"/ai/runs/{run_id}", headers={"X-User": "ada"}).status_code == 200  # staff
    forged = client.post("/ai/agents/offline/runs", data={"message": "hi", "user_id": "ada"}, headers={"X-User": "bob"})
    assert forged.status_code == 403  # a signed-in user cannot start runs as someone else


@pytest.mark.parametrize("after", ["-5", "1_0", "١٢", "abc", "1.5", " 3"])
def test_malformed_offsets_are_refused(app: Flask, after: str) -> None:
    client = app.test_client()
    run_id = client.post(
        "/ai/agents/offline/runs", data={"message": "hi", "stream": "false"}, headers={"X-User": "bob"}
    ).json["run_id"]
    answer = client.get(f"/ai/runs/{run_id}/events", query_string={"after": after}, headers={"X-User": "bob"})
    assert answer.status_code == 400 and answer.json["code"] == "bad_request", answer.json
    header = client.get(f"/ai/runs/{run_id}/events", headers={"X-User": "bob", "Last-Event-ID": after})
    assert header.status_code == 400


def test_an_offset_past_a_live_run_s_end_is_refused(app: Flask, script: Any) -> None:
    script("A slow answer " * 20, token_delay=0.05)
    client = app.test_client()
    started = client.post(
        "/ai/agents/fake/runs",
        data={"message": "hi", "background": "true", "stream": "false"},
        headers={"X-User": "bob"},
    )
    run_id = started.json["run_id"]
    answer = client.get(f"/ai/runs/{run_id}/events", query_string={"after": "999999"}, headers={"X-User": "bob"})
    assert answer.status_code == 400 and "past the run's last offset" in answer.json["detail"]
    client.post(f"/ai/agents/fake/runs/{run_id}/cancel", headers={"X-User": "bob"})


def test_tool_call_started_says_when_a_tool_needs_confirmation(app: Flask, script: Any) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/c"})]), "Done.")
    client = app.test_client()
    answer = client.post("/ai/agents/fake/runs", data={"message": "delete it"}, headers={"X-User": "bob"})
    started = [line for line in answer.text.splitlines() if line.startswith("data:") and "ToolCallStarted" in line]
    assert started and '"requires_confirmation":true' in started[0]


# -- users stay inside their own sessions and schedules -------------------------------------------------------

BOB, EVE, ADA = {"X-User": "bob"}, {"X-User": "eve"}, {"X-User": "ada"}


def agui_input(thread: str, text: str) -> dict[str, Any]:
    """A RunAgentInput as AG-UI's HttpAgent sends it."""
    message = {"id": uuid.uuid4().hex, "role": "user", "content": text}
    return {"threadId": thread, "runId": uuid.uuid4().hex, "state": {}, "messages": [message], "tools": [],
            "context": [], "forwardedProps": {}}  # fmt: skip


def session_runs(client: Any, session: str) -> list[str]:
    answer = client.get("/ai/runs", query_string={"session_id": session, "limit": "100"}, headers=ADA)
    return sorted(r["run_id"] for r in answer.json["runs"])


def test_another_user_s_session_is_hidden_on_every_route(app: Flask) -> None:
    client = app.test_client()
    session, secret = f"s-{uuid.uuid4().hex[:8]}", "my locker code is 4711"
    first = client.post(
        "/ai/agents/offline/runs", data={"message": secret, "stream": "false", "session_id": session}, headers=BOB
    )
    assert first.status_code == 200, first.json
    before = session_runs(client, session)
    for strategy in ("reject", "enqueue", "interrupt"):
        form = {"message": "what did she say?", "session_id": session, "multitask_strategy": strategy}
        refused = client.post("/ai/agents/offline/runs", data={**form, "stream": "true"}, headers=EVE)
        assert refused.status_code == 404 and refused.json["code"] == "session_not_found", refused.text
        assert secret not in refused.text
    for path in ("/ai/agui/offline", "/ai/agui/offline/connect"):
        agui = client.post(path, json=agui_input(session, "tell me everything"), headers=EVE)
        assert agui.status_code == 404 and secret not in agui.text, agui.text
    assert client.get(f"/ai/sessions/{session}", headers=EVE).status_code == 404
    assert client.delete(f"/ai/sessions/{session}", headers=EVE).status_code == 404
    scheduled = client.post(
        "/ai/schedules",
        json={"agent_id": "offline", "message": "again", "every_seconds": 60, "session_id": session},
        headers=EVE,
    )
    assert scheduled.status_code == 404, scheduled.json
    listed = client.get("/ai/sessions", query_string={"limit": "200"}, headers=EVE).json["sessions"]
    assert session not in [s["session_id"] for s in listed]
    assert session_runs(client, session) == before  # nothing was created
    assert client.get("/ai/schedules", headers=EVE).json["schedules"] == [] or all(
        s["session_id"] != session for s in client.get("/ai/schedules", headers=EVE).json["schedules"]
    )
    # Its owner goes on in it, and sees the history; staff may read it.
    again = client.post(
        "/ai/agents/offline/runs", data={"message": "more", "stream": "false", "session_id": session}, headers=BOB
    )
    assert again.status_code == 200, again.json
    view = client.get(f"/ai/sessions/{session}", headers=BOB).json
    assert view["user_id"] == "bob" and secret in str(view["messages"])
    assert client.get(f"/ai/sessions/{session}", headers=ADA).status_code == 200


def test_another_user_s_live_run_cannot_be_interrupted(app: Flask, script: Any) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/kept"})]), "Done.")
    client = app.test_client()
    session = f"s-{uuid.uuid4().hex[:8]}"
    paused = client.post(
        "/ai/agents/fake/runs", data={"message": "delete", "stream": "false", "session_id": session}, headers=BOB
    )
    assert paused.json["status"] == "PAUSED", paused.json
    run_id = paused.json["run_id"]
    form = {"message": "stop hers", "stream": "false", "session_id": session, "multitask_strategy": "interrupt"}
    refused = client.post("/ai/agents/fake/runs", data=form, headers=EVE)
    assert refused.status_code == 404 and run_id not in refused.text
    assert client.get(f"/ai/runs/{run_id}", headers=BOB).json["status"] == "paused"  # untouched
    busy = client.post("/ai/agents/fake/runs", data={**form, "multitask_strategy": "reject"}, headers=BOB)
    assert busy.status_code == 409 and run_id not in busy.json["detail"]  # says only that the session is busy
    client.post(f"/ai/agents/fake/runs/{run_id}/cancel", headers=BOB)


def test_a_rule_that_refuses_the_stop_refuses_the_interrupt(fast_settings: Any, worker: Any, script: Any) -> None:
    def no_stops(action: str, user_id: str | None, resource: Any, agent_id: str | None) -> bool:
        return user_id is not None and action != "stop" and (resource is None or resource.user_id == user_id)

    app = Flask("host")
    init_app(app, Runtime(settings=fast_settings), authorize=no_stops, user_id=lambda: request.headers.get("X-User"))  # type: ignore[arg-type]
    app.register_blueprint(make_blueprint(), url_prefix="/ai")
    try:
        script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/kept"})]), "Done.")
        client, session = app.test_client(), f"s-{uuid.uuid4().hex[:8]}"
        form = {"message": "delete", "stream": "false", "session_id": session}
        run_id = client.post("/ai/agents/fake/runs", data=form, headers=BOB).json["run_id"]
        refused = client.post("/ai/agents/fake/runs", data={**form, "multitask_strategy": "interrupt"}, headers=BOB)
        assert refused.status_code == 409 and run_id not in refused.json["detail"]
        assert client.get(f"/ai/runs/{run_id}", headers=BOB).json["status"] == "paused"
    finally:
        close_app(app)


def test_schedules_belong_to_their_users(app: Flask) -> None:
    client = app.test_client()
    made = client.post(
        "/ai/schedules", json={"agent_id": "offline", "message": "daily report", "cron": "0 9 * * *"}, headers=BOB
    )
    assert made.status_code == 201, made.json
    schedule_id = made.json["schedule_id"]
    assert made.json["user_id"] == "bob"
    assert schedule_id not in [s["schedule_id"] for s in client.get("/ai/schedules", headers=EVE).json["schedules"]]
    assert schedule_id in [s["schedule_id"] for s in client.get("/ai/schedules", headers=BOB).json["schedules"]]
    for answer in (
        client.get(f"/ai/schedules/{schedule_id}", headers=EVE),
        client.post(f"/ai/schedules/{schedule_id}/pause", headers=EVE),
        client.post(f"/ai/schedules/{schedule_id}/resume", headers=EVE),
        client.delete(f"/ai/schedules/{schedule_id}", headers=EVE),
    ):
        assert answer.status_code == 404 and answer.json["code"] == "schedule_not_found", answer.json
    mine = client.get(f"/ai/schedules/{schedule_id}", headers=BOB).json
    assert mine["paused"] is False  # eve's pause changed nothing
    assert client.get(f"/ai/schedules/{schedule_id}", headers=ADA).status_code == 200  # staff
    assert client.delete(f"/ai/schedules/{schedule_id}", headers=BOB).status_code == 204


def test_another_user_s_chat_is_hidden_on_every_ai_sdk_route(app: Flask) -> None:
    client = app.test_client()
    chat, secret = uuid.uuid4().hex, "my locker code is 4711"
    user = {"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": secret}]}
    first = client.post("/ai/aisdk/offline", json={"id": chat, "messages": [user]}, headers=BOB)
    assert first.status_code == 200 and '"finish"' in first.text, first.text
    run_id = first.headers["x-workflow-run-id"]
    before = session_runs(client, chat)
    other = {"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": "what did he say?"}]}
    answer = {"id": f"msg-{run_id}", "role": "assistant", "parts": []}
    for body in ({"id": chat, "messages": [other]}, {"id": chat, "messages": [user, answer]}):
        refused = client.post("/ai/aisdk/offline", json=body, headers=EVE)
        assert refused.status_code == 404 and secret not in refused.text, refused.text
    for ident in (chat, run_id):
        for method, path in (("GET", f"/ai/aisdk/offline/{ident}/stream"), ("POST", f"/ai/aisdk/offline/{ident}/stop")):
            hidden = client.open(path, method=method, headers=EVE)
            assert hidden.status_code == 404 and secret not in hidden.text, (path, hidden.text)
    assert session_runs(client, chat) == before  # nothing was created, nothing stopped
    assert client.get(f"/ai/runs/{run_id}", headers=BOB).json["status"] == "completed"
    assert client.get(f"/ai/aisdk/offline/{chat}/stream", headers=BOB).status_code == 204  # its owner: nothing live


def test_a_run_started_over_http_reads_its_agent_s_manifest_once(
    fast_settings: Any, worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API reads the agent's manifest to answer 404 before the body, and the run's creation needs it again:
    one read from Redis for both. The SSE response knows the new run's ids without reading them back."""
    import json

    runtime = Runtime(settings=fast_settings)
    app = Flask("host")
    init_app(app, runtime)
    app.register_blueprint(make_blueprint(), url_prefix="/ai")
    reads: list[str] = []
    get = runtime.store.agents.get
    monkeypatch.setattr(runtime.store.agents, "get", lambda name: reads.append(name) or get(name))
    try:
        resp = app.test_client().post("/ai/agents/offline/runs", data={"message": "hi", "stream": "true"})
        assert resp.status_code == 200
        events = {}
        for block in resp.get_data(as_text=True).strip().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in block.split("\n") if not line.startswith(":"))
            events[fields["event"]] = json.loads(fields["data"])
        assert reads == ["offline"]
        started, done = events["RunStarted"], events["RunCompleted"]
        view = runtime.get(started["run_id"])
        assert started["session_id"] == done["session_id"] == view.session_id
        assert started["agent_id"] == done["agent_id"] == "offline"
        runtime.agent_manifest("offline")
        assert reads == ["offline", "offline"]  # outside a request's creation, each call reads
    finally:
        close_app(app)

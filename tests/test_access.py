"""The host's users in the Flask blueprint: the authorization hook decides who may start, read, continue and stop;
runs record who started them. And the strict edges of the caller side: offsets, confirmations."""

from __future__ import annotations

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

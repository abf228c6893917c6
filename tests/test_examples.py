"""The examples run a real agent end to end: the demo agents module, the Flask app and the Django project."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from agents_celery import Settings, load_agents

from .conftest import wait_for

# -- the demo agents module ---------------------------------------------------------------------------------


def test_demo_agents_module_is_scripted_without_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    import examples.agents

    module = importlib.reload(examples.agents)
    agents = load_agents("examples.agents")
    assert list(agents) == ["assistant"]
    manifest = agents["assistant"].manifest()
    assert manifest["model"] == "scripted"
    tools = {t["name"]: t for t in manifest["tools"]}
    assert set(tools) == {"get_current_time", "delete_file"}
    assert tools["delete_file"]["requires_confirmation"] and not tools["get_current_time"]["requires_confirmation"]
    assert "UTC" in module.get_current_time(timezone="UTC")
    assert "unknown timezone" in module.get_current_time(timezone="Mars/Olympus")


def test_demo_agents_module_uses_openai_when_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    import examples.agents
    from agents_celery import OpenAIChat

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    try:
        module = importlib.reload(examples.agents)
        assert isinstance(module.assistant.model, OpenAIChat)
    finally:
        monkeypatch.delenv("OPENAI_BASE_URL")
        importlib.reload(examples.agents)


def test_delete_file_stays_in_its_sandbox(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import examples.agents

    monkeypatch.setattr(examples.agents, "SANDBOX", tmp_path)
    (tmp_path / "notes.txt").write_text("x")
    assert "refused" in examples.agents.delete_file(path="../../etc/passwd")
    assert examples.agents.delete_file(path="notes.txt") == "deleted 'notes.txt'"
    assert not (tmp_path / "notes.txt").exists()


# -- Flask: an existing app with Celery, the agents API mounted under /ai ---------------------------------


def uninstrument_celery() -> None:
    """Undo the process-wide Celery instrumentation ``instrument()`` turned on, so later tests do not trace."""
    try:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
    except ImportError:
        return
    if CeleryInstrumentor().is_instrumented_by_opentelemetry:
        CeleryInstrumentor().uninstrument()


@pytest.fixture
def flask_app(fast_settings: Settings, worker: Any) -> Iterator[Flask]:
    from agents_celery.contrib.flask import close_app
    from examples.flask_app import create_app

    app = create_app(fast_settings)
    yield app
    close_app(app)
    uninstrument_celery()


def test_flask_app_keeps_its_own_routes_and_celery(flask_app: Flask) -> None:
    client = flask_app.test_client()
    assert client.get("/").get_json()["agents_api"] == "/ai/agents"
    celery_app = flask_app.extensions["celery"]
    assert not celery_app.conf.task_acks_late  # the host's own setting: the step task carries its own
    assert celery_app.tasks["agents_celery.step"].acks_late
    assert flask_app.extensions["agents_celery"].celery_app is celery_app  # one Celery app, not two
    assert client.get("/ai/health").status_code == 200


def test_flask_app_runs_an_agent_end_to_end(flask_app: Flask) -> None:
    client = flask_app.test_client()
    names = wait_for(lambda: [a["name"] for a in client.get("/ai/agents").get_json()], what="published agents")
    assert "offline" in names
    answer = client.post("/ai/agents/offline/runs", data={"message": "What time is it?", "stream": "false"})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    body = answer.get_json()
    assert body["status"] == "COMPLETED", body
    assert body["content"] == "It is 12:00 UTC."


def test_flask_app_streams_a_run(flask_app: Flask) -> None:
    client = flask_app.test_client()
    response = client.post("/ai/agents/offline/runs", data={"message": "What time is it?", "stream": "true"})
    assert response.status_code == 200
    assert response.mimetype == "text/event-stream"
    text = response.get_data(as_text=True)  # the stream ends with the run
    events = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunCompleted", kinds
    assert "ToolCallCompleted" in kinds

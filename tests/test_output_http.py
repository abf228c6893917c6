"""Structured output over HTTP (issue #30 part 1): a run's ``output_schema`` through the AgentOS routes (form field
as JSON text, JSON body), AG-UI's ``forwardedProps.output_schema`` and the HTTP client; a bad schema is a 422 that
creates nothing. Both front ends (Flask, Django under uvicorn), a real worker, the fake OpenAI server."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from agents_celery.client import Client
from agents_celery.testing.openai_server import SchemaResponder

from .conftest import TEST_REDIS_URL
from .support.apis import ApiServer, SharedApis, frames
from .support.invariants import assert_agui_stream

pytestmark = pytest.mark.timeout(120)

POINT = {
    "type": "object",
    "title": "Point",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
    "required": ["x", "y"],
}


@pytest.fixture(scope="module", params=["flask", "django"])
def api(request: pytest.FixtureRequest, apis: SharedApis) -> ApiServer:
    return apis.get(request.param)


@pytest.fixture
def client(api: ApiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api.url, timeout=30) as c:
        yield c


def stored(client: httpx.Client, run_id: str) -> list[Any]:
    with client.stream("GET", f"/runs/{run_id}/events", params={"until": "pause"}) as resp:
        assert resp.status_code == 200
        return [f.data for f in frames(resp)]


def test_agentos_form_field_and_json_body(client: httpx.Client, fake_openai: Any) -> None:
    fake_openai.responder = responder = SchemaResponder(['{"x": "one", "y": 2}', {"x": 1, "y": 2}])
    form = {"message": "Where?", "stream": "false", "output_schema": json.dumps(POINT)}
    resp = client.post("/agents/fake/runs", data=form)  # waits for the run: AgentOS's RunOutput
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["status"] == "COMPLETED" and out["content"] == {"x": 1, "y": 2}
    run = client.get(f"/runs/{out['run_id']}").json()
    assert run["status"] == "completed" and run["output"] == {"x": 1, "y": 2}
    events = stored(client, out["run_id"])
    retries = [e for e in events if e["type"] == "CUSTOM" and e["name"] == "output_retry"]
    assert len(retries) == 1 and "at x" in retries[0]["value"]["error"]
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"] == {"x": 1, "y": 2}
    assert responder.formats[-1]["json_schema"]["name"] == "Point"  # type: ignore[index]

    fake_openai.responder = SchemaResponder([{"x": 3, "y": 4}])
    with client.stream("POST", "/agents/fake/runs", json={"message": "Where?", "output_schema": POINT}) as resp:
        assert resp.status_code == 200
        got = [f.data for f in frames(resp)]
    assert [e["event"] for e in got].count("RunContent") > 1  # the JSON streams as it is generated
    assert got[-1]["event"] == "RunCompleted" and got[-1]["content"] == {"x": 3, "y": 4}


def agui_turn(client: httpx.Client, thread: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    body = {
        "threadId": thread,
        "runId": uuid.uuid4().hex,
        "state": {},
        "messages": messages,
        "tools": [],
        "context": [],
        "forwardedProps": {"output_schema": POINT},
    }
    with client.stream("POST", "/agui/fake", json=body) as resp:
        assert resp.status_code == 200, resp.read()
        events = [f.data for f in frames(resp)]
    assert_agui_stream(events)
    return events


def conversation(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages a client keeps from a stream's TEXT_MESSAGE events (as HttpAgent does)."""
    kept: dict[str, dict[str, Any]] = {}
    for e in events:
        if e["type"] == "TEXT_MESSAGE_START":
            kept[e["messageId"]] = {"id": e["messageId"], "role": e["role"], "content": ""}
        elif e["type"] == "TEXT_MESSAGE_CONTENT":
            kept[e["messageId"]]["content"] += e["delta"]
    return list(kept.values())


def test_agui_forwarded_props_output_schema(client: httpx.Client, fake_openai: Any) -> None:
    fake_openai.responder = SchemaResponder(["[5, 6]", {"x": 5, "y": 6}])
    thread, question = uuid.uuid4().hex, {"id": uuid.uuid4().hex, "role": "user", "content": "Where?"}
    events = agui_turn(client, thread, [question])
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"] == {"x": 5, "y": 6}
    said = conversation(events)
    assert [m["role"] for m in said] == ["assistant", "user", "assistant"]  # the retry's message is shown
    assert json.loads(said[-1]["content"]) == {"x": 5, "y": 6}
    # the next turn, with the conversation as the client kept it, agrees with the thread's stored history
    fake_openai.responder = SchemaResponder([{"x": 7, "y": 8}])
    again = agui_turn(client, thread, [question, *said, {"id": uuid.uuid4().hex, "role": "user", "content": "And?"}])
    assert again[-1]["type"] == "RUN_FINISHED" and again[-1]["result"] == {"x": 7, "y": 8}


def test_the_http_client_passes_output_schema(api: ApiServer, fake_openai: Any) -> None:
    fake_openai.responder = SchemaResponder([{"x": 7, "y": 8}])
    with Client(api.url) as http:
        view = http.run("fake", "Where?", output_schema=POINT, timeout=30)
    assert view.status == "completed" and view.output == {"x": 7, "y": 8}


@pytest.mark.parametrize(
    ("how", "schema", "status", "code"),
    [
        ("form", json.dumps({"type": "object", "properties": {"x": {"type": "integer", "minimum": "0"}}}), 422, ""),
        ("json", {"type": "wat"}, 422, "invalid_output_schema"),
        ("json", [1, 2], 422, "invalid_output_schema"),
        ("form", "{not json", 400, "bad_request"),
    ],
)
def test_a_bad_output_schema_is_refused_with_nothing_created(
    client: httpx.Client, worker_env: dict[str, str], how: str, schema: Any, status: int, code: str
) -> None:
    session = uuid.uuid4().hex
    prefix = worker_env["AGENTS_CELERY_KEY_PREFIX"]
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        before = set(r.scan_iter(match=f"{prefix}:*", count=1000))
        body = {"message": "hi", "stream": "false", "session_id": session, "output_schema": schema}
        resp = client.post("/agents/fake/runs", **({"data": body} if how == "form" else {"json": body}))  # type: ignore[arg-type]
        assert resp.status_code == status, resp.text
        assert resp.json()["code"] == (code or "invalid_output_schema") and resp.json()["detail"]
        agui = {
            "threadId": session,
            "runId": uuid.uuid4().hex,
            "state": {},
            "messages": [{"id": "m1", "role": "user", "content": "hi"}],
            "tools": [],
            "context": [],
            "forwardedProps": {"output_schema": {"type": "wat"}},
        }
        resp = client.post("/agui/fake", json=agui)
        assert resp.status_code == 422 and resp.json()["code"] == "invalid_output_schema"
        assert client.get("/runs", params={"session_id": session}).json()["runs"] == []
        new = set(r.scan_iter(match=f"{prefix}:*", count=1000)) - before  # (the workers' sweeper lock comes and goes)
        assert [k for k in new if b":run:" in k or session.encode() in k] == []

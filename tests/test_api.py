"""The HTTP API end to end: a real API server process, a real worker, real Redis, httpx as the client."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import ag_ui.core as agui
import httpx
import pydantic
import pytest
import redis

from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.storage.keys import Keys
from agents_celery.testing import ScriptResponder

from .conftest import TEST_REDIS_URL, kill_connections, wait_for
from .support.apis import ApiServer, Frame, SharedApis, frames, free_port, read_until, recv_until
from .support.invariants import assert_agui_stream

END = {"RunCompleted", "RunError", "RunCancelled", "RunPaused"}
#: Stored types the AgentOS dialect renders (the others are skipped, leaving gaps in event_index).
AGENTOS_TYPES = {
    "RUN_STARTED",
    "TEXT_MESSAGE_CONTENT",
    "TOOL_CALL_END",
    "TOOL_CALL_RESULT",
    "RUN_FINISHED",
    "RUN_ERROR",
}
LONG_TEXT = " ".join(f"word{i}" for i in range(60))
AGUI_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(agui.Event)


@pytest.fixture(scope="module", params=["flask", "django"])
def api(request: pytest.FixtureRequest, apis: SharedApis) -> ApiServer:
    """The API, served by the Flask app and by the Django app (under uvicorn, ASGI): every test using it is the
    shared HTTP contract, run against both front ends."""
    return apis.get(request.param)


@pytest.fixture
def client(api: ApiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api.url, timeout=30) as c:
        yield c


@pytest.fixture
def rdb() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(TEST_REDIS_URL)
    yield client
    client.close()


def deletions(r: redis.Redis, prefix: str, path: str) -> int:
    return int(r.get(f"{prefix}:test:count:delete_file:{path}") or 0)


def stored(client: httpx.Client, run_id: str) -> list[Frame]:
    """The run's whole stored log (canonical dialect)."""
    with client.stream("GET", f"/runs/{run_id}/events", params={"until": "pause"}) as resp:
        assert resp.status_code == 200
        return list(frames(resp))


def approval_reconnect_story(client: httpx.Client, agent: str, fake_openai: Any) -> tuple[str, str, list[Frame]]:
    """The AgentOS reconnect story with ``agent``, whose ``delete_file`` tool needs confirmation: start streamed,
    the approval pause, continue (approved), drop the connection after a few frames, resume from the last one.
    Checks every renderable offset arrives once, in order, and the run's answer; returns the file path the tool was
    asked to delete, the run id and the frames read."""
    path = f"/tmp/{uuid.uuid4().hex}"
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("Deleting.", [ScriptedToolCall("delete_file", {"path": path})]), "All done, the file is gone."]
    )
    with client.stream("POST", f"/agents/{agent}/runs", data={"message": "delete it", "stream": "true"}) as resp:
        assert resp.status_code == 200
        first = list(frames(resp))  # the stream closes by itself after RunPaused
    paused = first[-1].data
    assert first[-1].event == "RunPaused" and paused["is_paused"] is True
    assert paused["tools"][0]["tool_name"] == "delete_file" and paused["tools"][0]["tool_args"] == {"path": path}
    run_id = paused["run_id"]
    assert "".join(f.data["content"] for f in first if f.event == "RunContent") == "Deleting."
    tools = [{**paused["tools"][0], "confirmed": True}]
    body = {"tools": json.dumps(tools), "stream": "true", "background": "true"}
    with client.stream("POST", f"/agents/{agent}/runs/{run_id}/continue", data=body) as resp:
        assert resp.status_code == 200
        dropped = read_until(resp, END, limit=3)  # then the connection is dropped
    assert dropped[0].event == "RunContinued"
    with client.stream("POST", f"/agents/{agent}/runs/{run_id}/resume", data={"last_event_index": dropped[-1].id}) as r:
        assert r.status_code == 200
        rest = list(frames(r))
    assert rest[0].event in ("catch_up", "replay")
    events = [f for f in first + dropped + rest if f.id is not None]
    assert events[-1].event == "RunCompleted" and events[-1].data["content"] == "All done, the file is gone."
    expected = [f.id for f in stored(client, run_id) if f.event in AGENTOS_TYPES]
    assert [f.id for f in events] == expected  # contiguous: every renderable offset once, in order
    return path, run_id, events


def wait_status(client: httpx.Client, run_id: str, *statuses: str, timeout: float = 20) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(f"/runs/{run_id}").json()
        return body if body["status"] in statuses else None

    result: dict[str, Any] = wait_for(check, timeout=timeout, what=f"run {run_id} to be {statuses}")
    return result


def start_background(client: httpx.Client, message: str = "hi", agent: str = "fake") -> str:
    resp = client.post(f"/agents/{agent}/runs", data={"message": message, "stream": "false", "background": "true"})
    assert resp.status_code == 202, resp.text
    run_id: str = resp.json()["run_id"]
    return run_id


def pause_run(client: httpx.Client, script: Any, path: str) -> tuple[str, list[Frame]]:
    """Start a run that pauses for delete_file(path), streamed to the pause; return its id and frames."""
    script(ScriptedTurn("Deleting.", [ScriptedToolCall("delete_file", {"path": path})]), "All done, the file is gone.")
    with client.stream("POST", "/agents/fake/runs", data={"message": "delete it", "stream": "true"}) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["cache-control"] == "no-cache" and resp.headers["x-accel-buffering"] == "no"
        got = list(frames(resp))  # the stream closes by itself after RunPaused
    assert got[-1].event == "RunPaused"
    return got[0].data["run_id"], got


# -- the AgentOS reconnect story ----------------------------------------------------------------------------


def test_agentos_reconnect_story(client: httpx.Client, script: Any, rdb: redis.Redis, key_prefix: str) -> None:
    path = f"/tmp/{uuid.uuid4().hex}"
    run_id, first = pause_run(client, script, path)
    paused = first[-1].data
    assert paused["is_paused"] is True and paused["tools"][0]["tool_name"] == "delete_file"
    assert paused["tools"][0]["tool_args"] == {"path": path}
    for f in first:
        assert f.id == f.data["event_index"] and f.data["run_id"] == run_id and f.data["agent_id"] == "fake"
        assert isinstance(f.data["created_at"], int) and f.data["session_id"]
    tools = [{**paused["tools"][0], "confirmed": True}]
    body = {"tools": json.dumps(tools), "stream": "true", "background": "true"}
    with client.stream("POST", f"/agents/fake/runs/{run_id}/continue", data=body) as resp:
        assert resp.status_code == 200
        dropped = read_until(resp, END, limit=4)  # then the connection is dropped
    assert dropped[0].event == "RunContinued" and len(dropped) == 4
    with client.stream("POST", f"/agents/fake/runs/{run_id}/resume", data={"last_event_index": dropped[-1].id}) as resp:
        assert resp.status_code == 200
        rest = list(frames(resp))
    assert rest[0].event in ("catch_up", "replay") and rest[0].id is None
    events = [f for f in first + dropped + rest if f.id is not None]
    assert events[-1].event == "RunCompleted" and events[-1].data["content"] == "All done, the file is gone."
    # contiguous: exactly the log's renderable offsets, each once, in order
    expected = [f.id for f in stored(client, run_id) if f.event in AGENTOS_TYPES]
    assert [f.id for f in events] == expected
    assert deletions(rdb, key_prefix, path) == 1
    completed = [f for f in events if f.event == "ToolCallCompleted"]
    assert completed[0].data["tool"]["tool_name"] == "delete_file" and completed[0].data["tool"]["confirmed"] is True


def test_resume_while_live_then_after_the_end(client: httpx.Client, script: Any) -> None:
    script(LONG_TEXT, token_delay=0.03)
    run_id = start_background(client)
    wait_for(lambda: client.get(f"/runs/{run_id}").json()["last_offset"] >= 6, what="a few events")
    with client.stream("POST", f"/agents/fake/runs/{run_id}/resume", json={"last_event_index": 2}) as resp:
        got = list(frames(resp))
    assert got[0].event == "catch_up" and got[0].data["status"] == "RUNNING"
    assert got[0].data["missed_events"] >= 4 and got[0].data["current_event_count"] >= 7
    names = [f.event for f in got]
    assert names.count("subscribed") == 1 and names[-1] == "RunCompleted"
    sub = names.index("subscribed")
    assert all(f.id is not None and f.id <= got[sub].data["last_event_index"] for f in got[1:sub])
    ids = [f.id for f in got if f.id is not None]
    assert ids == sorted(set(ids)) and ids[0] > 2
    assert "".join(f.data["content"] for f in got if f.event == "RunContent") == LONG_TEXT
    # after the end: a replay meta frame, then the events after the index asked for
    with client.stream("POST", f"/agents/fake/runs/{run_id}/resume", data={"last_event_index": "5"}) as resp:
        replay = list(frames(resp))
    total = len(stored(client, run_id))
    assert replay[0].event == "replay" and replay[0].data["status"] == "COMPLETED"
    assert replay[0].data["total_events"] == total and replay[0].data["last_event_index_requested"] == 5
    assert [f.id for f in replay[1:]] == [f.id for f in got if f.id is not None and f.id > 5]
    with client.stream("POST", f"/agents/fake/runs/{run_id}/resume") as resp:  # no index: from the start
        it = frames(resp)
        assert next(it).event == "replay" and next(it).event == "RunStarted"


def test_last_event_id_on_run_events(client: httpx.Client, script: Any) -> None:
    script("One two three four five six.")
    run_id = start_background(client)
    wait_status(client, run_id, "completed")
    everything = stored(client, run_id)
    assert [f.id for f in everything] == list(range(len(everything)))
    assert everything[0].event == "RUN_STARTED" and everything[0].data["offset"] == 0
    with client.stream("GET", f"/runs/{run_id}/events?after=1", headers={"Last-Event-ID": "4"}) as resp:
        resumed = list(frames(resp))
    assert [f.id for f in resumed] == list(range(5, len(everything)))  # the header wins over ?after
    last = everything[-1].id
    resp = client.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": str(last)})
    assert resp.status_code == 204  # nothing more will come: an EventSource stops reconnecting


def test_agui_stream_is_strict(client: httpx.Client, script: Any) -> None:
    script(ScriptedTurn("Checking.", [ScriptedToolCall("get_time", {"timezone": "CET"})]), "It is noon in CET.")
    run_id = start_background(client)
    wait_status(client, run_id, "completed")
    with client.stream("GET", f"/runs/{run_id}/events", params={"format": "agui"}) as resp:
        got = list(frames(resp))
    assert_agui_stream([f.data for f in got])
    assert got[-1].data["type"] == "RUN_FINISHED" and got[-1].data["outcome"]["type"] == "success"
    assert "threadId" in got[0].data and isinstance(got[0].data["timestamp"], int)
    # joined mid-message: a synthesized RUN_STARTED, STEP_STARTED and TEXT_MESSAGE_START (no id: lines) come first
    contents = [f.id for f in stored(client, run_id) if f.event == "TEXT_MESSAGE_CONTENT"]
    mid = contents[-2]
    with client.stream("GET", f"/runs/{run_id}/events", params={"format": "agui", "after": mid}) as resp:
        joined = list(frames(resp))
    assert [f.data["type"] for f in joined[:3]] == ["RUN_STARTED", "STEP_STARTED", "TEXT_MESSAGE_START"]
    assert [f.id for f in joined[:4]] == [None, None, None, mid + 1]
    assert_agui_stream([f.data for f in joined])


def test_keep_alive_on_an_idle_stream(client: httpx.Client, script: Any) -> None:
    run_id, _ = pause_run(client, script, f"/tmp/{uuid.uuid4().hex}")
    with client.stream("GET", f"/runs/{run_id}/events", params={"until": "end"}) as resp:
        lines = resp.iter_lines()
        seen = []
        for line in lines:
            seen.append(line)
            if line == ": keep-alive":
                break
    assert seen.count("") >= 2 and "event: RUN_FINISHED" in seen  # the pause, then idle comments
    assert client.post(f"/agents/fake/runs/{run_id}/cancel").status_code == 200


def test_agui_paused_run(client: httpx.Client, script: Any) -> None:
    run_id, _ = pause_run(client, script, f"/tmp/{uuid.uuid4().hex}")
    with client.stream("GET", f"/runs/{run_id}/events", params={"format": "agui"}) as resp:
        got = [f.data for f in frames(resp)]
    assert_agui_stream(got)
    interrupt = got[-1]["outcome"]["interrupts"][0]
    assert got[-1]["outcome"]["type"] == "interrupt" and interrupt["toolCallId"]
    assert client.post(f"/agents/fake/runs/{run_id}/cancel").status_code == 200


# -- the non-streaming answers ------------------------------------------------------------------------------


def test_stream_false_returns_the_finished_run(client: httpx.Client, script: Any) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("add", {"a": 2, "b": 3})]), "The sum is 5.")
    resp = client.post("/agents/fake/runs", json={"message": "add", "stream": False})
    assert resp.status_code == 200
    body = resp.json()
    assert body["status"] == "COMPLETED" and body["content"] == "The sum is 5." and body["is_paused"] is False
    assert body["messages"][-1]["content"] == "The sum is 5."
    assert any(m.get("role") == "tool" and m["content"] == "5" for m in body["messages"])
    uuid.UUID(body["session_id"])  # a new uuid4 when none was given


def test_stream_false_on_pause_and_continue_as_json(
    client: httpx.Client, script: Any, rdb: Any, key_prefix: str
) -> None:
    path = f"/tmp/{uuid.uuid4().hex}"
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": path})]), "Kept it.")
    body = client.post("/agents/fake/runs", data={"message": "delete", "stream": "false"}).json()
    assert body["status"] == "PAUSED" and body["is_paused"] is True
    tool = body["tools"][0]
    assert tool["requires_confirmation"] is True and tool["tool_args"] == {"path": path}
    tools = [{**tool, "confirmed": False, "confirmation_note": "not this one"}]
    done = client.post(f"/agents/fake/runs/{body['run_id']}/continue", json={"tools": tools, "stream": False})
    assert done.status_code == 200 and done.json()["status"] == "COMPLETED" and done.json()["content"] == "Kept it."
    assert deletions(rdb, key_prefix, path) == 0


def test_background_and_idempotency_key(client: httpx.Client, script: Any) -> None:
    script("Only once.")
    key = uuid.uuid4().hex
    form = {"message": "once", "stream": "false", "background": "true"}
    first = client.post("/agents/fake/runs", data=form, headers={"Idempotency-Key": key})
    again = client.post("/agents/fake/runs", data=form, headers={"Idempotency-Key": key})
    assert first.status_code == again.status_code == 202
    assert set(first.json()) == {"run_id", "session_id", "status"}
    assert first.json()["status"] in ("queued", "running", "completed")  # the library's spelling, as /runs has it
    assert first.json()["run_id"] == again.json()["run_id"]
    run_id = first.json()["run_id"]
    location = first.headers["Location"]  # under the front end's prefix (/ai for the Django project)
    assert location.endswith(f"/runs/{run_id}") and client.base_url.path.rstrip("/") + f"/runs/{run_id}" == location
    wait_status(client, run_id, "completed")
    other = client.post("/agents/fake/runs", data={**form, "message": "twice"}, headers={"Idempotency-Key": key})
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"


def test_multipart_form_body(client: httpx.Client, script: Any) -> None:
    script("Multipart works.")
    resp = client.post("/agents/fake/runs", files={"message": (None, "hi"), "stream": (None, "false")})
    assert resp.status_code == 200 and resp.json()["content"] == "Multipart works."


def test_disconnect_leaves_the_run_running(client: httpx.Client, script: Any) -> None:
    script(LONG_TEXT, token_delay=0.02)
    with client.stream("POST", "/agents/fake/runs", data={"message": "talk"}) as resp:
        run_id = read_until(resp, END, limit=3)[0].data["run_id"]
    view = wait_status(client, run_id, "completed")
    assert view["output"] == LONG_TEXT


def test_cancel_and_get_run(client: httpx.Client, script: Any) -> None:
    script(LONG_TEXT, token_delay=0.05)
    run_id = start_background(client)
    wait_for(lambda: client.get(f"/runs/{run_id}").json()["status"] == "running", what="running")
    first = client.post(f"/agents/fake/runs/{run_id}/cancel")
    assert first.status_code == 200 and first.json()["status"] in ("running", "cancelled")  # one spelling
    second = client.post(f"/agents/fake/runs/{run_id}/stop")
    assert second.status_code in (200, 409)  # 200 while the stop is in progress, 409 once it ended
    view = wait_status(client, run_id, "cancelled")
    assert view["agent_id"] == "fake" and view["last_offset"] >= 1 and view["pending"] == []
    assert "agent" not in view and "pending_approvals" not in view  # no field twice
    with client.stream("POST", f"/agents/fake/runs/{run_id}/resume") as resp:
        assert [f.event for f in frames(resp)][-1] == "RunCancelled"
    ended = client.post(f"/agents/fake/runs/{run_id}/cancel")
    assert ended.status_code == 409 and ended.json()["code"] == "run_finished"


def test_agents_and_health(client: httpx.Client) -> None:
    agents = client.get("/agents").json()
    names = [a["name"] for a in agents]  # in module order (other test modules may publish agents of their own)
    assert names.index("fake") < names.index("offline") and agents[names.index("fake")]["id"] == "fake"
    assert client.get("/agents/fake").json()["name"] == "fake"
    assert client.get("/health").json() == {"status": "ok"}
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/agents/{agent_id}/runs/{run_id}/resume", "/runs/{run_id}/events", "/health"} <= set(paths)
    assert {"/runs", "/sessions", "/sessions/{session_id}"} <= set(paths) and "delete" in paths["/runs/{run_id}"]
    assert {"/agui/{agent_id}", "/agui/{agent_id}/connect"} <= set(paths)


# -- errors ------------------------------------------------------------------------------------------------------


def assert_error(resp: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body: dict[str, Any] = resp.json()
    assert set(body) == {"detail", "code"} and body["detail"]
    if code:
        assert body["code"] == code
    return body


def created(rdb: redis.Redis, prefix: str) -> set[bytes]:
    """Every run and session the indexes know (``<p>:runs`` and ``<p>:sessions``, storage/keys.py)."""
    keys = Keys(prefix)
    return set(rdb.zrange(keys.runs, 0, -1)) | set(rdb.zrange(keys.sessions, 0, -1))


def test_malformed_and_invalid_bodies(client: httpx.Client, rdb: redis.Redis, key_prefix: str) -> None:
    before = created(rdb, key_prefix)
    bad = client.post("/agents/fake/runs", content=b"{not json", headers={"Content-Type": "application/json"})
    assert_error(bad, 400, "bad_request")
    assert_error(client.post("/agents/fake/runs", json=[1, 2]), 400, "bad_request")
    assert_error(client.post("/agents/fake/runs", json={"stream": False}), 422, "invalid_body")
    assert_error(client.post("/agents/fake/runs", data={"message": "  "}), 422)
    assert_error(client.post("/agents/fake/runs", data={"message": "x", "stream": "maybe"}), 422)
    assert_error(client.get("/runs/x/events", params={"format": "xml"}), 400)
    assert_error(client.get("/no/such/route"), 404)
    assert_error(client.delete("/agents"), 405)
    assert created(rdb, key_prefix) <= before  # no run, no session: a refused body creates nothing


def test_unknown_things_are_404_before_streaming(client: httpx.Client, script: Any) -> None:
    assert_error(client.post("/agents/nobody/runs", data={"message": "hi"}), 404, "unknown_agent")
    assert_error(client.get("/agents/nobody"), 404, "unknown_agent")
    for route in ("continue", "resume", "cancel", "stop"):
        assert_error(client.post(f"/agents/fake/runs/{uuid.uuid4().hex}/{route}"), 404, "run_not_found")
    assert_error(client.get(f"/runs/{uuid.uuid4().hex}"), 404)
    assert_error(client.get(f"/runs/{uuid.uuid4().hex}/events"), 404)
    script("Mine.")
    run_id = start_background(client)
    for route in ("continue", "resume", "cancel"):  # a run answers only under its own agent
        assert_error(client.post(f"/agents/offline/runs/{run_id}/{route}"), 404, "run_not_found")
    wait_status(client, run_id, "completed")


def test_continue_errors_leave_the_run_paused(client: httpx.Client, script: Any) -> None:
    run_id, got = pause_run(client, script, f"/tmp/{uuid.uuid4().hex}")
    tool = got[-1].data["tools"][0]
    before = client.get(f"/runs/{run_id}").json()
    url = f"/agents/fake/runs/{run_id}/continue"
    assert_error(client.post(url, data={"tools": "[{oops"}), 400, "bad_request")
    assert_error(client.post(url, json={"tools": [{**tool, "tool_call_id": "call_nope"}]}), 400, "invalid_decision")
    bad_args = {**tool, "confirmed": True, "tool_args": {"path": 5}}
    assert "path" in assert_error(client.post(url, json={"tools": [bad_args]}), 422, "invalid_tool_arguments")["detail"]
    assert_error(client.post(url, json={"tools": [{"confirmed": True}]}), 422, "invalid_body")
    assert_error(client.post(url, json={"tools": [tool], "session_id": "another"}), 404)
    after = client.get(f"/runs/{run_id}").json()
    assert after["status"] == "paused" and after["last_offset"] == before["last_offset"]
    ok = client.post(url, json={"tools": [], "stream": False})  # an empty list approves every pending call
    assert ok.status_code == 200 and ok.json()["status"] == "COMPLETED"
    again = client.post(url, json={"tools": [], "stream": False})  # a retried continue forks nothing
    assert_error(again, 409, "run_not_paused")
    assert_error(client.post(f"/agents/fake/runs/{run_id}/cancel"), 409, "run_finished")


def test_expired_run_is_410(client: httpx.Client, rdb: redis.Redis, runtime: Any) -> None:
    run_id = uuid.uuid4().hex
    rdb.set(runtime.store.keys.run(run_id).gone, "1", px=60_000)
    assert_error(client.get(f"/runs/{run_id}"), 410, "run_expired")
    assert_error(client.get(f"/runs/{run_id}/events"), 410, "run_expired")
    assert_error(client.post(f"/agents/fake/runs/{run_id}/resume"), 410, "run_expired")


def test_api_key(worker: Any, worker_env: dict[str, str]) -> None:
    server = ApiServer({**worker_env, "AGENTS_CELERY_API_KEY": "s3cret"}).wait_ready()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            assert_error(c.get("/agents"), 401, "unauthorized")
            assert_error(c.get("/agents", headers={"Authorization": "Bearer wrong"}), 401)
            assert_error(c.post("/agents/fake/runs", data={"message": "x"}), 401)
            assert c.get("/agents", headers={"Authorization": "Bearer s3cret"}).status_code == 200
            assert c.get("/health").status_code == 200
    finally:
        server.stop()


def test_redis_down_is_503_at_once(worker_env: dict[str, str]) -> None:
    env = {**worker_env, "AGENTS_CELERY_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    server = ApiServer(env).wait_ready()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            for method, url in [("GET", "/health"), ("GET", "/agents"), ("GET", "/runs/x"), ("POST", "/agents/a/runs")]:
                started = time.monotonic()
                resp = c.request(method, url, data={"message": "x"} if method == "POST" else None)
                assert resp.status_code == 503, (url, resp.text)
                assert time.monotonic() - started < 5
            assert_error(c.get("/agents"), 503, "redis_unavailable")
    finally:
        server.stop()


def test_gunicorn_gevent_serves_streams(worker: Any, worker_env: dict[str, str], script: Any) -> None:
    import gevent  # noqa: F401  (dev dependencies: a missing one fails the test, never skips it)
    import gunicorn  # noqa: F401

    server = ApiServer(worker_env, gunicorn=True).wait_ready()
    try:
        script("Served by gunicorn.")
        with httpx.stream("POST", server.url + "/agents/fake/runs", data={"message": "hi"}, timeout=20) as resp:
            assert resp.status_code == 200
            got = list(frames(resp))
        assert got[-1].event == "RunCompleted" and got[-1].data["content"] == "Served by gunicorn."
        assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    finally:
        server.stop()


@pytest.mark.parametrize("front", ["gunicorn", "django"])
def test_more_streams_than_a_default_redis_pool(worker_env: dict[str, str], runtime: Any, front: str) -> None:
    """150 concurrent subscribers of one live run (redis-py's default pools stop at 100), on gunicorn's gevent
    worker and on the Django app under uvicorn (asyncio Redis client): all get every event."""
    from agents_celery.events import EventType, make_event

    subs = 150
    run_id = uuid.uuid4().hex
    log = runtime.store.log
    log.create(run_id, "s", "fake", [make_event(EventType.RUN_STARTED, thread_id="s", run_id=run_id)])
    token = runtime.leases.acquire(run_id, 60_000)
    env = {**worker_env, "AGENTS_CELERY_KEEPALIVE_SECONDS": "0.3", "AGENTS_CELERY_API_KEY": "k"}
    server = ApiServer(env, gunicorn=front == "gunicorn", django=front == "django").wait_ready()
    conns: list[socket.socket] = []
    try:
        base = "/ai" if front == "django" else ""
        request = f"GET {base}/runs/{run_id}/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n".encode()
        for _ in range(subs):
            conn = socket.create_connection(("127.0.0.1", server.port), timeout=20)
            conn.sendall(request)
            conns.append(conn)
        for conn in conns:  # every stream is open and past its replay
            assert b"RUN_STARTED" in recv_until(conn, b"RUN_STARTED")
        content = make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="m", delta="hi")
        log.append(run_id, [content] * 5, token)
        done = make_event(EventType.RUN_FINISHED, thread_id="s", run_id=run_id, outcome={"type": "success"})
        log.set_status(run_id, "ended", token, [done])
        for conn in conns:
            body = recv_until(conn, b"0\r\n\r\n")  # the chunked body's end: the stream closed after the run
            assert body.count(b"event: TEXT_MESSAGE_CONTENT") == 5 and b"RUN_FINISHED" in body, body[-300:]
    finally:
        for conn in conns:
            conn.close()
        server.stop()


def test_a_stream_reads_its_live_batches_on_one_connection(monkeypatch: pytest.MonkeyPatch, runtime: Any) -> None:
    """A stream keeps the connection it waits on: no checkout from the pool per live batch, connected again
    when Redis dropped it between two reads, and back in the pool when the stream ends."""
    from agents_celery.events import EventType, make_event
    from agents_celery.http.streams import Streams

    run_id = uuid.uuid4().hex
    log = runtime.store.log
    log.create(run_id, "s", "fake", [make_event(EventType.RUN_STARTED, thread_id="s", run_id=run_id)])
    token = runtime.leases.acquire(run_id, 60_000)
    streams = Streams(runtime, max_connections=4)
    pool = streams.redis.connection_pool
    checkout, checkin, taken, given_back = pool.get_connection, pool.release, [], []
    monkeypatch.setattr(pool, "get_connection", lambda *a, **k: taken.append(1) or checkout(*a, **k))
    monkeypatch.setattr(pool, "release", lambda conn: given_back.append(1) or checkin(conn))
    try:
        info = streams.log.info(run_id)
        pages = streams.log.tail(run_id, -1, block_ms=200, info=info, idle_seconds=0.2)
        assert [offset for offset, _ in next(pages) or []] == [0]  # the replay
        content = make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="m", delta="hi")
        for offset in range(1, 6):
            log.append(run_id, [content], token)
            assert [o for o, _ in next(pages) or []] == [offset]  # one live batch each
            if offset == 3:  # Redis drops the stream's connection while a slow client holds the stream up
                assert kill_connections(runtime.redis, "xread")
        done = make_event(EventType.RUN_FINISHED, thread_id="s", run_id=run_id, outcome={"type": "success"})
        log.set_status(run_id, "ended", token, [done])
        assert [o for o, _ in next(pages) or []] == [6]
        assert next(pages, "ended") == "ended"
        assert len(taken) == 2  # the log's info (streams.log.info), then the stream's own connection, once
        assert len(given_back) == 2  # the stream's given back when it ended
    finally:
        streams.close()


# -- fuzzing the OpenAPI spec: no 5xx ---------------------------------------------------------------------------
# schemathesis' pytest plugin (``from_fixture``) does not run under pytest 9 (it reads ``node._nodeid``), so the
# test drives its per-operation hypothesis strategies itself against the live server.


#: Examples per operation: the shared protocol is fuzzed in depth behind Flask; behind Django the same protocol
#: needs only enough to reach each operation's own body parsing and error mapping (the two cost 64 s and 62 s).
FUZZ_EXAMPLES = {"flask": 40, "django": 12}


def test_fuzz_no_server_errors(api: ApiServer, request: pytest.FixtureRequest) -> None:
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error

    schema = schemathesis.openapi.from_url(api.url + "/openapi.json")
    tested = []
    for result in schema.get_all_operations():
        operation = result.ok()
        tested.append(operation.label)

        @given(case=operation.as_strategy())
        @settings(
            max_examples=FUZZ_EXAMPLES[request.node.callspec.params["api"]],
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def check(case: Any) -> None:
            case.call_and_validate(base_url=api.url, checks=[not_a_server_error], timeout=10)

        check()
    assert len(tested) >= 10, tested  # schemathesis leaves out the spec's own route


def test_api_with_agents_lists_them_before_any_worker_published(worker_env: dict[str, str]) -> None:
    """``agents-celery api --agents MODULE``: the module's agents are known even with no worker around."""
    env = {**worker_env, "AGENTS_CELERY_KEY_PREFIX": f"{worker_env['AGENTS_CELERY_KEY_PREFIX']}:lonely"}
    server = ApiServer(env).wait_ready()  # the env names tests.agents.fixture; nothing published here
    try:
        names = [a["name"] for a in httpx.get(server.url + "/agents", timeout=10).json()]
        assert names[:2] == ["fake", "offline"]
        assert httpx.get(server.url + "/agents/fake", timeout=10).status_code == 200
    finally:
        server.stop()


# -- runs and sessions as resources ---------------------------------------------------------------------------


def test_runs_and_sessions_are_listed_read_and_deleted(client: httpx.Client, script: Any) -> None:
    session = f"s-{uuid.uuid4().hex[:8]}"
    script("First answer.", "Second answer.")
    done = []
    for message in ("one", "two"):
        resp = client.post("/agents/fake/runs", data={"message": message, "stream": "false", "session_id": session})
        assert resp.status_code == 200, resp.text
        done.append(resp.json()["run_id"])
    first = client.get("/runs", params={"session_id": session, "limit": 1}).json()
    assert [r["run_id"] for r in first["runs"]] == [done[1]] and first["next_cursor"]
    assert first["runs"][0]["status"] == "completed" and first["runs"][0]["session_id"] == session
    second = client.get("/runs", params={"session_id": session, "limit": 1, "cursor": first["next_cursor"]}).json()
    assert [r["run_id"] for r in second["runs"]] == [done[0]] and second["next_cursor"] is None
    assert done[1] in [r["run_id"] for r in client.get("/runs", params={"status": "completed"}).json()["runs"]]
    shown = client.get(f"/sessions/{session}").json()
    assert [(m["role"], m["content"]) for m in shown["messages"]][::2] == [("user", "one"), ("user", "two")]
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant", "user", "assistant"]
    assert [r["run_id"] for r in shown["runs"]] == done[::-1] and shown["active_run_id"] is None
    assert session in [s["session_id"] for s in client.get("/sessions", params={"limit": 200}).json()["sessions"]]
    # A paused run of the session: neither it nor its session can be deleted until it ends.
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/x"})]), "ok")
    resp = client.post("/agents/fake/runs", data={"message": "three", "stream": "false", "session_id": session})
    paused = resp.json()["run_id"]
    assert client.get("/runs", params={"session_id": session, "status": "paused"}).json()["runs"][0]["run_id"] == paused
    refused = client.delete(f"/runs/{paused}")
    assert refused.status_code == 409 and refused.json()["code"] == "run_live"
    refused = client.delete(f"/sessions/{session}")
    assert refused.status_code == 409 and refused.json()["code"] == "session_busy"
    assert client.post(f"/agents/fake/runs/{paused}/cancel").status_code == 200
    wait_status(client, paused, "cancelled")
    assert client.delete(f"/runs/{done[0]}").status_code == 204
    assert client.get(f"/runs/{done[0]}").json()["code"] == "run_not_found"
    assert client.delete(f"/sessions/{session}").status_code == 204
    gone = client.get(f"/sessions/{session}")
    assert gone.status_code == 404 and gone.json()["code"] == "session_not_found"
    assert client.get("/runs", params={"session_id": session}).json() == {"runs": [], "next_cursor": None}
    assert client.get(f"/runs/{paused}").status_code == 404


def test_bad_listing_parameters_are_a_json_400(client: httpx.Client) -> None:
    for params, word in (
        ({"status": "done"}, "status"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1000"}, "limit"),
        ({"cursor": "x"}, "cursor"),
    ):
        resp = client.get("/runs", params=params)
        assert resp.status_code == 400 and word in resp.json()["detail"], (params, resp.text)
    assert client.get("/sessions", params={"limit": "-3"}).status_code == 400
    assert client.put("/runs/abc").status_code == 405


def test_the_inspector_pages_are_static_and_locked_down(client: httpx.Client) -> None:
    """The pages hold no data (the API answers their scripts like any client), so they are served to anyone;
    they load only their own script and style."""
    root = client.get("/ui")
    assert root.status_code == 308 and root.headers["location"].endswith("/ui/")
    for path, kind in (("/ui/", "text/html"), ("/ui/runs/abc", "text/html"), ("/ui/ui.js", "text/javascript")):
        page = client.get(path)
        assert page.status_code == 200 and page.headers["content-type"].startswith(kind), path
        assert page.headers["content-security-policy"].startswith("default-src 'self'")
        assert page.headers["x-content-type-options"] == "nosniff"
    assert 'src="../ui.js"' in client.get("/ui/runs/abc").text
    missing = client.get("/ui/secrets.txt")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"


def test_a_delayed_run_over_http(client: httpx.Client) -> None:
    body = {"message": "later", "stream": "false", "background": "true", "start_after": "60"}
    resp = client.post("/agents/offline/runs", data=body)
    assert resp.status_code == 202 and resp.json()["status"] == "scheduled"
    run_id = resp.json()["run_id"]
    assert run_id in [r["run_id"] for r in client.get("/runs", params={"status": "scheduled"}).json()["runs"]]
    assert client.post(f"/agents/offline/runs/{run_id}/cancel").json()["status"] == "cancelled"
    naive = client.post("/agents/offline/runs", json={"message": "x", "start_at": "2030-01-01T09:00:00"})
    assert naive.status_code == 422 and "time zone" in naive.json()["detail"]
    negative = client.post("/agents/offline/runs", json={"message": "x", "start_after": -3})
    assert negative.status_code == 422
    ftp = client.post("/agents/offline/runs", json={"message": "x", "webhook_url": "ftp://example.com/h"})
    assert ftp.status_code == 422 and "http:// or https://" in ftp.json()["detail"]
    unsigned = client.post("/agents/offline/runs", json={"message": "x", "webhook_url": "https://example.com/h"})
    assert unsigned.status_code == 422 and "WEBHOOK_SECRET" in unsigned.json()["detail"]  # this API has none


def test_a_run_tree_over_http(client: httpx.Client, fake_openai: Any, rdb: redis.Redis, key_prefix: str) -> None:
    """Agents as tools through the API: the AgentOS dialect pauses on a child's call and its continue reaches
    the child; GET /runs shows the tree; ?format=agui attributes the child's work to it."""
    from .test_subagents import by_agent, lead_asks, researcher_deletes

    path = f"/tmp/{uuid.uuid4().hex}"
    fake_openai.responder = by_agent(lead=lead_asks(path, then="All clean."), researcher=researcher_deletes)
    with client.stream("POST", "/agents/lead/runs", data={"message": "clean", "stream": "true"}) as resp:
        got = list(frames(resp))
    assert got[-1].event == "RunPaused" and not any("SUBAGENT" in str(f.event) for f in got)  # skipped
    run_id = got[0].data["run_id"]
    (tool,) = got[-1].data["tools"]
    parent = client.get(f"/runs/{run_id}").json()
    (child,) = parent["children"]
    assert tool["tool_call_id"] == f"{child['run_id']}:call_del" and child["status"] == "paused"
    assert client.get(f"/runs/{child['run_id']}").json()["parent_run_id"] == run_id
    tools = [{**tool, "confirmed": True}]
    resp = client.post(f"/agents/lead/runs/{run_id}/continue", data={"tools": json.dumps(tools), "stream": "false"})
    assert resp.status_code == 200, resp.text
    assert wait_status(client, run_id, "completed")["output"] == "All clean."
    assert deletions(rdb, key_prefix, path) == 1
    with client.stream("GET", f"/runs/{run_id}/events", params={"format": "agui", "until": "end"}) as resp:
        events = [f.data for f in frames(resp)]
    assert_agui_stream(events)
    kinds = [(e["type"], e.get("subagentRunId")) for e in events]
    assert ("SUBAGENT_STARTED", child["run_id"]) in kinds and ("TOOL_CALL_RESULT", child["run_id"]) in kinds
    assert kinds.index(("TOOL_CALL_START", child["run_id"])) < kinds.index(("SUBAGENT_FINISHED", child["run_id"]))


def test_a_parent_agui_stream_shows_its_child_working_live(client: httpx.Client, fake_openai: Any) -> None:
    """While a child streams its answer, the parent's AG-UI stream already carries the child's deltas
    (attributed to it); each once, before the parent's SUBAGENT_FINISHED."""
    from .test_subagents import by_agent, lead_asks, researcher_talks

    fake_openai.responder = by_agent(lead=lead_asks("live"), researcher=researcher_talks)
    run_id = start_background(client, "research", agent="lead")
    seen: list[dict[str, Any]] = []
    live = None
    with client.stream("GET", f"/runs/{run_id}/events", params={"format": "agui", "until": "end"}) as resp:
        for f in frames(resp):
            AGUI_EVENT.validate_python(f.data)
            seen.append(f.data)
            child = f.data.get("subagentRunId")
            if live is None and f.data["type"] == "TEXT_MESSAGE_CONTENT" and child:
                live = client.get(f"/runs/{child}").json()["status"]
    assert live == "running"  # the child's first delta reached the parent's stream before the child ended
    assert_agui_stream(seen)
    (child,) = {e["subagentRunId"] for e in seen if e["type"] == "SUBAGENT_STARTED"}
    words = [e["delta"] for e in seen if e["type"] == "TEXT_MESSAGE_CONTENT" and e.get("subagentRunId") == child]
    child_log = stored(client, child)
    assert len(words) == sum(1 for f in child_log if f.event == "TEXT_MESSAGE_CONTENT")  # each once
    kinds = [(e["type"], e.get("subagentRunId")) for e in seen]
    assert kinds.index(("TEXT_MESSAGE_END", child)) < kinds.index(("SUBAGENT_FINISHED", child))
    assert seen[-1]["type"] == "RUN_FINISHED"

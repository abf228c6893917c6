"""The AG-UI endpoint (``POST /agui/<agent_id>``) over HTTP, on the Flask and the Django front ends: a real API
server, a real worker, real Redis. The official JS client drives the same flows in test_agui_client.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from agents_celery.models import ScriptedToolCall, ScriptedTurn

from .conftest import TEST_REDIS_URL
from .support.apis import ApiServer, SharedApis, frames
from .support.invariants import assert_agui_stream, counter_of

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module", params=["flask", "django"])
def api(request: pytest.FixtureRequest, apis: SharedApis) -> ApiServer:
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


def run_input(thread: str, *messages: dict[str, Any], run_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """A RunAgentInput as HttpAgent sends it (every field, camelCase)."""
    return {
        "threadId": thread,
        "runId": run_id or uuid.uuid4().hex,
        "state": {"theme": "dark"},
        "messages": list(messages),
        "tools": [],
        "context": [],
        "forwardedProps": {},
        **extra,
    }


def user(text: str) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex, "role": "user", "content": text}


def post(client: httpx.Client, body: dict[str, Any], path: str = "/agui/fake") -> list[dict[str, Any]]:
    """POST a RunAgentInput; the AG-UI events of the answer (checked strict and complete)."""
    with client.stream("POST", path, json=body) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [f.data for f in frames(resp)]
    assert_agui_stream(events)
    assert [e["type"] for e in events].count("RUN_STARTED") == 1
    assert sum(e["type"] in ("RUN_FINISHED", "RUN_ERROR") for e in events) == 1
    assert events[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR")
    return events


def text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def count(r: redis.Redis, prefix: str, name: str) -> int:
    return counter_of(r, prefix)(name)


def test_a_run_under_the_clients_ids_with_snapshots(client: httpx.Client, script: Any) -> None:
    script("Hello from the agent.")
    thread, run = uuid.uuid4().hex, uuid.uuid4().hex
    events = post(client, run_input(thread, user("hi"), run_id=run))
    assert events[0] == {**events[0], "threadId": thread, "runId": run}
    assert events[-1]["threadId"] == thread and events[-1]["runId"] == run
    assert events[-1]["outcome"]["type"] == "success" and text(events) == "Hello from the agent."
    state, messages = events[-3], events[-2]
    assert state["type"] == "STATE_SNAPSHOT" and state["snapshot"] == {"theme": "dark"}
    assert messages["type"] == "MESSAGES_SNAPSHOT"
    assert [(m["role"], m.get("content")) for m in messages["messages"]] == [
        ("user", "hi"),
        ("assistant", "Hello from the agent."),
    ]
    # The thread is a session: its next input carries the snapshot's conversation, and the run sees it.
    script("Second answer.")
    follow = run_input(thread, *messages["messages"], user("again"))
    assert text(post(client, follow)) == "Second answer."
    assert len(client.get(f"/sessions/{thread}").json()["runs"]) == 2


def test_the_same_run_id_twice_attaches_to_one_run(client: httpx.Client, script: Any) -> None:
    script("Only once.")
    body = run_input(uuid.uuid4().hex, user("hi"))
    first, again = post(client, body), post(client, body)
    assert text(first) == text(again) == "Only once."
    runs = client.get("/runs", params={"session_id": body["threadId"]}).json()["runs"]
    assert len(runs) == 1


def test_interrupt_resumed_with_edited_args_runs_the_tool_once(
    client: httpx.Client, script: Any, rdb: redis.Redis, key_prefix: str
) -> None:
    asked, edited = f"/tmp/{uuid.uuid4().hex}", f"/tmp/{uuid.uuid4().hex}"
    script(ScriptedTurn("Deleting.", [ScriptedToolCall("delete_file", {"path": asked})]), "Done.")
    thread = uuid.uuid4().hex
    paused = post(client, run_input(thread, user("delete it")))
    end = paused[-1]
    assert end["outcome"]["type"] == "interrupt"
    (interrupt,) = end["outcome"]["interrupts"]
    assert interrupt["reason"] == "tool_call" and interrupt["toolCallId"] == interrupt["id"]
    assert interrupt["responseSchema"]["properties"]["editedArgs"]["properties"]["path"]
    assert [e["type"] for e in paused[-3:]] == ["STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]

    # New input without resume while the interrupt is open: RUN_ERROR, and the run waits on.
    refused = post(client, run_input(thread, user("something else")))
    assert [e["type"] for e in refused] == ["RUN_STARTED", "RUN_ERROR"] and refused[1]["code"] == "interrupts_open"
    resume = [
        {
            "interruptId": interrupt["id"],
            "status": "resolved",
            "payload": {"approved": True, "editedArgs": {"path": edited}},
        }
    ]
    partial = post(client, run_input(thread, resume=[{**resume[0], "interruptId": "nope"}]))
    assert partial[-1]["type"] == "RUN_ERROR" and partial[-1]["code"] == "resume_mismatch"

    done = post(client, run_input(thread, resume=resume))
    results = [e for e in done if e["type"] == "TOOL_CALL_RESULT"]
    assert [r["content"] for r in results] == [f"deleted {edited}"]
    assert done[-1]["outcome"]["type"] == "success" and text(done) == "Done."
    # The same resume again (a retried request under a new runId): it attaches, nothing runs twice.
    replayed = post(client, run_input(thread, resume=resume))
    assert [e["content"] for e in replayed if e["type"] == "TOOL_CALL_RESULT"] == [f"deleted {edited}"]
    assert count(rdb, key_prefix, f"delete_file:{edited}") == 1
    assert count(rdb, key_prefix, f"delete_file:{asked}") == 0


def test_a_cancelled_interrupt_rejects_the_call(
    client: httpx.Client, script: Any, rdb: redis.Redis, key_prefix: str
) -> None:
    path = f"/tmp/{uuid.uuid4().hex}"
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": path})]), "Left it alone.")
    thread = uuid.uuid4().hex
    (interrupt,) = post(client, run_input(thread, user("delete it")))[-1]["outcome"]["interrupts"]
    done = post(client, run_input(thread, resume=[{"interruptId": interrupt["id"], "status": "cancelled"}]))
    (result,) = [e for e in done if e["type"] == "TOOL_CALL_RESULT"]
    assert "rejected" in result["content"] and text(done) == "Left it alone."
    assert count(rdb, key_prefix, f"delete_file:{path}") == 0


def test_a_frontend_tool_round_trip(client: httpx.Client, script: Any) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("pick_color", {"options": ["red", "blue"]})]), "You picked red.")
    tools = [
        {
            "name": "pick_color",
            "description": "Ask the user to pick a color.",
            "parameters": {"type": "object", "properties": {"options": {"type": "array", "items": {"type": "string"}}}},
        }
    ]
    thread = uuid.uuid4().hex
    first = post(client, run_input(thread, user("pick one"), tools=tools))
    end = first[-1]
    assert end["outcome"]["type"] == "success"
    (call_id,) = end["outcome"]["pendingToolCallIds"]
    start = next(e for e in first if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "pick_color" and start["toolCallId"] == call_id
    snapshot = first[-2]["messages"]
    assert snapshot[-1]["toolCalls"][0]["id"] == call_id
    # Without the answer the thread waits on.
    refused = post(client, run_input(thread, *snapshot, user("hello?"), tools=tools))
    assert refused[-1]["type"] == "RUN_ERROR" and refused[-1]["code"] == "tools_open"
    answer = {"id": uuid.uuid4().hex, "role": "tool", "toolCallId": call_id, "content": "red"}
    done = post(client, run_input(thread, *snapshot, answer, tools=tools))
    (result,) = [e for e in done if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == call_id and result["content"] == "red"
    assert text(done) == "You picked red." and done[-1]["outcome"]["type"] == "success"


def test_connect_attaches_mid_run_as_valid_agui(client: httpx.Client, script: Any) -> None:
    script(" ".join(f"w{i}" for i in range(40)), token_delay=0.03)
    body = run_input(uuid.uuid4().hex, user("long one"))
    with client.stream("POST", "/agui/fake", json=body) as resp:  # the first stream drops after a few words
        for f in frames(resp):
            if f.data["type"] == "TEXT_MESSAGE_CONTENT":
                break
    events = post(client, {**body, "messages": []}, "/agui/fake/connect")
    assert events[0]["runId"] == body["runId"]
    # Synthesized: the step and the message were open when it joined.
    assert [e["type"] for e in events[1:3]] == ["STEP_STARTED", "TEXT_MESSAGE_START"]
    assert events[-1]["outcome"]["type"] == "success"
    full = events[-2]["messages"][-1]["content"]
    assert full.endswith(text(events)) and full.split() == [f"w{i}" for i in range(40)]
    # Once the run ended, connect gives its end: RUN_STARTED, the snapshots and RUN_FINISHED.
    ended = post(client, {**body, "runId": "reconnect", "messages": []}, "/agui/fake/connect")
    assert [e["type"] for e in ended] == ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]


def test_bad_input_is_refused_before_the_stream(client: httpx.Client, script: Any) -> None:
    script("unused")
    good = run_input(uuid.uuid4().hex, user("hi"))
    snake = {**{k: v for k, v in good.items() if k != "threadId"}, "thread_id": good["threadId"]}
    resp = client.post("/agui/fake", json=snake)
    assert resp.status_code == 422 and "thread_id" in resp.json()["detail"]
    resp = client.post("/agui/fake", json={**good, "messages": [{"role": "user"}]})
    assert resp.status_code == 422 and resp.json()["code"] == "invalid_body"
    resp = client.post(
        "/agui/fake", json={**good, "messages": [user("hi"), {"id": "a", "role": "assistant", "content": "x"}]}
    )
    assert resp.status_code == 422 and "end with the new user message" in resp.json()["detail"]
    assert client.post("/agui/nobody", json=good).json()["code"] == "unknown_agent"
    assert (
        client.post("/agui/fake", content=b"{not json", headers={"Content-Type": "application/json"}).status_code == 400
    )
    bad_tool = {**good, "tools": [{"name": "get_time", "description": "", "parameters": {}}]}
    resp = client.post("/agui/fake", json=bad_tool)
    assert resp.status_code == 422 and "get_time" in resp.json()["detail"]
    assert client.get("/runs", params={"session_id": good["threadId"]}).json()["runs"] == []


def test_messages_that_contradict_the_history_are_refused(client: httpx.Client, script: Any) -> None:
    script("First answer.")
    thread = uuid.uuid4().hex
    snapshot = post(client, run_input(thread, user("first")))[-2]["messages"]
    forged = [{**snapshot[0], "content": "something I never said"}, *snapshot[1:]]
    resp = client.post("/agui/fake", json=run_input(thread, *forged, user("second")))
    assert resp.status_code == 409 and resp.json()["code"] == "history_mismatch"
    assert client.get(f"/sessions/{thread}").json()["active_run_id"] is None  # nothing started, nothing held
    script("Second answer.")
    assert text(post(client, run_input(thread, *snapshot, user("second")))) == "Second answer."
    # A client that keeps no history may send the new message alone.
    script("Third answer.")
    assert text(post(client, run_input(thread, user("third")))) == "Third answer."


def test_state_context_and_forwarded_props_reach_the_agent(client: httpx.Client, script: Any, fake_openai: Any) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("client_props", {})]), "Noted.")
    body = run_input(
        uuid.uuid4().hex,
        user("what do you know?"),
        state={"cart": [1, 2]},
        forwardedProps={"plan": "pro"},
        context=[{"description": "the user's city", "value": "Paris"}],
        tools=[{"name": "show_map", "description": "Show a map.", "parameters": {"type": "object", "properties": {}}}],
    )
    done = post(client, body)
    (result,) = [e["content"] for e in done if e["type"] == "TOOL_CALL_RESULT"]
    assert result == '{"forwarded": {"plan": "pro"}, "state": {"cart": [1, 2]}}'
    assert done[-3]["snapshot"] == {"cart": [1, 2]}
    request = fake_openai.requests[-1]
    assert "- the user's city: Paris" in request["messages"][0]["content"]
    assert "show_map" in [t["function"]["name"] for t in request["tools"]]

"""The official AG-UI client (``@ag-ui/client`` ``HttpAgent``, pinned in tests/agui_client/package.json) runs our
agents through ``POST /agui/<agent_id>``: node drives tests/agui_client/scenarios.mjs against a real API server,
a real worker and real Redis, on the Flask and the Django front ends. The client verifies each stream itself."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from agents_celery.models import ScriptedToolCall, ScriptedTurn

from .conftest import TEST_REDIS_URL
from .support.apis import ApiServer, SharedApis, frames
from .support.invariants import counter_of

pytestmark = pytest.mark.timeout(120)

CLIENT = Path(__file__).parent / "agui_client"


@pytest.fixture(scope="module", params=["flask", "django"])
def api(request: pytest.FixtureRequest, apis: SharedApis) -> ApiServer:
    if shutil.which("node") is None or not (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.fail("the AG-UI client is not installed: run scripts/ensure-agui-client (make test does)")
    return apis.get(request.param)


@pytest.fixture
def rdb() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(TEST_REDIS_URL)
    yield client
    client.close()


def node(api: ApiServer, scenario: str, thread: str, agent: str = "fake", **args: Any) -> dict[str, Any]:
    """Run one scenario of the JS client; what it printed."""
    done = subprocess.run(
        ["node", "scenarios.mjs", scenario, f"{api.url}/agui/{agent}", thread, json.dumps(args)],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, f"node failed:\n{done.stdout}\n{done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def count(r: redis.Redis, prefix: str, name: str) -> int:
    return counter_of(r, prefix)(name)


def test_http_agent_gets_the_streamed_text(api: ApiServer, script: Any) -> None:
    script("Hello from a durable run.")
    got = node(api, "text", uuid.uuid4().hex)
    assert got["types"][0] == "RUN_STARTED" and got["types"][-1] == "RUN_FINISHED"
    assert "TEXT_MESSAGE_CONTENT" in got["types"] and "MESSAGES_SNAPSHOT" in got["types"]
    assert got["messages"][-1] == {**got["messages"][-1], "role": "assistant", "content": "Hello from a durable run."}


def test_an_interrupt_resumed_with_edited_arguments_runs_the_tool_once(
    api: ApiServer, script: Any, rdb: redis.Redis, key_prefix: str
) -> None:
    asked, edited = f"/tmp/{uuid.uuid4().hex}", f"/tmp/{uuid.uuid4().hex}"
    script(ScriptedTurn("Deleting.", [ScriptedToolCall("delete_file", {"path": asked})]), "Done, it is gone.")
    got = node(api, "interrupt", uuid.uuid4().hex, edited=edited)
    (interrupt,) = got["interrupts"]
    assert interrupt["reason"] == "tool_call" and interrupt["toolCallId"] and interrupt["responseSchema"]
    assert got["refused"] and "interrupt" in got["refused"]  # new input without resume: RUN_ERROR
    assert "TOOL_CALL_RESULT" in got["resumedTypes"] and got["pendingAfter"] == 0
    assert got["messages"][-1]["content"] == "Done, it is gone."
    assert any(m["role"] == "tool" and m["content"] == f"deleted {edited}" for m in got["messages"])
    assert got["replayError"] is None and "TOOL_CALL_RESULT" in got["replayTypes"]  # the replay attached
    assert count(rdb, key_prefix, f"delete_file:{edited}") == 1
    assert count(rdb, key_prefix, f"delete_file:{asked}") == 0


def test_a_frontend_tool_round_trip(api: ApiServer, script: Any) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("pick_color", {"options": ["red", "blue"]})]), "You picked red.")
    got = node(api, "frontend", uuid.uuid4().hex)
    assert got["call"]["function"]["name"] == "pick_color"
    assert json.loads(got["call"]["function"]["arguments"]) == {"options": ["red", "blue"]}
    assert got["firstTypes"][-1] == "RUN_FINISHED" and "TOOL_CALL_RESULT" in got["secondTypes"]
    roles = [(m["role"], m["content"]) for m in got["messages"]]
    assert ("tool", "red") in roles and roles[-1] == ("assistant", "You picked red.")


def test_the_same_run_id_twice_is_one_run(api: ApiServer, script: Any) -> None:
    script("Exactly once.")
    thread = uuid.uuid4().hex
    got = node(api, "sameRunId", thread, runId=uuid.uuid4().hex)
    first, second = got["results"]
    assert first == second and first[-1]["content"] == "Exactly once."
    runs = httpx.get(f"{api.url}/runs", params={"session_id": thread}).json()["runs"]
    assert len(runs) == 1


def test_connect_reattaches_to_a_live_run(api: ApiServer, script: Any) -> None:
    words = [f"w{i}" for i in range(40)]
    script(" ".join(words), token_delay=0.03)
    thread, run = uuid.uuid4().hex, uuid.uuid4().hex
    body = {
        "threadId": thread,
        "runId": run,
        "state": {},
        "messages": [{"id": "u1", "role": "user", "content": "go"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    with httpx.stream("POST", f"{api.url}/agui/fake", json=body, timeout=30) as resp:  # the tab drops mid-answer
        for f in frames(resp):
            if f.data["type"] == "TEXT_MESSAGE_CONTENT":
                break
    got = node(api, "connect", thread, runId=run)
    assert got["types"][0] == "RUN_STARTED" and got["types"][-1] == "RUN_FINISHED"
    assert got["messages"][-1]["content"].split() == words  # the whole answer, from the final snapshot


def test_one_stream_tells_a_run_tree(api: ApiServer, fake_openai: Any) -> None:
    """A parent with two child runs: the parent's stream carries each child's work attributed to it, between
    SUBAGENT_STARTED and SUBAGENT_FINISHED, and the official client's verifier accepts all of it."""
    from .test_subagents import by_agent, lead_asks, researcher_counts

    fake_openai.responder = by_agent(lead=lead_asks("alpha", "beta"), researcher=researcher_counts())
    got = node(api, "subagents", uuid.uuid4().hex, agent="lead")
    events = got["first"]
    assert events[0][0] == "RUN_STARTED" and events[-1][0] == "RUN_FINISHED" and got["second"] is None
    started = [sub for kind, sub, _ in events if kind == "SUBAGENT_STARTED"]
    assert len(started) == 2 and len(set(started)) == 2
    for sub in started:
        kinds = [kind for kind, who, _ in events if who == sub]
        assert kinds[0] == "SUBAGENT_STARTED" and kinds[-1] == "SUBAGENT_FINISHED"
        assert {"TEXT_MESSAGE_CONTENT", "TOOL_CALL_START", "TOOL_CALL_RESULT", "STEP_STARTED"} <= set(kinds)
    texts = [m["content"] for m in got["messages"] if m["role"] == "tool"]
    assert sorted(texts)[-2:] == ["Found: alpha", "Found: beta"]  # the parent's tool results are the answers
    assert got["messages"][-1]["content"] == "Summary written."


def test_a_nested_approval_resumed_through_the_parent_stream(
    api: ApiServer, fake_openai: Any, rdb: redis.Redis, key_prefix: str
) -> None:
    """A child asks for a confirmation: the parent's stream ends with that interrupt; the client's resume on
    the parent reaches the child, whose tool runs once."""
    from .test_subagents import by_agent, lead_asks, researcher_deletes

    path = f"/tmp/{uuid.uuid4().hex}"
    fake_openai.responder = by_agent(lead=lead_asks(path, then="All clean."), researcher=researcher_deletes)
    got = node(api, "subagents", uuid.uuid4().hex, agent="lead")
    (interrupt,) = got["interrupts"]
    child = interrupt["metadata"]["run_id"]
    assert interrupt["toolCallId"] == f"{child}:call_del"  # as the child's TOOL_CALL_START in the stream names it
    assert ["TOOL_CALL_START", child, None] in got["first"] and ["SUBAGENT_FINISHED", child, None] in got["first"]
    second = got["second"]
    assert ["SUBAGENT_STARTED", child, None] in second and ["TOOL_CALL_RESULT", child, None] in second
    assert second[-1][0] == "RUN_FINISHED" and got["messages"][-1]["content"] == "All clean."
    assert count(rdb, key_prefix, f"delete_file:{path}") == 1


def test_http_agent_sends_an_image_and_a_document(api: ApiServer, script: Any, fake_openai: Any) -> None:
    import base64

    script("An image and a report.")
    png, pdf = b"\x89PNG\r\n\x1a\n" + bytes(300), b"%PDF-1.4\n" + b"x" * 300
    seen = len(fake_openai.requests)
    image, doc = base64.b64encode(png).decode(), base64.b64encode(pdf).decode()
    got = node(api, "multimodal", uuid.uuid4().hex, image=image, pdf=doc)
    assert got["errors"] == [] and got["first"][-1] == got["second"][-1] == "RUN_FINISHED", got
    expected = [
        {"type": "text", "text": "What are these?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
        {"type": "file", "file": {"filename": "report.pdf", "file_data": f"data:application/pdf;base64,{doc}"}},
    ]
    first, second = fake_openai.requests[seen:]
    for request in (first, second):  # the second turn still sends them (the thread's history)
        users = [m["content"] for m in request["messages"] if m["role"] == "user"]
        assert users[0] == expected
    assert [m["content"] for m in got["messages"] if m["role"] == "user"] == ["What are these?", "and which is bigger?"]

"""The Vercel AI SDK's own chat client (npm ``ai`` 7: ``AbstractChat`` with ``DefaultChatTransport``, as ``useChat``
runs it; pinned in tests/aisdk_client/package.json) against ``/aisdk/<agent_id>``: node drives
tests/aisdk_client/scenarios.mjs against a real API server, a real worker and real Redis, on the Flask and the
Django front ends. The client validates every chunk against its own schema and throws on one it does not know."""

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
from agents_celery.testing.openai_server import FakeReply

from .conftest import TEST_REDIS_URL, wait_for
from .support.apis import ApiServer, SharedApis
from .support.invariants import counter_of

pytestmark = pytest.mark.timeout(120)

CLIENT = Path(__file__).parent / "aisdk_client"


def ensure_client() -> None:
    if shutil.which("node") is None or not (CLIENT / "node_modules" / "ai").is_dir():
        pytest.fail("the AI SDK client is not installed: run scripts/ensure-aisdk-client (make test does)")


@pytest.fixture(scope="module", params=["flask", "django"])
def api(request: pytest.FixtureRequest, apis: SharedApis) -> ApiServer:
    ensure_client()
    return apis.get(request.param)


@pytest.fixture
def rdb() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(TEST_REDIS_URL)
    yield client
    client.close()


def node(url: str, scenario: str, chat: str, **args: Any) -> dict[str, Any]:
    """Run one scenario of the JS client against the chat API at ``url``; what it printed."""
    done = subprocess.run(
        ["node", "scenarios.mjs", scenario, url, chat, json.dumps(args)],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    out = done.stdout.strip().splitlines()
    assert done.returncode == 0 and out, f"node failed:\n{done.stdout}\n{done.stderr}"
    result: dict[str, Any] = json.loads(out[-1])
    return result


def chunks(request: dict[str, Any]) -> list[Any]:
    """The chunks one recorded response streamed (``[DONE]`` as the string)."""
    found = []
    for block in request["body"].split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                data = line[6:]
                found.append(data if data == "[DONE]" else json.loads(data))
    return found


def types(request: dict[str, Any]) -> list[str]:
    return [c if isinstance(c, str) else c["type"] for c in chunks(request)]


def text_of(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


def tool_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"].startswith("tool-")]


def test_a_message_streams_with_a_tool(api: ApiServer, script: Any, rdb: redis.Redis, key_prefix: str) -> None:
    script(ScriptedTurn("Adding.", [ScriptedToolCall("add", {"a": 2, "b": 3})]), "It is 5.")
    chat = uuid.uuid4().hex
    got = node(f"{api.url}/aisdk/fake", "text", chat, text="2+3?")
    assert got["status"] == "ready" and got["errors"] == [], got
    user, answer = got["messages"]
    assert user["role"] == "user" and answer["role"] == "assistant"
    assert text_of(answer) == "Adding.It is 5."
    (call,) = tool_parts(answer)
    assert call["type"] == "tool-add" and call["state"] == "output-available"
    assert call["input"] == {"a": 2, "b": 3} and call["output"] == 5
    (request,) = got["requests"]
    assert request["headers"]["x-vercel-ai-ui-message-stream"] == "v1"
    run_id = request["headers"]["x-workflow-run-id"]
    assert answer["id"] == f"msg-{run_id}" and answer["metadata"]["run_id"] == run_id
    seen = types(request)
    assert seen[0] == "start" and seen[-2:] == ["finish", "[DONE]"]
    assert seen.count("start-step") == seen.count("finish-step") >= 2
    assert counter_of(rdb, key_prefix)("add") >= 1
    assert httpx.get(f"{api.url}/runs/{run_id}").json()["session_id"] == chat  # the chat is the session


def test_approval_through_add_tool_approval_response_runs_the_tool_once(
    api: ApiServer, script: Any, rdb: redis.Redis, key_prefix: str
) -> None:
    path = f"/tmp/{uuid.uuid4().hex}"
    script(ScriptedTurn("Deleting.", [ScriptedToolCall("delete_file", {"path": path})]), "Done, it is gone.")
    got = node(f"{api.url}/aisdk/fake", "approve", uuid.uuid4().hex, text="delete it")
    assert got["asked"]["type"] == "tool-delete_file" and got["asked"]["input"] == {"path": path}, got
    assert types(got["requests"][0])[-3:] == ["tool-approval-request", "finish", "[DONE]"]
    assert got["status"] == "ready" and got["errors"] == []
    _user, answer = got["messages"]  # the answer continued the same assistant message
    assert answer["id"] == got["pausedMessage"]["id"]
    (call,) = tool_parts(answer)
    assert call["state"] == "output-available" and call["output"] == f"deleted {path}"
    assert text_of(answer) == "Deleting.Done, it is gone."
    assert counter_of(rdb, key_prefix)(f"delete_file:{path}") == 1


def test_a_denial_with_a_reason_reaches_the_model(
    api: ApiServer, script: Any, rdb: redis.Redis, key_prefix: str, fake_openai: Any
) -> None:
    path = f"/tmp/{uuid.uuid4().hex}"
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": path})]), "Understood, I kept it.")
    got = node(f"{api.url}/aisdk/fake", "approve", uuid.uuid4().hex, approved=False, reason="keep that file")
    (call,) = tool_parts(got["messages"][-1])
    assert call["state"] == "output-denied", call
    assert text_of(got["messages"][-1]) == "Understood, I kept it."
    told = [m["content"] for m in fake_openai.requests[-1]["messages"] if m["role"] == "tool"]
    assert any("keep that file" in t for t in told), told
    assert counter_of(rdb, key_prefix)(f"delete_file:{path}") == 0


def test_an_edited_input_runs_as_edited(api: ApiServer, script: Any, rdb: redis.Redis, key_prefix: str) -> None:
    asked, edited = f"/tmp/{uuid.uuid4().hex}", f"/tmp/{uuid.uuid4().hex}"
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": asked})]), "Done.")
    got = node(f"{api.url}/aisdk/fake", "approve", uuid.uuid4().hex, edit={"path": edited})
    (call,) = tool_parts(got["messages"][-1])
    assert call["output"] == f"deleted {edited}", call
    count = counter_of(rdb, key_prefix)
    assert count(f"delete_file:{edited}") == 1 and count(f"delete_file:{asked}") == 0


def test_a_page_tool_answered_with_add_tool_output(api: ApiServer, script: Any, fake_openai: Any) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("pick_color", {"options": ["red", "blue"]})]), "You picked red.")
    tool = {
        "name": "pick_color",
        "description": "Ask the user.",
        "parameters": {"type": "object", "properties": {"options": {"type": "array", "items": {"type": "string"}}}},
    }
    got = node(f"{api.url}/aisdk/fake", "clientTool", uuid.uuid4().hex, tools=[tool], output="red")
    assert got["status"] == "ready" and got["errors"] == [], got
    (call,) = tool_parts(got["messages"][-1])
    assert call["type"] == "tool-pick_color" and call["output"] == "red"
    assert text_of(got["messages"][-1]) == "You picked red."
    assert [m["content"] for m in fake_openai.requests[-1]["messages"] if m["role"] == "tool"] == ["red"]


def test_stop_ends_the_stream_and_the_run(api: ApiServer, script: Any) -> None:
    script(" ".join(f"w{i}" for i in range(400)), token_delay=0.02)
    got = node(f"{api.url}/aisdk/fake", "stop", uuid.uuid4().hex)
    run_id = got["stopBody"]["run_id"]
    assert got["stopMs"] < 5000 and got["errors"] == [], got
    assert types(got["requests"][0])[-3:] == ["abort", "finish", "[DONE]"]
    wait_for(lambda: httpx.get(f"{api.url}/runs/{run_id}").json()["status"] == "cancelled", timeout=10)


def test_a_closed_page_does_not_stop_the_run_and_a_new_page_resumes_it_whole(api: ApiServer, script: Any) -> None:
    words = [f"w{i}" for i in range(60)]
    script(" ".join(words), token_delay=0.03)
    got = node(f"{api.url}/aisdk/fake", "closeAndResume", uuid.uuid4().hex, atLeast=5)
    assert got["errors"] == [] and got["status"] == "ready", got
    assert 0 < len(got["partial"]) < len(" ".join(words))  # the first page saw part of it
    user, answer = got["resumed"]
    assert text_of(answer) == " ".join(words)  # the whole answer once: replayed from its start, then live
    resume = got["requests"][1]
    assert resume["method"] == "GET" and resume["status"] == 200 and resume["url"].endswith("/stream")
    assert got["requests"][2]["status"] == 204 and got["afterEnd"]["messages"] == [user]  # nothing live after the end
    run_id = answer["metadata"]["run_id"]
    assert httpx.get(f"{api.url}/runs/{run_id}").json()["status"] == "completed"  # the closed tab stopped nothing


def test_regenerate_answers_again_in_a_new_run(api: ApiServer, fake_openai: Any) -> None:
    answers = iter(["First answer.", "Second answer."])
    fake_openai.responder = lambda request: FakeReply(text=next(answers))
    chat = uuid.uuid4().hex
    got = node(f"{api.url}/aisdk/fake", "regenerate", chat)
    assert got["firstAnswer"] == "First answer."
    _user, answer = got["messages"]
    assert text_of(answer) == "Second answer." and got["errors"] == []
    runs = httpx.get(f"{api.url}/runs", params={"session_id": chat}).json()["runs"]
    assert len(runs) == 2


def test_a_retried_post_attaches_to_the_run_it_started(api: ApiServer, script: Any) -> None:
    script("Exactly once.")
    chat = uuid.uuid4().hex
    body = {
        "id": chat,
        "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
    }
    first = httpx.post(f"{api.url}/aisdk/fake", json=body, timeout=30)
    second = httpx.post(f"{api.url}/aisdk/fake", json=body, timeout=30)
    assert first.status_code == second.status_code == 200
    assert first.headers["x-workflow-run-id"] == second.headers["x-workflow-run-id"]
    assert chunks({"body": first.text}) == chunks({"body": second.text})  # the same message, keep-alives aside
    assert '"delta":"once."' in first.text
    assert len(httpx.get(f"{api.url}/runs", params={"session_id": chat}).json()["runs"]) == 1


def test_bad_input_is_a_clear_4xx_and_changes_nothing(api: ApiServer) -> None:
    chat = uuid.uuid4().hex
    url = f"{api.url}/aisdk/fake"
    no_messages = httpx.post(url, json={"id": chat, "messages": []})
    assert no_messages.status_code == 422 and "messages" in no_messages.json()["detail"]
    odd_part = {"id": "u1", "role": "user", "parts": [{"type": "source-url", "url": "https://x"}]}
    refused = httpx.post(url, json={"id": chat, "messages": [odd_part]})
    assert refused.status_code == 422 and "source-url" in refused.json()["detail"]
    assert httpx.post(f"{api.url}/aisdk/nobody", json={"id": chat, "messages": [odd_part]}).status_code == 404
    assert httpx.get(f"{api.url}/aisdk/fake/{chat}/stream").status_code == 204
    assert httpx.get(f"{api.url}/runs", params={"session_id": chat}).json()["runs"] == []


def test_the_workflow_transport_reconnects_by_chunk_index_with_its_defaults(api: ApiServer, script: Any) -> None:
    """``@ai-sdk/workflow``'s ``WorkflowChatTransport`` as it comes: its POST carries only the messages; its stream
    drops after four frames and it reconnects to ``{api}/{x-workflow-run-id}/stream?startIndex=<chunks it has>``;
    a page reloaded later asks for the last three chunks (``initialStartIndex: -3``)."""
    words = [f"w{i}" for i in range(40)]
    script(" ".join(words), token_delay=0.01)
    got = node(f"{api.url}/aisdk/fake", "workflow", uuid.uuid4().hex, cutAfter=4, tail=-3)
    assert got["errors"] == [] and got["status"] == "ready", got
    _user, answer = got["messages"]
    assert text_of(answer) == " ".join(words)  # no chunk lost or repeated across the reconnect
    post, reconnect, tail = got["requests"]
    run_id = got["runId"]
    assert post["method"] == "POST" and post["headers"]["x-workflow-run-id"] == run_id
    whole = chunks({"body": httpx.get(f"{api.url}/aisdk/fake/{run_id}/stream?startIndex=0").text})
    assert whole[0]["type"] == "start" and whole[-2:] == [{"type": "finish", "finishReason": "stop"}, "[DONE]"]
    had = int(reconnect["url"].rsplit("?startIndex=", 1)[1])  # the chunks the client had parsed before the drop
    assert reconnect["url"].endswith(f"/{run_id}/stream?startIndex={had}") and reconnect["status"] == 200
    assert 1 <= had < len(whole) - 2 and chunks(reconnect) == whole[had:]  # the rest of the same stream, no more
    assert tail["url"].endswith(f"/{run_id}/stream?startIndex=-3") and tail["status"] == 200
    assert chunks(tail) == whole[-4:]  # its last three chunks (and [DONE])
    session = httpx.get(f"{api.url}/runs/{run_id}").json()["session_id"]
    assert answer["metadata"]["session_id"] == session  # no chat id sent: a new session, named to the page


def test_a_second_workflow_message_finds_its_chat_from_the_history(api: ApiServer, fake_openai: Any) -> None:
    replies = iter(["First.", "Second."])
    fake_openai.responder = lambda request: FakeReply(text=next(replies))
    got = node(f"{api.url}/aisdk/fake", "workflowTwice", uuid.uuid4().hex)
    assert got["errors"] == [] and got["status"] == "ready", got
    assert [text_of(m) for m in got["messages"] if m["role"] == "assistant"] == ["First.", "Second."]
    first, second = (r["headers"]["x-workflow-run-id"] for r in got["requests"])
    sessions = {httpx.get(f"{api.url}/runs/{r}").json()["session_id"] for r in (first, second)}
    assert len(sessions) == 1  # the second run is in the first one's session: its history holds the first answer
    said = [m for m in fake_openai.requests[-1]["messages"] if m["role"] in ("user", "assistant")]
    assert [m["content"] for m in said] == ["go", "First.", "again"]


def test_a_bad_start_index_is_a_400_naming_it(api: ApiServer, script: Any) -> None:
    script("Short.")
    chat = uuid.uuid4().hex
    node(f"{api.url}/aisdk/fake", "text", chat)
    resp = httpx.get(f"{api.url}/aisdk/fake/{chat}/stream", params={"startIndex": "two"})
    assert resp.status_code == 400 and "startIndex" in resp.json()["detail"], resp.text

"""pydantic-ai agents through the HTTP API: ``GET /agents``, the AgentOS reconnect story (pause, continue, drop the
connection, resume) on Flask and on the Django app, ``?format=agui`` and the official AG-UI client's verifier (also
on a run whose worker is killed -9 mid-stream), against a real API server and a real worker serving
tests/agents/pydantic_ai_agents.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing import ScriptResponder

from .conftest import TEST_REDIS_URL, all_events, wait_event, wait_for
from .support.apis import ApiServer, frames
from .support.invariants import assert_agui_stream, assert_run_sound, counter_of
from .support.workers import Deployment
from .test_agui_client import CLIENT, node
from .test_api import approval_reconnect_story, wait_status

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def served(fake_openai: Any) -> Iterator[tuple[Deployment, ApiServer]]:
    """One worker and one API server (Flask) of the module's own, serving the pydantic-ai agents."""
    dep = Deployment("paihttp", fake_openai.url, {"AGENTS_CELERY_AGENTS": "tests.agents.pydantic_ai_agents"})
    try:
        dep.start(1)
        api = ApiServer({**dep.env, "AGENTS_CELERY_KEEPALIVE_SECONDS": "0.3"}).wait_ready()
        yield dep, api
        api.stop()
    finally:
        dep.close()


@pytest.fixture
def client(served: tuple[Deployment, ApiServer]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served[1].url, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def django_api(served: tuple[Deployment, ApiServer]) -> Iterator[ApiServer]:
    """The Django example project (the reusable app at ``/ai``) under uvicorn, on the same deployment."""
    api = ApiServer({**served[0].env, "AGENTS_CELERY_KEEPALIVE_SECONDS": "0.3"}, django=True).wait_ready()
    yield api
    api.stop()


@pytest.fixture(params=["flask", "django"])
def front(request: pytest.FixtureRequest, served: tuple[Deployment, ApiServer]) -> Iterator[httpx.Client]:
    """A client of one front end: Flask's server, or the Django app."""
    api = served[1] if request.param == "flask" else request.getfixturevalue("django_api")
    with httpx.Client(base_url=api.url, timeout=30) as c:
        yield c


def count(dep: Deployment, name: str) -> int:
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        return counter_of(r, dep.prefix)(name)


def test_get_agents_lists_the_pydantic_ai_agents(client: httpx.Client) -> None:
    agents = {a["name"]: a for a in client.get("/agents").json()}
    assert {"pai_weather", "pai_bank", "pai_files"} <= set(agents)
    files = agents["pai_files"]
    assert files["description"].startswith("Deletes files")
    tools = {t["name"]: t for t in files["tools"]}
    assert (
        tools["delete_file"]["requires_confirmation"] is True and tools["list_files"]["requires_confirmation"] is False
    )
    assert tools["delete_file"]["parameters"]["properties"] == {"path": {"type": "string"}}


def test_agentos_reconnect_story_with_a_pydantic_ai_agent(
    front: httpx.Client, served: tuple[Deployment, ApiServer], fake_openai: Any
) -> None:
    """Start, stream, the approval pause, continue, drop the connection, resume: on Flask and on Django."""
    client = front
    path, run_id, events = approval_reconnect_story(client, "pai_files", fake_openai)
    assert count(served[0], f"pai:delete_file:{path}") == 1
    completed = [f for f in events if f.event == "ToolCallCompleted"]
    assert [c.data["tool"]["tool_name"] for c in completed] == ["delete_file"]
    view = client.get(f"/runs/{run_id}").json()
    assert view["status"] == "completed" and view["usage"]["total_tokens"] > 0


def test_the_agui_dialect_of_a_pydantic_ai_run_is_strict(client: httpx.Client, fake_openai: Any) -> None:
    fake_openai.responder = ScriptResponder(
        [
            ScriptedTurn("Looking.", [ScriptedToolCall("get_lat_lng", {"location": "Paris"})]),
            ScriptedTurn(tool_calls=[ScriptedToolCall("get_weather", {"lat": 48.8, "lng": 2.3})]),
            "Sunny in Paris.",
        ]
    )
    resp = client.post("/agents/pai_weather/runs", data={"message": "Paris?", "stream": "false", "background": "true"})
    run_id = resp.json()["run_id"]
    wait_status(client, run_id, "completed")
    with client.stream("GET", f"/runs/{run_id}/events", params={"format": "agui"}) as r:
        got = [f.data for f in frames(r)]
    assert_agui_stream(got)
    types = [e["type"] for e in got]
    assert types.count("TOOL_CALL_RESULT") == 2 and types[-1] == "RUN_FINISHED"


def test_the_official_agui_client_resumes_a_pydantic_ai_interrupt(
    served: tuple[Deployment, ApiServer], fake_openai: Any
) -> None:
    if shutil.which("node") is None or not (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.fail("the AG-UI client is not installed: run scripts/ensure-agui-client (make test does)")
    dep, api = served
    asked, edited = f"/tmp/{uuid.uuid4().hex}", f"/tmp/{uuid.uuid4().hex}"
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("Deleting.", [ScriptedToolCall("delete_file", {"path": asked})]), "Done, it is gone."]
    )
    got = node(api, "interrupt", uuid.uuid4().hex, agent="pai_files", edited=edited)  # type: ignore[arg-type]
    (interrupt,) = got["interrupts"]
    assert interrupt["reason"] == "tool_call" and interrupt["toolCallId"]
    assert "TOOL_CALL_RESULT" in got["resumedTypes"] and got["pendingAfter"] == 0
    assert got["messages"][-1]["content"] == "Done, it is gone."
    assert any(m["role"] == "tool" and m["content"] == f"deleted {edited}" for m in got["messages"])
    assert got["replayError"] is None
    wait_for(lambda: count(dep, f"pai:delete_file:{edited}") == 1, timeout=10, what="the edited call")
    assert count(dep, f"pai:delete_file:{asked}") == 0


@pytest.mark.slow
def test_the_official_agui_client_verifies_a_run_whose_worker_was_killed_mid_stream(
    served: tuple[Deployment, ApiServer], fake_openai: Any
) -> None:
    """``@ag-ui/client`` reads a pydantic-ai run live through ``POST /agui/pai_weather`` while its worker is
    killed -9 in the middle of the second model request's stream: the retried unit (the dead attempt's message
    closed, the retry announced) still makes a stream the client's own verifier accepts, ending RUN_FINISHED."""
    from .test_pydantic_ai import kill_live

    if shutil.which("node") is None or not (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.fail("the AG-UI client is not installed: run scripts/ensure-agui-client (make test does)")
    dep, api = served
    text = " ".join(f"w{i}" for i in range(80))
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("Looking.", [ScriptedToolCall("get_lat_lng", {"location": "Oslo"})]), text], token_delay=0.02
    )
    before, counted = fake_openai.calls, count(dep, "pai:get_lat_lng")
    thread, agui_run = uuid.uuid4().hex, uuid.uuid4().hex
    cmd = ["node", "scenarios.mjs", "live", f"{api.url}/agui/pai_weather", thread]
    client = subprocess.Popen(
        [*cmd, json.dumps({"runId": agui_run, "message": "Weather in Oslo?"})],
        cwd=CLIENT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        rt = dep.runtime
        runs = wait_for(lambda: rt.runs(session_id=thread).runs, timeout=30, what="the client's run")
        run_id = runs[0].run_id
        second_turn = lambda e: e.type.value == "TEXT_MESSAGE_CONTENT" and str(e.data.get("delta", "")).startswith("w")  # noqa: E731
        wait_event(rt, run_id, second_turn)
        kill_live(dep)  # mid-stream: the model unit in flight was never journaled
        out, err = client.communicate(timeout=90)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(timeout=10)
    assert client.returncode == 0, f"the AG-UI client failed:\n{out}\n{err}"
    got = json.loads(out.strip().splitlines()[-1])
    types = got["types"]
    assert got["errors"] == [] and types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED", types
    assert types.count("TOOL_CALL_RESULT") == 1 and types.count("TEXT_MESSAGE_START") == 3  # Looking., dead, retry
    assert got["messages"][-1]["role"] == "assistant" and got["messages"][-1]["content"] == text
    assert fake_openai.calls - before == 3  # the first turn once, the second twice (killed, retried)
    assert count(dep, "pai:get_lat_lng") - counted == 1  # the journaled tool did not run again
    events = all_events(rt, run_id)
    assert_run_sound(events)
    kinds = [e.type.value for e in events]
    assert "attempt_abandoned" in [e.data.get("name") for e in events if e.type.value == "CUSTOM"], kinds
    with (
        httpx.Client(base_url=api.url, timeout=30) as http,
        http.stream("GET", f"/runs/{run_id}/events", params={"format": "agui"}) as r,
    ):
        assert_agui_stream([f.data for f in frames(r)])


def test_a_pydantic_ai_agent_behind_v1_gets_the_client_s_instructions_messages_and_tools(
    served: tuple[Deployment, ApiServer], fake_openai: Any
) -> None:
    """The openai SDK's ``instructions``, a ``developer`` message and a function tool of its own reach a
    pydantic-ai guest: the model is told them, its call of the client's tool is a ``function_call`` item the next
    request answers, and the conversation's items render from the pydantic-ai history."""
    import openai

    fake_openai.responder = ScriptResponder(
        [ScriptedTurn(tool_calls=[ScriptedToolCall("ask_user", {"question": "Which city?"})]), "Sunny in Oslo."]
    )
    tool = {
        "type": "function",
        "name": "ask_user",
        "description": "Ask the user something.",
        "parameters": {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]},
    }
    with openai.OpenAI(base_url=served[1].url + "/v1", api_key="unused", max_retries=0) as client:
        conversation = client.conversations.create()
        first = client.responses.create(
            model="pai_weather",
            instructions="Answer like a pirate.",
            input=[{"role": "developer", "content": "The user is in Norway."}, {"role": "user", "content": "Weather?"}],
            tools=[tool],  # type: ignore[list-item]
            conversation=conversation.id,
        )
        system = "\n".join(m["content"] for m in fake_openai.requests[-1]["messages"] if m["role"] == "system")
        assert "Answer like a pirate." in system and "The user is in Norway." in system
        assert "ask_user" in [t["function"]["name"] for t in fake_openai.requests[-1].get("tools") or []]
        (call,) = [i for i in first.output if i.type == "function_call"]
        assert call.name == "ask_user" and json.loads(call.arguments) == {"question": "Which city?"}
        answer = {"type": "function_call_output", "call_id": call.call_id, "output": "Oslo"}
        second = client.responses.create(model="pai_weather", input=[answer], conversation=conversation.id)  # type: ignore[list-item]
        assert second.output_text == "Sunny in Oslo."
        tool_messages = [m["content"] for m in fake_openai.requests[-1]["messages"] if m["role"] == "tool"]
        assert tool_messages == ["Oslo"]
        items = client.conversations.items.list(conversation.id, order="asc").data
        kinds = [(i.type, getattr(i, "role", None)) for i in items]
        assert ("message", "user") in kinds and ("function_call", None) in kinds
        assert ("function_call_output", None) in kinds and kinds[-1] == ("message", "assistant")

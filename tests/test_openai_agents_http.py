"""Agents SDK agents through the HTTP API: ``GET /agents``, the AgentOS reconnect story (stream, the approval pause,
continue, drop the connection, resume), a strict ``?format=agui`` stream and the session's conversation items on
``/v1``; a real API server and the session's worker serving tests/agents/openai_sdk.py."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing import ScriptResponder

from .conftest import TEST_REDIS_URL
from .support.apis import ApiServer
from .support.invariants import assert_agui_stream, counter_of
from .support.workers import Deployment
from .test_agui_client import CLIENT, node
from .test_api import approval_reconnect_story
from .test_openai_agents import TRIAGE, WEATHER

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def client(sdk_api: ApiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sdk_api.url, timeout=30) as c:
        yield c


def test_get_agents_lists_the_sdk_agents_as_they_are(client: httpx.Client) -> None:
    agents = {a["name"]: a for a in client.get("/agents").json()}
    assert {"sdk_weather", "sdk_files", "sdk_triage", "Billing_agent"} <= set(agents)
    files = agents["sdk_files"]
    assert files["framework"] == "openai-agents" and files["description"].startswith("Deletes files")
    tools = {t["name"]: t for t in files["tools"]}
    assert tools["delete_file"]["requires_confirmation"] is True
    assert tools["list_files"]["requires_confirmation"] is False


def test_agentos_reconnect_story_with_an_sdk_agent(
    client: httpx.Client, sdk_deployment: Deployment, fake_openai: Any
) -> None:
    """Start, stream, the approval pause, continue, drop the connection, resume: every offset once, in order."""
    path, run_id, events = approval_reconnect_story(client, "sdk_files", fake_openai)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        assert counter_of(r, sdk_deployment.prefix)(f"sdk:delete_file:{path}") == 1
    completed = [f for f in events if f.event == "ToolCallCompleted"]
    assert [c.data["tool"]["tool_name"] for c in completed] == ["delete_file"]
    assert client.get(f"/runs/{run_id}").json()["status"] == "completed"
    view = sdk_deployment.runtime.get_stream(run_id).get()  # the SDK's items, read as chat messages
    assert [m["role"] for m in view.messages] == ["user", "assistant", "tool", "assistant"], view.messages
    assert view.messages[1]["content"] == "Deleting." and view.messages[1]["tool_calls"][0]["id"]


def test_the_agui_dialect_of_a_handoff_run_is_strict(client: httpx.Client, fake_openai: Any) -> None:
    fake_openai.responder = ScriptResponder(TRIAGE)
    resp = client.post("/agents/sdk_triage/runs", data={"message": "Refund order A1.", "stream": "false"})
    assert resp.status_code == 200, resp.text
    run_id = resp.json()["run_id"]
    got = client.get(f"/runs/{run_id}/events", params={"format": "agui", "after": "-1"})
    wire = [json.loads(line[6:]) for line in got.text.splitlines() if line.startswith("data: ")]
    assert_agui_stream(wire)
    custom = [e for e in wire if e["type"] == "CUSTOM" and e["name"] == "handoff"]
    assert [c["value"]["to"] for c in custom] == ["Billing agent"]


def test_a_session_of_an_sdk_agent_as_conversation_items(client: httpx.Client, fake_openai: Any) -> None:
    session = f"sdk-items-{uuid.uuid4().hex[:8]}"
    fake_openai.responder = ScriptResponder(WEATHER)
    resp = client.post(
        "/agents/sdk_weather/runs", data={"message": "Weather in London?", "stream": "false", "session_id": session}
    )
    assert resp.status_code == 200, resp.text
    items = client.get(f"/v1/conversations/{session}/items", params={"order": "asc", "limit": "100"}).json()["data"]
    kinds = [(i["type"], i.get("role") or i.get("name")) for i in items]
    assert kinds == [
        ("message", "user"),
        ("function_call", "get_lat_lng"),
        ("function_call_output", None),
        ("function_call", "get_weather"),
        ("function_call_output", None),
        ("function_call", "get_time"),
        ("function_call_output", None),
        ("message", "assistant"),
    ]
    assert items[-1]["content"][0]["text"] == "It is sunny in London at noon."


def test_the_official_agui_client_resumes_an_sdk_interrupt_with_edited_arguments(
    sdk_api: ApiServer, sdk_deployment: Deployment, fake_openai: Any
) -> None:
    """``@ag-ui/client`` meets the approval as an interrupt, resumes it with edited arguments (which the SDK lacks):
    the call runs with them, once, and the MESSAGES_SNAPSHOT shows the SDK's items as chat messages."""
    if shutil.which("node") is None or not (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.fail("the AG-UI client is not installed: run scripts/ensure-agui-client (make test does)")
    asked, edited = f"/tmp/{uuid.uuid4().hex}", f"/tmp/{uuid.uuid4().hex}"
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("Deleting.", [ScriptedToolCall("delete_file", {"path": asked})]), "Done, it is gone."]
    )
    got = node(sdk_api, "interrupt", uuid.uuid4().hex, agent="sdk_files", edited=edited)
    (interrupt,) = got["interrupts"]
    assert interrupt["reason"] == "tool_call" and interrupt["toolCallId"]
    assert "TOOL_CALL_RESULT" in got["resumedTypes"] and got["pendingAfter"] == 0
    assert got["messages"][-1]["content"] == "Done, it is gone."
    assert any(m["role"] == "tool" and m["content"] == f"deleted {edited}" for m in got["messages"])
    assert got["replayError"] is None
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        count = counter_of(r, sdk_deployment.prefix)
        assert count(f"sdk:delete_file:{edited}") == 1 and count(f"sdk:delete_file:{asked}") == 0

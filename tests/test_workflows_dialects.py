"""Every dialect renders a workflow run as one run: AG-UI (its steps as AG-UI steps, its agents' work attributed to
their subagent runs, checked strict and complete), the OpenAI Responses API (the official openai SDK), the AI SDK's
UI message stream (a workflow step is a ``start-step`` / ``finish-step``) and A2A (the official a2a-sdk client)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import openai
import pytest
from a2a.types import TaskState

from agents_celery.testing.responders import ScriptResponder

from .support.apis import ApiServer, SharedApis, frames
from .support.invariants import assert_agui_stream
from .test_a2a import ask, collect, connect, folded, texts

pytestmark = pytest.mark.timeout(120)

ANSWER = "found five words about reefs"


@pytest.fixture(scope="module")
def api(apis: SharedApis) -> ApiServer:
    return apis.get("flask")


def test_an_agui_stream_of_a_workflow_run_shows_its_steps_and_its_agents(api: ApiServer, fake_openai: Any) -> None:
    fake_openai.responder = ScriptResponder([ANSWER])
    body = {
        "threadId": uuid.uuid4().hex,
        "runId": uuid.uuid4().hex,
        "state": {},
        "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": "reefs"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    with (
        httpx.Client(base_url=api.url, timeout=60) as client,
        client.stream("POST", "/agui/two-researchers", json=body) as resp,
    ):
        assert resp.status_code == 200, resp.read()
        events = [f.data for f in frames(resp)]
    assert_agui_stream(events)
    steps = [
        e["stepName"] for e in events if e["type"] == "STEP_STARTED" and not e["stepName"].startswith("model_turn")
    ]
    assert steps[0] == "gather" and set(steps[1:4]) == {"scout", "analyst", "tally"} and steps[4] == "write"
    children = {e["subagentRunId"] for e in events if e["type"] == "SUBAGENT_STARTED"}
    assert len(children) == 3  # scout, analyst, write: each agent step's run
    attributed = [e for e in events if e["type"] == "TEXT_MESSAGE_CONTENT" and e.get("subagentRunId") in children]
    assert attributed  # the agents' own answers, attributed to their runs
    own = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT" and "subagentRunId" not in e)
    assert own == ANSWER and events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"] == ANSWER


def test_a_responses_stream_of_a_workflow_run_is_one_response(api: ApiServer, fake_openai: Any) -> None:
    fake_openai.responder = ScriptResponder([ANSWER])
    client = openai.OpenAI(base_url=api.url + "/v1", api_key="k", max_retries=0)
    kinds: list[str] = []
    final: Any = None
    with client.responses.create(model="research-count-write", input="reefs", stream=True) as stream:
        for ev in stream:
            kinds.append(ev.type)
            if ev.type == "response.completed":
                final = ev.response
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final is not None and final.status == "completed" and final.output_text == ANSWER
    made = client.responses.create(model="research-count-write", input="tides")  # not streamed
    assert made.status == "completed" and made.output_text == ANSWER


def test_an_ai_sdk_stream_of_a_workflow_run_has_a_step_per_workflow_step(api: ApiServer, fake_openai: Any) -> None:
    fake_openai.responder = ScriptResponder([ANSWER])
    message = {"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": "reefs"}]}
    body = {"id": uuid.uuid4().hex, "messages": [message], "trigger": "submit-message"}
    with (
        httpx.Client(base_url=api.url, timeout=60) as client,
        client.stream("POST", "/aisdk/research-count-write", json=body) as resp,
    ):
        assert resp.status_code == 200, resp.read()
        chunks = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
    assert chunks[-1] == "[DONE]"
    parsed = [json.loads(c) for c in chunks[:-1]]
    kinds = [c["type"] for c in parsed]
    assert kinds[0] == "start" and kinds[-1] == "finish"
    depth = 0
    for kind in kinds:  # steps never nest and always close
        depth += {"start-step": 1, "finish-step": -1}.get(kind, 0)
        assert depth in (0, 1), kinds
    assert depth == 0 and kinds.count("start-step") >= 3  # at least one per workflow step
    text = "".join(c["delta"] for c in parsed if c["type"] == "text-delta")
    assert text == ANSWER


def test_an_a2a_task_of_a_workflow_run_completes_with_its_answer(api: ApiServer, fake_openai: Any) -> None:
    fake_openai.responder = ScriptResponder([ANSWER])

    async def through_the_sdk() -> Any:
        c = await connect(api.url, "research-count-write")
        try:
            return folded(await collect(c.client.send_message(ask("reefs"))))
        finally:
            await c.close()

    task = asyncio.run(asyncio.wait_for(through_the_sdk(), 100))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert ANSWER in "".join(texts(task).values())

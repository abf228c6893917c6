"""The AgentOS workflow routes with plain requests: listings, the non-streamed answer, background, continue and
cancel, and bad input (4xx with a JSON body naming the problem, nothing changed). Agno's own client is in
tests/test_agno_workflows.py."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from agents_celery.models import ScriptedToolCall
from agents_celery.testing.openai_server import FakeReply

from .conftest import wait_for
from .support.apis import ApiServer, SharedApis
from .test_workflows import by_agent

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def client(apis: SharedApis) -> Any:
    api: ApiServer = apis.get("flask")
    with httpx.Client(base_url=api.url, timeout=30) as c:
        yield c


def assert_error(resp: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body: dict[str, Any] = resp.json()
    assert set(body) == {"detail", "code"} and body["detail"]
    if code:
        assert body["code"] == code
    return body


def test_workflows_are_listed_apart_from_agents(client: httpx.Client) -> None:
    workflows = {w["id"]: w for w in client.get("/workflows").json()}
    assert workflows["research-count-write"]["description"].startswith("Research a topic")
    assert "fake" not in workflows
    assert "research-count-write" not in [a["name"] for a in client.get("/agents").json()]
    one = client.get("/workflows/two-researchers").json()
    assert [s["name"] for s in one["steps"]] == ["gather", "dig", "write"] and one["steps"][1]["type"] == "Parallel"
    assert "404" not in str(one)
    assert "a workflow" in assert_error(client.get("/agents/two-researchers"), 404)["detail"]
    assert "no workflow named 'fake'" in assert_error(client.get("/workflows/fake"), 404)["detail"]
    assert_error(client.post("/workflows/nope/runs", data={"message": "x"}), 404)
    assert_error(client.post("/agents/routing/runs", data={"message": "x"}), 404)


def test_a_non_streamed_run_answers_its_status_and_step_results(client: httpx.Client) -> None:
    answer = client.post("/workflows/routing/runs", data={"message": "my invoice", "stream": "false"}).json()
    assert answer["status"] == "COMPLETED" and answer["content"] == "billing handled it"
    assert [r["step_name"] for r in answer["step_results"]] == ["router-1", "close"]
    assert answer["step_results"][0]["steps"][0]["step_name"] == "billing"
    assert answer["step_results"][0]["step_type"] == "Router"


def test_background_then_continue_and_cancel(client: httpx.Client, fake_openai: Any) -> None:
    def cleans(turn: int, message: str) -> FakeReply:
        if turn == 0:
            return FakeReply(text="", tool_calls=[ScriptedToolCall("delete_file", {"path": "/tmp/x"}, "call_x")])
        return FakeReply(text="cleaned")

    fake_openai.responder = by_agent(cleaner=cleans)
    started = client.post(
        "/workflows/approved-cleanup/runs", json={"message": "attic", "background": True, "stream": False}
    )
    assert started.status_code == 202 and started.json()["status"] in ("PENDING", "RUNNING")
    run_id = started.json()["run_id"]
    wait_for(lambda: client.get(f"/runs/{run_id}").json()["status"] == "paused", what="the pause")
    # bad input first: nothing changes
    route = f"/workflows/approved-cleanup/runs/{run_id}/continue"
    assert_error(client.post(route, data={"step_requirements": "not json"}), 400)
    assert_error(client.post(route, json={"tools": [{"tool_call_id": "nope", "confirmed": True}]}), 400)
    assert_error(client.post(f"/workflows/routing/runs/{run_id}/continue", json={}), 404)  # another workflow's run
    assert client.get(f"/runs/{run_id}").json()["status"] == "paused"
    (pending,) = client.get(f"/runs/{run_id}").json()["pending"]
    requirement = {
        "step_id": "step:clean",
        "executor_requirements": [{"tool_execution": {"tool_call_id": pending["id"], "confirmed": True}}],
    }
    answer = client.post(route, data={"step_requirements": json.dumps([requirement]), "stream": "false"}).json()
    assert answer["status"] == "COMPLETED" and answer["content"] == {"words": 1}  # "cleaned"
    assert_error(client.post(route, json={}), 409)  # not paused any more
    assert_error(client.post(f"/workflows/approved-cleanup/runs/{run_id}/cancel"), 409)  # ended
    slow = client.post(
        "/workflows/slow-parallel/runs", json={"message": "x", "background": True, "stream": False}
    ).json()
    fake_openai.responder = by_agent(scout=lambda turn, message: FakeReply(text="slowly " * 40, token_delay=0.5))
    stopped = client.post(f"/workflows/slow-parallel/runs/{slow['run_id']}/cancel")
    assert stopped.status_code == 200 and stopped.json()["stop_requested"] is True
    wait_for(lambda: client.get(f"/runs/{slow['run_id']}").json()["status"] == "cancelled", what="the stop")


@pytest.mark.parametrize("front", ["flask", "django"])
def test_an_agent_step_streams_its_tokens_as_they_come(apis: SharedApis, fake_openai: Any, front: str) -> None:
    """AgentOS's stream of a workflow shows an agent step's own run events live (RunContent as each token comes),
    not in a burst once the step's run has ended: the first RunContent arrives while that run still streams."""
    from .test_workflows import writes

    client = httpx.Client(base_url=apis.get(front).url, timeout=30)

    words = [f"w{i}" for i in range(30)]
    fake_openai.responder = by_agent(
        scout=lambda turn, message: FakeReply(text=" ".join(words), token_delay=0.1), author=writes
    )
    first_content_at = None
    step_run_ended_at = None
    with client.stream("POST", "/workflows/research-count-write/runs", data={"message": "tea"}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line.removeprefix("data: "))
            if event["event"] == "RunContent" and first_content_at is None:
                first_content_at = event
                child = event["run_id"]
                step_status = client.get(f"/runs/{child}").json()["status"]
                assert step_status == "running", f"the step's run was {step_status} when its first token showed"
            if event["event"] == "RunCompleted" and event.get("step_name") == "research":
                step_run_ended_at = event
            if event["event"] in ("WorkflowCompleted", "WorkflowError"):
                break
    client.close()
    assert first_content_at is not None and step_run_ended_at is not None
    assert first_content_at["step_name"] == "research" and first_content_at["workflow_id"] == "research-count-write"

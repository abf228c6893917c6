"""The Responses API across kill -9 of the worker: the openai SDK resumes a background stream with
``starting_after`` and gets every event once, in order; an approved tool runs once though its worker died.
Each test has a deployment of its own (two workers, one of them killed), the API in a thread (test_responses.Server).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from agents_celery import Runtime, ScriptedToolCall, ScriptedTurn
from agents_celery.http.responses.render import parse_response_id

from .conftest import TEST_REDIS_URL
from .support.invariants import assert_run_sound, counter_of
from .test_responses import Server, check_sequence, deltas

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def module_cluster(fake_openai: Any) -> Iterator[tuple[Any, Server]]:
    """One deployment for the module (its workers are killed and topped up), the API in a thread over it."""
    from .support.workers import Deployment

    deployment = Deployment("resp", fake_openai.url)
    try:
        server = Server(Runtime(settings=deployment.settings))
        yield deployment, server
        server.close()
    finally:
        deployment.close()


@pytest.fixture
def cluster(module_cluster: tuple[Any, Server]) -> tuple[Any, Server]:
    deployment, _ = module_cluster
    alive = [w for w in deployment.workers if w.proc.poll() is None]
    if len(alive) < 2:
        deployment.start(2 - len(alive))
    return module_cluster


def crash_key(deployment: Any, point: str, run_id: str) -> str:
    return f"{deployment.prefix}:test:crash:{point}:{run_id}"  # the workers' key (tests/agents/fixture.py: crash_key)


def dumps(events: list[Any]) -> list[str]:
    return [json.dumps(e.model_dump(), sort_keys=True) for e in events]


def test_kill_9_after_sequence_10_resumes_with_no_gap(cluster: tuple[Any, Server], script: Any) -> None:
    deployment, server = cluster
    client = server.client()
    r = redis.Redis.from_url(TEST_REDIS_URL)
    text = " ".join(f"w{i}" for i in range(100))
    script(text, token_delay=0.02)
    seen = []
    stream = client.responses.create(model="fake", input="talk", background=True, stream=True)
    for event in stream:
        seen.append(event)
        if event.sequence_number >= 10:
            break
    stream.close()  # the connection dropped
    response_id = seen[0].response.id
    parsed = parse_response_id(response_id)
    assert parsed is not None
    run_id = parsed[0]
    holder = int(r.get(f"{deployment.prefix}:test:pid:{run_id}") or 0)
    deployment.by_pid(holder).kill()  # kill -9 of the worker running it

    resumed = list(client.responses.retrieve(response_id, stream=True, starting_after=10))
    check_sequence(resumed, 11)
    assert resumed[-1].type == "response.completed"
    whole = list(client.responses.retrieve(response_id, stream=True))
    check_sequence(whole)
    assert dumps(whole[:11]) == dumps(seen) and dumps(whole[11:]) == dumps(resumed)  # no gap, no duplicate
    final = client.responses.retrieve(response_id)
    assert final.status == "completed" and deltas(whole) == final.output_text
    messages = [i for i in final.output if i.type == "message"]
    # The killed attempt's text is an item of its own, incomplete; the retried turn's is the whole text.
    assert messages[0].status == "incomplete" and text.startswith(messages[0].content[0].text)
    assert messages[-1].status == "completed" and messages[-1].content[0].text == text
    with client.responses.stream(response_id=response_id, starting_after=10) as again:
        assert [(e.type, e.sequence_number) for e in again] == [(e.type, e.sequence_number) for e in resumed]
    assert_run_sound(deployment.runtime.store.log.read(run_id))


def test_an_approval_across_kill_9_runs_the_tool_once(cluster: tuple[Any, Server], script: Any) -> None:
    deployment, server = cluster
    client = server.client()
    r = redis.Redis.from_url(TEST_REDIS_URL)
    count = counter_of(r, deployment.prefix)
    path = f"/tmp/{uuid.uuid4().hex[:6]}"
    script(ScriptedTurn(tool_calls=[ScriptedToolCall("delete_file", {"path": path}, "call_k")]), "Deleted it.")
    asked = client.responses.create(model="fake", input=f"delete {path}")
    request_id = next(i.id for i in asked.output if i.type == "mcp_approval_request")
    parsed = parse_response_id(asked.id)
    assert parsed is not None
    run_id = parsed[0]
    r.set(crash_key(deployment, "after_tool", run_id), 1)  # the worker dies right after the tool ran, before its commit
    approve = {"type": "mcp_approval_response", "approval_request_id": request_id, "approve": True}
    done = client.responses.create(model="fake", previous_response_id=asked.id, input=[approve])  # type: ignore[list-item]
    assert done.status == "completed" and done.output_text == "Deleted it."
    assert [(c.name, c.output) for c in done.output if c.type == "mcp_call"] == [("delete_file", f"deleted {path}")]
    assert r.get(crash_key(deployment, "after_tool", run_id)) is None  # the crash happened
    log = deployment.runtime.store.log.read(run_id)
    assert_run_sound(log, tool_counts={f"delete_file:{path}": 1}, counter=count)

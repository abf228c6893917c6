"""The openai SDK with its default retries (twice, on timeouts, lost connections, 408/409/429/5xx) against ``/v1``:
a foreground create cut by a proxy is one run (its tool once), a create kept alive by spaces survives a proxy's idle
timeout, and a deterministic 409 is sent once (``x-should-retry: false``)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import redis
from flask import request

from agents_celery import Runtime, ScriptedToolCall, ScriptedTurn

from .conftest import TEST_REDIS_URL
from .support.invariants import counter_of
from .support.proxy import CuttingProxy
from .test_responses import Server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def counted(fast_settings: Any, worker: Any) -> Iterator[tuple[Server, Counter[str]]]:
    """The Flask server, counting the requests it sees (method and path)."""
    server = Server(Runtime(settings=fast_settings))  # spaces and SSE comments every 0.3 s
    seen: Counter[str] = Counter()
    server.app.before_request(lambda: seen.update([f"{request.method} {request.path}"]) and None)
    yield server, seen
    server.close()


def sdk(url: str, user: str, **options: Any) -> openai.OpenAI:
    """An openai SDK client with its defaults (max_retries left as it is)."""
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", default_headers={"X-User": user}, **options)


def test_a_cut_foreground_create_is_one_run_and_its_tool_runs_once(
    counted: tuple[Server, Counter[str]], script: Any, key_prefix: str
) -> None:
    server, seen = counted
    key = f"cut-{uuid.uuid4().hex[:8]}"
    script(ScriptedTurn(tool_calls=[ScriptedToolCall("slow_count", {"key": key, "seconds": 4})]), "Counted.")
    proxy = CuttingProxy(server.http.server_port, cut_after=3)
    user = f"u-{uuid.uuid4().hex[:8]}"
    try:
        with sdk(proxy.url, user) as client:
            made = client.responses.create(model="fake", input="count it")
    finally:
        proxy.close()
    assert made.output_text == "Counted." and proxy.cuts >= 1
    assert seen["POST /v1/responses"] >= 2  # the SDK did retry
    assert counter_of(redis.Redis.from_url(TEST_REDIS_URL), key_prefix)(key) == 1
    runs = server.app.extensions["agents_celery"].runs(user_id=user).runs
    assert len(runs) == 1


def test_spaces_keep_a_long_create_alive_through_an_idle_timeout(
    counted: tuple[Server, Counter[str]], script: Any
) -> None:
    server, seen = counted
    key = f"idle-{uuid.uuid4().hex[:8]}"
    script(ScriptedTurn(tool_calls=[ScriptedToolCall("slow_count", {"key": key, "seconds": 3})]), "Still here.")
    proxy = CuttingProxy(server.http.server_port, idle=1.5)
    try:
        with sdk(proxy.url, "bob", max_retries=0) as client:
            made = client.responses.create(model="fake", input="take your time")
    finally:
        proxy.close()
    assert made.output_text == "Still here." and proxy.cuts == 0 and seen["POST /v1/responses"] == 1


def test_each_deterministic_409_is_sent_once(counted: tuple[Server, Counter[str]], script: Any) -> None:
    server, seen = counted
    script(ScriptedTurn(tool_calls=[ScriptedToolCall("delete_file", {"path": "/tmp/r409"}, "call_r")]), "one", "two")
    with sdk(server.url, "bob") as client:
        paused = client.responses.create(model="fake", input="delete /tmp/r409")
        request_id = next(i.id for i in paused.output if i.type == "mcp_approval_request")
        approve = [{"type": "mcp_approval_response", "approval_request_id": request_id, "approve": True}]
        refusals: list[Any] = [
            lambda: client.responses.create(model="fake", input="next?", previous_response_id=paused.id),
        ]
        for refuse in refusals:  # paused: answer it first
            before = seen["POST /v1/responses"]
            with pytest.raises(openai.ConflictError) as refused:
                refuse()
            assert seen["POST /v1/responses"] == before + 1
            assert refused.value.response.headers["x-should-retry"] == "false"
        done = client.responses.create(model="fake", previous_response_id=paused.id, input=approve)  # type: ignore[arg-type]
        later = client.responses.create(model="fake", input="again", previous_response_id=done.id)
        refusals = [
            lambda: client.responses.create(model="fake", previous_response_id=paused.id, input=approve),  # answered
            lambda: client.responses.create(model="fake", input="older", previous_response_id=done.id),  # not newest
        ]
        for refuse in refusals:
            before = seen["POST /v1/responses"]
            with pytest.raises(openai.ConflictError):
                refuse()
            assert seen["POST /v1/responses"] == before + 1
        assert later.status == "completed"


def test_the_same_idempotency_key_with_other_tools_is_refused(
    counted: tuple[Server, Counter[str]], script: Any
) -> None:
    script("once")
    client = counted[0].client()
    key = {"Idempotency-Key": f"k-{uuid.uuid4().hex}"}
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    first = client.responses.create(model="fake", input="hi", extra_headers=key)
    assert client.responses.create(model="fake", input="hi", extra_headers=key).id == first.id
    for other in ({"tools": [tool]}, {"instructions": "Be brief."}, {"metadata": {"a": "b"}}):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="fake", input="hi", extra_headers=key, **other)  # type: ignore[arg-type]
        assert refused.value.code == "idempotency_key_reused"

"""An Agents SDK agent's MCP servers (the SDK's own ``MCPServerStreamableHttp``, in the agents module as the SDK user
writes it) served by our workers: each call a journaled unit through the effect ledger, ``require_approval`` as our
pause, a worker killed mid-call pausing as "may have run"; agents_celery.testing.mcp_server over streamable HTTP."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing import ScriptResponder

from .conftest import TEST_REDIS_URL, all_events, wait_for
from .support.invariants import assert_run_sound
from .support.workers import Deployment
from .test_mcp import Server
from .test_openai_agents import AGENTS

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def mcp_served(fake_openai: Any) -> Iterator[tuple[Deployment, Server]]:
    """An MCP server and a deployment of the module's own whose workers reach it (the crash test kills them)."""
    dep = Deployment("sdkmcp", fake_openai.url, {"AGENTS_CELERY_AGENTS": AGENTS})
    server = Server(dep.prefix)
    try:
        dep.env["SDK_MCP_URL"] = server.url
        dep.start(1)
        yield dep, server
    finally:
        if server.proc.poll() is None:
            server.kill()
        dep.close()


def _count(dep: Deployment, name: str) -> int:
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        return int(r.get(f"{dep.prefix}:test:count:{name}") or 0)


def test_an_mcp_server_s_calls_are_journaled_units(mcp_served: tuple[Deployment, Server], fake_openai: Any) -> None:
    dep, _ = mcp_served
    rt = dep.runtime
    key = f"sdk-{os.urandom(4).hex()}"
    turns = [
        ScriptedTurn(tool_calls=[ScriptedToolCall("count", {"key": key})]),
        ScriptedTurn(tool_calls=[ScriptedToolCall("count", {"key": key})]),
        "Counted twice.",
    ]
    fake_openai.responder = ScriptResponder(turns)
    stream = rt.stream("sdk_mcp", "Count twice.")
    events = all_events(rt, stream.id)
    assert stream.get().status.value == "completed", events[-1].data
    assert stream.get().output == "Counted twice."
    assert _count(dep, key) == 2
    assert_run_sound(events)
    results = [e.data["content"] for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert results == [f"count {key}: 1", f"count {key}: 2"]
    journal = rt.redis.hkeys(rt.store.keys.run(stream.id).effects)
    assert sum(f.startswith(b"mcp:words.count@0.") for f in journal) == 2  # each call in the effect ledger


def test_an_mcp_server_that_requires_approval_pauses_the_run(
    mcp_served: tuple[Deployment, Server], fake_openai: Any
) -> None:
    dep, _ = mcp_served
    rt = dep.runtime
    key = f"sdk-{os.urandom(4).hex()}"
    turns = [ScriptedTurn(tool_calls=[ScriptedToolCall("count", {"key": key})]), "Counted."]
    fake_openai.responder = ScriptResponder(turns)
    stream = rt.stream("sdk_mcp_approval", "Count.")
    wait_for(lambda: stream.get().status.value == "paused", timeout=30, what="the approval pause")
    (call,) = rt.store.load(stream.id)[0].pending
    assert (call.name, call.pause_reason, call.args) == ("count", "confirmation_required", {"key": key})
    assert _count(dep, key) == 0
    rt.continue_run(stream.id, [{"tool_call_id": call.id, "confirmed": True}])
    wait_for(lambda: stream.get().status.value == "completed", timeout=30, what="the run's end")
    assert _count(dep, key) == 1 and stream.get().output == "Counted."
    events = all_events(rt, stream.id)
    assert_run_sound(events)
    assert [e.data["content"] for e in events if e.type.value == "TOOL_CALL_RESULT"] == [f"count {key}: 1"]


@pytest.mark.slow
def test_a_worker_killed_during_an_mcp_call_pauses_as_may_have_run(
    mcp_served: tuple[Deployment, Server], fake_openai: Any
) -> None:
    dep, _ = mcp_served
    rt = dep.runtime
    key = f"sdk-{os.urandom(4).hex()}"
    turns = [ScriptedTurn(tool_calls=[ScriptedToolCall("slow_count", {"key": key, "seconds": 3})]), "Counted."]
    fake_openai.responder = ScriptResponder(turns)
    stream = rt.stream("sdk_mcp", "Count slowly.")
    wait_for(lambda: _count(dep, key) == 1, timeout=30, what="the MCP call")
    for w in [w for w in dep.workers if w.proc.poll() is None]:
        w.kill()  # the worker in the call among them
    dep.start(1)
    wait_for(lambda: stream.get().status.value == "paused", timeout=30, what="the may-have-run pause")
    (call,) = rt.store.load(stream.id)[0].pending
    assert (call.name, call.pause_reason) == ("slow_count", "may_have_run")
    rt.continue_run(stream.id)  # approve: run it again
    wait_for(lambda: stream.get().status.value == "completed", timeout=30, what="the run's end")
    assert _count(dep, key) == 2  # the killed call, and the approved re-run
    events = all_events(rt, stream.id)
    assert_run_sound(events)
    assert [e.data["content"] for e in events if e.type.value == "TOOL_CALL_RESULT"] == [f"slow count {key}: 2"]

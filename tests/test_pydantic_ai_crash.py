"""Crash tests of issue #29 for the pydantic-ai shapes beyond the weather-like one: the bank-like agent (structured
output, a tool raising ``ModelRetry``) and the approval agent with the worker killed -9 after each of the first N
journal writes, and the MCP server itself killed mid-call."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing import ScriptResponder

from .conftest import TEST_REDIS_URL, all_events, status_is, wait_for
from .support.invariants import assert_run_sound, counter_of
from .support.workers import Deployment
from .test_mcp import Server
from .test_pydantic_ai import (
    AGENTS,
    BANK,
    Counts,
    _crash_key,
    _delete,
    alive,
    crashable,
    in_process,
    mcp_server,
    module,
    stripped,
)

__all__ = ["crashable", "mcp_server"]  # the fixtures, imported to be used here

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def _killed(r: redis.Redis, dep: Deployment, dead: int) -> None:
    assert r.get(_crash_key(dep, "journal")) is None, "the crash never happened"
    assert sum(w.proc.poll() is not None for w in dep.workers) == dead + 1


@pytest.mark.parametrize("writes", [1, 2, 3])
def test_the_bank_agent_killed_after_a_journal_write_replays_as_in_process(
    crashable: Deployment, fake_openai: Any, writes: int
) -> None:
    output, messages, calls = in_process(fake_openai, "pai_bank", "What is my balance?", BANK)
    dead = alive(crashable)
    rt = crashable.runtime
    fake_openai.responder = ScriptResponder(BANK)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, crashable, "pai:customer_balance")
        r.set(_crash_key(crashable, "journal"), writes)
        before = fake_openai.calls
        stream = rt.stream("pai_bank", "What is my balance?")
        events = all_events(rt, stream.id)
        _killed(r, crashable, dead)
        assert stream.get().status == "completed", events[-1].data
        assert fake_openai.calls - before == calls == 3  # no journaled model request ran again
        # The ModelRetry call and the good one: each once, the journal returning the first after the kill.
        assert_run_sound(events, tool_counts={"pai:customer_balance": 2}, counter=counts)
    assert stream.get().output == output.model_dump(mode="json")
    assert events[-1].data["result"] == output.model_dump(mode="json")
    state, _ = rt.store.load(stream.id)
    assert stripped(state.messages) == stripped(messages)
    assert any(e.type.value == "CUSTOM" and e.data.get("name") == "attempt_abandoned" for e in events)
    results = [e.data["content"] for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert len(results) == 3 and "include_pending must be true" in results[0]  # the retry, the balance, the output


@pytest.mark.parametrize("writes", [1, 2, 3])
def test_the_approval_agent_killed_after_a_journal_write_replays_as_in_process(
    crashable: Deployment, fake_openai: Any, writes: int
) -> None:
    """The crash armed before the run: the Nth journal write counted across the segment that pauses for the
    approval and the one that runs the approved call."""
    from pydantic_ai import DeferredToolRequests, DeferredToolResults
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    agents = module(fake_openai)
    path = f"k{writes}-{os.urandom(4).hex()}.txt"
    fake_openai.responder = ScriptResponder(_delete(path))
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        before = fake_openai.calls
        first = agents.files.run_sync(f"Delete {path}", output_type=[str, DeferredToolRequests])
        assert isinstance(first.output, DeferredToolRequests)
        (asked,) = first.output.approvals
        fake_openai.responder = ScriptResponder(_delete(path))
        done = agents.files.run_sync(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={asked.tool_call_id: True}),
        )
        calls = fake_openai.calls - before
        in_proc = ModelMessagesTypeAdapter.dump_python(done.all_messages(), mode="json")

        dead = alive(crashable)
        rt = crashable.runtime
        fake_openai.responder = ScriptResponder(_delete(path))
        counts = Counts(r, crashable, f"pai:delete_file:{path}")
        r.set(_crash_key(crashable, "journal"), writes)
        before = fake_openai.calls
        stream = rt.stream("pai_files", f"Delete {path}")
        status_is(stream, "paused", 60, "the approval pause")
        state, _ = rt.store.load(stream.id)
        assert [(c.name, c.pause_reason) for c in state.pending] == [("delete_file", "confirmation_required")], (
            state.pending
        )
        call_id = state.pending[0].id
        assert call_id == asked.tool_call_id
        rt.continue_run(stream.id, [{"tool_call_id": call_id, "confirmed": True}])
        status_is(stream, "completed", 60, "the run's end")
        events = all_events(rt, stream.id)
        _killed(r, crashable, dead)
        assert fake_openai.calls - before == calls == 2
        assert_run_sound(events, tool_counts={f"pai:delete_file:{path}": 1}, counter=counts)
    state, _ = rt.store.load(stream.id)
    assert stripped(state.messages) == stripped(in_proc)
    assert stream.get().output == done.output
    (result,) = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert result.data["content"] == f"deleted {path}"
    assert any(e.type.value == "CUSTOM" and e.data.get("name") == "attempt_abandoned" for e in events)


@pytest.fixture
def own_mcp(fake_openai: Any) -> Iterator[tuple[Deployment, Server]]:
    """A deployment and an MCP server of the test's own (it kills the server)."""
    dep = Deployment("paimcpkill", fake_openai.url, {"AGENTS_CELERY_AGENTS": AGENTS})
    server = Server(dep.prefix)
    try:
        dep.env["PAI_MCP_PORT"] = str(server.port)
        dep.start(1)
        yield dep, server
    finally:
        if server.proc.poll() is None:
            server.kill()
        dep.close()


def _in_process_with_the_server_killed(fake_openai: Any, turns: list[ScriptedTurn | str], key: str) -> tuple[str, int]:
    """The same agent shape run in this process against an MCP server killed mid-call (the floor): what it raised
    (pydantic-ai's own behaviour) and the model requests it made."""
    import threading

    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset

    from tests.agents.pydantic_ai_agents import _model

    module(fake_openai)
    prefix = f"paimcpfloor-{os.urandom(4).hex()}"
    server = Server(prefix)
    agent = Agent(_model(), toolsets=[MCPToolset(server.url, id="words")])
    fake_openai.responder = ScriptResponder(turns)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        count = counter_of(r, prefix)

        def kill_mid_call() -> None:
            wait_for(lambda: count(key) == 1, timeout=30, what="the in-process MCP call")
            server.kill()

        killer = threading.Thread(target=kill_mid_call)
        killer.start()
        before = fake_openai.calls
        try:
            with pytest.raises(Exception) as raised:
                agent.run_sync("Count slowly.")
        finally:
            killer.join(timeout=40)
            if server.proc.poll() is None:
                server.kill()
            for k in r.scan_iter(match=f"{prefix}:*"):
                r.delete(k)
    return type(raised.value).__name__, fake_openai.calls - before


def test_the_mcp_server_killed_mid_call_ends_the_run_well_formed(
    own_mcp: tuple[Deployment, Server], fake_openai: Any
) -> None:
    dep, server = own_mcp
    rt = dep.runtime
    key = f"gone-{os.urandom(4).hex()}"
    turns: list[ScriptedTurn | str] = [
        ScriptedTurn(tool_calls=[ScriptedToolCall("slow_count", {"key": key, "seconds": 30})]),
        "Told.",
    ]
    raised, calls = _in_process_with_the_server_killed(fake_openai, turns, key)
    assert (raised, calls) == ("RemoteProtocolError", 2)
    fake_openai.responder = ScriptResponder(turns)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        count = counter_of(r, dep.prefix)
        stream = rt.stream("pai_mcp", "Count slowly.")
        wait_for(lambda: count(key) == 1, timeout=30, what="the MCP call to reach the server")
        assert count("tools_list") == 1
        before = fake_openai.calls
        killed = time.monotonic()
        server.kill()
        wait_for(lambda: stream.get().status in ("completed", "failed"), timeout=30, what="the run's end")
        assert time.monotonic() - killed < 10, "the lost MCP connection was noticed late"
        events = all_events(rt, stream.id)
        assert_run_sound(events)
        assert count(key) == 1 and count("tools_list") == 1  # listed once for the segment, the call sent once
    # As in-process (the floor above): pydantic-ai's MCP client hands the model the lost
    # call as an error result, once, the model answers, then the mcp transport's failure re-raises when the
    # toolset's session closes and the run fails with that reason (docs/pydantic-ai.md); nothing runs again.
    results = [e.data["content"] for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert results == ['{"error":"Connection closed"}'], results
    assert stream.get().status == "failed", events[-1].data
    assert events[-1].type.value == "RUN_ERROR" and events[-1].data["code"] == raised
    assert fake_openai.calls - before == calls - 1  # the model request that got the error result; no retried unit

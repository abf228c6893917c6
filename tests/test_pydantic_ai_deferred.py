"""Deferred tools of a pydantic-ai agent pause the run, whatever defers them: a tool raising ``CallDeferred``, an
``ExternalToolset``'s tool, an MCP toolset wrapped with ``approval_required()``. Before, only function tools with
``requires_approval=True`` added ``DeferredToolRequests`` to the run's output types, so these failed the run
(``UserError: ... DeferredToolRequests is not among output types``).

Real workers, real Redis, pydantic-ai's OpenAIChatModel against the fake OpenAI server, its MCP client against
the ``mcp`` package's server.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing import ScriptResponder

from .conftest import all_events, wait_for
from .support.invariants import assert_run_sound
from .support.workers import Deployment
from .test_pydantic_ai import _mcp_count, mcp_server, shared

__all__ = ["mcp_server", "shared"]  # the fixtures, shared with tests/test_pydantic_ai.py

pytestmark = pytest.mark.timeout(120)


def _paused(dep: Deployment, run_id: str) -> Any:
    wait_for(lambda: dep.runtime.get(run_id).status.value in ("paused", "completed", "failed"), timeout=30)
    view = dep.runtime.get(run_id)
    assert view.status.value == "paused", view.error
    return dep.runtime.store.load(run_id)[0].pending


def _told(fake_openai: Any, call_id: str) -> list[str]:
    """What the model was given as the result of ``call_id`` in the last request."""
    last = fake_openai.requests[-1]["messages"]
    return [m["content"] for m in last if m.get("role") == "tool" and m.get("tool_call_id") == call_id]


@pytest.mark.parametrize(("tool", "args"), [("launch", {"target": "mars"}), ("ask_human", {"question": "Why?"})])
def test_an_external_call_pauses_the_run_for_its_result(
    shared: Deployment, fake_openai: Any, tool: str, args: dict[str, Any]
) -> None:
    rt = shared.runtime
    turns = [ScriptedTurn(tool_calls=[ScriptedToolCall(tool, args, "call_x")]), "Got it."]
    fake_openai.responder = ScriptResponder(turns)
    stream = rt.stream("pai_external", "Go.")
    (call,) = _paused(shared, stream.id)
    assert (call.id, call.name, call.args) == ("call_x", tool, args)
    rt.continue_run(stream.id, [{"tool_call_id": "call_x", "result": "done outside"}])
    wait_for(lambda: stream.get().status.value in ("completed", "failed"), timeout=30, what="the run's end")
    events = all_events(rt, stream.id)
    assert stream.get().status.value == "completed", stream.get().error
    assert stream.get().output == "Got it."
    assert _told(fake_openai, "call_x") == ["done outside"]
    assert_run_sound(events)


@pytest.mark.parametrize("approve", [True, False])
def test_an_mcp_toolset_wrapped_for_approval_pauses_and_continues(
    shared: Deployment, fake_openai: Any, mcp_server: tuple[int, str], approve: bool
) -> None:
    rt = shared.runtime
    key = f"guarded-{os.urandom(4).hex()}"
    turns = [ScriptedTurn(tool_calls=[ScriptedToolCall("count", {"key": key}, "call_c")]), "Finished."]
    fake_openai.responder = ScriptResponder(turns)
    stream = rt.stream("pai_mcp_approval", "Count once.")
    (call,) = _paused(shared, stream.id)
    assert (call.id, call.name, call.pause_reason) == ("call_c", "count", "confirmation_required")
    assert _mcp_count(mcp_server, key) == 0
    rt.continue_run(stream.id, [{"tool_call_id": "call_c", "confirmed": approve, "note": "not now"}])
    wait_for(lambda: stream.get().status.value in ("completed", "failed"), timeout=30, what="the run's end")
    assert stream.get().status.value == "completed", stream.get().error
    assert _mcp_count(mcp_server, key) == (1 if approve else 0)
    told = _told(fake_openai, "call_c")
    assert len(told) == 1 and (f"count {key}: 1" in told[0] if approve else told[0] == "not now"), told
    assert_run_sound(all_events(rt, stream.id))

"""One asyncio loop per worker process for everything async: a guest's segment (pydantic-ai, the Agents SDK), our
async tools and our MCP connections. asyncio allows one running loop per OS thread, which all greenlets of a gevent
worker share: with a loop of its own for pydantic-ai, whichever loop started second never ran ("Cannot run the
event loop while another loop is running"), so the async tool waited out its timeout or the pydantic-ai run stayed
``running``.

Real workers (gevent, and prefork), a pydantic-ai agent, an Agents SDK agent (its async tool on that loop too), an
agent with an async tool and an MCP tool, and an agent with an MCP tool alone, five runs of each side by side, all
completing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agents_celery import ScriptedToolCall
from agents_celery.models.scripted import turn_index
from agents_celery.testing import ScriptResponder
from agents_celery.testing.openai_server import FakeReply

from .conftest import all_events, wait_for
from .support.invariants import assert_run_sound, counter_of
from .test_gevent_capacity import both_at_once
from .test_openai_agents import WEATHER as SDK_WEATHER
from .test_pydantic_ai import WEATHER

pytestmark = pytest.mark.timeout(240)

RUNS = 5
_WEATHER = ScriptResponder(WEATHER)
_SDK_WEATHER = ScriptResponder(SDK_WEATHER)


def side_by_side(request: dict[str, Any]) -> FakeReply:
    """The pydantic-ai weather script for ``pai*`` messages, the async tool and the MCP tool at once for ``mixed*``
    ones, one MCP call for ``mcp*`` ones."""
    messages = request.get("messages") or []
    key = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
    if key.startswith("pai"):
        return _WEATHER(request)
    if key.startswith("sdk"):
        return _SDK_WEATHER(request)
    if key.startswith("mixed"):
        return both_at_once(request)
    if turn_index(messages) > 0:
        return FakeReply(text=next(m["content"] for m in reversed(messages) if m.get("role") == "tool"))
    return FakeReply(tool_calls=(ScriptedToolCall("m_slow_count", {"key": key, "seconds": 0.3}, "call_m"),))


@pytest.fixture(params=["gevent", "prefork"])
def mixed_worker(request: pytest.FixtureRequest, deploy: Any, fake_openai: Any) -> Iterator[Any]:
    """tests/agents/mcp_tools.py's, tests/agents/pydantic_ai_agents.py's and tests/agents/openai_sdk.py's agents on
    one worker of the given pool."""
    from .test_mcp import Server

    fake_openai.responder = side_by_side
    own = deploy(
        "loop",
        {"AGENTS_CELERY_AGENTS": "tests.agents.mcp_tools,tests.agents.pydantic_ai_agents,tests.agents.openai_sdk"},
    )
    server = Server(own.prefix)
    own.env["MCP_TEST_URL"] = server.url
    concurrency = 50 if request.param == "gevent" else 4
    own.worker(pool=request.param, concurrency=concurrency)
    yield own
    server.kill()


def test_guests_async_and_mcp_tools_side_by_side_on_one_worker(mixed_worker: Any, r: Any) -> None:
    own = mixed_worker
    rt, count = own.runtime, counter_of(r, own.prefix)
    runs = []
    for i in range(RUNS):
        runs.append(("pai_weather", rt.stream("pai_weather", f"pai{i}").id))
        runs.append(("mcp_mixed", rt.stream("mcp_mixed", f"mixed{i}").id))
        runs.append(("mcp_http", rt.stream("mcp_http", f"mcp{i}").id))
        runs.append(("sdk_weather", rt.stream("sdk_weather", f"sdk{i}").id))

    def ended(run_id: str) -> Any:
        view = rt.get(run_id)
        return view if view.status.value in ("completed", "failed", "cancelled", "paused") else None

    views = {run_id: wait_for(lambda i=run_id: ended(i), timeout=90, what=f"{agent} to end") for agent, run_id in runs}
    assert [(a, views[i].status.value) for a, i in runs] == [(a, "completed") for a, _ in runs], [
        (a, views[i].error) for a, i in runs
    ]
    for n, (agent, run_id) in enumerate(runs):
        i = n // 4
        view = views[run_id]
        if agent == "pai_weather":
            assert view.output == "It is sunny in London.", view.output
        elif agent == "sdk_weather":
            assert view.output == "It is sunny in London at noon.", view.output
            assert_run_sound(all_events(rt, run_id, timeout=10))
        elif agent == "mcp_mixed":
            assert view.output == f"MIXED{i} | slow count mixed{i}: 1", view.output
            assert_run_sound(all_events(rt, run_id, timeout=10), tool_counts={f"mixed{i}": 1}, counter=count)
        else:
            assert view.output == f"slow count mcp{i}: 1", view.output
            assert_run_sound(all_events(rt, run_id, timeout=10), tool_counts={f"mcp{i}": 1}, counter=count)
    assert count("pai:get_lat_lng") == RUNS and count("pai:get_weather") == RUNS
    assert count("sdk:get_lat_lng") == count("sdk:get_weather") == count("sdk:get_time") == RUNS

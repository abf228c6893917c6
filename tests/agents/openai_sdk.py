"""An agents module of OpenAI Agents SDK agents, as an SDK user writes it (``--agents tests.agents.openai_sdk``): the
SDK's own ``Agent``, ``function_tool`` and ``OpenAIChatCompletionsModel`` on the test session's FakeOpenAIServer
(``FAKE_OPENAI_URL``; it answers Chat Completions, not the Responses API the SDK's default model speaks). Nothing of
agents-celery is needed to serve them; what this module imports of ours is the tests' crash hook.

Tools count their executions in Redis (as ``tests.agents.fixture``'s do). A test arms a crash with a Redis key:
``crash_key("sdk_journal", "any")`` holding N kills the worker (SIGKILL) right after the Nth journal write;
``crash_key("sdk_tool_body", "any")`` kills it between a tool's body and its journal write, once.
"""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
from openai import AsyncOpenAI
from pydantic import BaseModel

from agents_celery.storage import journal
from tests.agents.fixture import _redis, count_key, crash_key

set_tracing_disabled(True)  # no network here


def _model() -> OpenAIChatCompletionsModel:
    url = os.environ.get("FAKE_OPENAI_URL", "http://127.0.0.1:9/v1")
    return OpenAIChatCompletionsModel("gpt-4o-mini", AsyncOpenAI(base_url=url, api_key="test", max_retries=0))


#: Crashes armed for any run of the deployment (each test deployment has its own key prefix).
ANY = "any"


def _after_write(run_id: str, name: str, seq: int) -> None:
    key = crash_key("sdk_journal", ANY)
    if _redis.get(key) is not None and _redis.decr(key) == 0:
        _redis.delete(key)
        os.kill(os.getpid(), signal.SIGKILL)


journal.AFTER_WRITE.append(_after_write)  # the tests' crash hook (an SDK user's module imports nothing of ours)


def _count(name: str) -> None:
    _redis.incr(count_key(f"sdk:{name}"))


def _crash_between() -> None:
    """Kills the worker after a tool's body ran and before its journal write (once, when armed)."""
    if _redis.delete(crash_key("sdk_tool_body", ANY)):
        os.kill(os.getpid(), signal.SIGKILL)


# -- weather: two tools --------------------------------------------------------------------------------------------


@function_tool
def get_lat_lng(location: str) -> str:
    """Find the latitude and longitude of a place."""
    _count("get_lat_lng")
    _crash_between()
    return f"{location}: 51.5,-0.1"


@function_tool
def get_weather(lat: float, lng: float) -> str:
    """Tell the weather at a latitude and longitude."""
    _count("get_weather")
    return f"sunny at {lat},{lng}"


@function_tool
async def get_time(city: str) -> str:
    """Tell the time in a city (an async tool)."""
    _count("get_time")
    return f"noon in {city}"


weather = Agent(
    name="sdk_weather",
    handoff_description="Tells the weather (Agents SDK).",
    instructions="Use the tools to answer.",
    model=_model(),
    tools=[get_lat_lng, get_weather, get_time],
)


def _dated(ctx: object, agent: object) -> str:
    return f"Use the tools to answer. It is now {datetime.now(UTC).isoformat()}."


# The weather agent with the time of each request in its instructions (dynamic instructions).
clock = Agent(name="sdk_clock", instructions=_dated, model=_model(), tools=[get_lat_lng, get_weather])


# -- approvals: a tool that needs a human -----------------------------------------------------------------------------


@function_tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (needs approval)."""
    _count(f"delete_file:{path}")
    _crash_between()
    return f"deleted {path}"


@function_tool
def list_files() -> str:
    """List the files."""
    _count("list_files")
    return "a.txt b.txt"


files = Agent(
    name="sdk_files",
    handoff_description="Deletes files when a human approves (Agents SDK).",
    instructions="Manage files.",
    model=_model(),
    tools=[delete_file, list_files],
)


# -- handoffs: a triage agent that hands billing questions to another agent ------------------------------------------


@function_tool
def refund(order: str) -> str:
    """Refund an order."""
    _count(f"refund:{order}")
    return f"refunded {order}"


billing = Agent(
    name="Billing agent",  # a name with a space: served as Billing_agent
    handoff_description="Handles refunds.",
    instructions="Refund what the user asks for.",
    model=_model(),
    tools=[refund],
)

triage = Agent(
    name="sdk_triage",
    instructions="Hand billing questions to the billing agent.",
    model=_model(),
    handoffs=[billing],
)


# -- structured output ------------------------------------------------------------------------------------------------


class Point(BaseModel):
    x: int
    y: int


point = Agent(
    name="sdk_point",
    instructions="Answer with a point.",
    model=_model(),
    output_type=Point,
    model_settings=ModelSettings(temperature=0),
)


# -- MCP servers: agents_celery.testing.mcp_server over streamable HTTP (SDK_MCP_URL) --------------------------------

from agents.mcp import MCPServerStreamableHttp  # noqa: E402 (the MCP part of this module)

_MCP_URL = os.environ.get("SDK_MCP_URL", "http://127.0.0.1:9/mcp")
words = MCPServerStreamableHttp(params={"url": _MCP_URL}, name="words", client_session_timeout_seconds=30)
mcp_agent = Agent(name="sdk_mcp", instructions="Count with the tools.", model=_model(), mcp_servers=[words])

guarded = MCPServerStreamableHttp(
    params={"url": _MCP_URL}, name="guarded", require_approval="always", client_session_timeout_seconds=30
)
mcp_approval = Agent(name="sdk_mcp_approval", instructions="Count when allowed.", model=_model(), mcp_servers=[guarded])

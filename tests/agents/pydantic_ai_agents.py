"""A pydantic-ai agents module the tests serve (``--agents tests.agents.pydantic_ai_agents``), beside
``tests.agents.fixture``.

Each agent talks to the FakeOpenAIServer of the test session (``FAKE_OPENAI_URL``) through pydantic-ai's own
``OpenAIChatModel``. Tools count their executions in Redis (as ``tests.agents.fixture``'s do). A test arms a crash
with a Redis key: ``crash_key("journal", "any")`` holding N kills the worker (SIGKILL) right after the Nth
journal write; ``crash_key("journal_each", "any")`` holding N kills it right after each of the next N journal
writes (every attempt that saves a unit dies); ``crash_key("tool_body", "any")`` kills it between a tool's body
and its journal write, once.
"""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime

from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from agents_celery.contrib.pydantic_ai import CeleryDurability
from agents_celery.storage import journal
from tests.agents.fixture import _redis, count_key, crash_key


def _model() -> OpenAIChatModel:
    url = os.environ.get("FAKE_OPENAI_URL", "http://127.0.0.1:9/v1")
    return OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=url, api_key="test"))


def _after_write(run_id: str, name: str, seq: int) -> None:
    key = crash_key("journal", ANY)
    if _redis.get(key) is not None and _redis.decr(key) == 0:
        _redis.delete(key)
        os.kill(os.getpid(), signal.SIGKILL)
    each = crash_key("journal_each", ANY)
    if _redis.get(each) is not None and _redis.decr(each) >= 0:
        os.kill(os.getpid(), signal.SIGKILL)


journal.AFTER_WRITE.append(_after_write)

#: Crashes armed for any run of the deployment (each test deployment has its own key prefix).
ANY = "any"


def _count(name: str) -> None:
    _redis.incr(count_key(f"pai:{name}"))


def _crash_between(run_id: str = "") -> None:
    """Kills the worker after a tool's body ran and before its journal write (once, when armed)."""
    if _redis.delete(crash_key("tool_body", ANY)):
        os.kill(os.getpid(), signal.SIGKILL)


def _run_of(ctx: RunContext[None]) -> str:
    return (ctx.run_id or "").split(":")[0]


# -- weather: two tools, text output ---------------------------------------------------------------

weather = Agent(
    _model(),
    name="pai_weather",
    description="Tells the weather (pydantic-ai).",
    instructions="Use the tools to answer.",
    capabilities=[CeleryDurability()],
)


@weather.tool
def get_lat_lng(ctx: RunContext[None], location: str) -> str:
    """Find the latitude and longitude of a place."""
    _count("get_lat_lng")
    _crash_between(_run_of(ctx))
    return f"{location}: 51.5,-0.1"


@weather.tool_plain
def get_weather(lat: float, lng: float) -> str:
    """Tell the weather at a latitude and longitude."""
    _count("get_weather")
    return f"sunny at {lat},{lng}"


# -- clock: the weather agent, with the time of the request in its instructions ----------------------------

clock = Agent(
    _model(),
    name="pai_clock",
    description="Tells the weather, its instructions dated (pydantic-ai).",
    tools=[get_lat_lng, get_weather],
    capabilities=[CeleryDurability()],
)


@clock.instructions
def dated() -> str:
    return f"Use the tools to answer. It is now {datetime.now(UTC).isoformat()}."


# -- bank support: structured output, a tool that asks the model to retry -----------------------------


class SupportOutput(BaseModel):
    support_advice: str
    block_card: bool
    risk: int


bank = Agent(
    _model(),
    name="pai_bank",
    description="Bank support with structured output (pydantic-ai).",
    output_type=SupportOutput,
    capabilities=[CeleryDurability()],
)


@bank.tool_plain
def customer_balance(include_pending: bool) -> str:
    """The customer's balance."""
    _count("customer_balance")
    if not include_pending:
        raise ModelRetry("include_pending must be true")
    return "$123.45"


# -- approvals: a tool that needs a human ---------------------------------------------------------------

files = Agent(
    _model(),
    name="pai_files",
    description="Deletes files when a human approves (pydantic-ai).",
    capabilities=[CeleryDurability()],
)


@files.tool_plain(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (needs approval)."""
    _count(f"delete_file:{path}")
    _crash_between()
    return f"deleted {path}"


@files.tool_plain
def list_files() -> str:
    """List the files."""
    _count("list_files")
    return "a.txt b.txt"


# -- an MCP toolset (agents_celery.testing.mcp_server on PAI_MCP_PORT) -------------------------------------------------

from pydantic_ai.mcp import MCPToolset  # noqa: E402 (the MCP part of this module)

mcp_agent = Agent(
    _model(),
    name="pai_mcp",
    description="Looks words up on an MCP server (pydantic-ai).",
    toolsets=[MCPToolset(f"http://127.0.0.1:{os.environ.get('PAI_MCP_PORT', '9')}/mcp", id="words")],
    capabilities=[CeleryDurability()],
)

# The same server's tools, every call needing a human's approval (pydantic-ai's ``approval_required()`` wrapper).
mcp_approval = Agent(
    _model(),
    name="pai_mcp_approval",
    description="Counts on an MCP server when a human approves (pydantic-ai).",
    toolsets=[
        MCPToolset(f"http://127.0.0.1:{os.environ.get('PAI_MCP_PORT', '9')}/mcp", id="guarded").approval_required()
    ],
    capabilities=[CeleryDurability()],
)

# -- external tools: a tool that defers its call (CallDeferred), and an ExternalToolset --------------------------

from pydantic_ai import CallDeferred  # noqa: E402
from pydantic_ai.tools import ToolDefinition  # noqa: E402
from pydantic_ai.toolsets import ExternalToolset  # noqa: E402

_ASK = ToolDefinition(
    name="ask_human",
    description="Ask a human a question (answered outside the agent).",
    parameters_json_schema={"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]},
)

external = Agent(
    _model(),
    name="pai_external",
    description="Hands some calls to the outside world (pydantic-ai).",
    toolsets=[ExternalToolset([_ASK], id="humans")],
    capabilities=[CeleryDurability()],
)


@external.tool_plain
def launch(target: str) -> str:
    """Launch a job elsewhere: its result comes later, from outside."""
    _count("launch")
    raise CallDeferred()


# -- a user's own event stream handler, and a dataclass output ---------------------------------------------------

from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402


async def _watch(ctx: RunContext[None], stream: Any) -> None:
    """The user's handler: counts the events it is handed (in Redis, as the tools count their executions)."""
    async for _event in stream:
        _count("watched_event")


watched = Agent(
    _model(),
    name="pai_watched",
    description="Talks, with an event stream handler of its own (pydantic-ai).",
    capabilities=[CeleryDurability(event_stream_handler=_watch)],
)


@dataclass
class Point:
    x: int
    y: int


point = Agent(
    _model(),
    name="pai_point",
    description="Answers with a point, a dataclass (pydantic-ai).",
    output_type=Point,
    capabilities=[CeleryDurability()],
)

"""The agents of tests/test_mcp.py: the fake OpenAI model with the tools of ``agents_celery.testing.mcp_server``,
over streamable HTTP (``MCP_TEST_URL``) and over stdio (a server per worker process, started on first use)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agents_celery import Agent, MCPTools, OpenAIChat, tool

_ROOT = Path(__file__).resolve().parents[2]


def fake_model() -> OpenAIChat:
    return OpenAIChat("fake-model", base_url=os.environ.get("FAKE_OPENAI_URL", "http://127.0.0.1:9/v1"), api_key="k")


@tool
def local_count(key: str) -> str:
    """Count one execution under key (the same tool as the MCP server's ``count``, as a Python function)."""
    import redis

    client = redis.Redis.from_url(os.environ.get("AGENTS_CELERY_REDIS_URL", "redis://127.0.0.1:6379/9"))
    prefix = os.environ.get("AGENTS_CELERY_KEY_PREFIX", "mcptest")
    return f"count {key}: {client.incr(f'{prefix}:test:count:{key}')}"


@tool
async def shout(word: str) -> str:
    """Answer the word in capitals, after an await (an async tool: on a gevent worker it runs on the loop the MCP
    connections use, tests/test_gevent_capacity.py)."""
    import asyncio

    await asyncio.sleep(0.2)
    return word.upper()


_url = os.environ.get("MCP_TEST_URL", "http://127.0.0.1:9/mcp")

http_tools = MCPTools(
    url=_url,
    headers={"X-Test": "agents-celery"},
    prefix="m_",
    requires_confirmation=["delete"],
    timeout=30,
)

stdio_tools = MCPTools(
    command=[sys.executable, "-m", "agents_celery.testing.mcp_server", "stdio"],
    env={
        "MCP_TEST_REDIS": os.environ.get("AGENTS_CELERY_REDIS_URL", "redis://127.0.0.1:6379/9"),
        "MCP_TEST_PREFIX": os.environ.get("AGENTS_CELERY_KEY_PREFIX", "mcptest"),
        "PYTHONPATH": str(_ROOT),
    },
    prefix="s_",
    name="stdio",
    idempotent=["count", "slow_once"],
    timeout=30,
)

mcp_http = Agent(name="mcp_http", model=fake_model(), tools=[http_tools, local_count], description="MCP over HTTP.")
short_tools = MCPTools(url=_url, prefix="t_", name="short", timeout=1)

fresh_tools = MCPTools(url=_url, prefix="f_", name="fresh", list_ttl=0.001)

mcp_fresh = Agent(name="mcp_fresh", model=fake_model(), tools=[fresh_tools], description="Lists again every turn.")
mcp_short = Agent(name="mcp_short", model=fake_model(), tools=[short_tools], description="MCP calls of 1 s at most.")
mcp_stdio = Agent(name="mcp_stdio", model=fake_model(), tools=[stdio_tools], description="MCP over stdio.")

# The same server (and, with no headers, the same pooled connection as ``short`` and ``fresh``) under a prefix of
# its own: the tool list changes during its runs (``grow``).
grow_tools = MCPTools(url=_url, prefix="g_", name="grow")
mcp_grow = Agent(name="mcp_grow", model=fake_model(), tools=[grow_tools], description="Its server's tools change.")

# An async tool beside MCP tools: on greenlets both need the process's one asyncio loop.
mixed_tools = MCPTools(url=_url, prefix="x_", name="mixed")
mcp_mixed = Agent(name="mcp_mixed", model=fake_model(), tools=[mixed_tools, shout], description="Async tool and MCP.")

"""The agents of tests/test_mcp_real.py: the fake OpenAI model with the tools of MCP servers nobody here wrote:
PyPI's ``mcp-server-time`` over stdio (a server per worker process, started on first use) and npm's
``@modelcontextprotocol/server-everything`` over streamable HTTP (``MCP_EVERYTHING_URL``)."""

from __future__ import annotations

import os
import sys

from agents_celery import Agent, MCPTools, OpenAIChat


def fake_model() -> OpenAIChat:
    return OpenAIChat("fake-model", base_url=os.environ.get("FAKE_OPENAI_URL", "http://127.0.0.1:9/v1"), api_key="k")


time_tools = MCPTools(
    command=[sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"], prefix="t_", name="time", timeout=30
)
everything_tools = MCPTools(
    url=os.environ.get("MCP_EVERYTHING_URL", "http://127.0.0.1:9/mcp"), prefix="e_", name="everything", timeout=30
)

clock = Agent(name="clock", model=fake_model(), instructions="Tell the time.", tools=[time_tools])
everything = Agent(name="everything", model=fake_model(), instructions="Use the tools.", tools=[everything_tools])

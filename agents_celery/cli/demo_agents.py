"""The agents the demo's workers serve (``agents-celery worker --agents agents_celery.cli.demo_agents``).

Every model is a :class:`~agents_celery.models.ScriptedModel`, so the demo needs no API key and no network.
Tokens come with a small delay so streaming (and dropping a consumer mid-answer) is visible.

- ``weather``: says a few words, calls ``get_weather``, then answers in a streamed sentence.
- ``reporter``: calls ``build_report``, which takes about 1.5 s: the demo kills the worker meanwhile. The tool
  is declared idempotent, so the worker that recovers the run runs it again without asking.
- ``janitor``: wants to call ``delete_file``, which needs a human's confirmation (try it with ``agents-celery run``).
"""

from __future__ import annotations

import os
import time

from ..agent import Agent
from ..models import ScriptedModel, ScriptedToolCall, ScriptedTurn
from ..storage.connections import connect
from ..tools import ToolContext, tool

#: Seconds between streamed tokens.
TOKEN_DELAY = float(os.environ.get("AGENTS_CELERY_DEMO_TOKEN_DELAY", "0.06"))
#: How long ``build_report`` works.
REPORT_SECONDS = float(os.environ.get("AGENTS_CELERY_DEMO_REPORT_SECONDS", "1.5"))


def tool_pid_key(prefix: str, run_id: str) -> str:
    """Redis list where ``build_report`` pushes the pid of each worker process running it (the demo kills it)."""
    return f"{prefix}:demo:tool_pid:{{{run_id}}}"


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny, 24 °C in {city}"


@tool(idempotent=True)
def build_report(topic: str, ctx: ToolContext) -> str:
    """Build a report on a topic (slow). Idempotent: running it twice gives the same report."""
    client = connect(os.environ.get("AGENTS_CELERY_REDIS_URL", "redis://localhost:6379/0"))
    key = tool_pid_key(os.environ.get("AGENTS_CELERY_KEY_PREFIX", "ac"), ctx.run_id)
    try:
        client.rpush(key, os.getpid())
        client.expire(key, 3600)
    finally:
        client.close()
    deadline = time.monotonic() + REPORT_SECONDS
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return f"report on {topic}: 3 findings, 0 open issues"


@tool(requires_confirmation=True)
def delete_file(path: str) -> str:
    """Delete a file (pretend). Needs a human's confirmation."""
    return f"deleted {path} (not really: this is a demo)"


weather = Agent(
    name="weather",
    instructions="Answer questions about the weather.",
    model=ScriptedModel(
        [
            ScriptedTurn("Let me check the weather for you. ", [ScriptedToolCall("get_weather", {"city": "Lisbon"})]),
            "It is sunny in Lisbon today, 24 degrees, with a light breeze from the river. A fine day for a walk.",
        ],
        token_delay=TOKEN_DELAY,
    ),
    tools=[get_weather],
    description="Scripted: streams an answer around one tool call.",
)

reporter = Agent(
    name="reporter",
    instructions="Build reports.",
    model=ScriptedModel(
        [
            ScriptedTurn("Building the report. ", [ScriptedToolCall("build_report", {"topic": "uptime"})]),
            "The report is ready: 3 findings, 0 open issues.",
        ],
        token_delay=TOKEN_DELAY / 3,
    ),
    tools=[build_report],
    description="Scripted: one slow, idempotent tool call.",
)

janitor = Agent(
    name="janitor",
    instructions="Clean up files, asking first.",
    model=ScriptedModel(
        [
            ScriptedTurn("I will remove the old log. ", [ScriptedToolCall("delete_file", {"path": "/tmp/old.log"})]),
            "Done: the old log is gone.",
        ],
        token_delay=TOKEN_DELAY,
    ),
    tools=[delete_file],
    description="Scripted: a tool call that needs confirmation.",
)

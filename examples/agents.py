"""The demo agents module: ``agents-celery worker --agents examples.agents``.

``assistant`` talks to OpenAI (or any OpenAI-compatible server) when ``OPENAI_API_KEY`` or
``OPENAI_BASE_URL`` is set, and plays a scripted conversation otherwise, so the demo runs offline.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agents_celery import Agent, Model, OpenAIChat, ScriptedModel, ScriptedToolCall, ScriptedTurn, tool

#: Files ``delete_file`` may delete live here; nothing outside it is touched.
SANDBOX = Path(os.environ.get("EXAMPLES_SANDBOX", "/tmp/agents-celery-sandbox"))


@tool
def get_current_time(timezone: str = "UTC") -> str:
    """Tell the current time in an IANA timezone such as "Europe/Paris"."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown timezone {timezone!r}"
    return datetime.now(zone).strftime(f"%Y-%m-%d %H:%M:%S ({timezone})")


@tool(requires_confirmation=True)
def delete_file(path: str) -> str:
    """Delete a file from the sandbox directory (a human must confirm first)."""
    target = (SANDBOX / path).resolve()
    if not target.is_relative_to(SANDBOX.resolve()):
        return f"refused: {path!r} is outside the sandbox"
    if not target.exists():
        return f"{path!r} does not exist"
    target.unlink()
    return f"deleted {path!r}"


def _model() -> Model:
    """OpenAI when configured, else a scripted model that asks for the time and answers."""
    base_url = os.environ.get("OPENAI_BASE_URL") or None
    if os.environ.get("OPENAI_API_KEY") or base_url:
        return OpenAIChat(os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), base_url=base_url)
    return ScriptedModel(
        [
            ScriptedTurn("Let me look at the clock. ", [ScriptedToolCall("get_current_time", {"timezone": "UTC"})]),
            "That is the current time in UTC. (Scripted answer: set OPENAI_API_KEY to talk to a real model.)",
        ],
        token_delay=0.02,
    )


assistant = Agent(
    name="assistant",
    instructions="You are a helpful assistant. Use the tools when they help; never delete a file unasked.",
    model=_model(),
    tools=[get_current_time, delete_file],
    description="A demo assistant that can tell the time and delete sandbox files (with confirmation).",
)

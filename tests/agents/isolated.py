"""An agents module whose one agent has a queue of its own (``ISOLATED_QUEUE``), for the queue tests."""

from __future__ import annotations

import os

from agents_celery import Agent, ScriptedModel

isolated = Agent(
    name="isolated",
    model=ScriptedModel(["Served from my own queue."]),
    queue=os.environ.get("ISOLATED_QUEUE", "isolated"),
    description="Runs on its own queue.",
)

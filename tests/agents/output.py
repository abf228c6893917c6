"""The structured-output agent of tests/test_output.py, in a module of its own so that the test process imports it
without the Redis client of tests/agents/fixture.py (which serves it to the workers: it imports it)."""

from __future__ import annotations

import os

from pydantic import BaseModel

from agents_celery import Agent, OpenAIChat


class Forecast(BaseModel):
    """The structured output of the ``forecaster`` agent."""

    city: str
    temperature_c: float
    summary: str = ""


forecaster = Agent(
    name="forecaster",
    instructions="You are the forecaster. Answer with the forecast.",
    model=OpenAIChat("fake-model", base_url=os.environ.get("FAKE_OPENAI_URL", "http://127.0.0.1:9/v1"), api_key="k"),
    description="Answers with a Forecast (structured output).",
    output_type=Forecast,
)

"""The OpenAI Agents SDK agents of ``bench.openai_agents`` (an agents module,
``AGENTS_CELERY_AGENTS=bench.sdk_agents``), written as an SDK user writes them (the SDK's own ``Agent``,
``function_tool`` and ``OpenAIChatCompletionsModel``).

``sdk_bench`` calls ``noop`` three times (the fake model's script), then answers. ``sdk_long`` calls ``fetch`` once
per model call for as long as the script says (a hundred times), each result a kilobyte, so its conversation grows
with every call. ``sdk_recover`` calls ``sleepy``, which records ``pid:time_ns`` in Redis and, on its first call of a
run, sleeps for a minute (the bench kills the worker meanwhile); marked idempotent, so the recovering attempt runs
it again instead of pausing.
"""

from __future__ import annotations

import os
import time

import redis
from agents import Agent, OpenAIChatCompletionsModel, RunContextWrapper, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from agents_celery.contrib.openai_agents import idempotency_key, idempotent

set_tracing_disabled(True)


def model() -> OpenAIChatCompletionsModel:
    url = os.environ.get("BENCH_FAKE_OPENAI_URL", "http://127.0.0.1:9/v1")
    return OpenAIChatCompletionsModel("gpt-4o-mini", AsyncOpenAI(base_url=url, api_key="bench", max_retries=0))


def started_key(prefix: str, run_id: str) -> str:
    return f"{prefix}:bench:sdk:started:{run_id}"


@function_tool
def noop(i: int) -> str:
    """Do nothing, quickly."""
    return f"ok {i}"


bench = Agent(name="sdk_bench", instructions="Call the tools.", model=model(), tools=[noop])


@function_tool
def fetch(i: int) -> str:
    """Fetch a page (a kilobyte)."""
    return f"page {i}: " + "x" * 1024


long = Agent(name="sdk_long", instructions="Fetch the pages.", model=model(), tools=[fetch])

_redis = redis.Redis.from_url(os.environ.get("AGENTS_CELERY_REDIS_URL", "redis://127.0.0.1:6379/11"))


@idempotent
@function_tool
def sleepy(ctx: RunContextWrapper[None]) -> str:
    """Record who runs it; the first call of a run sleeps a minute."""
    run_id = (idempotency_key(ctx) or "").split(":")[0]
    first = _redis.rpush(started_key(os.environ.get("BENCH_PREFIX", ""), run_id), f"{os.getpid()}:{time.time_ns()}")
    if first == 1:
        time.sleep(60)
    return "slept"


recover = Agent(name="sdk_recover", instructions="Rest.", model=model(), tools=[sleepy])

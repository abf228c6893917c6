"""The pydantic-ai agents of ``bench.pydantic_ai`` (an agents module: ``AGENTS_CELERY_AGENTS=bench.pai_agents``).

``pai_bench`` calls ``noop`` three times (the fake model's script), then answers. ``pai_recover`` calls ``sleepy``,
which records ``pid:time_ns`` in Redis and, on its first call of a run, sleeps for a minute (the bench kills the
worker meanwhile); declared idempotent, so the recovering attempt runs it again instead of pausing. The model is
pydantic-ai's ``OpenAIChatModel`` pointed at ``BENCH_FAKE_OPENAI_URL``.
"""

from __future__ import annotations

import os
import time

import redis
from pydantic_ai import Agent, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from agents_celery.contrib.pydantic_ai import CeleryDurability


def model() -> OpenAIChatModel:
    url = os.environ.get("BENCH_FAKE_OPENAI_URL", "http://127.0.0.1:9/v1")
    return OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=url, api_key="bench"))


def started_key(prefix: str, run_id: str) -> str:
    return f"{prefix}:bench:pai:started:{run_id}"


bench = Agent(model(), name="pai_bench", capabilities=[CeleryDurability()])


@bench.tool_plain
def noop(i: int) -> str:
    """Do nothing, quickly."""
    return f"ok {i}"


recover = Agent(model(), name="pai_recover", capabilities=[CeleryDurability()])
_redis = redis.Redis.from_url(os.environ.get("AGENTS_CELERY_REDIS_URL", "redis://127.0.0.1:6379/11"))


@recover.tool(metadata={"agents_celery": {"idempotent": True}})
def sleepy(ctx: RunContext[None]) -> str:
    """Record who runs it; the first call of a run sleeps a minute."""
    key = started_key(os.environ.get("BENCH_PREFIX", ""), (ctx.run_id or "").split(":")[0])
    first = _redis.rpush(key, f"{os.getpid()}:{time.time_ns()}") == 1
    if first:
        time.sleep(60)
    return "slept"

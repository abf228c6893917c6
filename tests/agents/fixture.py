"""The agents module the test workers serve (``--agents tests.agents.fixture``).

The ``fake`` agent talks to the FakeOpenAIServer the tests start (``FAKE_OPENAI_URL``) through the real
openai SDK; the ``offline`` agent uses the ScriptedModel. Tools count their executions in Redis so tests
can check that nothing ran twice.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator

from agents_celery import (
    Agent,
    Hooks,
    OpenAIChat,
    ScriptedModel,
    ScriptedToolCall,
    ScriptedTurn,
    StepInfo,
    StopStep,
    tool,
)
from agents_celery.storage.connections import connect
from agents_celery.storage.keys import Keys
from agents_celery.tools import ToolContext

_PREFIX = os.environ.get("AGENTS_CELERY_KEY_PREFIX", "ac")
_redis = connect(os.environ.get("AGENTS_CELERY_REDIS_URL", "redis://127.0.0.1:6379/9"))
#: Where the tools count their executions: the state store, unless a test that kills a master of a Redis Cluster
#: keeps them on a Redis that stays up (``TEST_COUNTS_REDIS_URL``), so no count is lost with the master.
_counts = connect(os.environ["TEST_COUNTS_REDIS_URL"]) if os.environ.get("TEST_COUNTS_REDIS_URL") else _redis


def count_key(name: str) -> str:
    return f"{_PREFIX}:test:count:{name}"


@tool
def get_time(timezone: str = "UTC") -> str:
    """Tell the current time in a timezone."""
    _counts.incr(count_key("get_time"))
    return f"12:00 in {timezone}"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    _counts.incr(count_key("add"))
    return a + b


@tool(requires_confirmation=True)
def delete_file(path: str) -> str:
    """Delete a file (needs a human's confirmation)."""
    _counts.incr(count_key(f"delete_file:{path}"))
    return f"deleted {path}"


@tool
def slow_count(key: str, seconds: float = 0.0, ctx: ToolContext | None = None) -> str:
    """Count an execution under ``key`` in Redis, then sleep (crash tests kill the worker meanwhile)."""
    _counts.incr(count_key(key))
    if ctx is not None:
        _counts.rpush(count_key(f"{key}:idem"), ctx.idempotency_key)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return f"counted {key}"


@tool(idempotent=True)
def idempotent_count(key: str, seconds: float = 0.0) -> str:
    """Like slow_count, but declared idempotent: a crashed attempt re-runs it without asking."""
    _counts.incr(count_key(key))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return f"counted {key}"


def crash_key(point: str, run_id: str) -> str:
    return f"{_PREFIX}:test:crash:{point}:{run_id}"


def pid_key(run_id: str) -> str:
    return f"{_PREFIX}:test:pid:{run_id}"


class CrashHooks(Hooks):
    """Records which process runs each step, and kills it (SIGKILL) at a point a test armed."""

    def before_step(self, step: StepInfo) -> None:
        _redis.set(pid_key(step.run_id), os.getpid(), ex=600)

    def after_commit(self, step: StepInfo) -> None:
        if _redis.delete(crash_key("after_commit", step.run_id)):
            os.kill(os.getpid(), signal.SIGKILL)

    def after_tool_call(self, step: StepInfo, tool_name: str, result: str, error: str | None) -> None:
        if _redis.delete(crash_key("after_tool", step.run_id)):
            os.kill(os.getpid(), signal.SIGKILL)


@tool
async def async_lookup(word: str) -> str:
    """An async tool: looks a word up (counts its executions)."""
    import asyncio

    await asyncio.sleep(0)
    _counts.incr(count_key("async_lookup"))
    return word.upper()


@tool
def guarded(path: str) -> str:
    """A tool a hook refuses to run (StopStep)."""
    return f"ran {path}"


class GuardHooks(Hooks):
    """Stops the step when a tool called ``guarded`` is about to run."""

    def before_tool_call(self, step: StepInfo, tool_name: str, arguments: dict[str, object]) -> None:
        if tool_name == "guarded":
            raise StopStep(f"policy forbids touching {arguments.get('path')!r}")


@tool(idempotent=True)
def crash_worker() -> str:
    """Kills the worker running it, every time (declared idempotent, so every attempt re-runs it)."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


@tool(idempotent=True)
def steal_lease(ms: int, ctx: ToolContext | None = None) -> str:
    """Hands the run's lease to a stranger for ``ms`` milliseconds, once per run: that attempt's commit is
    refused, and the sweeper gives the step to a new attempt once the stranger's lease expires."""
    assert ctx is not None
    if _redis.set(count_key(f"stolen:{ctx.run_id}"), 1, nx=True, ex=600):
        _redis.set(Keys(_PREFIX).run(ctx.run_id).lease, "stranger", px=ms)
    return "stolen"


@tool
def die_twice(key: str) -> str:
    """Counts an execution under ``key``, and kills the worker running it on the first two (SIGKILL)."""
    if _counts.incr(count_key(key)) <= 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return f"survived {key}"


@tool
def hang(key: str) -> str:
    """Counts its start, then blocks forever (a tool that never returns: a stuck socket, a deadlock)."""
    _counts.incr(count_key(f"hang:{key}"))
    threading.Event().wait()
    return "unreachable"


@tool
def compute(key: str, seconds: float) -> str:
    """Counts its start, then computes in pure Python for ``seconds`` without yielding (no I/O, no sleep): on a
    gevent worker it holds the hub, every other greenlet of the process included; counts ``<key>:done`` at the end."""
    _redis.incr(count_key(key))
    deadline, spins = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        spins += 1
    _redis.incr(count_key(f"{key}:done"))
    return f"computed {key}: {spins} spins"


@tool(timeout=0.5)
def slow_lookup(word: str) -> str:
    """Takes 3 s, with a 0.5 s timeout: the step walks away and the model gets an error result."""
    time.sleep(3)
    return word.upper()


@tool
def client_props(ctx: ToolContext | None = None) -> str:
    """What the client that started the run passed along (AG-UI state and forwardedProps)."""
    client = ctx.client if ctx is not None else {}
    return json.dumps({"state": client.get("state"), "forwarded": client.get("forwarded_props")}, sort_keys=True)


TOOLS = [
    get_time, add, delete_file, slow_count, idempotent_count, crash_worker, async_lookup, guarded, steal_lease, hang,
    slow_lookup, client_props, compute, die_twice,
]  # fmt: skip


def fake_model() -> OpenAIChat:
    """The official openai SDK pointed at the tests' fake OpenAI server."""
    return OpenAIChat("fake-model", base_url=os.environ.get("FAKE_OPENAI_URL", "http://127.0.0.1:9/v1"), api_key="k")


fake = Agent(
    name="fake",
    instructions="You are a test agent.",
    model=fake_model(),
    tools=TOOLS,
    description="Talks to the local fake OpenAI server.",
    hooks=[CrashHooks(), GuardHooks()],
)


class BrokenModel:
    """A model adapter with a bug: it raises something that is not a ModelError."""

    name = "broken"

    def stream(self, messages: list[dict[str, object]], tools: list[dict[str, object]]) -> Iterator[object]:
        raise KeyError("choices")


offline = Agent(
    name="offline",
    instructions="You are an offline test agent.",
    model=ScriptedModel(
        [
            ScriptedTurn("Let me check. ", [ScriptedToolCall("get_time", {"timezone": "UTC"})]),
            "It is 12:00 UTC.",
        ]
    ),
    tools=TOOLS,
    description="Scripted, no network.",
)

billing = Agent(
    name="billing",
    instructions="You are the billing agent.",
    model=fake_model(),
    tools=[add],
    description="Answers billing questions.",
)

triage = Agent(
    name="triage",
    instructions="You are the triage agent.",
    model=fake_model(),
    tools=[get_time],
    description="Routes a question to the agent for it.",
    handoffs=[billing],
)

broken = Agent(name="broken", instructions="", model=BrokenModel(), description="Its model adapter has a bug.")

# Agents as tools: lead -> researcher -> checker, each a child run of the one before (tests/test_subagents.py).
checker = Agent(
    name="checker",
    instructions="You are the checker.",
    model=fake_model(),
    tools=[delete_file],
    description="Checks a finding.",
)

researcher = Agent(
    name="researcher",
    instructions="You are the researcher.",
    model=fake_model(),
    tools=[slow_count, delete_file, checker.as_tool(description="Checks a finding.")],
    description="Looks things up.",
    hooks=[CrashHooks()],
)

lead = Agent(
    name="lead",
    instructions="You are the lead agent.",
    model=fake_model(),
    tools=[researcher.as_tool(), slow_count, idempotent_count],
    description="Hands research to the researcher.",
)

# Structured output (tests/test_output.py): defined apart so the test process imports it without this module's
# Redis client; imported last so GET /agents lists it after the agents above.
from .output import forecaster  # noqa: E402, F401

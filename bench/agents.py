"""The agents module bench workers serve (``AGENTS_CELERY_AGENTS=bench.agents``).

- ``steps``: a zero-latency :class:`~agents_celery.ScriptedModel` run. The user message is a number N; turn i
  (i < N) calls the no-op tool ``noop`` once, turn N answers. A run is N model turns + N tool steps + 1 final
  turn = 2N + 1 steps.
- ``streamer``: :class:`~agents_celery.OpenAIChat` pointed at ``FAKE_OPENAI_URL`` (the bench's fake server).
- ``long_summarize`` and ``long_plain``: a long session with and without ``Summarize`` (bench/history.py).
- ``mcp_calls`` and ``py_calls``: N calls of a counting tool, an MCP server's (``BENCH_MCP_URL``) or a Python
  function doing the same (bench/mcp.py).
- ``ten_functions`` and ``three_agents``: workflows (bench/workflows.py): ten function steps of :func:`passes`, and
  three agent steps of ``helper``.
- ``recover``: turn 0 calls ``sleepy``, which records ``pid:attempt:time_ns`` in Redis, then sleeps on its first
  attempt (the bench kills the worker meanwhile) and returns at once on a retry; turn 1 answers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import redis

from agents_celery import (
    Agent,
    MCPTools,
    OpenAIChat,
    ScriptedModel,
    ScriptedToolCall,
    ScriptedTurn,
    Step,
    StepInput,
    Summarize,
    Workflow,
    tool,
)
from agents_celery.models import ModelChunk
from agents_celery.tools import ToolContext

_PREFIX = os.environ.get("BENCH_PREFIX", os.environ.get("AGENTS_CELERY_KEY_PREFIX", "bench"))
_redis = redis.Redis.from_url(os.environ.get("AGENTS_CELERY_REDIS_URL", "redis://127.0.0.1:6379/11"))


def started_key(run_id: str, prefix: str = _PREFIX) -> str:
    """The list ``sleepy`` pushes ``pid:attempt:time_ns`` to when it starts."""
    return f"{prefix}:bench:started:{run_id}"


@tool
def noop(i: int = 0) -> str:
    """Do nothing."""
    return "ok"


@tool(idempotent=True)
def sleepy(seconds: float, ctx: ToolContext) -> str:
    """Record where it runs, then sleep on the first attempt only."""
    _redis.rpush(started_key(ctx.run_id), f"{os.getpid()}:{ctx.attempt}:{time.time_ns()}")
    if ctx.attempt == 1:
        time.sleep(seconds)
    return "slept"


class CountingModel:
    """A ScriptedModel whose length is the number in the last user message (N tool-call turns, then text)."""

    def __init__(self) -> None:
        self._models: dict[int, ScriptedModel] = {}

    @property
    def name(self) -> str:
        return "scripted-counting"

    def describe(self) -> dict[str, Any]:
        return {"provider": "scripted", "name": self.name}

    def _model(self, n: int) -> ScriptedModel:
        if n not in self._models:
            turns: list[ScriptedTurn | str] = [
                ScriptedTurn("", [ScriptedToolCall("noop", {"i": i}, id=f"call_{i}")]) for i in range(n)
            ]
            self._models[n] = ScriptedModel([*turns, "done"])
        return self._models[n]

    def stream(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Iterator[ModelChunk]:
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        try:
            n = int(str(last_user.get("content", "")).strip())
        except ValueError:
            n = 0
        return self._model(n).stream(messages, tools)


steps = Agent(name="steps", instructions="", model=CountingModel(), tools=[noop], description="N no-op tool steps.")

streamer = Agent(
    name="streamer",
    instructions="Stream.",
    model=OpenAIChat("fake-model", base_url=os.environ.get("FAKE_OPENAI_URL", "http://127.0.0.1:9/v1"), api_key="k"),
    description="Streams from the bench's fake OpenAI server.",
)

_SLEEP = float(os.environ.get("BENCH_SLEEP", "60"))

recover = Agent(
    name="recover",
    instructions="",
    model=ScriptedModel(
        [
            ScriptedTurn("", [ScriptedToolCall("sleepy", {"seconds": float(os.environ.get("BENCH_SLEEP", "60"))})]),
            "done",
        ]
    ),
    tools=[sleepy],
    description="A tool that sleeps until the bench kills its worker.",
)

#: ``waiter``: one turn of 20 words, 50 ms apart: about a second spent waiting on "the model", as real agents do.
waiter = Agent(
    name="waiter",
    instructions="",
    model=ScriptedModel([" ".join(f"word{i}" for i in range(20))], token_delay=0.05),
    description="A turn that mostly waits on its model.",
)

#: ``helper``: one text turn; ``delegate`` calls it as a tool (a child run per call); ``plain`` calls ``noop``
#: instead, with the same script otherwise (bench/subagents.py).
helper = Agent(name="helper", instructions="", model=ScriptedModel(["helped"]), description="Answers at once.")

delegate = Agent(
    name="delegate",
    instructions="",
    model=ScriptedModel([ScriptedTurn("", [ScriptedToolCall("helper", {"input": "x"}, id="call_h")]), "done"]),
    tools=[helper.as_tool()],
    description="Calls helper as a tool: one child run.",
)

plain = Agent(
    name="plain",
    instructions="",
    model=ScriptedModel([ScriptedTurn("", [ScriptedToolCall("noop", {"i": 0}, id="call_n")]), "done"]),
    tools=[noop],
    description="Calls a plain tool once.",
)

#: The prompt budget of ``long_summarize`` (bench/history.py).
HISTORY_BUDGET = 2000


def _fake_chat() -> OpenAIChat:
    return OpenAIChat("fake-model", base_url=os.environ.get("FAKE_OPENAI_URL", "http://127.0.0.1:9/v1"), api_key="k")


long_summarize = Agent(
    name="long_summarize",
    instructions="Answer briefly.",
    model=_fake_chat(),
    history=Summarize(max_prompt_tokens=HISTORY_BUDGET, keep_last_turns=4),
    description="A long session under Summarize (bench/history.py).",
)

long_plain = Agent(
    name="long_plain",
    instructions="Answer briefly.",
    model=_fake_chat(),
    description="A long session without a history policy (bench/history.py).",
)


@tool
def count(key: str) -> str:
    """Count one execution under key (what the MCP server's ``count`` does, as a Python function)."""
    return f"count {key}: {_redis.incr(f'{_PREFIX}:test:count:{key}')}"


class CallingModel(CountingModel):
    """A CountingModel that calls ``tool`` with ``{"key": "bench"}``: N calls, then text."""

    def __init__(self, tool_name: str) -> None:
        super().__init__()
        self.tool_name = tool_name

    def _model(self, n: int) -> ScriptedModel:
        if n not in self._models:
            calls = [
                ScriptedTurn("", [ScriptedToolCall(self.tool_name, {"key": "bench"}, id=f"c{i}")]) for i in range(n)
            ]
            self._models[n] = ScriptedModel([*calls, "done"])
        return self._models[n]


mcp_calls = Agent(
    name="mcp_calls",
    model=CallingModel("m_count"),
    tools=[MCPTools(url=os.environ.get("BENCH_MCP_URL", "http://127.0.0.1:9/mcp"), prefix="m_")],
    description="N calls of an MCP server's counting tool (bench/mcp.py).",
)

py_calls = Agent(
    name="py_calls",
    model=CallingModel("count"),
    tools=[count],
    description="N calls of the same counting tool as a Python function (bench/mcp.py).",
)


def passes(given: StepInput) -> str:
    """A function step that does nothing but pass its input on (the same function the plain chain's tasks call)."""
    return given.previous_text


ten_functions = Workflow(
    "ten_functions", "Ten function steps.", steps=[Step(f"f{i}", function=passes) for i in range(10)]
)
three_agents = Workflow(
    "three_agents", "Three agent steps.", steps=[Step(f"a{i}", agent=helper, message="go") for i in range(3)]
)

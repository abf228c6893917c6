"""The workflows the test workers serve (``--agents tests.agents.fixture,tests.agents.workflows``).

Their agents talk to the tests' fake OpenAI server (tests answer each by the word after "You are the" in its
instructions); their function steps count their executions in Redis under the workflow run's id, and kill the
worker running them (SIGKILL) at a point a test armed (``crash_key``), so tests can check that nothing ran twice.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from agents_celery import Agent, Condition, Loop, Parallel, Router, Step, StepInput, Workflow
from agents_celery.hooks import Hooks, StepInfo
from agents_celery.models import ScriptedModel

from .fixture import CrashHooks, _counts, _redis, count_key, crash_key, delete_file, fake_model, slow_count


def counted(name: str, given: StepInput) -> None:
    """Count an execution of step ``name`` of the run; die (SIGKILL) when a test armed ``in:<name>`` for it."""
    _counts.incr(count_key(f"{name}:{given.run_id}"))
    if _redis.delete(crash_key(f"in:{name}", given.run_id)):
        os.kill(os.getpid(), signal.SIGKILL)


def gather(given: StepInput) -> str:
    """The notes a research starts from."""
    counted("gather", given)
    return f"notes on {given.message}"


def count_words(given: StepInput) -> dict[str, int]:
    """How many words the previous step wrote."""
    counted("count", given)
    return {"words": len(given.previous_text.split())}


def tally(given: StepInput) -> str:
    """A function step beside the researchers of a parallel."""
    counted("tally", given)
    return f"tallied {given.message}"


def wait_a_while(given: StepInput) -> str:
    """Sleeps until a test says go (``go:<run id>``) or 30 s pass: a step a stop finds running."""
    counted("wait", given)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not _redis.exists(count_key(f"go:{given.run_id}")):
        time.sleep(0.05)
    return "waited"


def label(given: StepInput) -> str:
    counted("label", given)
    return "urgent" if "urgent" in given.message else "routine"


def escalate(given: StepInput) -> str:
    counted("escalate", given)
    return f"escalated ({given.previous_output})"


def file_it(given: StepInput) -> str:
    counted("file", given)
    return f"filed ({given.previous_output})"


def grow(given: StepInput) -> str:
    """Adds an 'x' to its input, each loop iteration."""
    counted("grow", given)
    before = given.previous_output if given.iteration > 1 else ""
    return f"{before}x"


def billing_desk(given: StepInput) -> str:
    counted("billing", given)
    return "billing handled it"


def support_desk(given: StepInput) -> str:
    counted("support", given)
    return "support handled it"


def route_desk(given: StepInput) -> str:
    return "billing" if "invoice" in given.message else "support"


def noop(given: StepInput) -> str:
    return given.previous_text


def explode(given: StepInput) -> str:
    raise ValueError(f"cannot handle {given.message!r}")


scout = Agent(
    name="wf-scout",
    instructions="You are the scout.",
    model=fake_model(),
    tools=[slow_count],
    description="Researches a topic (counts a tool call).",
    hooks=[CrashHooks()],
)
analyst = Agent(
    name="wf-analyst",
    instructions="You are the analyst.",
    model=fake_model(),
    tools=[slow_count],
    description="Researches another side of it.",
    hooks=[CrashHooks()],
)
author = Agent(
    name="wf-author",
    instructions="You are the author.",
    model=fake_model(),
    description="Writes the piece.",
    hooks=[CrashHooks()],
)
cleaner = Agent(
    name="wf-cleaner",
    instructions="You are the cleaner.",
    model=fake_model(),
    tools=[delete_file],
    description="Deletes files (a human confirms each).",
)

research_count_write = Workflow(
    "research-count-write",
    "Research a topic, count the words of the notes, write the piece.",
    steps=[
        Step("research", agent=scout),
        Step("count", function=count_words),
        Step("write", agent=author, message="Write about {message}; the notes have {previous_output} words."),
    ],
    hooks=[CrashHooks()],
)

two_researchers = Workflow(
    "two-researchers",
    "Two researchers and a tally at once, then a writer.",
    steps=[
        Step("gather", function=gather),
        Parallel(Step("scout", agent=scout), Step("analyst", agent=analyst), Step("tally", function=tally), name="dig"),
        Step("write", agent=author),
    ],
    hooks=[CrashHooks()],
)

approved_cleanup = Workflow(
    "approved-cleanup",
    "Prepare, clean up with a human's approval, report.",
    steps=[Step("prepare", function=gather), Step("clean", agent=cleaner), Step("report", function=count_words)],
)

slow_parallel = Workflow(
    "slow-parallel",
    "A slow agent and a slow function side by side (stop tests).",
    steps=[Parallel(Step("slow_scout", agent=scout), Step("wait", function=wait_a_while))],
)

conditional = Workflow(
    "conditional",
    "Label a message, escalate it when urgent, file it otherwise.",
    steps=[
        Step("label", function=label),
        Condition(
            when=lambda given: given.previous_output == "urgent",
            steps=[Step("escalate", function=escalate)],
            else_steps=[Step("file", function=file_it)],
            name="triage",
        ),
    ],
)

looping = Workflow(
    "looping",
    "Grow a draft until it is three long (at most five times), then grow another exactly twice.",
    steps=[
        Loop(Step("grow", function=grow), until=lambda given: len(given.previous_output) >= 3, max_iterations=5),
        Loop(Step("again", function=grow), max_iterations=2, name="twice"),
    ],
)

routing = Workflow(
    "routing",
    "Send a message to the desk for it.",
    steps=[
        Router(route_desk, [Step("billing", function=billing_desk), Step("support", function=support_desk)]),
        Step("close", function=noop),
    ],
)

ten_functions = Workflow(
    "ten-functions",
    "Ten function steps, one after another (the bench's shape).",
    steps=[Step(f"f{i}", function=noop) for i in range(10)],
)

exploding = Workflow("exploding", "A step that raises: the workflow fails.", steps=[Step("explode", function=explode)])


class TaskHooks(Hooks):
    """Records the Celery task each attempt of a step runs in (hash ``task:<run id>``: ``<step>:<attempt>`` -> the
    task's id), and kills the worker (SIGKILL) before a model call a test armed (``model``)."""

    def before_step(self, step: StepInfo) -> None:
        from celery import current_task

        task: Any = current_task
        key = count_key(f"task:{step.run_id}")
        _redis.hset(key, f"{step.step}:{step.attempt}", (task.request.id if task else None) or "")
        _redis.expire(key, 600)

    def before_model_call(self, step: StepInfo, messages: list[dict[str, Any]]) -> None:
        if _redis.delete(crash_key("model", step.run_id)):
            os.kill(os.getpid(), signal.SIGKILL)


echo = Agent(
    name="wf-echo",
    instructions="",
    model=ScriptedModel(["echoed"]),
    description="Answers at once (no model server).",
    hooks=[TaskHooks()],
)

three_echoes = Workflow(
    "three-echoes",
    "Three agent steps of an agent that answers at once (the bench's shape).",
    steps=[Step(f"e{i}", agent=echo, message="go") for i in range(3)],
    hooks=[TaskHooks()],
)

echo_loop = Workflow(
    "echo-loop",
    "One agent step, twelve times: more steps than one delivery runs on its thread.",
    steps=[Loop(Step("again", agent=echo, message="go"), max_iterations=12, name="twelve")],
    hooks=[TaskHooks()],
)

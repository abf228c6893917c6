"""Workflows on real workers: sequences of function and agent steps, Parallel, Condition, Loop, Router, an approval
inside a step, stop (tests/agents/workflows.py defines them; the fake OpenAI server answers each agent by the word
after "You are the" in its instructions). Crash tests are in tests/test_workflows_crash.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from agents_celery import ConfigurationError, Loop, Parallel, RunStatus, Runtime, RunView, Step, Workflow
from agents_celery.engine.children import child_run_id
from agents_celery.events import Event, EventType
from agents_celery.models import ScriptedToolCall
from agents_celery.testing.openai_server import FakeReply

from .conftest import wait_for
from .support.invariants import assert_run_sound, counter_of

pytestmark = pytest.mark.timeout(90)

Turns = Callable[[int, str], FakeReply]


def by_agent(**scripts: Turns) -> Callable[[dict[str, Any]], FakeReply]:
    """A responder that answers each agent (the word after "You are the" in its system prompt) with
    ``scripts[word](turn, last user message)``; the turn counts assistant messages after that message."""

    def respond(request: dict[str, Any]) -> FakeReply:
        messages = request["messages"]
        who = str(messages[0]["content"]).removeprefix("You are the ").split()[0].rstrip(".")
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        turn = sum(1 for m in messages[last_user:] if m["role"] == "assistant")
        return scripts[who](turn, str(messages[last_user]["content"]))

    return respond


def researches(key: str, seconds: float = 0.0, token_delay: float = 0.0, first: str = "Looking.") -> Turns:
    """Says ``first`` (``token_delay`` between words) and calls slow_count once (``key``, sleeping ``seconds``), then
    answers with the words it found."""

    def turns(turn: int, message: str) -> FakeReply:
        if turn == 0:
            args = {"key": key, "seconds": seconds}
            call = ScriptedToolCall("slow_count", args, "call_count")
            return FakeReply(text=first, tool_calls=[call], token_delay=token_delay)
        return FakeReply(text=f"found five words about {message[:20]}", token_delay=token_delay)

    return turns


def writes(turn: int, message: str) -> FakeReply:
    return FakeReply(text=f"Piece: {message}")


def ended(runtime: Runtime, run_id: str, timeout: float = 30) -> RunView:
    view: RunView = wait_for(lambda: (v := runtime.get(run_id)).status.is_final and v, timeout=timeout, what="the end")
    return view


def settled(runtime: Runtime, run_id: str, timeout: float = 30) -> RunView:
    """The run once it ended or paused."""

    def done() -> RunView | None:
        view = runtime.get(run_id)
        return view if view.status.is_final or view.status is RunStatus.PAUSED else None

    view: RunView = wait_for(done, timeout=timeout, what="the run to end or pause")
    return view


def log_of(runtime: Runtime, run_id: str) -> list[Event]:
    return list(runtime.store.log.read(run_id, after=-1))


def steps_of(log: list[Event]) -> list[tuple[str, str]]:
    """The workflow steps' STEP_STARTED / STEP_FINISHED in the log: (type, step name), without the engine's."""
    return [
        ("started" if e.type is EventType.STEP_STARTED else "finished", e.data["step_name"])
        for e in log
        if e.type in (EventType.STEP_STARTED, EventType.STEP_FINISHED)
        and "workflow_step" in (e.data.get("metadata") or {})
    ]


def outputs_of(log: list[Event]) -> dict[str, Any]:
    return {e.data["value"]["step"]: e.data["value"]["output"] for e in log if e.data.get("name") == "step_output"}


def nodes_of(e: Event) -> dict[str, Any] | None:
    """The value of a container's CUSTOM ``workflow_node`` event (None for any other event)."""
    return e.data["value"] if e.type is EventType.CUSTOM and e.data.get("name") == "workflow_node" else None


def count(runtime: Runtime, name: str) -> int:
    return counter_of(runtime.redis, runtime.settings.key_prefix)(name)


# -- the vocabulary ----------------------------------------------------------------------------------------------


def test_a_plan_names_its_nodes_and_refuses_what_cannot_run() -> None:
    def f(given: Any) -> str:
        return "x"

    wf = Workflow("w", steps=[Step("a", function=f), Parallel(Step("b", function=f), Loop(Step("c", function=f)))])
    plan = wf.plan()
    assert [n["name"] for n in plan] == ["a", "parallel-1"] and plan[1]["type"] == "Parallel"
    assert plan[1]["steps"][1] == {
        "name": "loop-1",
        "type": "Loop",
        "max_iterations": 3,
        "steps": [
            {
                "name": "c",
                "description": "",
                "type": "Step",
                "executor": "function",
                "function": plan[1]["steps"][1]["steps"][0]["function"],
                "idempotent": False,
            }
        ],
    }
    assert wf.manifest()["kind"] == "workflow" and [t["name"] for t in wf.manifest()["tools"]] == ["a", "b", "c"]
    with pytest.raises(ConfigurationError, match="two nodes are named 'a'"):
        Workflow("w2", steps=[Step("a", function=f), Step("a", function=f)])
    with pytest.raises(ConfigurationError, match="an agent or a function"):
        Step("x")
    with pytest.raises(ConfigurationError, match="max_iterations"):
        Loop(Step("y", function=f), max_iterations=0)
    with pytest.raises(ConfigurationError, match="step name"):
        Step("has space", function=f)


def test_workers_publish_workflows_with_their_plans(runtime: Runtime) -> None:
    manifest = wait_for(lambda: runtime.store.agents.get("research-count-write"), what="the workflow's manifest")
    assert manifest["kind"] == "workflow"
    assert [s["name"] for s in manifest["steps"]] == ["research", "count", "write"]
    assert manifest["steps"][0]["agent"] == {"id": "wf-scout", "name": "wf-scout"}
    assert runtime.store.agents.get("wf-author") is not None  # its agents are served too


# -- running -----------------------------------------------------------------------------------------------------


def test_research_count_write_runs_each_step_once_in_order(runtime: Runtime, fake_openai: Any) -> None:
    key = f"rcw-{time.monotonic_ns()}"
    fake_openai.responder = by_agent(scout=researches(key), author=writes)
    stream = runtime.stream("research-count-write", "tides")
    view = ended(runtime, stream.id)
    assert view.status is RunStatus.COMPLETED, view.error
    assert view.output == 'Piece: Write about tides; the notes have {"words": 5} words.'
    log = log_of(runtime, stream.id)
    assert_run_sound(log)
    assert steps_of(log) == [
        ("started", "research"),
        ("finished", "research"),
        ("started", "count"),
        ("finished", "count"),
        ("started", "write"),
        ("finished", "write"),
    ]
    assert outputs_of(log)["count"] == {"words": 5}
    assert count(runtime, key) == 1 and count(runtime, f"count:{stream.id}") == 1
    kids = [child_run_id(stream.id, "step:research"), child_run_id(stream.id, "step:write")]
    assert [c["run_id"] for c in view.children] == kids
    assert all(runtime.get(k).status is RunStatus.COMPLETED for k in kids)
    assert runtime.session(view.session_id).messages[-1] == {"role": "assistant", "content": view.output}


def test_a_parallel_runs_its_branches_at_once_then_the_writer(runtime: Runtime, fake_openai: Any) -> None:
    key = f"par-{time.monotonic_ns()}"
    fake_openai.responder = by_agent(
        scout=researches(f"{key}:s", seconds=1.0), analyst=researches(f"{key}:a", seconds=1.0), author=writes
    )
    started = time.monotonic()
    stream = runtime.stream("two-researchers", "reefs")
    view = ended(runtime, stream.id)
    assert view.status is RunStatus.COMPLETED, view.error
    assert time.monotonic() - started < 6  # both researchers' 1 s tools ran side by side
    log = log_of(runtime, stream.id)
    assert_run_sound(log)
    outputs = outputs_of(log)
    assert outputs["tally"] == "tallied reefs" and outputs["gather"] == "notes on reefs"
    assert view.output.startswith("Piece: ### scout") and "### analyst" in view.output and "### tally" in view.output
    assert count(runtime, f"{key}:s") == 1 and count(runtime, f"{key}:a") == 1
    names = [n for kind, n in steps_of(log) if kind == "started"]
    assert names[0] == "gather" and set(names[1:4]) == {"scout", "analyst", "tally"} and names[4] == "write"


@pytest.mark.parametrize(
    ("message", "expected", "ran"),
    [("urgent: fire", "escalated (urgent)", "escalate"), ("hi", "filed (routine)", "file")],
)
def test_a_condition_runs_one_branch(runtime: Runtime, message: str, expected: str, ran: str) -> None:
    stream = runtime.stream("conditional", message)
    view = ended(runtime, stream.id)
    assert view.status is RunStatus.COMPLETED and view.output == expected
    other = {"escalate": "file", "file": "escalate"}[ran]
    assert count(runtime, f"{ran}:{stream.id}") == 1 and count(runtime, f"{other}:{stream.id}") == 0
    assert_run_sound(log_of(runtime, stream.id))


def test_a_loop_runs_until_its_condition_and_is_bounded(runtime: Runtime) -> None:
    stream = runtime.stream("looping", "go")
    view = ended(runtime, stream.id)
    assert view.status is RunStatus.COMPLETED and view.output == "xx"
    log = log_of(runtime, stream.id)
    assert_run_sound(log)
    assert list(outputs_of(log)) == ["grow@1", "grow@2", "grow@3", "again@1", "again@2"]
    assert count(runtime, f"grow:{stream.id}") == 5
    marks = [v for e in log if (v := nodes_of(e))]
    phases = [(v["node"], v["phase"], v.get("iteration")) for v in marks]
    assert phases[:3] == [
        ("loop-1", "started", None),
        ("loop-1", "iteration_started", 1),
        ("loop-1", "iteration_completed", 1),
    ]
    assert ("loop-1", "completed", None) in phases and phases[-1] == ("twice", "completed", None)
    continues = [v["should_continue"] for v in marks if v["phase"] == "iteration_completed"]
    assert continues == [True, True, False, True, False]


@pytest.mark.parametrize(("message", "desk"), [("my invoice is wrong", "billing"), ("it broke", "support")])
def test_a_router_runs_the_step_it_chooses(runtime: Runtime, message: str, desk: str) -> None:
    stream = runtime.stream("routing", message)
    view = ended(runtime, stream.id)
    assert view.status is RunStatus.COMPLETED and view.output == f"{desk} handled it"
    assert count(runtime, f"{desk}:{stream.id}") == 1
    assert sum(count(runtime, f"{d}:{stream.id}") for d in ("billing", "support")) == 1


def test_a_step_that_raises_fails_the_workflow_with_its_reason(runtime: Runtime) -> None:
    view = ended(runtime, runtime.stream("exploding", "boom").id)
    assert view.status is RunStatus.FAILED and view.error is not None
    assert view.error["message"] == "step 'explode' failed: ValueError: cannot handle 'boom'"
    assert_run_sound(log_of(runtime, view.run_id))


def test_an_approval_inside_a_step_pauses_the_workflow_and_continue_answers_it(
    runtime: Runtime, fake_openai: Any
) -> None:
    path = f"/tmp/wf-{time.monotonic_ns()}"

    def cleans(turn: int, message: str) -> FakeReply:
        if turn == 0:
            return FakeReply(text="", tool_calls=[ScriptedToolCall("delete_file", {"path": path}, "call_del")])
        return FakeReply(text="cleaned up")

    fake_openai.responder = by_agent(cleaner=cleans)
    stream = runtime.stream("approved-cleanup", "the attic")
    view = settled(runtime, stream.id)
    assert view.status is RunStatus.PAUSED
    kid = child_run_id(stream.id, "step:clean")
    assert [c.id for c in view.pending] == [f"{kid}:call_del"] and view.pending[0].run_id == kid
    assert count(runtime, f"delete_file:{path}") == 0
    runtime.continue_run(stream.id, [{"tool_call_id": f"{kid}:call_del", "confirmed": True}])
    view = ended(runtime, stream.id)
    assert view.status is RunStatus.COMPLETED and view.output == {"words": 2}
    assert count(runtime, f"delete_file:{path}") == 1
    log = log_of(runtime, stream.id)
    assert_run_sound(log)
    assert steps_of(log) == [
        ("started", "prepare"),
        ("finished", "prepare"),
        ("started", "clean"),
        ("finished", "clean"),  # suspended with the pause
        ("started", "clean"),  # opened again by the continue
        ("finished", "clean"),
        ("started", "report"),
        ("finished", "report"),
    ]


def test_stop_in_a_parallel_stops_every_branch(runtime: Runtime, fake_openai: Any) -> None:
    key = f"stop-{time.monotonic_ns()}"
    fake_openai.responder = by_agent(scout=researches(key, seconds=30.0))
    stream = runtime.stream("slow-parallel", "anything")
    kid = child_run_id(stream.id, "step:slow_scout")
    wait_for(lambda: count(runtime, key) == 1 and count(runtime, f"wait:{stream.id}") == 1, what="both branches")
    asked = time.monotonic()
    runtime.stop(stream.id)
    view = ended(runtime, stream.id, timeout=15)
    assert view.status is RunStatus.CANCELLED and time.monotonic() - asked < 10
    assert ended(runtime, kid, timeout=15).status is RunStatus.CANCELLED
    assert_run_sound(log_of(runtime, stream.id))
    assert_run_sound(log_of(runtime, kid))


def test_a_stopped_branch_ends_the_workflow_cancelled(runtime: Runtime, fake_openai: Any) -> None:
    key = f"branch-{time.monotonic_ns()}"
    fake_openai.responder = by_agent(scout=researches(key, seconds=30.0))
    stream = runtime.stream("slow-parallel", "anything")
    kid = child_run_id(stream.id, "step:slow_scout")
    wait_for(lambda: count(runtime, key) == 1, what="the scout's slow tool")
    runtime.redis.set(f"{runtime.settings.key_prefix}:test:count:go:{stream.id}", 1)  # the function step ends
    runtime.stop(kid)
    view = ended(runtime, stream.id, timeout=15)
    assert view.status is RunStatus.CANCELLED
    log = log_of(runtime, stream.id)
    assert_run_sound(log)
    assert any(e.data.get("name") == "step_stopped" for e in log)

"""``CeleryRunner``, the caller's drop-in for ``agents.Runner``: the same agents, the same result shape, the run on
the session's worker (tests/agents/openai_sdk.py); each compared with ``Runner`` in-process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from agents_celery.contrib.openai_agents import CeleryRunner
from agents_celery.errors import DecisionError, RunFailedError
from agents_celery.greenlets import run_coroutine
from agents_celery.testing import ScriptResponder

from .support.invariants import assert_run_sound
from .support.workers import Deployment
from .test_openai_agents import TRIAGE, WEATHER, _delete, in_process, module

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def runner(sdk_deployment: Deployment) -> Iterator[type[CeleryRunner]]:
    CeleryRunner.configure(sdk_deployment.runtime)
    yield CeleryRunner
    CeleryRunner.runtime = None


def _items(result: Any) -> list[tuple[str, Any]]:
    """A result's items: their type and what they say (ids aside)."""
    out = []
    for item in result.new_items:
        raw = item.raw_item
        said = raw.get("output") if isinstance(raw, dict) else getattr(raw, "arguments", None)
        if item.type == "message_output_item":
            said = "".join(c.text for c in raw.content)
        out.append((item.type, said))
    return out


def test_run_sync_gives_runner_s_result(runner: type[CeleryRunner], fake_openai: Any) -> None:
    agents = module(fake_openai)
    floor, calls = in_process(fake_openai, agents.weather, "Weather in London?", WEATHER)
    fake_openai.responder = ScriptResponder(WEATHER)
    before = fake_openai.calls
    result = runner.run_sync(agents.weather, "Weather in London?")
    assert fake_openai.calls - before == calls == 4
    assert result.final_output == floor.final_output
    assert _items(result) == _items(floor)
    assert result.last_agent is agents.weather and result.interruptions == []
    assert [i["type"] for i in result.to_input_list()[1:]] == [i["type"] for i in floor.to_input_list()[1:]]


def test_a_handoff_run_ends_with_the_agent_handed_to(runner: type[CeleryRunner], fake_openai: Any) -> None:
    agents = module(fake_openai)
    floor, _ = in_process(fake_openai, agents.triage, "Refund order A1.", TRIAGE)
    fake_openai.responder = ScriptResponder(TRIAGE)
    result = asyncio.run(runner.run(agents.triage, "Refund order A1."))
    assert result.last_agent is floor.last_agent is agents.billing
    assert _items(result) == _items(floor)
    assert [type(i).__name__ for i in result.new_items] == [type(i).__name__ for i in floor.new_items]


@pytest.mark.parametrize("approve", [True, False])
def test_to_state_approvals_continue_the_run_on_the_workers(
    runner: type[CeleryRunner], fake_openai: Any, approve: bool
) -> None:
    """``result.to_state()``, ``state.approve(item)`` / ``state.reject(item, ...)``, ``run_sync(agent, state)``:
    as with ``Runner``, the same output and items; the run is one run of ours, continued."""
    from agents import Runner

    agents = module(fake_openai)
    path = f"r-{approve}.txt"
    first, _ = in_process(fake_openai, agents.files, f"Delete {path}", _delete(path))
    state = first.to_state()
    (item,) = first.interruptions
    state.approve(item) if approve else state.reject(item, rejection_message="not that one")
    fake_openai.responder = ScriptResponder(_delete(path))
    floor = run_coroutine(Runner.run(agents.files, state))

    fake_openai.responder = ScriptResponder(_delete(path))
    paused = runner.run_sync(agents.files, f"Delete {path}")
    (asked,) = paused.interruptions
    assert (asked.tool_name, asked.raw_item.arguments) == ("delete_file", item.raw_item.arguments)
    ours = paused.to_state()
    ours.approve(asked) if approve else ours.reject(asked, rejection_message="not that one")
    fake_openai.responder = ScriptResponder(_delete(path))
    done = runner.run_sync(agents.files, ours)
    assert done.run_id == paused.run_id
    assert done.final_output == floor.final_output
    outputs = [i.raw_item["output"] for i in done.new_items if i.type == "tool_call_output_item"]
    assert outputs == [f"deleted {path}" if approve else "not that one"]
    assert _items(done) == _items(floor)


def test_undecided_interruptions_are_refused(runner: type[CeleryRunner], fake_openai: Any) -> None:
    agents = module(fake_openai)
    fake_openai.responder = ScriptResponder(_delete("u.txt"))
    paused = runner.run_sync(agents.files, "Delete u.txt")
    with pytest.raises(DecisionError, match="neither approved nor rejected"):
        runner.run_sync(agents.files, paused.to_state())
    assert runner.runtime is not None and runner.runtime.get(paused.run_id).status.value == "paused"


def _names(events: list[Any]) -> list[str]:
    return [getattr(e, "name", e.type) for e in events if e.type != "raw_response_event"]


def test_run_streamed_yields_the_sdk_s_own_events(runner: type[CeleryRunner], fake_openai: Any) -> None:
    from agents import Runner

    agents = module(fake_openai)

    async def floor() -> tuple[list[Any], Any]:
        got = Runner.run_streamed(agents.triage, "Refund order A1.")
        return [e async for e in got.stream_events()], got

    fake_openai.responder = ScriptResponder(TRIAGE)
    theirs, their_result = run_coroutine(floor())

    async def ours() -> tuple[list[Any], Any]:
        got = runner.run_streamed(agents.triage, "Refund order A1.")
        return [e async for e in got.stream_events()], got

    fake_openai.responder = ScriptResponder(TRIAGE)
    events, result = asyncio.run(ours())
    assert _names(events) == _names(theirs)
    assert [type(e).__name__ for e in events if e.type != "raw_response_event"] == [
        type(e).__name__ for e in theirs if e.type != "raw_response_event"
    ]
    deltas = "".join(e.data.delta for e in events if e.type == "raw_response_event" and hasattr(e.data, "delta"))
    assert "Refunded A1." in deltas
    assert result.is_complete and result.final_output == their_result.final_output == "Refunded A1."
    assert result.current_agent is agents.billing
    assert_run_sound(list(runner.runtime.get_stream(result.run_id).events()))  # type: ignore[union-attr]


def test_follow_reads_a_run_by_its_id(runner: type[CeleryRunner], fake_openai: Any) -> None:
    agents = module(fake_openai)
    fake_openai.responder = ScriptResponder(WEATHER)
    started = runner.run_streamed(agents.weather, "Weather in London?")

    async def follow() -> tuple[list[Any], Any]:
        got = runner.follow(agents.weather, started.run_id)
        return [e async for e in got.stream_events()], got

    events, followed = asyncio.run(follow())
    tools = [e.item.raw_item["output"] for e in events if getattr(e, "name", "") == "tool_output"]
    assert tools == ["London: 51.5,-0.1", "sunny at 51.5,-0.1", "noon in London"]
    assert followed.final_output == "It is sunny in London at noon."


def test_a_failed_run_raises_and_the_context_reaches_the_worker(runner: type[CeleryRunner], fake_openai: Any) -> None:
    agents = module(fake_openai)
    fake_openai.responder = ScriptResponder(WEATHER)  # four model calls, one turn allowed
    with pytest.raises(RunFailedError, match="MaxTurnsExceeded"):
        runner.run_sync(agents.weather, "Weather in London?", max_turns=1, context={"user": "u1"})
    with pytest.raises(Exception, match="must be JSON"):
        runner.run_sync(agents.weather, "Hi", context=object())


def test_structured_output_comes_back_as_the_output_type(runner: type[CeleryRunner], fake_openai: Any) -> None:
    agents = module(fake_openai)
    floor, _ = in_process(fake_openai, agents.point, "Where?", ['{"x": 3, "y": 4}'])
    fake_openai.responder = ScriptResponder(['{"x": 3, "y": 4}'])
    result = runner.run_sync(agents.point, "Where?")
    assert result.final_output == floor.final_output and isinstance(result.final_output, agents.Point)
    assert result.final_output_as(agents.Point, raise_if_incorrect_type=True).y == 4

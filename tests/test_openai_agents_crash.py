"""Agents SDK agents on our backend with their worker killed for real (SIGKILL): after each of the first three
journal writes, while the model streams, between a tool's body and its journal write (approved and rejected), with
instructions that change on every call; each run compared with the same agent run in-process by ``Runner.run``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing import ScriptResponder

from .conftest import TEST_REDIS_URL, all_events, status_is, wait_for
from .support.invariants import assert_run_sound
from .support.workers import Deployment
from .test_openai_agents import AGENTS, LONG_TEXT, WEATHER, WEATHER_TOOLS, Counts, _delete, _shown, in_process, module

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


@pytest.fixture(scope="module")
def crashable(fake_openai: Any, versions_seam: None) -> Iterator[Deployment]:
    """A deployment whose workers the tests kill (each test first tops it up to two live workers)."""
    dep = Deployment("sdkcrash", fake_openai.url, {"AGENTS_CELERY_AGENTS": AGENTS})
    try:
        yield dep
    finally:
        dep.close()


def alive(dep: Deployment, n: int = 2) -> int:
    """Start workers until ``n`` are alive; how many have died so far."""
    dead = sum(w.proc.poll() is not None for w in dep.workers)
    if len(dep.workers) - dead < n:
        dep.start(n - (len(dep.workers) - dead))
    return dead


def kill_live(dep: Deployment) -> None:
    """SIGKILL every live worker of ``dep`` (the one holding the run among them), then start two fresh ones."""
    for w in [w for w in dep.workers if w.proc.poll() is None]:
        w.kill()
    alive(dep)


def _crash_key(dep: Deployment, point: str) -> str:
    return f"{dep.prefix}:test:crash:{point}:any"


def _abandoned(events: list[Any]) -> bool:
    return any(e.type.value == "CUSTOM" and e.data.get("name") == "attempt_abandoned" for e in events)


@pytest.mark.parametrize("writes", [1, 2, 3])
def test_a_worker_killed_after_a_journal_write_replays_the_segment(
    crashable: Deployment, fake_openai: Any, writes: int
) -> None:
    agents = module(fake_openai)
    result, calls = in_process(fake_openai, agents.weather, "Weather in London?", WEATHER)
    dead = alive(crashable)
    rt = crashable.runtime
    fake_openai.responder = ScriptResponder(WEATHER)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, crashable, *WEATHER_TOOLS)
        r.set(_crash_key(crashable, "sdk_journal"), writes)
        before = fake_openai.calls
        stream = rt.stream("sdk_weather", "Weather in London?")
        events = all_events(rt, stream.id, timeout=90)
        assert r.get(_crash_key(crashable, "sdk_journal")) is None, "the crash never happened"
        assert sum(w.proc.poll() is not None for w in crashable.workers) == dead + 1
        assert stream.get().status == "completed", events[-1].data
        assert fake_openai.calls - before == calls == 4  # no journaled unit ran again
        assert_run_sound(events, tool_counts=dict.fromkeys(WEATHER_TOOLS, 1), counter=counts)
    assert stream.get().output == result.final_output
    state, _ = rt.store.load(stream.id)
    assert [_shown(i) for i in state.new_messages] == [_shown(i) for i in result.to_input_list()]
    assert _abandoned(events)
    assert [e.type.value for e in events].count("TOOL_CALL_RESULT") == 3


@pytest.mark.parametrize("writes", [1, 2, 3])
def test_the_approval_agent_killed_after_a_journal_write_replays_as_in_process(
    crashable: Deployment, fake_openai: Any, writes: int
) -> None:
    """The crash armed before the run: the Nth journal write counted across the segment that pauses for the
    approval and the one that runs the approved call."""
    from agents import Runner

    from agents_celery.greenlets import run_coroutine

    agents = module(fake_openai)
    path = f"k{writes}-{os.urandom(4).hex()}.txt"
    first, calls = in_process(fake_openai, agents.files, f"Delete {path}", _delete(path))
    state = first.to_state()
    state.approve(first.interruptions[0])
    fake_openai.responder = ScriptResponder(_delete(path))
    before = fake_openai.calls
    done = run_coroutine(Runner.run(agents.files, state))
    calls += fake_openai.calls - before

    dead = alive(crashable)
    rt = crashable.runtime
    fake_openai.responder = ScriptResponder(_delete(path))
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, crashable, f"sdk:delete_file:{path}")
        r.set(_crash_key(crashable, "sdk_journal"), writes)
        before = fake_openai.calls
        stream = rt.stream("sdk_files", f"Delete {path}")
        status_is(stream, "paused", 60, "the approval pause")
        (call,) = rt.store.load(stream.id)[0].pending
        assert (call.name, call.pause_reason) == ("delete_file", "confirmation_required")
        rt.continue_run(stream.id, [{"tool_call_id": call.id, "confirmed": True}])
        status_is(stream, "completed", 60, "the run's end")
        events = all_events(rt, stream.id)
        assert r.get(_crash_key(crashable, "sdk_journal")) is None, "the crash never happened"
        assert sum(w.proc.poll() is not None for w in crashable.workers) == dead + 1
        assert fake_openai.calls - before == calls == 2
        assert_run_sound(events, tool_counts={f"sdk:delete_file:{path}": 1}, counter=counts)
    assert stream.get().output == done.final_output
    stored, _ = rt.store.load(stream.id)
    assert [_shown(i) for i in stored.new_messages] == [_shown(i) for i in done.to_input_list()]
    (result,) = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert result.data["content"] == f"deleted {path}"
    assert _abandoned(events)


def test_a_worker_killed_while_the_model_streams_retries_that_unit_visibly(
    crashable: Deployment, fake_openai: Any
) -> None:
    alive(crashable)
    rt = crashable.runtime
    fake_openai.responder = ScriptResponder([LONG_TEXT], token_delay=0.02)
    before = fake_openai.calls
    stream = rt.stream("sdk_weather", "Talk.")
    for ev in stream.events():
        if ev.type.value == "TEXT_MESSAGE_CONTENT":
            break
    kill_live(crashable)  # mid-stream: the model unit was never journaled
    status_is(stream, "completed", 60, "the run's end")
    assert stream.get().output == LONG_TEXT
    assert fake_openai.calls - before == 2  # the unit in flight ran again; nothing else did
    events = all_events(rt, stream.id)
    assert_run_sound(events)  # the dead attempt's open message closed, the retry announced with its attempt
    kinds = [e.type.value for e in events]
    assert kinds.count("TEXT_MESSAGE_START") == 2 and kinds.count("TEXT_MESSAGE_END") == 2
    assert _abandoned(events)


@pytest.mark.parametrize("approve", [True, False])
def test_a_tool_killed_before_its_journal_write_pauses_as_may_have_run(
    crashable: Deployment, fake_openai: Any, approve: bool
) -> None:
    alive(crashable)
    rt = crashable.runtime
    fake_openai.responder = ScriptResponder(WEATHER)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, crashable, *WEATHER_TOOLS)
        r.set(_crash_key(crashable, "sdk_tool_body"), 1)
        before = fake_openai.calls
        stream = rt.stream("sdk_weather", "Weather in London?")
        status_is(stream, "paused", 60, "the may-have-run pause")
        state, _ = rt.store.load(stream.id)
        assert [(c.name, c.pause_reason) for c in state.pending] == [("get_lat_lng", "may_have_run")]
        assert counts("sdk:get_lat_lng") == 1
        call_id = state.pending[0].id
        rt.continue_run(stream.id, [{"tool_call_id": call_id, "confirmed": approve}])
        status_is(stream, "completed", 60, "the run's end")
        events = all_events(rt, stream.id)
        expected = {"sdk:get_lat_lng": 2 if approve else 1, "sdk:get_weather": 1, "sdk:get_time": 1}
        assert_run_sound(events, tool_counts=expected, counter=counts)
        assert fake_openai.calls - before == 4  # the first model call was journaled: replayed, not sent again
    results = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert [e.data["tool_call_id"] for e in results].count(call_id) == 1
    told = [
        m["content"]
        for m in fake_openai.requests[-3]["messages"]
        if m.get("role") == "tool" and m.get("tool_call_id") == call_id
    ]
    if approve:
        assert told == ["London: 51.5,-0.1"]
    else:  # the model is told, and the call is not run again
        rejected = "The user rejected this tool call; it did not run again."
        note = "The tool may or may not have completed in a crashed attempt; not re-run."  # the default note
        assert told == [f"{rejected} {note}"], told


def test_an_approved_call_killed_before_its_journal_write_keeps_the_approval(
    crashable: Deployment, fake_openai: Any
) -> None:
    alive(crashable)
    rt = crashable.runtime
    path = f"c-{os.urandom(4).hex()}.txt"
    fake_openai.responder = ScriptResponder(_delete(path))
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, crashable, f"sdk:delete_file:{path}")
        stream = rt.stream("sdk_files", f"Delete {path}")
        status_is(stream, "paused", 60, "the approval pause")
        r.set(_crash_key(crashable, "sdk_tool_body"), 1)
        rt.continue_run(stream.id)  # approved; the worker dies after the tool's body, before its journal write
        wait_for(lambda: rt.store.load(stream.id)[0].pending, timeout=60, what="the may-have-run pause")
        state, _ = rt.store.load(stream.id)
        assert [c.pause_reason for c in state.pending] == ["may_have_run"]
        alive(crashable)
        rt.continue_run(stream.id)  # run it again: the segment replays with its first approval still given
        status_is(stream, "completed", 60, "the run's end")
        events = all_events(rt, stream.id)
        assert_run_sound(events, tool_counts={f"sdk:delete_file:{path}": 2}, counter=counts)
    (result,) = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert result.data["content"] == f"deleted {path}"


def test_instructions_that_change_on_every_call_do_not_stop_a_killed_run_from_replaying(
    crashable: Deployment, fake_openai: Any
) -> None:
    """The instructions say the time, so every request differs between attempts: killed during the second model
    call, the run replays the first and completes (the unit is the same one: its kind, ordinal and name)."""
    alive(crashable)
    rt = crashable.runtime
    turns = [ScriptedTurn(tool_calls=[ScriptedToolCall("get_lat_lng", {"location": "London"})]), LONG_TEXT]
    fake_openai.responder = ScriptResponder(turns, token_delay=0.02)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, crashable, *WEATHER_TOOLS)
        before = fake_openai.calls
        stream = rt.stream("sdk_clock", "Weather in London?")
        for ev in stream.events():
            if ev.type.value == "TEXT_MESSAGE_CONTENT":
                break
        kill_live(crashable)
        wait_for(lambda: stream.get().status in ("completed", "failed"), timeout=60, what="the run's end")
        events = all_events(rt, stream.id)
        assert stream.get().status == "completed", events[-1].data
        assert_run_sound(events, tool_counts={"sdk:get_lat_lng": 1}, counter=counts)
        assert fake_openai.calls - before == 3  # the first call replayed; the second, killed, sent again
    firsts = [m["content"] for m in fake_openai.requests[-2]["messages"] if m["role"] == "system"]
    lasts = [m["content"] for m in fake_openai.requests[-1]["messages"] if m["role"] == "system"]
    assert firsts != lasts  # the instructions changed between the attempts
    assert _abandoned(events)
    assert stream.get().output == LONG_TEXT


def test_celery_runner_s_to_state_answers_a_call_that_may_have_run(crashable: Deployment, fake_openai: Any) -> None:
    """A call that may have run in a crashed attempt is one of ``CeleryRunner``'s interruptions too: approving it on
    ``to_state()`` runs it again, once, and the run goes on."""
    from agents_celery.contrib.openai_agents import CeleryRunner

    agents = module(fake_openai)
    alive(crashable)
    CeleryRunner.configure(crashable.runtime)
    try:
        fake_openai.responder = ScriptResponder(WEATHER)
        with redis.Redis.from_url(TEST_REDIS_URL) as r:
            counts = Counts(r, crashable, *WEATHER_TOOLS)
            r.set(_crash_key(crashable, "sdk_tool_body"), 1)
            paused = CeleryRunner.run_sync(agents.weather, "Weather in London?")
            (item,) = paused.interruptions
            assert (item.tool_name, paused.status) == ("get_lat_lng", "paused")
            state = paused.to_state()
            state.approve(item)
            alive(crashable)
            done = CeleryRunner.run_sync(agents.weather, state)
            assert done.final_output == "It is sunny in London at noon."
            assert counts("sdk:get_lat_lng") == 2 and counts("sdk:get_weather") == 1  # the approved run again
    finally:
        CeleryRunner.runtime = None


def test_resets_of_the_worker_s_redis_connections_while_the_model_streams_cost_no_run(
    deploy: Any, fake_openai: Any
) -> None:
    """A Redis blip (every worker connection forgotten by a proxy, twice, while the SDK's model streams: each fails
    on its next command) is not the run's failure (DESIGN rule 9): the step is given back, the model unit runs
    again, the run completes with a sound log."""
    from urllib.parse import urlparse

    from .support.faults import ResettingProxy

    upstream = urlparse(TEST_REDIS_URL)
    proxy = ResettingProxy((upstream.hostname or "127.0.0.1", upstream.port or 6379))
    own = deploy("sdkblip", {"AGENTS_CELERY_AGENTS": AGENTS})
    worker = own.worker({"AGENTS_CELERY_REDIS_URL": proxy.url(path=upstream.path or "/0")})
    rt = own.runtime
    try:
        fake_openai.responder = ScriptResponder([LONG_TEXT], token_delay=0.02)
        stream = rt.stream("sdk_weather", "Talk.")
        seen = 0
        for n in range(2):
            seen = wait_for(
                lambda s=seen: (
                    (c := sum(e.type.value == "TEXT_MESSAGE_CONTENT" for e in rt.store.log.read(stream.id))) >= s + 8
                    and c
                ),
                timeout=30,
                what=f"the model streaming before reset {n + 1}",
            )
            assert proxy.reset(half_open=True) > 0
        wait_for(lambda: stream.get().status.is_final, timeout=60, what="the run's end")
        view = stream.get()
        assert view.status.value == "completed", (view.error, worker.output()[-3000:])
        assert view.output == LONG_TEXT
        events = all_events(rt, stream.id)
        assert_run_sound(events)
        assert _abandoned(events)
    finally:
        worker.stop()
        proxy.close()


def test_two_calls_of_one_response_killed_between_them_each_run_once(crashable: Deployment, fake_openai: Any) -> None:
    """A model response asking for two tools: the worker killed after the first one's journal write (the second
    write: the model call's, then the first tool's); the replay returns the first from the journal and runs the
    second, in the same order (the SDK runs them one after another inside a segment)."""
    two = [
        ScriptedTurn(
            tool_calls=[
                ScriptedToolCall("get_lat_lng", {"location": "Oslo"}),
                ScriptedToolCall("get_weather", {"lat": 59.9, "lng": 10.7}),
            ]
        ),
        "Cold in Oslo.",
    ]
    agents = module(fake_openai)
    result, calls = in_process(fake_openai, agents.weather, "Weather in Oslo?", two)
    dead = alive(crashable)
    rt = crashable.runtime
    fake_openai.responder = ScriptResponder(two)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, crashable, *WEATHER_TOOLS)
        r.set(_crash_key(crashable, "sdk_journal"), 2)
        before = fake_openai.calls
        stream = rt.stream("sdk_weather", "Weather in Oslo?")
        events = all_events(rt, stream.id, timeout=90)
        assert sum(w.proc.poll() is not None for w in crashable.workers) == dead + 1
        assert stream.get().status.value == "completed", events[-1].data
        assert fake_openai.calls - before == calls == 2
        assert_run_sound(
            events, tool_counts={"sdk:get_lat_lng": 1, "sdk:get_weather": 1, "sdk:get_time": 0}, counter=counts
        )
    assert stream.get().output == result.final_output
    assert [e.data["content"] for e in events if e.type.value == "TOOL_CALL_RESULT"] == [
        "Oslo: 51.5,-0.1",
        "sunny at 59.9,10.7",
    ]
    assert _abandoned(events)

"""pydantic-ai agents on our backend (agents_celery.contrib.pydantic_ai): real workers, real Redis, pydantic-ai's
own OpenAIChatModel against the fake OpenAI server; each shape run in-process and on the backend, compared."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing import ScriptResponder

from .conftest import TEST_REDIS_URL, all_events, status_is, wait_for
from .support.invariants import assert_run_sound, counter_of
from .support.workers import Deployment

pytestmark = pytest.mark.timeout(120)

AGENTS = "tests.agents.pydantic_ai_agents"
#: Message fields that differ between two runs of the same conversation.
VOLATILE = {"timestamp", "run_id", "conversation_id", "provider_response_id", "provider_details", "metadata"}

LONG_TEXT = " ".join(f"token{i}" for i in range(120))

WEATHER = [
    ScriptedTurn(tool_calls=[ScriptedToolCall("get_lat_lng", {"location": "London"})]),
    ScriptedTurn(tool_calls=[ScriptedToolCall("get_weather", {"lat": 51.5, "lng": -0.1})]),
    "It is sunny in London.",
]


def module(fake_openai: Any) -> Any:
    os.environ.setdefault("FAKE_OPENAI_URL", fake_openai.url)
    import tests.agents.pydantic_ai_agents as agents

    return agents


def stripped(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: stripped(v) for k, v in data.items() if k not in VOLATILE}
    if isinstance(data, list):
        return [stripped(v) for v in data]
    return data


def in_process(fake_openai: Any, agent_name: str, message: str, turns: list[Any]) -> tuple[Any, list[Any], int]:
    """The agent run in this process (the floor): its output, its messages as JSON, the model calls it made."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    agents = module(fake_openai)
    agent = {"pai_weather": agents.weather, "pai_bank": agents.bank, "pai_files": agents.files}[agent_name]
    fake_openai.responder = ScriptResponder(turns)
    before = fake_openai.calls
    result = agent.run_sync(message)
    messages = ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json")
    return result.output, messages, fake_openai.calls - before


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[tuple[int, str]]:
    """agents_celery.testing.mcp_server (the mcp package's server) over streamable HTTP: its port and the key
    prefix it counts under."""
    from .test_mcp import Server

    prefix = f"paimcp-{os.urandom(4).hex()}"
    server = Server(prefix)
    try:
        yield server.port, prefix
    finally:
        server.kill()
        with redis.Redis.from_url(TEST_REDIS_URL) as r:
            for key in r.scan_iter(match=f"{prefix}:*"):
                r.delete(key)


@pytest.fixture(scope="module")
def shared(fake_openai: Any, mcp_server: tuple[int, str]) -> Iterator[Deployment]:
    """One worker of the module's own for the tests that kill nothing (tool counts are read as deltas)."""
    extra = {
        "AGENTS_CELERY_AGENTS": AGENTS,
        "PAI_MCP_PORT": str(mcp_server[0]),
        "AGENTS_CELERY_WEBHOOK_SECRET": "pai-webhook-secret",
        "AGENTS_CELERY_WEBHOOK_ALLOW": "127.0.0.1",
    }
    dep = Deployment("pai", fake_openai.url, extra)
    try:
        dep.start(1)
        yield dep
    finally:
        dep.close()


@pytest.fixture(scope="module")
def crashable(fake_openai: Any, mcp_server: tuple[int, str], versions_seam: None) -> Iterator[Deployment]:
    """A deployment whose workers the crash tests kill (each test first tops it up to two live workers)."""
    extra = {"AGENTS_CELERY_AGENTS": AGENTS, "PAI_MCP_PORT": str(mcp_server[0])}
    dep = Deployment("paicrash", fake_openai.url, extra)
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


class Counts:
    """The tool executions counted under a deployment's prefix since it was made."""

    def __init__(self, r: redis.Redis, dep: Deployment, *names: str) -> None:
        self.read = counter_of(r, dep.prefix)
        self.before = {name: self.read(name) for name in names}

    def __call__(self, name: str) -> int:
        return self.read(name) - self.before.get(name, 0)


WEATHER_TOOLS = ("pai:get_lat_lng", "pai:get_weather")


def test_weather_agent_runs_on_the_backend_as_in_process(shared: Deployment, fake_openai: Any) -> None:
    output, messages, calls = in_process(fake_openai, "pai_weather", "Weather in London?", WEATHER)
    rt = shared.runtime
    fake_openai.responder = ScriptResponder(WEATHER)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, shared, *WEATHER_TOOLS)
        before = fake_openai.calls
        stream = rt.stream("pai_weather", "Weather in London?")
        events = all_events(rt, stream.id)
        view = stream.get()
        assert view.status == "completed", events[-1].data
        assert view.output == output
        assert fake_openai.calls - before == calls
        state, _ = rt.store.load(stream.id)
        assert stripped(state.messages) == stripped(messages)
        assert state.usage["total_tokens"] > 0 and view.usage == state.usage
        assert_run_sound(events, tool_counts=dict.fromkeys(WEATHER_TOOLS, 1), counter=counts)
    kinds = [e.type.value for e in events]
    assert kinds.count("TOOL_CALL_RESULT") == 2
    assert "TEXT_MESSAGE_CONTENT" in kinds and "TOOL_CALL_ARGS" in kinds


def _crash_key(dep: Deployment, point: str) -> str:
    return f"{dep.prefix}:test:crash:{point}:any"


@pytest.mark.slow
@pytest.mark.parametrize("writes", [1, 2, 3])
def test_a_worker_killed_after_a_journal_write_replays_the_segment(
    crashable: Deployment, fake_openai: Any, writes: int
) -> None:
    output, messages, calls = in_process(fake_openai, "pai_weather", "Weather in London?", WEATHER)
    dead = alive(crashable)
    rt = crashable.runtime
    fake_openai.responder = ScriptResponder(WEATHER)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, crashable, *WEATHER_TOOLS)
        r.set(_crash_key(crashable, "journal"), writes)
        before = fake_openai.calls
        stream = rt.stream("pai_weather", "Weather in London?")
        events = all_events(rt, stream.id)
        assert r.get(_crash_key(crashable, "journal")) is None, "the crash never happened"
        assert sum(w.proc.poll() is not None for w in crashable.workers) == dead + 1
        view = stream.get()
        assert view.status == "completed", events[-1].data
        assert view.output == output
        assert fake_openai.calls - before == calls  # no journaled unit ran again
        state, _ = rt.store.load(stream.id)
        assert stripped(state.messages) == stripped(messages)
        assert_run_sound(events, tool_counts=dict.fromkeys(WEATHER_TOOLS, 1), counter=counts)
    assert any(e.type.value == "CUSTOM" and e.data.get("name") == "attempt_abandoned" for e in events)
    assert [e.type.value for e in events].count("TOOL_CALL_RESULT") == 2


@pytest.mark.slow
@pytest.mark.parametrize("approve", [True, False])
def test_a_tool_killed_before_its_journal_write_pauses_as_may_have_run(
    crashable: Deployment, fake_openai: Any, approve: bool
) -> None:
    alive(crashable)
    rt = crashable.runtime
    fake_openai.responder = ScriptResponder(WEATHER)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, crashable, *WEATHER_TOOLS)
        r.set(_crash_key(crashable, "tool_body"), 1)
        stream = rt.stream("pai_weather", "Weather in London?")
        status_is(stream, "paused", 30, "the may-have-run pause")
        state, _ = rt.store.load(stream.id)
        assert [(c.name, c.pause_reason) for c in state.pending] == [("get_lat_lng", "may_have_run")]
        assert counts("pai:get_lat_lng") == 1
        call_id = state.pending[0].id
        rt.continue_run(stream.id, [{"tool_call_id": call_id, "confirmed": approve}])
        status_is(stream, "completed", 30, "the run's end")
        events = all_events(rt, stream.id)
        expected = {"pai:get_lat_lng": 2 if approve else 1, "pai:get_weather": 1}
        assert_run_sound(events, tool_counts=expected, counter=counts)
    results = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert [e.data["tool_call_id"] for e in results].count(call_id) == 1
    if not approve:  # the model was told, as pydantic-ai tells it of a denied call, and asked for no other call
        told = [
            m["content"]
            for request in fake_openai.requests[-2:]
            for m in request["messages"]
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id
        ]
        rejected = "The user rejected this tool call; it did not run again."
        note = "The tool may or may not have completed in a crashed attempt; not re-run."  # the default note
        assert told == [f"{rejected} {note}"] * 2, told


@pytest.mark.slow
def test_an_approved_rerun_that_dies_with_its_worker_asks_again(crashable: Deployment, fake_openai: Any) -> None:
    """An approval authorises one execution: the tool's worker dies after its first two executions (before
    their journal writes), so the run pauses as "may have run" twice, one execution per approval."""
    rt = crashable.runtime
    fake_openai.responder = ScriptResponder(WEATHER)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, crashable, *WEATHER_TOOLS)
        alive(crashable)
        r.set(_crash_key(crashable, "tool_body"), 1)
        stream = rt.stream("pai_weather", "Weather in London?")
        for approval in (1, 2):
            wait_for(lambda: stream.get().status in ("paused", "completed"), timeout=60, what="a pause")
            assert stream.get().status == "paused", f"approval {approval - 1} ran the call more than once"
            (call,) = rt.store.load(stream.id)[0].pending
            assert (call.name, call.pause_reason) == ("get_lat_lng", "may_have_run")
            assert counts("pai:get_lat_lng") == approval
            alive(crashable)
            if approval == 1:
                r.set(_crash_key(crashable, "tool_body"), 1)  # the approved re-run dies too
            rt.continue_run(stream.id, [{"tool_call_id": call.id, "confirmed": True}])
        status_is(stream, "completed", 60, "the run's end")
        events = all_events(rt, stream.id)
        assert_run_sound(events, tool_counts={"pai:get_lat_lng": 3, "pai:get_weather": 1}, counter=counts)


def _delete(path: str) -> list[Any]:
    return [ScriptedTurn(tool_calls=[ScriptedToolCall("delete_file", {"path": path})]), "Done."]


@pytest.mark.parametrize("decision", ["approve", "edit", "reject"])
def test_a_tool_needing_approval_pauses_and_continues(shared: Deployment, fake_openai: Any, decision: str) -> None:
    from pydantic_ai import DeferredToolRequests, DeferredToolResults
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    agents = module(fake_openai)
    asked, edited = f"a-{decision}.txt", f"b-{decision}.txt"
    fake_openai.responder = ScriptResponder(_delete(asked))
    first = agents.files.run_sync(f"Delete {asked}", output_type=[str, DeferredToolRequests])
    assert isinstance(first.output, DeferredToolRequests)
    rt = shared.runtime
    fake_openai.responder = ScriptResponder(_delete(asked))
    stream = rt.stream("pai_files", f"Delete {asked}")
    status_is(stream, "paused", 30, "the approval pause")
    events = all_events(rt, stream.id)
    outcome = events[-1].data["outcome"]
    assert outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    assert interrupt["metadata"] == {"tool_name": "delete_file", "tool_args": {"path": asked}}
    assert "editedArgs" in interrupt["response_schema"]["properties"]
    call_id = interrupt["tool_call_id"]
    answer: dict[str, Any] = {"tool_call_id": call_id, "confirmed": decision != "reject"}
    if decision == "edit":
        answer["tool_args"] = {"path": edited}
    if decision == "reject":
        answer["confirmation_note"] = "keep it"
    rt.continue_run(stream.id, [answer])
    status_is(stream, "completed", 30, "the run's end")
    events = all_events(rt, stream.id)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        expected = {f"pai:delete_file:{asked}": int(decision == "approve"), f"pai:delete_file:{edited}": 0}
        if decision == "edit":
            expected = {f"pai:delete_file:{asked}": 0, f"pai:delete_file:{edited}": 1}
        assert_run_sound(events, tool_counts=expected, counter=counter_of(r, shared.prefix))
    (result,) = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
    wanted = {"approve": f"deleted {asked}", "edit": f"deleted {edited}", "reject": "keep it"}[decision]
    assert wanted in result.data["content"]
    if decision == "approve":  # the same conversation as in-process, resumed with the same decision
        fake_openai.responder = ScriptResponder(_delete(asked))
        results = DeferredToolResults(approvals={call_id: True})
        done = agents.files.run_sync(message_history=first.all_messages(), deferred_tool_results=results)
        state, _ = rt.store.load(stream.id)
        in_proc = ModelMessagesTypeAdapter.dump_python(done.all_messages(), mode="json")
        assert stripped(state.messages) == stripped(in_proc)
        assert stream.get().output == done.output


BANK = [
    ScriptedTurn(tool_calls=[ScriptedToolCall("customer_balance", {"include_pending": False})]),
    ScriptedTurn(tool_calls=[ScriptedToolCall("customer_balance", {"include_pending": True})]),
    ScriptedTurn(
        tool_calls=[ScriptedToolCall("final_result", {"support_advice": "All fine.", "block_card": False, "risk": 1})]
    ),
]


def test_structured_output_and_a_model_retry_as_in_process(shared: Deployment, fake_openai: Any) -> None:
    output, messages, calls = in_process(fake_openai, "pai_bank", "What is my balance?", BANK)
    rt = shared.runtime
    fake_openai.responder = ScriptResponder(BANK)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, shared, "pai:customer_balance")
        before = fake_openai.calls
        stream = rt.stream("pai_bank", "What is my balance?")
        events = all_events(rt, stream.id)
        assert stream.get().status == "completed", events[-1].data
        assert fake_openai.calls - before == calls == 3
        assert_run_sound(events, tool_counts={"pai:customer_balance": 2}, counter=counts)
    assert stream.get().output == output.model_dump(mode="json")
    assert events[-1].data["result"] == output.model_dump(mode="json")
    state, _ = rt.store.load(stream.id)
    assert stripped(state.messages) == stripped(messages)
    results = [e.data["content"] for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert len(results) == 3 and "include_pending must be true" in results[0]  # the retry, the balance, the output


def test_a_session_carries_the_pydantic_ai_history(shared: Deployment, fake_openai: Any) -> None:
    rt = shared.runtime
    fake_openai.responder = ScriptResponder(["Nice to meet you, Ada."])
    first = rt.stream("pai_weather", "My name is Ada.")
    wait_for(lambda: first.get().status == "completed", timeout=30, what="the first run")
    session = first.get().session_id
    fake_openai.responder = ScriptResponder(["Your name is Ada."])
    wait_for(lambda: rt.store.sessions.history(session), timeout=10, what="the session's history")
    second = rt.stream("pai_weather", "What is my name?", session_id=session)
    wait_for(lambda: second.get().status == "completed", timeout=30, what="the second run")
    sent = fake_openai.requests[-1]["messages"]
    said = [(m["role"], m.get("content")) for m in sent if m["role"] in ("user", "assistant")]
    assert said == [("user", "My name is Ada."), ("assistant", "Nice to meet you, Ada."), ("user", "What is my name?")]
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    # The session takes a run's messages just after its status reads completed (the next run waits for that).
    wait_for(lambda: len(rt.store.sessions.history(session)) == 4, timeout=10, what="the second run's messages")
    history = rt.store.sessions.history(session)
    assert len(ModelMessagesTypeAdapter.validate_python(history)) == 4  # stored as pydantic-ai's messages


def test_a_stop_while_the_model_streams_cancels_the_run(shared: Deployment, fake_openai: Any) -> None:
    import time

    rt = shared.runtime
    fake_openai.responder = ScriptResponder([" ".join(f"w{i}" for i in range(400))], token_delay=0.02)
    stream = rt.stream("pai_weather", "Talk for a while.")
    for ev in stream.events():
        if ev.type.value == "TEXT_MESSAGE_CONTENT":
            break
    t0 = time.monotonic()
    rt.stop(stream.id)
    status_is(stream, "cancelled", 10, "the cancelled run")
    assert time.monotonic() - t0 < 3
    events = all_events(rt, stream.id)
    assert events[-1].data["outcome"] == {"type": "cancelled"}
    assert_run_sound(events)


def test_a_journal_that_does_not_fit_fails_the_run_naming_the_unit(shared: Deployment, fake_openai: Any) -> None:
    import json

    from agents_celery.runtime.admission import idempotent_run_id

    rt = shared.runtime
    key = f"mismatch-{os.urandom(4).hex()}"
    run_id = idempotent_run_id(key, None)
    fake_openai.responder = ScriptResponder(WEATHER)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:  # the journal of an agent since renamed
        entry = {"name": "old_weather__model.request_stream", "ordinal": 0, "digest": "0" * 32, "result": None}
        r.hset(rt.store.keys.run(run_id).effects, "j:0:0", json.dumps(entry))
        before = fake_openai.calls
        stream = rt.stream("pai_weather", "Weather in London?", idempotency_key=key)
        assert stream.id == run_id
        events = all_events(rt, stream.id)
    assert stream.get().status == "failed"
    assert events[-1].data["code"] == "journal_mismatch"
    assert "'old_weather__model.request_stream'" in events[-1].data["message"]
    assert "'pai_weather__model.request_stream'" in events[-1].data["message"]
    assert fake_openai.calls == before  # nothing ran against a journal that does not fit


def kill_live(dep: Deployment) -> None:
    """SIGKILL every live worker of ``dep`` (the one holding the run among them: an idle one may keep connections
    to the same servers, so connections do not tell them apart), then start two fresh ones."""
    for w in [w for w in dep.workers if w.proc.poll() is None]:
        w.kill()
    alive(dep)


@pytest.mark.slow
def test_a_time_in_the_instructions_does_not_stop_a_killed_run_from_replaying(
    crashable: Deployment, fake_openai: Any
) -> None:
    """The instructions say the time, so every request's messages differ between attempts: killed during the
    second model request, the run replays the first and completes (the unit is the same one)."""
    alive(crashable)
    rt = crashable.runtime
    turns = [ScriptedTurn(tool_calls=[ScriptedToolCall("get_lat_lng", {"location": "London"})]), LONG_TEXT]
    fake_openai.responder = ScriptResponder(turns, token_delay=0.02)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, crashable, *WEATHER_TOOLS)
        stream = rt.stream("pai_clock", "Weather in London?")
        for ev in stream.events():
            if ev.type.value == "TEXT_MESSAGE_CONTENT":
                break
        kill_live(crashable)
        wait_for(lambda: stream.get().status in ("completed", "failed"), timeout=60, what="the run's end")
        events = all_events(rt, stream.id)
        assert stream.get().status == "completed", events[-1].data
        assert_run_sound(events, tool_counts={"pai:get_lat_lng": 1}, counter=counts)
    assert any(e.type.value == "CUSTOM" and e.data.get("name") == "attempt_abandoned" for e in events)
    assert stream.get().output == LONG_TEXT


def _mcp_count(mcp_server: tuple[int, str], name: str) -> int:
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        return int(r.get(f"{mcp_server[1]}:test:count:{name}") or 0)


def test_an_mcp_toolset_through_the_backend_lists_its_tools_once_per_segment(
    shared: Deployment, fake_openai: Any, mcp_server: tuple[int, str]
) -> None:
    rt = shared.runtime
    key = f"pai-{os.urandom(4).hex()}"
    turns = [
        ScriptedTurn(tool_calls=[ScriptedToolCall("count", {"key": key})]),
        ScriptedTurn(tool_calls=[ScriptedToolCall("count", {"key": key})]),
        "Counted twice.",
    ]
    fake_openai.responder = ScriptResponder(turns)
    listed = _mcp_count(mcp_server, "tools_list")
    stream = rt.stream("pai_mcp", "Count twice.")
    events = all_events(rt, stream.id)
    assert stream.get().status == "completed", events[-1].data
    assert stream.get().output == "Counted twice."
    assert _mcp_count(mcp_server, key) == 2
    assert _mcp_count(mcp_server, "tools_list") - listed == 1  # once for the segment's 3 model requests
    assert_run_sound(events)
    results = [e.data["content"] for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert results == [f"count {key}: 1", f"count {key}: 2"]


@pytest.mark.slow
def test_a_worker_killed_during_an_mcp_call_pauses_as_may_have_run(
    crashable: Deployment, fake_openai: Any, mcp_server: tuple[int, str]
) -> None:
    alive(crashable)
    rt = crashable.runtime
    key = f"pai-{os.urandom(4).hex()}"
    turns = [ScriptedTurn(tool_calls=[ScriptedToolCall("slow_count", {"key": key, "seconds": 3})]), "Counted."]
    fake_openai.responder = ScriptResponder(turns)
    stream = rt.stream("pai_mcp", "Count slowly.")
    wait_for(lambda: _mcp_count(mcp_server, key) == 1, timeout=30, what="the MCP call")
    kill_live(crashable)  # the worker in the call among them
    status_is(stream, "paused", 30, "the may-have-run pause")
    state, _ = rt.store.load(stream.id)
    assert [(c.name, c.pause_reason) for c in state.pending] == [("slow_count", "may_have_run")]
    rt.continue_run(stream.id)  # approve: run it again
    status_is(stream, "completed", 30, "the run's end")
    assert _mcp_count(mcp_server, key) == 2  # the killed call, and the approved re-run
    events = all_events(rt, stream.id)
    assert_run_sound(events)
    assert [e.data["content"] for e in events if e.type.value == "TOOL_CALL_RESULT"] == [f"slow count {key}: 2"]


def test_a_schedule_starts_and_a_webhook_reports_a_pydantic_ai_run(shared: Deployment, fake_openai: Any) -> None:
    from .test_webhooks import Receiver

    rt = shared.runtime
    fake_openai.responder = ScriptResponder(["Tick handled."])
    made = rt.schedule("pai_weather", "tick", every=3600, name="pai-hourly")
    try:
        assert made.next_at is not None
        rt.fire_schedules(made.next_at)
        runs = wait_for(
            lambda: [r for r in rt.runs(agent_id="pai_weather", limit=50).runs if r.schedule_id == made.schedule_id],
            timeout=10,
            what="the scheduled run",
        )
        (run,) = runs
        wait_for(lambda: rt.get_stream(run.run_id).get().status == "completed", timeout=30, what="its end")
        assert rt.get_stream(run.run_id).get().output == "Tick handled."
    finally:
        rt.delete_schedule(made.schedule_id)
    receiver = Receiver()
    try:
        stream = rt.stream("pai_weather", "hi", webhook_url=receiver.url)
        (taken,) = wait_for(lambda: receiver.accepted("completed"), timeout=30, what="the webhook")
        assert taken.data["run_id"] == stream.id and taken.data["output"] == "Tick handled."
        assert taken.data["agent_id"] == "pai_weather"
    finally:
        receiver.close()


@pytest.mark.slow
def test_a_worker_killed_while_the_model_streams_retries_that_unit_visibly(
    crashable: Deployment, fake_openai: Any
) -> None:
    alive(crashable)
    rt = crashable.runtime
    text = " ".join(f"w{i}" for i in range(120))
    fake_openai.responder = ScriptResponder([text], token_delay=0.02)
    before = fake_openai.calls
    stream = rt.stream("pai_weather", "Talk.")
    for ev in stream.events():
        if ev.type.value == "TEXT_MESSAGE_CONTENT":
            break
    kill_live(crashable)  # mid-stream: the model unit was never journaled
    status_is(stream, "completed", 60, "the run's end")
    assert stream.get().output == text
    assert fake_openai.calls - before == 2  # the unit in flight ran again; nothing else did
    events = all_events(rt, stream.id)
    assert_run_sound(events)  # the dead attempt's open message closed, the retry announced with its attempt
    kinds = [e.type.value for e in events]
    assert kinds.count("TEXT_MESSAGE_START") == 2 and kinds.count("TEXT_MESSAGE_END") == 2


@pytest.mark.slow
def test_an_approved_call_killed_before_its_journal_write_keeps_the_approval(
    crashable: Deployment, fake_openai: Any
) -> None:
    alive(crashable)
    rt = crashable.runtime
    path = f"c-{os.urandom(4).hex()}.txt"
    fake_openai.responder = ScriptResponder(_delete(path))
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, crashable, f"pai:delete_file:{path}")
        stream = rt.stream("pai_files", f"Delete {path}")
        status_is(stream, "paused", 30, "the approval pause")
        r.set(_crash_key(crashable, "tool_body"), 1)
        rt.continue_run(stream.id)  # approved; the worker dies after the tool's body, before its journal write
        wait_for(lambda: rt.store.load(stream.id)[0].pending, timeout=30, what="the may-have-run pause")
        state, _ = rt.store.load(stream.id)
        assert [c.pause_reason for c in state.pending] == ["may_have_run"]
        rt.continue_run(stream.id)  # run it again: the segment replays with its first approval still given
        status_is(stream, "completed", 30, "the run's end")
        events = all_events(rt, stream.id)
        assert_run_sound(events, tool_counts={f"pai:delete_file:{path}": 2}, counter=counts)
    (result,) = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert result.data["content"] == f"deleted {path}"

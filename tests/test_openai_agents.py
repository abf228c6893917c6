"""OpenAI Agents SDK agents on our backend (agents_celery.contrib.openai_agents): real workers, real Redis, the SDK's
own OpenAIChatCompletionsModel against the fake OpenAI server; each shape run in-process with ``Runner.run`` and on
the backend, compared (output, model calls, each tool once)."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pytest
import redis

from agents_celery.greenlets import run_coroutine
from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing import ScriptResponder

from .conftest import TEST_REDIS_URL, all_events, status_is, wait_for
from .support.invariants import assert_run_sound, counter_of
from .support.workers import Deployment

pytestmark = pytest.mark.timeout(120)

AGENTS = "tests.agents.openai_sdk"

WEATHER = [
    ScriptedTurn(tool_calls=[ScriptedToolCall("get_lat_lng", {"location": "London"})]),
    ScriptedTurn(tool_calls=[ScriptedToolCall("get_weather", {"lat": 51.5, "lng": -0.1})]),
    ScriptedTurn(tool_calls=[ScriptedToolCall("get_time", {"city": "London"})]),
    "It is sunny in London at noon.",
]
WEATHER_TOOLS = ("sdk:get_lat_lng", "sdk:get_weather", "sdk:get_time")


def module(fake_openai: Any) -> Any:
    os.environ.setdefault("FAKE_OPENAI_URL", fake_openai.url)
    import tests.agents.openai_sdk as agents

    return agents


def in_process(fake_openai: Any, agent: Any, message: Any, turns: list[Any]) -> tuple[Any, int]:
    """The agent run in this process with the SDK's own ``Runner.run`` (the floor): its result and its model calls."""
    from agents import Runner

    fake_openai.responder = ScriptResponder(turns)
    before = fake_openai.calls
    result = run_coroutine(Runner.run(agent, message))  # one loop for every in-process run: the module's clients
    return result, fake_openai.calls - before


@pytest.fixture
def shared(sdk_deployment: Deployment) -> Deployment:
    """The session's worker serving tests/agents/openai_sdk.py (tests/conftest.py)."""
    return sdk_deployment


class Counts:
    """The tool executions counted under a deployment's prefix since it was made."""

    def __init__(self, r: redis.Redis, dep: Deployment, *names: str) -> None:
        self.read = counter_of(r, dep.prefix)
        self.before = {name: self.read(name) for name in names}

    def __call__(self, name: str) -> int:
        return self.read(name) - self.before.get(name, 0)


def test_a_tool_agent_runs_on_the_backend_as_in_process(shared: Deployment, fake_openai: Any) -> None:
    agents = module(fake_openai)
    result, calls = in_process(fake_openai, agents.weather, "Weather in London?", WEATHER)
    rt = shared.runtime
    fake_openai.responder = ScriptResponder(WEATHER)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, shared, *WEATHER_TOOLS)
        before = fake_openai.calls
        stream = rt.stream("sdk_weather", "Weather in London?")
        events = all_events(rt, stream.id)
        view = stream.get()
        assert view.status == "completed", events[-1].data
        assert fake_openai.calls - before == calls == 4
        assert_run_sound(events, tool_counts=dict.fromkeys(WEATHER_TOOLS, 1), counter=counts)
    assert view.output == result.final_output
    state, _ = rt.store.load(stream.id)
    assert [i.get("type") for i in state.new_messages] == [i.get("type", "message") for i in result.to_input_list()]
    results = [e.data["content"] for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert results == ["London: 51.5,-0.1", "sunny at 51.5,-0.1", "noon in London"]
    text = "".join(e.data["delta"] for e in events if e.type.value == "TEXT_MESSAGE_CONTENT")
    assert text == "It is sunny in London at noon."


def _delete(path: str) -> list[Any]:
    return [ScriptedTurn(tool_calls=[ScriptedToolCall("delete_file", {"path": path})]), "Done."]


@pytest.mark.parametrize("decision", ["approve", "edit", "reject"])
def test_an_approval_agent_pauses_and_continues_as_in_process(
    shared: Deployment, fake_openai: Any, decision: str
) -> None:
    from agents import Runner

    agents = module(fake_openai)
    asked, edited = f"a-{decision}-{os.urandom(3).hex()}.txt", f"b-{decision}.txt"
    first, calls = in_process(fake_openai, agents.files, f"Delete {asked}", _delete(asked))
    (item,) = first.interruptions
    state = first.to_state()
    if decision == "reject":
        state.reject(item, rejection_message="keep it")
    else:
        state.approve(item)
    fake_openai.responder = ScriptResponder(_delete(asked))
    before = fake_openai.calls
    done = run_coroutine(Runner.run(agents.files, state))
    calls += fake_openai.calls - before

    rt = shared.runtime
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, shared, f"sdk:delete_file:{asked}", f"sdk:delete_file:{edited}")
        fake_openai.responder = ScriptResponder(_delete(asked))
        before = fake_openai.calls
        stream = rt.stream("sdk_files", f"Delete {asked}")
        status_is(stream, "paused", 30, "the approval pause")
        events = all_events(rt, stream.id)
        (interrupt,) = events[-1].data["outcome"]["interrupts"]
        assert interrupt["metadata"] == {"tool_name": "delete_file", "tool_args": {"path": asked}}
        assert interrupt["tool_call_id"] == item.raw_item.call_id
        answer: dict[str, Any] = {"tool_call_id": interrupt["tool_call_id"], "confirmed": decision != "reject"}
        if decision == "edit":
            answer["tool_args"] = {"path": edited}
        if decision == "reject":
            answer["confirmation_note"] = "keep it"
        rt.continue_run(stream.id, [answer])
        status_is(stream, "completed", 30, "the run's end")
        events = all_events(rt, stream.id)
        assert fake_openai.calls - before == calls == 2
        ran = {"approve": {asked: 1, edited: 0}, "edit": {asked: 0, edited: 1}, "reject": {asked: 0, edited: 0}}
        expected = {f"sdk:delete_file:{path}": n for path, n in ran[decision].items()}
        assert_run_sound(events, tool_counts=expected, counter=counts)
    assert stream.get().output == done.final_output
    (result,) = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
    wanted = {"approve": f"deleted {asked}", "edit": f"deleted {edited}", "reject": "keep it"}[decision]
    assert result.data["content"] == wanted
    if decision != "edit":  # the same conversation as in-process, resumed with the same decision
        stored, _ = rt.store.load(stream.id)
        assert [_shown(i) for i in stored.new_messages] == [_shown(i) for i in done.to_input_list()]


def _shown(item: dict[str, Any]) -> Any:
    """What an item says, its ids and provider data aside."""
    keep = ("role", "name", "arguments", "output", "call_id")
    content = item.get("content")
    text = content if isinstance(content, str) else [c.get("text") for c in content or []]
    return (item.get("type", "message"), *(item.get(k) for k in keep), text)


TRIAGE = [
    ScriptedTurn(tool_calls=[ScriptedToolCall("transfer_to_billing_agent", {})]),
    ScriptedTurn(tool_calls=[ScriptedToolCall("refund", {"order": "A1"})]),
    "Refunded A1.",
]


def test_a_handoff_agent_runs_as_in_process_and_shows_the_agent_changing(shared: Deployment, fake_openai: Any) -> None:
    agents = module(fake_openai)
    result, calls = in_process(fake_openai, agents.triage, "Refund order A1.", TRIAGE)
    assert result.last_agent is agents.billing
    rt = shared.runtime
    fake_openai.responder = ScriptResponder(TRIAGE)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        counts = Counts(r, shared, "sdk:refund:A1")
        before = fake_openai.calls
        stream = rt.stream("sdk_triage", "Refund order A1.")
        events = all_events(rt, stream.id)
        assert stream.get().status == "completed", events[-1].data
        assert fake_openai.calls - before == calls == 3
        assert_run_sound(events, tool_counts={"sdk:refund:A1": 1}, counter=counts)
    assert stream.get().output == result.final_output == "Refunded A1."
    (moved,) = [e.data["value"] for e in events if e.type.value == "CUSTOM" and e.data.get("name") == "handoff"]
    transfer = next(e.data["tool_call_id"] for e in events if e.type.value == "TOOL_CALL_START")
    assert moved == {"from": "sdk_triage", "to": "Billing agent", "tool_call_id": transfer}
    results = [e.data["content"] for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert results == [json.dumps({"assistant": "Billing agent"}), "refunded A1"]
    stored, _ = rt.store.load(stream.id)
    assert [_shown(i) for i in stored.new_messages] == [_shown(i) for i in result.to_input_list()]


def test_structured_output_is_the_object_and_its_schema_is_listed(shared: Deployment, fake_openai: Any) -> None:
    agents = module(fake_openai)
    turns = ['{"x": 1, "y": 2}']
    result, _ = in_process(fake_openai, agents.point, "Where?", turns)
    rt = shared.runtime
    fake_openai.responder = ScriptResponder(turns)
    stream = rt.stream("sdk_point", "Where?")
    events = all_events(rt, stream.id)
    assert stream.get().output == result.final_output.model_dump() == {"x": 1, "y": 2}
    assert events[-1].data["result"] == {"x": 1, "y": 2}
    manifest = rt.agent_manifest("sdk_point")
    assert manifest["framework"] == "openai-agents"
    assert manifest["output_schema"]["properties"].keys() == {"x", "y"}


def test_the_agents_are_listed_with_their_tools(shared: Deployment, fake_openai: Any) -> None:
    rt = shared.runtime
    names = [m["name"] for m in rt.agents()]
    sdk = ["sdk_weather", "sdk_clock", "sdk_files", "Billing_agent", "sdk_triage", "sdk_point"]
    assert [n for n in names if n in sdk] == sdk  # in the order the module defines them
    files = rt.agent_manifest("sdk_files")
    tools = {t["name"]: t for t in files["tools"]}
    assert tools["delete_file"]["requires_confirmation"] is True
    assert tools["list_files"]["requires_confirmation"] is False
    assert tools["delete_file"]["parameters"]["properties"] == {"path": {"title": "Path", "type": "string"}}
    assert rt.agent_manifest("sdk_triage")["handoffs"] == ["Billing agent"]


def test_a_journal_that_does_not_fit_fails_the_run_naming_the_unit(shared: Deployment, fake_openai: Any) -> None:
    from agents_celery.runtime.admission import idempotent_run_id

    rt = shared.runtime
    key = f"mismatch-{os.urandom(4).hex()}"
    run_id = idempotent_run_id(key, None)
    fake_openai.responder = ScriptResponder(WEATHER)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:  # the journal of an agent since renamed
        entry = {"name": "old_weather.model", "ordinal": 0, "digest": "0" * 32, "result": None}
        r.hset(rt.store.keys.run(run_id).effects, "j:0:0", json.dumps(entry))
        before = fake_openai.calls
        stream = rt.stream("sdk_weather", "Weather in London?", idempotency_key=key)
        events = all_events(rt, stream.id)
    assert stream.get().status == "failed"
    assert events[-1].data["code"] == "journal_mismatch"
    assert "'old_weather.model'" in events[-1].data["message"]
    assert "'sdk_weather.model'" in events[-1].data["message"]
    assert fake_openai.calls == before  # nothing ran against a journal that does not fit


LONG_TEXT = " ".join(f"token{i}" for i in range(200))


def test_a_stop_while_the_model_streams_cancels_the_run(shared: Deployment, fake_openai: Any) -> None:
    rt = shared.runtime
    fake_openai.responder = ScriptResponder([LONG_TEXT], token_delay=0.05)
    stream = rt.stream("sdk_weather", "Talk.")
    for ev in stream.events():
        if ev.type.value == "TEXT_MESSAGE_CONTENT":
            break
    rt.stop(stream.id)
    status_is(stream, "cancelled", 15, "the cancelled end")
    events = all_events(rt, stream.id)
    assert_run_sound(events)
    said = "".join(e.data["delta"] for e in events if e.type.value == "TEXT_MESSAGE_CONTENT")
    assert said and len(said) < len(LONG_TEXT)  # what was said so far is kept, the rest never came


def test_a_session_carries_the_sdk_items(shared: Deployment, fake_openai: Any) -> None:
    rt = shared.runtime
    session = f"sdk-session-{os.urandom(4).hex()}"
    fake_openai.responder = ScriptResponder(WEATHER)
    first = rt.stream("sdk_weather", "Weather in London?", session_id=session)
    all_events(rt, first.id)
    assert first.get().status == "completed"
    fake_openai.responder = ScriptResponder(["You asked about London."])
    second = rt.stream("sdk_weather", "What did I ask?", session_id=session)
    all_events(rt, second.id)
    assert second.get().output == "You asked about London."
    sent = fake_openai.requests[-1]["messages"]
    texts = [m.get("content") for m in sent if m.get("role") == "user"]
    assert texts == ["Weather in London?", "What did I ask?"]
    assert [m["role"] for m in sent].count("tool") == 3  # the first run's tool results are history too


PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(64)).decode()


def test_the_agent_is_given_images_the_client_s_context_and_a_session_of_our_own_agent(
    shared: Deployment, fake_openai: Any
) -> None:
    """A session begun by one of our own agents (``fake``) goes on with an SDK agent: the SDK's model is sent the
    earlier turn, the client's context as a developer message, and the new message's image as an image part."""
    rt = shared.runtime
    session = f"sdk-mixed-{os.urandom(4).hex()}"
    fake_openai.responder = ScriptResponder(["Earlier answer."])
    first = rt.stream("fake", "Earlier question.", session_id=session)
    all_events(rt, first.id)
    assert first.get().output == "Earlier answer."
    fake_openai.responder = ScriptResponder(["A cat."])
    seen = len(fake_openai.requests)
    parts = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": PNG}}]
    context = [{"description": "page", "value": "the zoo"}]
    second = rt.stream("sdk_weather", parts, session_id=session, client={"context": context})
    events = all_events(rt, second.id)
    assert second.get().output == "A cat.", events[-1].data
    sent = fake_openai.requests[seen]["messages"]
    texts = [(m["role"], m["content"] if isinstance(m["content"], str) else "parts") for m in sent]
    assert texts == [
        ("system", "Use the tools to answer."),
        ("developer", "Context from the client:\n- page: the zoo"),
        ("user", "Earlier question."),
        ("assistant", "Earlier answer."),
        ("user", "parts"),
    ], texts
    image = [p for p in sent[-1]["content"] if p["type"] == "image_url"]
    assert image and image[0]["image_url"]["url"] == PNG
    asked = next(m["content"] for m in rt.get_stream(second.id).get().messages if m["role"] == "user")
    assert asked[1]["type"] == "image_url" and "ref" in asked[1]  # the image stored once, beside the run


def test_the_client_s_own_tool_pauses_the_run_for_its_answer(shared: Deployment, fake_openai: Any) -> None:
    """A tool the client runs itself (AG-UI's frontend tools, the Responses API's ``function`` tools) is offered to
    the SDK agent's model beside its own; a call of it pauses the run (``client_tool``) until the client answers with
    its result, which the model is then shown."""
    rt = shared.runtime
    spec = {
        "name": "pick_color",
        "description": "Ask the user for a color.",
        "parameters": {"type": "object", "properties": {"prompt": {"type": "string"}}},
    }
    turns = [ScriptedTurn(tool_calls=[ScriptedToolCall("pick_color", {"prompt": "Which?"})]), "Blue it is."]
    fake_openai.responder = ScriptResponder(turns)
    seen = len(fake_openai.requests)
    stream = rt.stream("sdk_weather", "Pick a color with me.", client_tools=[spec])
    wait_for(lambda: stream.get().status.value == "paused", timeout=30, what="the pause for the client's answer")
    offered = [t["function"]["name"] for t in fake_openai.requests[seen]["tools"]]
    assert offered == ["get_lat_lng", "get_weather", "get_time", "pick_color"]
    (call,) = rt.store.load(stream.id)[0].pending
    assert (call.name, call.pause_reason, call.args) == ("pick_color", "client_tool", {"prompt": "Which?"})
    paused = all_events(rt, stream.id)[-1].data["outcome"]
    assert paused == {"type": "success", "pending_tool_call_ids": [call.id]}
    rt.continue_run(stream.id, [{"tool_call_id": call.id, "result": "blue"}])
    wait_for(lambda: stream.get().status.value == "completed", timeout=30, what="the run's end")
    assert stream.get().output == "Blue it is."
    told = [m["content"] for m in fake_openai.requests[-1]["messages"] if m.get("role") == "tool"]
    assert told == ["blue"]
    events = rt.store.log.read(stream.id)  # the whole log (a reader stops at the first segment's end)
    assert_run_sound(events)
    assert [e.data["content"] for e in events if e.type.value == "TOOL_CALL_RESULT"] == ["blue"]

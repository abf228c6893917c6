"""What a response says of itself is right (issue #38, point 5), read with the official ``openai`` SDK: its own
``usage`` (also on the streamed ``response.completed``), ``output_text`` that is the answer, ``previous_response_id``
of an older response refused, ``input_items`` in pages, ``response.created`` of a foreground stream
``in_progress``, and replays that do not depend on the manifest deployed now. A live Flask API in a thread, the
session's real worker, real Redis, the fake OpenAI server as the agent's model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from agents_celery import Runtime, ScriptedToolCall, ScriptedTurn
from agents_celery.http.responses.render import parse_response_id

from .test_responses import MATH, MathResponse, Server, check_sequence, events_of

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def server(fast_settings: Any, worker: Any) -> Iterator[Server]:
    found = Server(Runtime(settings=fast_settings))
    yield found
    found.close()


@pytest.fixture
def client(server: Server) -> openai.OpenAI:
    return server.client()


WEATHER = {
    "type": "function",
    "name": "lookup_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def run_of(response_id: str) -> str:
    parsed = parse_response_id(response_id)
    assert parsed is not None
    return parsed[0]


def weather_round(client: openai.OpenAI, script: Any) -> tuple[Any, Any]:
    """A response that pauses for the client's function call, and the one that answers it (the run completes)."""
    script(
        ScriptedTurn(tool_calls=[ScriptedToolCall("lookup_weather", {"city": "Oslo"}, "call_w1")]),
        "It is sunny in Oslo, twenty one degrees, a fine day for a walk.",
    )
    first = client.responses.create(model="fake", input="weather in Oslo?", tools=[WEATHER])  # type: ignore[list-item]
    (call,) = [i for i in first.output if i.type == "function_call"]
    answer = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}
    second = client.responses.create(model="fake", previous_response_id=first.id, input=[answer], tools=[WEATHER])  # type: ignore[list-item]
    return first, second


def test_usage_is_each_response_s_own_also_when_streamed(
    server: Server, client: openai.OpenAI, script: Any, fast_settings: Any
) -> None:
    script(
        ScriptedTurn(tool_calls=[ScriptedToolCall("lookup_weather", {"city": "Oslo"}, "call_w1")]),
        "It is sunny in Oslo, twenty one degrees, a fine day for a walk.",
    )
    first = client.responses.create(model="fake", input="weather in Oslo?", tools=[WEATHER])  # type: ignore[list-item]
    (call,) = [i for i in first.output if i.type == "function_call"]
    answer = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}
    live = events_of(
        client.responses.create(
            model="fake",
            previous_response_id=first.id,
            input=[answer],  # type: ignore[list-item]
            tools=[WEATHER],  # type: ignore[list-item]
            stream=True,
        )
    )
    completed = live[-1]
    assert completed.type == "response.completed" and completed.response.usage is not None
    assert all(e.response.usage is None for e in live[:-1] if hasattr(e, "response"))
    second = client.responses.retrieve(completed.response.id)
    total = Runtime(settings=fast_settings).get(run_of(first.id)).usage
    assert first.usage is not None and second.usage is not None
    assert first.usage.total_tokens > 0 and second.usage.total_tokens > 0
    # each response its own: together they are the run's (today each repeated the run's running total)
    assert first.usage.input_tokens + second.usage.input_tokens == total["prompt_tokens"]
    assert first.usage.output_tokens + second.usage.output_tokens == total["completion_tokens"]
    assert first.usage.total_tokens + second.usage.total_tokens == total["total_tokens"]
    assert client.responses.retrieve(first.id).usage == first.usage  # unchanged by the run going on
    assert completed.response.usage == second.usage
    replay = events_of(client.responses.retrieve(second.id, stream=True))
    assert [e.model_dump() for e in replay] == [e.model_dump() for e in live]  # the same on every replay


def test_output_text_is_the_answer_not_the_answer_sent_back(client: openai.OpenAI, fake_openai: Any) -> None:
    """An answer that failed the schema (an output retry) is not the output: ``output_text`` is the JSON answer,
    so ``json.loads(response.output_text)`` works, as with OpenAI's."""
    from agents_celery.output import RETRY_PREFIX
    from agents_celery.testing.openai_server import FakeReply

    def answer(request: dict[str, Any]) -> FakeReply:
        retried = any(str(m.get("content", "")).startswith(RETRY_PREFIX) for m in request["messages"])
        return FakeReply(text=MATH.model_dump_json() if retried else "Let me think.")

    fake_openai.responder = answer
    parsed = client.responses.parse(model="fake", input="solve 8x + 31 = 2", text_format=MathResponse)
    assert parsed.output_parsed == MATH
    assert MathResponse.model_validate(json.loads(parsed.output_text)) == MATH
    assert [i.type for i in parsed.output] == ["reasoning", "message"]
    assert parsed.output[0].content is not None and parsed.output[0].content[0].text == "Let me think."
    assert client.responses.retrieve(parsed.id).output_text == parsed.output_text
    with client.responses.stream(model="fake", input="solve 8x + 31 = 2", text_format=MathResponse) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert final.output_parsed == MATH and json.loads(final.output_text) == MATH.model_dump()
    texts = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(texts) == "Let me think." + MATH.model_dump_json()  # what was streamed stays true


def test_previous_response_id_of_an_older_response_of_the_newest_run_is_409(
    server: Server, client: openai.OpenAI, script: Any, fast_settings: Any
) -> None:
    first, second = weather_round(client, script)
    assert second.status == "completed" and run_of(second.id) == run_of(first.id)
    runtime = Runtime(settings=fast_settings)
    session = runtime.get(run_of(first.id)).session_id
    before = [r.run_id for r in runtime.runs(session_id=session).runs]
    script("should not be asked")
    with pytest.raises(openai.ConflictError) as refused:  # as the docs say: only the newest response goes on
        client.responses.create(model="fake", input="and tomorrow?", previous_response_id=first.id)
    assert "newest" in refused.value.message
    assert refused.value.response.headers.get("x-should-retry") == "false"
    assert [r.run_id for r in runtime.runs(session_id=session).runs] == before  # nothing started
    script("Tomorrow too.")
    after = client.responses.create(model="fake", input="and tomorrow?", previous_response_id=second.id)
    assert after.output_text == "Tomorrow too." and after.previous_response_id == second.id


def test_input_items_are_paged_newest_first(client: openai.OpenAI, script: Any) -> None:
    script("Noted.")
    history = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": "four"},
        {"role": "user", "content": "five"},
    ]
    made = client.responses.create(model="fake", input=history)  # type: ignore[arg-type]
    texts = ["Be brief.", "one", "two", "three", "four", "five"]
    everything = client.responses.input_items.list(made.id, limit=100)
    assert [i.content[0].text for i in everything.data] == texts[::-1]  # desc by default, as OpenAI
    page = client.responses.input_items.list(made.id, limit=2)
    assert [i.content[0].text for i in page.data] == ["five", "four"] and page.has_more
    extra = page.model_extra or {}
    assert extra["first_id"] == page.data[0].id and extra["last_id"] == page.data[-1].id
    walked = [i.content[0].text for i in client.responses.input_items.list(made.id, limit=2)]  # the SDK pages on
    assert walked == texts[::-1]
    oldest = client.responses.input_items.list(made.id, limit=4, order="asc")
    assert [i.content[0].text for i in oldest.data] == texts[:4] and oldest.has_more
    rest = client.responses.input_items.list(made.id, order="asc", after=oldest.data[-1].id)
    assert [i.content[0].text for i in rest.data] == texts[4:] and not rest.has_more
    before = client.responses.input_items.list(made.id, order="asc", extra_query={"before": oldest.data[2].id})
    assert [i.content[0].text for i in before.data] == texts[:2]
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.input_items.list(made.id, limit=0)
    assert "limit" in bad.value.message


def test_response_created_of_a_foreground_stream_is_in_progress(client: openai.OpenAI, script: Any) -> None:
    script("Hello.", "Hello again.")
    foreground = events_of(client.responses.create(model="fake", input="hi", stream=True))
    assert foreground[0].type == "response.created" and foreground[0].response.status == "in_progress"
    assert foreground[1].type == "response.in_progress"  # still sent, as OpenAI does
    check_sequence(foreground)
    background = events_of(client.responses.create(model="fake", input="hi", stream=True, background=True))
    assert background[0].response.status == "queued" and background[1].type == "response.in_progress"


def test_a_replay_does_not_depend_on_the_manifest_deployed_now(
    client: openai.OpenAI, script: Any, fast_settings: Any
) -> None:
    """A deploy that makes a tool need a confirmation must not renumber what a client saw: the set of tools that
    show as approval requests is recorded with the run."""
    script(
        ScriptedTurn(text="Let me check.", tool_calls=[ScriptedToolCall("get_time", {"timezone": "UTC"})]),
        "It is twelve o'clock in UTC.",
    )
    live = events_of(client.responses.create(model="fake", input="time?", stream=True, background=True))
    response_id = live[0].response.id
    store = Runtime(settings=fast_settings).store
    deployed = store.agents.get("fake")
    assert deployed is not None
    changed = json.loads(json.dumps(deployed))
    for tool in changed["tools"]:
        if tool["name"] == "get_time":
            tool["requires_confirmation"] = True
    store.agents.refresh(changed)  # what a worker of the new deploy publishes
    try:
        n = 6
        tail = events_of(client.responses.retrieve(response_id, stream=True, starting_after=n))
        assert [e.model_dump() for e in tail] == [e.model_dump() for e in live[n + 1 :]]
        assert [i.type for i in client.responses.retrieve(response_id).output] == ["message", "mcp_call", "message"]
    finally:
        store.agents.refresh(deployed)


def test_usage_of_an_approval_round_adds_up_to_the_run_s(
    client: openai.OpenAI, script: Any, fast_settings: Any
) -> None:
    script(ScriptedTurn(tool_calls=[ScriptedToolCall("delete_file", {"path": "/tmp/x"}, "call_d1")]), "Done with it.")
    paused = client.responses.create(model="fake", input="delete /tmp/x")
    (request,) = [i for i in paused.output if i.type == "mcp_approval_request"]
    approve = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
    done = client.responses.create(model="fake", previous_response_id=paused.id, input=[approve])  # type: ignore[list-item]
    total = Runtime(settings=fast_settings).get(run_of(paused.id)).usage
    assert paused.usage is not None and done.usage is not None and done.usage.total_tokens > 0
    assert paused.usage.total_tokens + done.usage.total_tokens == total["total_tokens"]
    assert client.responses.retrieve(paused.id).usage == paused.usage

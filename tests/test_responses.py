"""The OpenAI Responses API under /v1, with the official ``openai`` SDK as the client: a live API server (the Flask
blueprint under werkzeug's threaded server, in a thread of the test), the session's real worker, real Redis, and the
fake OpenAI server as the agent's model. Crashes (kill -9 of a worker) are in test_responses_crash.py."""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from flask import Flask, request
from pydantic import BaseModel
from werkzeug.serving import make_server

from agents_celery import Runtime, ScriptedToolCall, ScriptedTurn
from agents_celery.contrib.flask import close_app, init_app, make_blueprint

from .conftest import TEST_REDIS_URL
from .support.invariants import counter_of

pytestmark = pytest.mark.timeout(90)


def owner_rule(action: str, user_id: str | None, resource: Any, agent_id: str | None) -> bool:
    """A host's rule: what a user started is theirs (callers without a user see only what has no owner)."""
    return resource is None or resource.user_id == user_id


class Server:
    """A Flask app serving the API at the root on a free port, in a thread (werkzeug's threaded server)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.app = Flask("responses-test")
        self.app.config["AGENTS_CELERY_KEEPALIVE_SECONDS"] = 0.3  # read by init_app: spaces and SSE comments often
        init_app(self.app, runtime, authorize=owner_rule, user_id=lambda: request.headers.get("X-User"))  # type: ignore[arg-type]
        self.app.register_blueprint(make_blueprint())
        self.http = make_server("127.0.0.1", 0, self.app, threaded=True)
        self.url = f"http://127.0.0.1:{self.http.server_port}"
        self.clients: list[openai.OpenAI] = []
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def client(self, user: str | None = "bob", api_key: str = "unused") -> openai.OpenAI:
        """An openai SDK client of this server (closed with it), as ``user`` (the host's login: ``X-User``)."""
        headers = {"X-User": user} if user else {}
        made = openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, default_headers=headers, max_retries=0)
        self.clients.append(made)
        return made

    def close(self) -> None:
        for made in self.clients:
            made.close()
        self.http.shutdown()
        self.http.server_close()
        close_app(self.app)


@pytest.fixture
def server(fast_settings: Any, worker: Any) -> Iterator[Server]:
    found = Server(Runtime(settings=fast_settings))
    yield found
    found.close()


@pytest.fixture
def client(server: Server) -> openai.OpenAI:
    return server.client()


def events_of(stream: Any) -> list[Any]:
    return list(stream)


def check_sequence(events: list[Any], first: int = 0) -> None:
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(first, first + len(numbers))), numbers


def deltas(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def test_create_waits_and_retrieve_answers_the_same(client: openai.OpenAI, script: Any, fake_openai: Any) -> None:
    script("Hello from the agent.")
    made = client.responses.create(model="fake", input="hi there", instructions="Answer in English.")
    assert made.status == "completed" and made.output_text == "Hello from the agent."
    assert made.id.startswith("resp_") and made.model == "fake"
    again = client.responses.retrieve(made.id)
    assert again.output_text == made.output_text and again.status == "completed"
    assert [i.type for i in again.output] == ["message"]
    system = fake_openai.requests[-1]["messages"][0]
    assert system["role"] == "system" and "Answer in English." in system["content"]  # added to the agent's
    items = client.responses.input_items.list(made.id)
    assert [(i.type, i.role) for i in items.data] == [("message", "user")]
    assert items.data[0].content[0].text == "hi there"
    assert "fake" in [m.id for m in client.models.list().data]
    assert client.models.retrieve("fake").id == "fake"


def test_stream_numbers_are_stable_and_resume_exactly(client: openai.OpenAI, script: Any) -> None:
    script(
        ScriptedTurn(text="Let me check.", tool_calls=[ScriptedToolCall("get_time", {"timezone": "UTC"})]),
        "It is twelve o'clock in UTC, as the tool said.",
    )
    live = events_of(client.responses.create(model="fake", input="time?", stream=True, background=True))
    check_sequence(live)
    assert live[0].type == "response.created" and live[-1].type == "response.completed"
    response_id = live[0].response.id
    final = client.responses.retrieve(response_id)
    assert deltas(live) == final.output_text
    assert [i.type for i in final.output] == ["message", "mcp_call", "message"]
    call = final.output[1]
    assert call.name == "get_time" and call.output == "12:00 in UTC" and call.server_label == "fake"
    assert live[-1].response.output_text == final.output_text
    for n in (0, 5, 10, len(live) - 2):
        tail = events_of(client.responses.retrieve(response_id, stream=True, starting_after=n))
        assert [e.model_dump() for e in tail] == [e.model_dump() for e in live[n + 1 :]]
    replay = events_of(client.responses.retrieve(response_id, stream=True))
    assert [e.model_dump() for e in replay] == [e.model_dump() for e in live]
    tail = events_of(client.responses.retrieve(response_id, stream=True, extra_headers={"Last-Event-ID": "12"}))
    assert [e.sequence_number for e in tail] == list(range(13, len(live)))  # an EventSource's reconnect
    with client.responses.stream(response_id=response_id, starting_after=7) as stream:
        resumed = list(stream)  # the SDK reads from 0 (response.created first) and drops what is <= 7
        assert stream.get_final_response().output_text == final.output_text
    assert [e.sequence_number for e in resumed] == list(range(8, len(live)))


def test_previous_response_id_across_three_turns(client: openai.OpenAI, script: Any, fake_openai: Any) -> None:
    script("one", "two", "three")
    first = client.responses.create(model="fake", input="turn A")
    second = client.responses.create(model="fake", input="turn B", previous_response_id=first.id)
    third = client.responses.create(model="fake", input="turn C", previous_response_id=second.id)
    assert third.previous_response_id == second.id and third.status == "completed"
    seen = [(m["role"], m.get("content")) for m in fake_openai.requests[-1]["messages"] if m["role"] != "system"]
    assert seen == [
        ("user", "turn A"),
        ("assistant", first.output_text),
        ("user", "turn B"),
        ("assistant", second.output_text),
        ("user", "turn C"),
    ]
    with pytest.raises(openai.ConflictError):  # only the newest response of a conversation goes on
        client.responses.create(model="fake", input="turn D", previous_response_id=first.id)


def test_conversation_is_a_session(client: openai.OpenAI, script: Any, fake_openai: Any) -> None:
    script("first answer", "second answer")
    conversation = client.conversations.create()
    assert conversation.id.startswith("conv_")
    client.responses.create(model="fake", input="hello", conversation=conversation.id)
    made = client.responses.create(model="fake", input="again", conversation={"id": conversation.id})
    assert made.conversation is not None and made.conversation.id == conversation.id
    users = [m["content"] for m in fake_openai.requests[-1]["messages"] if m["role"] == "user"]
    assert users == ["hello", "again"]
    items = client.conversations.items.list(conversation.id, order="asc")
    texts = [(i.role, i.content[0].text) for i in items.data if i.type == "message"]
    assert texts[:2] == [("user", "hello"), ("assistant", made.output_text if False else texts[1][1])]
    assert [t for t in texts if t[0] == "user"] == [("user", "hello"), ("user", "again")]
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="fake", input="x", conversation="conv_nobody_made_this")


def test_function_tools_round_trip(client: openai.OpenAI, script: Any, fake_openai: Any) -> None:
    script(
        ScriptedTurn(tool_calls=[ScriptedToolCall("lookup_weather", {"city": "Oslo"}, "call_w1")]),
        "It is sunny in Oslo.",
    )
    tools = [
        {
            "type": "function",
            "name": "lookup_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }
    ]
    first = client.responses.create(model="fake", input="weather in Oslo?", tools=tools)  # type: ignore[arg-type]
    calls = [i for i in first.output if i.type == "function_call"]
    assert first.status == "completed" and len(calls) == 1
    assert calls[0].call_id.endswith("_call_w1") and json.loads(calls[0].arguments) == {"city": "Oslo"}
    answer = {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"}
    second = client.responses.create(model="fake", previous_response_id=first.id, input=[answer], tools=tools)  # type: ignore[arg-type, list-item]
    assert second.output_text == "It is sunny in Oslo." and second.previous_response_id == first.id
    assert second.id != first.id
    tool_message = [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_message and tool_message[0]["content"] == "sunny, 21 C"
    items = client.responses.input_items.list(second.id).data
    assert [(i.type, i.call_id, i.output) for i in items] == [("function_call_output", calls[0].call_id, "sunny, 21 C")]
    with pytest.raises(openai.ConflictError):  # answered: a stateless client's answer again (no previous id) is refused
        client.responses.create(model="fake", input=[answer], tools=tools)  # type: ignore[arg-type, list-item]


def confirm_script(script: Any, path: str) -> None:
    script(ScriptedTurn(tool_calls=[ScriptedToolCall("delete_file", {"path": path}, "call_d1")]), "Done with it.")


def test_approval_approve_and_reject(client: openai.OpenAI, script: Any, key_prefix: str) -> None:
    import redis

    count = counter_of(redis.Redis.from_url(TEST_REDIS_URL), key_prefix)
    confirm_script(script, "/tmp/yes")
    asked = client.responses.create(model="fake", input="delete /tmp/yes")
    requests = [i for i in asked.output if i.type == "mcp_approval_request"]
    assert len(requests) == 1 and requests[0].name == "delete_file" and requests[0].server_label == "fake"
    assert json.loads(requests[0].arguments) == {"path": "/tmp/yes"} and count("delete_file:/tmp/yes") == 0
    approve = {"type": "mcp_approval_response", "approval_request_id": requests[0].id, "approve": True}
    done = client.responses.create(model="fake", previous_response_id=asked.id, input=[approve])  # type: ignore[list-item]
    assert done.status == "completed" and done.output_text == "Done with it."
    ran = [i for i in done.output if i.type == "mcp_call"]
    assert [(c.name, c.output) for c in ran] == [("delete_file", "deleted /tmp/yes")]
    assert count("delete_file:/tmp/yes") == 1
    with pytest.raises(openai.ConflictError):  # answered once; the same answer again is refused
        client.responses.create(model="fake", previous_response_id=asked.id, input=[approve])  # type: ignore[list-item]

    confirm_script(script, "/tmp/no")
    asked = client.responses.create(model="fake", input="delete /tmp/no")
    request_id = next(i.id for i in asked.output if i.type == "mcp_approval_request")
    reject = {"type": "mcp_approval_response", "approval_request_id": request_id, "approve": False, "reason": "no"}
    done = client.responses.create(model="fake", previous_response_id=asked.id, input=[reject])  # type: ignore[list-item]
    assert done.status == "completed" and count("delete_file:/tmp/no") == 0

    confirm_script(script, "/tmp/never")  # a paused response cancelled: its run ends, nothing runs
    asked = client.responses.create(model="fake", input="delete /tmp/never")
    assert client.responses.cancel(asked.id).status == "completed"  # it ended (with its approval request)
    with pytest.raises(openai.ConflictError):
        request_id = next(i.id for i in asked.output if i.type == "mcp_approval_request")
        approve = {"type": "mcp_approval_response", "approval_request_id": request_id, "approve": True}
        client.responses.create(model="fake", previous_response_id=asked.id, input=[approve])  # type: ignore[list-item]
    assert count("delete_file:/tmp/never") == 0


def test_approval_with_edited_arguments(client: openai.OpenAI, script: Any, key_prefix: str) -> None:
    import redis

    count = counter_of(redis.Redis.from_url(TEST_REDIS_URL), key_prefix)
    confirm_script(script, "/tmp/asked")
    asked = client.responses.create(model="fake", input="delete /tmp/asked")
    request_id = next(i.id for i in asked.output if i.type == "mcp_approval_request")
    edited = {
        "type": "mcp_approval_response",
        "approval_request_id": request_id,
        "approve": True,
        "arguments": json.dumps({"path": "/tmp/edited"}),
    }
    done = client.responses.create(model="fake", previous_response_id=asked.id, input=[edited])  # type: ignore[list-item]
    assert [i.output for i in done.output if i.type == "mcp_call"] == ["deleted /tmp/edited"]
    assert count("delete_file:/tmp/edited") == 1 and count("delete_file:/tmp/asked") == 0


def test_cancel_a_running_and_a_finished_response(client: openai.OpenAI, script: Any) -> None:
    script(" ".join(["word"] * 400), token_delay=0.02)
    running = client.responses.create(model="fake", input="talk a lot", background=True)
    assert running.status in ("queued", "in_progress")
    cancelled = client.responses.cancel(running.id)
    assert cancelled.status == "cancelled"
    assert client.responses.cancel(running.id).status == "cancelled"  # idempotent
    replay = list(client.responses.retrieve(running.id, stream=True))
    check_sequence(replay)
    # The SDK has no class for response.cancelled: it passes the event through, its response a dict.
    assert replay[-1].type == "response.cancelled" and replay[-1].response["status"] == "cancelled"  # type: ignore[index]
    script("short")
    finished = client.responses.create(model="fake", input="quick")
    assert client.responses.cancel(finished.id).status == "completed"  # ended: answered as it is


def test_cancel_a_queued_response(deploy: Any) -> None:
    from agents_celery import Runtime

    from .agents.fixture import fake

    deployment = deploy("respq")  # no worker consumes its queue: the response stays queued
    found = Server(Runtime(settings=deployment.settings, agents=[fake]))
    try:
        client = found.client()
        queued = client.responses.create(model="fake", input="never started", background=True)
        assert queued.status == "queued"
        assert client.responses.cancel(queued.id).status == "cancelled"
    finally:
        found.close()


def test_another_user_gets_404_everywhere(server: Server, script: Any) -> None:
    script(ScriptedTurn(tool_calls=[ScriptedToolCall("delete_file", {"path": "/tmp/bob"}, "call_b")]), "ok")
    bob, eve = server.client("bob"), server.client("eve")
    made = bob.responses.create(model="fake", input="delete /tmp/bob")
    with pytest.raises(openai.NotFoundError):
        eve.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        list(eve.responses.retrieve(made.id, stream=True))
    with pytest.raises(openai.NotFoundError):
        eve.responses.cancel(made.id)
    with pytest.raises(openai.NotFoundError):
        eve.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        eve.responses.input_items.list(made.id)
    request_id = next(i.id for i in made.output if i.type == "mcp_approval_request")
    approve = [{"type": "mcp_approval_response", "approval_request_id": request_id, "approve": True}]
    with pytest.raises(openai.NotFoundError):
        eve.responses.create(model="fake", previous_response_id=made.id, input=approve)  # type: ignore[arg-type]
    conversation = bob.conversations.create()
    with pytest.raises(openai.NotFoundError):
        eve.responses.create(model="fake", input="hi", conversation=conversation.id)
    with pytest.raises(openai.NotFoundError):
        eve.conversations.items.list(conversation.id)
    assert bob.responses.retrieve(made.id).id == made.id  # still bob's, untouched
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve("resp_" + "0" * 32 + "_0")


def test_bad_input_is_refused_and_unsupported_is_said(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-agent", input="hi")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="fake", input="hi", tools=[{"type": "web_search"}])  # type: ignore[list-item]
    assert refused.value.body["code"] == "unsupported"  # type: ignore[index]
    image = {"type": "input_image", "file_id": "file-abc"}  # a provider's stored file: we have none
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="fake", input=[{"role": "user", "content": [image]}])  # type: ignore[list-item]
    assert refused.value.body["code"] == "unsupported"  # type: ignore[index]
    grammar = {"type": "grammar", "grammar": "start: 'a'"}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="fake", input="hi", text={"format": grammar})  # type: ignore[typeddict-item]
    assert refused.value.body["code"] == "unsupported"  # type: ignore[index]
    not_a_schema = {"type": "json_schema", "name": "x", "schema": {"type": "no-such-type"}}
    with pytest.raises(openai.BadRequestError):  # not JSON Schema: 400 (OpenAI's status; ours is 422), nothing created
        client.responses.create(model="fake", input="hi", text={"format": not_a_schema})  # type: ignore[typeddict-item]
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="fake", input="  ")
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("not-a-response")


def test_image_and_file_parts_reach_the_model(client: openai.OpenAI, script: Any, fake_openai: Any) -> None:
    script("A cat, and a one-page report.")
    pdf = "data:application/pdf;base64," + base64.b64encode(b"%PDF-1.4 tiny").decode()
    content = [
        {"type": "input_text", "text": "What are these?"},
        {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "low"},
        {"type": "input_file", "filename": "report.pdf", "file_data": pdf},
    ]
    made = client.responses.create(model="fake", input=[{"role": "user", "content": content}])  # type: ignore[list-item]
    assert made.output_text == "A cat, and a one-page report."
    sent = [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "user"][-1]["content"]
    assert sent[0] == {"type": "text", "text": "What are these?"}
    assert sent[1] == {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}}
    assert sent[2]["type"] == "file" and sent[2]["file"]["file_data"] == pdf
    shown = client.responses.input_items.list(made.id).data[0].content
    assert [p.type for p in shown] == ["input_text", "input_image", "input_file"]


def test_a_part_over_the_limit_is_refused(fast_settings: Any, worker: Any) -> None:
    small = Server(Runtime(settings=fast_settings.model_copy(update={"max_part_bytes": 100_000})))
    try:
        too_big = "data:image/png;base64," + base64.b64encode(b"x" * 200_000).decode()
        with pytest.raises(openai.APIStatusError) as refused:
            small.client().responses.create(
                model="fake",
                input=[{"role": "user", "content": [{"type": "input_image", "image_url": too_big}]}],  # type: ignore[list-item]
            )
        assert refused.value.status_code == 413 and refused.value.body["code"] == "input_too_large"  # type: ignore[index]
    finally:
        small.close()


def test_delete_a_response_deletes_its_run(client: openai.OpenAI, script: Any) -> None:
    script("bye")
    made = client.responses.create(model="fake", input="hi")
    client.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)


@pytest.fixture
def django_api(apis: Any) -> Any:
    """The Django example project under uvicorn (the session's shared one), with an API key the openai SDK sends
    as ``Authorization: Bearer`` (the Flask blueprint is the in-process server of the other tests)."""
    return apis.get("django", api_key="sk-test-key")


def test_a_round_trip_on_django(django_api: Any, script: Any) -> None:
    script(ScriptedTurn(text="Checking.", tool_calls=[ScriptedToolCall("add", {"a": 2, "b": 3})]), "It is 5.")
    with (
        openai.OpenAI(base_url=django_api.url + "/v1", api_key="sk-test-key", max_retries=0) as client,
        openai.OpenAI(base_url=django_api.url + "/v1", api_key="sk-wrong", max_retries=0) as stranger,
    ):
        live = list(client.responses.create(model="fake", input="2+3?", stream=True, background=True))
        check_sequence(live)
        response_id = live[0].response.id
        tail = list(client.responses.retrieve(response_id, stream=True, starting_after=4))
        assert [e.sequence_number for e in tail] == [e.sequence_number for e in live[5:]]
        final = client.responses.retrieve(response_id)
        assert final.output_text == deltas(live) == "Checking.It is 5."
        assert client.responses.cancel(response_id).status == "completed"
        assert "fake" in [m.id for m in client.models.list().data]
        with pytest.raises(openai.AuthenticationError):
            stranger.responses.retrieve(response_id)


def test_the_api_key_is_the_sdk_s_bearer_token(fast_settings: Any, worker: Any, script: Any) -> None:
    keyed = Server(Runtime(settings=fast_settings.model_copy(update={"api_key": "sk-flask-key"})))
    try:
        script("keyed")
        made = keyed.client(api_key="sk-flask-key").responses.create(model="fake", input="hi")
        assert made.output_text == "keyed"
        with pytest.raises(openai.AuthenticationError):
            keyed.client(api_key="sk-wrong").responses.retrieve(made.id)
    finally:
        keyed.close()


@pytest.mark.parametrize("with_previous", [True, False], ids=["previous_response_id", "stateless"])
def test_pydantic_ai_openai_responses_model_runs_against_us(
    server: Server, script: Any, fake_openai: Any, with_previous: bool
) -> None:
    """pydantic-ai's OpenAIResponsesModel with our endpoint as its provider, with its background option and
    previous_response_id, and stateless (its defaults: the whole history each time, our function_call item ids
    name the paused run): its own tool is a client function tool of the run."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
    from pydantic_ai.providers.openai import OpenAIProvider

    script(ScriptedTurn(tool_calls=[ScriptedToolCall("city_of", {"person": "Ada"}, "call_p1")]), "Ada lives in London.")
    provider = OpenAIProvider(base_url=server.url + "/v1", api_key="unused")
    model = OpenAIResponsesModel("fake", provider=provider)
    settings = OpenAIResponsesModelSettings(openai_background=True, openai_previous_response_id="auto")
    agent = Agent(model, model_settings=settings if with_previous else OpenAIResponsesModelSettings())

    @agent.tool_plain
    def city_of(person: str) -> str:
        """Where a person lives."""
        return {"Ada": "London"}.get(person, "unknown")

    result = agent.run_sync("Where does Ada live?")
    assert result.output == "Ada lives in London."
    tool_message = [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_message] == ["London"]


def test_idempotency_key_and_metadata(client: openai.OpenAI, script: Any) -> None:
    script("once")
    key = {"Idempotency-Key": f"k-{uuid.uuid4().hex}"}
    first = client.responses.create(model="fake", input="hi", metadata={"ticket": "T-1"}, extra_headers=key)
    again = client.responses.create(model="fake", input="hi", metadata={"ticket": "T-1"}, extra_headers=key)
    assert again.id == first.id and again.metadata == {"ticket": "T-1"}
    with pytest.raises(openai.BadRequestError):  # the same key for another request
        client.responses.create(model="fake", input="something else", extra_headers=key)


def test_an_expired_response_answers_404(client: openai.OpenAI, script: Any, fast_settings: Any) -> None:
    """Past retention only the run's tombstone is left: /v1 answers 404 as OpenAI does (our /runs routes 410)."""
    import httpx
    import redis

    from agents_celery.http.responses.render import parse_response_id
    from agents_celery.storage.keys import Keys

    script("soon gone")
    made = client.responses.create(model="fake", input="hi")
    parsed = parse_response_id(made.id)
    assert parsed is not None
    keys = Keys(fast_settings.key_prefix).run(parsed[0])
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        assert r.exists(keys.gone)
        r.delete(keys.run, keys.events, keys.messages)  # what retention's expiry leaves: the tombstone
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(made.id)
    assert httpx.get(f"{str(client.base_url).removesuffix('/v1/')}/runs/{parsed[0]}").status_code == 410


class Step(BaseModel):
    explanation: str
    output: str


class MathResponse(BaseModel):
    steps: list[Step]
    final_answer: str


MATH = MathResponse(
    steps=[
        Step(explanation="Subtract 31 from both sides of the equation", output="8x = 2 - 31"),
        Step(explanation="Work out the right hand side", output="8x = -29"),
        Step(explanation="Divide both sides by eight", output="x = -29 / 8"),
    ],
    final_answer="x = -3.625",
)


def test_parse_gives_output_parsed(client: openai.OpenAI, fake_openai: Any) -> None:
    from agents_celery.output import RETRY_PREFIX
    from agents_celery.testing.openai_server import FakeReply

    def answer(request: dict[str, Any]) -> FakeReply:  # a first answer that fails the schema, then a good one
        retried = any(str(m.get("content", "")).startswith(RETRY_PREFIX) for m in request["messages"])
        return FakeReply(text=MATH.model_dump_json() if retried else "Let me think.")

    fake_openai.responder = answer
    parsed = client.responses.parse(model="fake", input="solve 8x + 31 = 2", text_format=MathResponse)
    assert parsed.output_parsed == MATH
    # the answer sent back is commentary: a reasoning item, so output_text is the answer (test_responses_said.py)
    shown = [(i.type, getattr(i, "phase", None)) for i in parsed.output]
    assert shown == [("reasoning", None), ("message", "final_answer")]
    asked = fake_openai.requests[-1]["response_format"]
    assert asked["type"] == "json_schema" and asked["json_schema"]["schema"]["properties"].keys() == {
        "steps",
        "final_answer",
    }


def test_the_sdk_background_streaming_example(client: openai.OpenAI, script: Any) -> None:
    """What the openai SDK's examples/responses/background_streaming.py does, pointed at us: structured output,
    background, break at sequence 10, resume with starting_after=10."""
    script(MATH.model_dump_json(), token_delay=0.01)
    response_id = ""
    with client.responses.stream(
        input="solve 8x + 31 = 2", model="fake", text_format=MathResponse, background=True
    ) as stream:
        for event in stream:
            if event.type == "response.created":
                response_id = event.response.id
            if event.sequence_number == 10:
                break
    with client.responses.stream(response_id=response_id, starting_after=10, text_format=MathResponse) as stream:
        resumed = list(stream)
        final = stream.get_final_response()
    assert resumed[0].sequence_number == 11 and resumed[-1].type == "response.completed"
    assert final.output_parsed == MATH

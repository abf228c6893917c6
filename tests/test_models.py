"""Models: the scripted model, turn assembly, and OpenAIChat against the fake server through the real SDK."""

from __future__ import annotations

import json
import pickle
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agents_celery.errors import ModelError
from agents_celery.models import (
    Model,
    ModelChunk,
    OpenAIChat,
    ScriptedModel,
    ScriptedToolCall,
    ScriptedTurn,
    TextDelta,
    ToolCallDelta,
    TurnAccumulator,
    Usage,
)
from agents_celery.models.scripted import split_tokens
from agents_celery.testing.openai_server import FailingResponder, FakeOpenAIServer, FakeReply, ScriptResponder

USER = {"role": "user", "content": "what is two plus three"}
WEATHER = ScriptedTurn(
    "Let me look.",
    [
        ScriptedToolCall("get_weather", {"city": "Paris"}),
        ScriptedToolCall("get_time", {"tz": "Europe/Paris"}, id="call_custom"),
    ],
)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "", "parameters": {"type": "object"}}}]


def assemble(chunks: Iterator[ModelChunk]) -> TurnAccumulator:
    acc = TurnAccumulator()
    for chunk in chunks:
        acc.add(chunk)
    return acc


def tool_round(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The assistant message and one tool result per call, as the engine appends them."""
    results = [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in message.get("tool_calls", [])]
    return [message, *results]


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(ScriptResponder([WEATHER, "It is sunny."])) as fake:
        yield fake


@pytest.fixture
def chat(server: FakeOpenAIServer) -> Iterator[OpenAIChat]:
    model = OpenAIChat("gpt-4o-mini", base_url=server.url, api_key="sk-test", timeout=10)
    yield model
    model.close()


# --- ScriptedModel and TurnAccumulator -------------------------------------------------------------------------


def test_scripted_model_is_a_model() -> None:
    model = ScriptedModel(["hi"])
    assert isinstance(model, Model)
    assert model.name == "scripted"
    assert ScriptedModel(["hi"], name="demo").name == "demo"


def test_scripted_turn_selection_follows_the_conversation() -> None:
    model = ScriptedModel([WEATHER, "It is sunny.", "Anything else?"])
    messages: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}, USER]

    first = assemble(model.stream(messages, TOOLS))
    assert first.text == "Let me look."
    assert [c["name"] for c in first.tool_calls] == ["get_weather", "get_time"]

    messages += tool_round(first.assistant_message())
    second = assemble(model.stream(messages, TOOLS))
    assert second.text == "It is sunny."
    assert second.tool_calls == []

    # A new user message (a new run in the same session) starts the script again.
    messages += [second.assistant_message(), {"role": "user", "content": "and tomorrow?"}]
    assert assemble(model.stream(messages, TOOLS)).text == "Let me look."


def test_scripted_model_repeats_last_turn_past_the_end() -> None:
    model = ScriptedModel(["one", "two"])
    messages = [USER, {"role": "assistant", "content": "x"}, {"role": "assistant", "content": "y"}]
    assert assemble(model.stream(messages, [])).text == "two"
    assert assemble(model.stream([], [])).text == "one"


def test_scripted_tool_calls_stream_in_two_deltas_with_ids() -> None:
    chunks = list(ScriptedModel([WEATHER]).stream([USER], TOOLS))
    deltas = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert [(d.index, d.id, d.name) for d in deltas] == [
        (0, "call_0_0", "get_weather"),
        (0, None, None),
        (1, "call_custom", "get_time"),
        (1, None, None),
    ]
    assert deltas[0].arguments + deltas[1].arguments == json.dumps({"city": "Paris"})
    assert isinstance(chunks[-1], Usage)
    assert chunks[-1].prompt_tokens == 5
    assert chunks[-1].total_tokens == chunks[-1].prompt_tokens + chunks[-1].completion_tokens


@pytest.mark.parametrize("text", ["Hello, world!", "  leading and  double  spaces\n\nnew para ", "", "one"])
def test_token_splitting_reassembles_exactly(text: str) -> None:
    assert "".join(split_tokens(text)) == text
    chunks = list(ScriptedModel([text]).stream([USER], []))
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == text


def test_scripted_text_streams_word_by_word() -> None:
    chunks = list(ScriptedModel(["Hello there, world."], token_delay=0.001).stream([USER], []))
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == ["Hello ", "there, ", "world."]


def test_scripted_model_needs_turns() -> None:
    with pytest.raises(Exception, match="at least one turn"):
        ScriptedModel([])


def test_accumulator_assembles_interleaved_deltas_in_index_order() -> None:
    acc = TurnAccumulator()
    for chunk in [
        TextDelta("Hi "),
        ToolCallDelta(1, "call_b", "second", '{"y"'),
        ToolCallDelta(0, "call_a", "first", ""),
        TextDelta("there"),
        ToolCallDelta(0, None, None, '{"x": 1}'),
        ToolCallDelta(1, None, None, ": 2}"),
        Usage(3, 4, 7),
    ]:
        acc.add(chunk)
    assert acc.text == "Hi there"
    assert acc.usage == Usage(3, 4, 7)
    assert acc.tool_calls == [
        {"id": "call_a", "name": "first", "arguments": '{"x": 1}'},
        {"id": "call_b", "name": "second", "arguments": '{"y": 2}'},
    ]
    assert acc.assistant_message() == {
        "role": "assistant",
        "content": "Hi there",
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "first", "arguments": '{"x": 1}'}},
            {"id": "call_b", "type": "function", "function": {"name": "second", "arguments": '{"y": 2}'}},
        ],
    }


def test_accumulator_without_tool_calls_or_text() -> None:
    assert TurnAccumulator().assistant_message() == {"role": "assistant", "content": None}
    acc = TurnAccumulator()
    acc.add(TextDelta("done"))
    assert acc.assistant_message() == {"role": "assistant", "content": "done"}


def test_accumulator_invents_unique_ids_when_the_server_sends_none() -> None:
    acc = TurnAccumulator()
    acc.add(ToolCallDelta(0, None, "f", "{}"))
    acc.add(ToolCallDelta(1, None, "g", "{}"))
    ids = [c["id"] for c in acc.tool_calls]
    assert all(i.startswith("call_") for i in ids) and len(set(ids)) == 2
    assert acc.tool_calls == acc.tool_calls  # stable between reads


# --- OpenAIChat through the real openai SDK ---------------------------------------------------------------------


def test_openai_chat_streams_text(server: FakeOpenAIServer, chat: OpenAIChat) -> None:
    server.responder = ScriptResponder(["Hello there, how are you?"])
    chunks = list(chat.stream([USER], []))
    texts = [c.text for c in chunks if isinstance(c, TextDelta)]
    assert texts == ["Hello ", "there, ", "how ", "are ", "you?"]
    assert chunks[-1] == Usage(prompt_tokens=5, completion_tokens=5, total_tokens=10)

    request = server.requests[0]
    assert request["model"] == "gpt-4o-mini"
    assert request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}
    assert request["messages"] == [USER]
    assert "tools" not in request  # no tools: the field is left out


def test_openai_chat_assembles_two_parallel_tool_calls(server: FakeOpenAIServer, chat: OpenAIChat) -> None:
    acc = assemble(chat.stream([USER], TOOLS))
    assert acc.text == "Let me look."
    assert acc.tool_calls == [
        {"id": "call_0_0", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"id": "call_custom", "name": "get_time", "arguments": '{"tz": "Europe/Paris"}'},
    ]
    assert acc.usage.prompt_tokens == 5 and acc.usage.completion_tokens > 0
    assert server.requests[0]["tools"] == TOOLS

    # The engine's next call carries the tool results; the script moves on to turn 1.
    follow_up = assemble(chat.stream([USER, *tool_round(acc.assistant_message())], TOOLS))
    assert follow_up.text == "It is sunny."
    assert server.calls == 2


def test_openai_chat_sends_options_and_extra_body(server: FakeOpenAIServer) -> None:
    model = OpenAIChat("local-model", server.url, temperature=0.2, max_tokens=50, extra_body={"top_k": 5})
    try:
        list(model.stream([USER], []))
    finally:
        model.close()
    request = server.requests[0]
    assert (request["model"], request["temperature"], request["max_tokens"], request["top_k"]) == (
        "local-model",
        0.2,
        50,
        5,
    )


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(500, True), (503, True), (429, True), (400, False), (401, False), (404, False), (422, False)],
)
def test_openai_chat_maps_http_errors(server: FakeOpenAIServer, chat: OpenAIChat, status: int, retryable: bool) -> None:
    server.responder = lambda request: FakeReply(status=status, error=f"boom {status}")
    with pytest.raises(ModelError) as info:
        list(chat.stream([USER], []))
    assert info.value.status_code == status
    assert info.value.retryable is retryable
    assert f"boom {status}" in str(info.value)
    assert f"HTTP {status}" in str(info.value)


def test_openai_chat_connection_refused_is_retryable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAIChat(base_url=f"http://127.0.0.1:{port}/v1", timeout=5)
    try:
        with pytest.raises(ModelError, match="cannot connect") as info:
            list(model.stream([USER], []))
    finally:
        model.close()
    assert info.value.retryable is True
    assert info.value.status_code is None


def test_openai_chat_read_timeout_is_retryable(server: FakeOpenAIServer) -> None:
    server.responder = lambda request: FakeReply(text="slow words here", token_delay=0.1)
    model = OpenAIChat(base_url=server.url, timeout=0.05)
    try:
        with pytest.raises(ModelError, match="timed out") as info:
            list(model.stream([USER], []))
    finally:
        model.close()
    assert info.value.retryable is True


def test_failing_responder_fails_n_times_then_succeeds(server: FakeOpenAIServer, chat: OpenAIChat) -> None:
    failing = FailingResponder(ScriptResponder(["recovered"]), failures=2, status=502)
    server.responder = failing
    for _ in range(2):
        with pytest.raises(ModelError, match="injected failure") as info:
            list(chat.stream([USER], []))
        assert info.value.retryable and info.value.status_code == 502
    assert assemble(chat.stream([USER], [])).text == "recovered"
    assert failing.failed == 2
    assert server.calls == 3


def test_openai_chat_is_lazy_and_picklable(server: FakeOpenAIServer) -> None:
    model = OpenAIChat("m", server.url)
    assert model.name == "openai:m"
    assert isinstance(model, Model)
    assert model.describe() == {"provider": "openai", "model": "m", "base_url": server.url}
    list(model.stream([USER], []))  # builds the client
    copy = pickle.loads(pickle.dumps(model))
    model.close()
    try:
        assert assemble(copy.stream([USER], [])).text == "Let me look."
    finally:
        copy.close()


def test_openai_chat_spreads_streams_over_clients_and_a_quiet_one_reuses_one(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpcore looks at every connection of its pool per request: a client carries STREAMS_PER_CLIENT streams at
    once, the next turn goes to another; turns one after another all go to the first (its connection reused)."""
    from agents_celery.models import openai as openai_model

    monkeypatch.setattr(openai_model, "STREAMS_PER_CLIENT", 2)
    server.responder = lambda request: FakeReply(text="one two three", token_delay=0.01)
    model = OpenAIChat("m", server.url)
    try:
        for _ in range(3):
            assert assemble(model.stream([USER], [])).text == "one two three"
        clients = model._clients._clients
        assert len(clients) == 1
        streams = [model.stream([USER], []) for _ in range(5)]
        assert [next(s) for s in streams] == [TextDelta("one ")] * 5  # five requests open at once
        assert len(clients) == 3 and model._clients._open == [2, 2, 1]
        assert len({id(c) for c in clients}) == 3
        for stream in streams:
            stream.close()
        assert model._clients._open == [0, 0, 0]
        first = clients[0]
        assert assemble(model.stream([USER], [])).text == "one two three"
        assert model._clients._clients[0] is first and model._clients._open == [0, 0, 0]
    finally:
        model.close()
    assert model._clients._clients == []


def test_openai_chat_clients_share_one_tls_context(server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every SDK client of the process gets the one TLS context (the library's default one, verifying): building
    one per client loaded the CA bundle each time (26 ms)."""
    import ssl

    from agents_celery.models import openai as openai_model

    module = openai_model._http_module()
    built: list[int] = []
    real = module.create_ssl_context
    monkeypatch.setattr(module, "create_ssl_context", lambda *a, **k: built.append(1) or real(*a, **k))
    monkeypatch.setattr(openai_model, "STREAMS_PER_CLIENT", 1)
    openai_model._tls_context.cache_clear()
    server.responder = lambda request: FakeReply(text="one two three", token_delay=0.01)
    model = OpenAIChat("m", server.url)
    streams = [model.stream([USER], []) for _ in range(3)]
    try:
        assert [next(s) for s in streams] == [TextDelta("one ")] * 3
        assert len(model._clients._clients) == 3 and built == [1]  # three clients, one context
        context = openai_model._tls_context()
        assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED
        assert context.check_hostname
    finally:
        for stream in streams:
            stream.close()
        model.close()
        openai_model._tls_context.cache_clear()


def test_openai_chat_stream_abandoned_midway(server: FakeOpenAIServer, chat: OpenAIChat) -> None:
    server.responder = lambda request: FakeReply(text="one two three four five six", token_delay=0.01)
    stream = chat.stream([USER], [])
    assert next(stream) == TextDelta("one ")
    stream.close()  # closes the HTTP response; the server notices the client is gone
    server.responder = ScriptResponder(["still here"])
    assert assemble(chat.stream([USER], [])).text == "still here"


# --- FakeOpenAIServer on its own --------------------------------------------------------------------------------


def test_fake_server_non_streaming_models_and_unknown_paths(server: FakeOpenAIServer) -> None:
    with httpx.Client(base_url=server.url, timeout=5) as client:
        body = client.post("/chat/completions", json={"model": "x", "messages": [USER]}).json()
        assert body["object"] == "chat.completion"
        message = body["choices"][0]["message"]
        assert message["content"] == "Let me look."
        assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather", "get_time"]
        assert body["choices"][0]["finish_reason"] == "tool_calls"
        assert body["usage"]["prompt_tokens"] == 5

        assert client.get("/models").json()["data"][0]["id"] == "fake-model"
        missing = client.get("/nope")
        assert missing.status_code == 404 and "error" in missing.json()
        assert client.post("/chat/completions", content=b"{bad").status_code == 400


def test_fake_server_streams_openai_chunks(server: FakeOpenAIServer) -> None:
    request = {"model": "x", "messages": [USER], "stream": True, "stream_options": {"include_usage": True}}
    with (
        httpx.Client(base_url=server.url, timeout=5) as client,
        client.stream("POST", "/chat/completions", json=request) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    first_call = next(c for c in chunks if c["choices"] and "tool_calls" in c["choices"][0]["delta"])
    assert first_call["choices"][0]["delta"]["tool_calls"][0]["type"] == "function"


def test_fake_server_survives_client_disconnect_and_stops_with_open_connections() -> None:
    with FakeOpenAIServer(lambda request: FakeReply(text="a b c d e f g h", token_delay=0.05)) as fake:
        host, port = fake.url.split("//")[1].split("/")[0].split(":")
        body = json.dumps({"model": "x", "messages": [USER], "stream": True}).encode()
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
            sock.sendall(head.encode() + body)
            assert b"200 OK" in sock.recv(4096)
        fake.responder = ScriptResponder(["fine"])
        with httpx.Client(base_url=fake.url, timeout=5) as client:
            reply = client.post("/chat/completions", json={"messages": [USER]}).json()
            assert reply["choices"][0]["message"]["content"] == "fine"
            idle = socket.create_connection((host, int(port)), timeout=5)  # kept open while the server stops
        started = time.monotonic()
    idle.close()
    assert time.monotonic() - started < 2


def test_stream_lines_are_parsed_raw_and_errors_inside_the_stream_raise() -> None:
    import openai

    from agents_celery.models.openai import _chunk_deltas, _sse_data

    lines = iter(
        [
            ": keep-alive",
            'data: {"choices":[{"delta":{"content":"Hi"}}]}',
            "",
            'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1",'
            '"function":{"name":"f","arguments":"{}"}}]}}]}',
            'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}',
            "data: [DONE]",
            'data: {"choices":[{"delta":{"content":"after done"}}]}',
        ]
    )
    chunks = [c for data in _sse_data(lines) for c in _chunk_deltas(data)]
    assert chunks == [
        TextDelta("Hi"),
        ToolCallDelta(0, "c1", "f", "{}"),
        Usage(prompt_tokens=3, completion_tokens=2, total_tokens=5),
    ]
    with pytest.raises(openai.APIError, match="overloaded"):
        list(_sse_data(iter(['data: {"error": {"message": "overloaded", "type": "server_error"}}'])))


_WARM_UP = """
import logging, sys
from celery import signals
from agents_celery import Agent, OpenAIChat
from agents_celery.broker.celery_app import create_celery_app
from agents_celery.models import openai as openai_model
from agents_celery.settings import load_settings

class Broken:
    name = "broken"
    def stream(self, messages, tools):
        raise AssertionError("not called")
    def warm_up(self):
        raise RuntimeError("no SDK here")

class Starting:  # what worker_init is sent by: Celery's WorkController (the parts the app reads)
    pool_cls, concurrency = "prefork", 2
    def __init__(self, app):
        self.app = app

logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")
model = OpenAIChat("m", "http://127.0.0.1:9/v1")
agents = {"a": Agent("a", instructions="x", model=model), "b": Agent("b", instructions="y", model=model),
          "c": Agent("c", instructions="z", model=Broken())}
app = create_celery_app(load_settings(), agents=agents)
print("before", "openai" in sys.modules, openai_model._tls_context.cache_info().currsize)
signals.worker_init.send(sender=Starting(app))
print("after", "openai" in sys.modules, openai_model._tls_context.cache_info().currsize)
"""


def test_a_worker_loads_its_models_sdk_as_it_starts() -> None:
    """``worker_init`` (the main process, before a prefork pool forks) has each agent's model warm up: the openai
    SDK is imported and the TLS context built there, not in every child's first turn. A model whose warm-up
    fails is logged; the worker still starts."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _WARM_UP], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "before False 0" in lines and "after True 1" in lines, done.stdout
    assert any("warming up the model of 'c' failed: no SDK here" in line for line in lines), done.stdout

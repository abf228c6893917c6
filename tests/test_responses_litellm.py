"""LiteLLM's ``responses()`` client against our ``/v1`` (issue #38: a framework's client as its users call it, with
its defaults), offline: a foreground create, a stream, a function tool round with ``previous_response_id``. LiteLLM
is not in the lock (it brings boto3, tokenizers, huggingface_hub and aiohttp): the module is skipped where it is
not installed (``pip install litellm`` to run it). A live Flask API in a thread, the session's real worker, real
Redis, the fake OpenAI server as the agent's model."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from agents_celery import Runtime, ScriptedToolCall, ScriptedTurn

from .test_responses import Server

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # it would fetch its price list at import
litellm = pytest.importorskip("litellm")

pytestmark = [
    pytest.mark.timeout(120),
    # litellm's own types, as pydantic warns of them when litellm first builds a model of them (not ours)
    pytest.mark.filterwarnings("ignore:Items? .* using the `ReadOnly` qualifier:UserWarning"),
]

WEATHER = {
    "type": "function",
    "name": "lookup_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture
def server(fast_settings: Any, worker: Any) -> Iterator[Server]:
    found = Server(Runtime(settings=fast_settings))
    yield found
    found.close()


def ask(server: Server, **fields: Any) -> Any:
    """``litellm.responses`` as its docs show it for an OpenAI-compatible server (retries left as they are)."""
    return litellm.responses(model="openai/fake", api_base=server.url + "/v1", api_key="unused", **fields)


def test_a_create_and_a_stream(server: Server, script: Any) -> None:
    script("Hello from the agent.")
    made = ask(server, input="hi there", instructions="Answer in English.")
    assert made.status == "completed" and made.output_text == "Hello from the agent."
    assert made.usage is not None and made.usage.total_tokens > 0
    script("Streamed hello.")  # a new run: the script starts again
    events = list(ask(server, input="and again", stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Streamed hello." and events[-1].response.output_text == text


def test_a_function_tool_round(server: Server, script: Any, fake_openai: Any) -> None:
    script(
        ScriptedTurn(tool_calls=[ScriptedToolCall("lookup_weather", {"city": "Oslo"}, "call_w1")]),
        "It is sunny in Oslo.",
    )
    first = ask(server, input="weather in Oslo?", tools=[WEATHER])
    (call,) = [i for i in first.output if i.type == "function_call"]
    assert call.name == "lookup_weather" and json.loads(call.arguments) == {"city": "Oslo"}
    answer = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}
    second = ask(server, input=[answer], previous_response_id=first.id, tools=[WEATHER])
    assert second.output_text == "It is sunny in Oslo."
    # LiteLLM hands out its own ids (ours inside, with the provider: base64) and sends ours back
    assert first.id != second.previous_response_id and second.previous_response_id.startswith("resp_")
    assert second.previous_response_id in base64.b64decode(first.id.removeprefix("resp_")).decode()
    tool_message = [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_message] == ["sunny, 21 C"]

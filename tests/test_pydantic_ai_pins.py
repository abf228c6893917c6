"""Pins on what the pydantic-ai guest reads of pydantic-ai beyond its public API (#39 point 8; docs/pydantic-ai.md
lists each item and where it is pinned). The supported range is ``pydantic-ai-slim>=2.68.0,<2.69``
(pyproject.toml); a pydantic-ai that changes one of these fails here, the test and its message naming the item,
before a run would go wrong. In-process: pydantic-ai's FunctionModel, or OpenAIChatModel against the fake server."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.durable_exec import ModelRequestId, ToolsetCallToolId
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.toolsets import FunctionToolset

from agents_celery.content import refs_in
from agents_celery.contrib.pydantic_ai import CeleryDurability
from agents_celery.contrib.pydantic_ai.guest import _tool_manifests
from agents_celery.contrib.pydantic_ai.prompt import Prompt, restored, stored_form
from agents_celery.contrib.pydantic_ai.segment import _CURRENT, _call_of, _tool_call_id, _tool_names, identity
from agents_celery.conversation import as_chat, user_messages
from agents_celery.testing import ScriptResponder

pytestmark = pytest.mark.timeout(60)

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(32))


@dataclass
class Recorder:
    """Stands in for a worker's segment: records every unit pydantic-ai hands the backend, and runs it."""

    run_id: str = "pin-run"
    session_id: str = "pin-session"
    number: int = 0
    units: list[tuple[Any, str, tuple[object, ...]]] = field(default_factory=list)

    async def unit(self, operation_id: Any, name: str, body: Any, cache_key: tuple[object, ...], config: Any) -> Any:
        self.units.append((operation_id, name, cache_key))
        return await body()

    def on_event(self, event: Any) -> None:
        pass

    def rejection(self, call_id: str | None) -> str | None:
        return None


def _called(messages: list[ModelMessage]) -> bool:
    return any(isinstance(p, ToolCallPart) for m in messages if isinstance(m, ModelResponse) for p in m.parts)


def _script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if not _called(messages):
        return ModelResponse(parts=[ToolCallPart("echo", {"x": 1}, tool_call_id="call-1")])
    return ModelResponse(parts=[TextPart("done")])


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    if not _called(messages):
        yield {0: DeltaToolCall(name="echo", json_args='{"x": 1}', tool_call_id="call-1")}
    else:
        yield "done"


def _pin_agent() -> Agent[None, str]:
    agent = Agent(FunctionModel(_script, stream_function=_stream), name="pin", capabilities=[CeleryDurability()])

    @agent.tool_plain(requires_approval=False, metadata={"agents_celery": {"idempotent": True}}, timeout=7)
    def echo(x: int) -> int:
        """Echo x."""
        return x

    return agent


def _recorded_units() -> list[tuple[Any, str, tuple[object, ...]]]:
    agent, recorder = _pin_agent(), Recorder()

    async def go() -> None:
        token = _CURRENT.set(recorder)  # type: ignore[arg-type]
        try:
            await agent.run("Echo one.")
        finally:
            _CURRENT.reset(token)

    asyncio.run(go())
    return recorder.units


def test_pin_the_cache_key_of_a_model_request() -> None:
    """segment.identity reads a model request's ``cache_key`` (documented as opaque): a RunContext in it (its
    ``model``: system and model name) and the ModelRequestParameters (its function and output tools' names)."""
    units = [(op, key) for op, _, key in _recorded_units() if isinstance(op, ModelRequestId)]
    assert units, "pin 'cache_key layout': no model request unit reached the backend"
    for _, key in units:
        contexts = [v for v in key if type(v).__name__ == "RunContext"]
        assert contexts and getattr(contexts[0].model, "system", None) == "function", (
            f"pin 'cache_key layout': a model request's cache_key no longer holds a RunContext with its model: {key!r}"
        )
        assert _tool_names(key) == ["echo"], (
            f"pin 'cache_key layout': a model request's cache_key no longer holds its ModelRequestParameters: {key!r}"
        )


def test_pin_the_cache_key_of_a_tool_call() -> None:
    """segment._tool_call_id, _call_of and identity read a call_tool's ``cache_key``: the tool's name first, its
    arguments second, and a RunContext whose ``tool_call_id`` is the call's."""
    units = [(op, key) for op, _, key in _recorded_units() if isinstance(op, ToolsetCallToolId)]
    assert len(units) == 1, "pin 'cache_key layout': the tool call is not one call_tool unit"
    op, key = units[0]
    assert key[:2] == ("echo", {"x": 1}), f"pin 'cache_key layout': (tool name, arguments) are not first: {key!r}"
    assert _tool_call_id(op, key) == "call-1", f"pin 'cache_key layout': no RunContext.tool_call_id in {key!r}"
    call = _call_of("call-1", key, 0)
    assert (call.name, call.args) == ("echo", {"x": 1})
    assert identity(op, key) == identity(op, ("echo", {"x": 2}, *key[2:]))  # the arguments are not the identity


def test_pin_function_toolset_tools() -> None:
    """guest._tool_manifests lists an agent's function tools from ``FunctionToolset.tools`` (a dict of name ->
    Tool) and each Tool's description, ``function_schema.json_schema``, requires_approval, metadata, timeout."""
    agent = _pin_agent()
    toolsets = [t for t in agent.toolsets if isinstance(t, FunctionToolset)]
    assert toolsets and isinstance(getattr(toolsets[0], "tools", None), dict), (
        "pin 'FunctionToolset.tools': the agent's FunctionToolset has no dict of tools"
    )
    assert _tool_manifests(agent) == [
        {
            "name": "echo",
            "description": "Echo x.",
            "parameters": {
                "additionalProperties": False,
                "properties": {"x": {"type": "integer"}},
                "required": ["x"],
                "type": "object",
            },
            "requires_confirmation": False,
            "idempotent": True,
            "timeout": 7,
        }
    ], "pin 'FunctionToolset.tools': a Tool's attributes changed"


def test_pin_the_message_json_layout() -> None:
    """conversation.as_chat / user_messages, content.refs_in and prompt.stored_form / restored read the JSON of
    ``ModelMessagesTypeAdapter``: ``kind`` request / response, ``parts`` with ``part_kind``, a user prompt's
    ``content`` list in order (``kind`` binary / image-url), a tool call's ``tool_call_id``, ``tool_name``, ``args``."""
    image = BinaryContent(PNG, media_type="image/png")
    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(["Look:", image, ImageUrl("https://example.com/a.png")])]),
        ModelResponse(parts=[TextPart("A PNG."), ToolCallPart("echo", {"x": 1}, tool_call_id="c1")]),
    ]
    dumped = ModelMessagesTypeAdapter.dump_python(messages, mode="json")
    user = dumped[0]["parts"][0]
    assert (dumped[0]["kind"], user["part_kind"]) == ("request", "user-prompt"), "pin 'message JSON layout'"
    assert [c if isinstance(c, str) else c["kind"] for c in user["content"]] == ["Look:", "binary", "image-url"], (
        f"pin 'message JSON layout': a user prompt's content is {user['content']!r}"
    )
    call = dumped[1]["parts"][1]
    assert (dumped[1]["kind"], call["part_kind"], call["tool_name"], call["tool_call_id"]) == (
        "response",
        "tool-call",
        "echo",
        "c1",
    ), "pin 'message JSON layout': a tool call's fields"
    ref = {"type": "image_url", "ref": "run/0", "media_type": "image/png", "bytes": len(PNG)}
    prompt = Prompt({"run/0": {"type": "image_url", "image_url": {"url": _data_url(PNG)}}}, "openai")
    assert prompt.content([ref]) == [image]
    kept = stored_form(messages, dumped, prompt)
    assert kept[0]["parts"][0]["content"][1] == ref and base64.b64encode(PNG).decode() not in json.dumps(kept)
    assert refs_in(kept) == ["run/0"]
    assert restored(kept[0], prompt) == messages[0], "pin 'message JSON layout': a stored prompt does not restore"
    (shown,) = user_messages(kept)
    assert shown["content"][1] == ref and as_chat(kept)[1]["tool_calls"][0]["function"]["name"] == "echo"


def _data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def test_pin_why_a_video_is_refused(fake_openai: Any) -> None:
    """The door refuses a video for a pydantic-ai agent (content.check_for_framework) because pydantic-ai's
    OpenAIChatModel raises on one; the day it takes one, this fails and the refusal can go."""
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=fake_openai.url, api_key="test"))
    fake_openai.responder = ScriptResponder(["never asked"])
    agent = Agent(model)
    video = BinaryContent(b"\x00\x00\x00\x18ftypmp42", media_type="video/mp4")
    with pytest.raises(NotImplementedError):
        agent.run_sync(["What is this?", video])

"""What makes a journaled pydantic-ai unit the same unit on replay (segment.identity), without Redis: its kind,
the model and the tool names for a model request, the tool and the call id for a tool call; not the messages."""

from __future__ import annotations

from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.durable_exec import ModelRequestId, ToolsetCallToolId
from pydantic_ai.messages import ModelRequest, SystemPromptPart, UserPromptPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import RunUsage

from agents_celery.contrib.pydantic_ai.segment import identity


def _request(instructions: str, model: str = "gpt-4o-mini", tools: tuple[str, ...] = ("a", "b")) -> str:
    ctx: RunContext[None] = RunContext(deps=None, model=TestModel(model_name=model), usage=RunUsage())
    messages = [ModelRequest(parts=[SystemPromptPart(instructions), UserPromptPart("Weather in London?")])]
    params = ModelRequestParameters(function_tools=[ToolDefinition(name=t) for t in tools])
    return identity(ModelRequestId(model_name="default"), (None, messages, None, params, ctx))


def _tool_call(name: str, call_id: str, args: dict[str, Any]) -> str:
    ctx: RunContext[None] = RunContext(deps=None, model=TestModel(), usage=RunUsage(), tool_call_id=call_id)
    op = ToolsetCallToolId(toolset_id="t", toolset_kind="function")
    return identity(op, (name, args, ctx, None))


def test_a_request_whose_instructions_changed_is_the_same_unit() -> None:
    assert _request("It is now 10:00:00.1") == _request("It is now 10:00:03.7")


def test_another_model_or_another_tool_set_is_another_unit() -> None:
    assert _request("x", model="gpt-4o") != _request("x", model="gpt-4o-mini")
    assert _request("x", tools=("a", "c")) != _request("x", tools=("a", "b"))
    assert _request("x", tools=("b", "a")) == _request("x", tools=("a", "b"))


def test_a_tool_call_is_its_tool_and_its_call_id() -> None:
    assert _tool_call("get", "c1", {"x": 1}) == _tool_call("get", "c1", {"x": 2})
    assert _tool_call("get", "c1", {}) != _tool_call("get", "c2", {})
    assert _tool_call("get", "c1", {}) != _tool_call("put", "c1", {})

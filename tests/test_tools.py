"""Tools: schema from type hints and docstrings, argument validation, context injection, invocation."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from agents_celery.errors import ConfigurationError, ToolArgumentsError
from agents_celery.tools import Tool, ToolContext, tool

CTX = ToolContext(run_id="run-1", tool_call_id="call-1")


@tool
def add(a: int, b: int = 1) -> int:
    """Add two numbers.

    Used to test schemas.

    Args:
        a: The first number.
        b (int): The second number,
            which defaults to one.
    """
    return a + b


class Point(BaseModel):
    x: float
    y: float


@dataclass
class Box:
    width: int
    label: str


def test_schema_from_hints_defaults_and_docstring() -> None:
    assert isinstance(add, Tool)
    assert add.name == "add"
    assert add.description == "Add two numbers."
    assert add.parameters == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "The first number."},
            "b": {"type": "integer", "default": 1, "description": "The second number, which defaults to one."},
        },
        "required": ["a"],
        "additionalProperties": False,
    }
    assert add.openai_schema() == {
        "type": "function",
        "function": {"name": "add", "description": "Add two numbers.", "parameters": add.parameters},
    }
    assert add.manifest() == {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": add.parameters,
        "requires_confirmation": False,
        "idempotent": False,
        "timeout": None,
    }


def test_schema_covers_richer_types_and_overrides() -> None:
    @tool(name="place-point", description="Put a point somewhere.")
    def place(point: Point, mode: Literal["fast", "slow"] = "fast", tags: list[str] | None = None) -> str:
        """Ignored docstring."""
        return mode

    props = place.parameters["properties"]
    assert place.name == "place-point"
    assert place.description == "Put a point somewhere."
    assert props["point"] == {"$ref": "#/$defs/Point"}
    assert "Point" in place.parameters["$defs"]
    assert props["mode"]["enum"] == ["fast", "slow"]
    assert place.parameters["required"] == ["point"]


def test_parameters_may_shadow_basemodel_attributes() -> None:
    @tool
    def query(schema: str, json: str = "{}", model_name: str = "m") -> str:
        """Run a query."""
        return f"{schema}|{json}|{model_name}"

    assert set(query.parameters["properties"]) == {"schema", "json", "model_name"}
    assert query.invoke({"schema": "public"}, CTX) == "public|{}|m"


def test_docstring_without_args_section_and_no_docstring() -> None:
    @tool
    def ping() -> str:
        return "pong"

    assert ping.description == ""
    assert ping.parameters["properties"] == {}
    assert ping.invoke("", CTX) == "pong"  # some servers send "" for no arguments
    assert ping.invoke("{}", CTX) == "pong"


def test_validate_coerces_and_fills_defaults() -> None:
    assert add.validate('{"a": "3"}') == {"a": 3, "b": 1}
    assert add.validate({"a": 2, "b": 5}) == {"a": 2, "b": 5}


def test_validate_keeps_python_objects() -> None:
    @tool
    def draw(point: Point) -> str:
        """Draw."""
        return "ok"

    kwargs = draw.validate({"point": {"x": 1, "y": 2}})
    assert kwargs["point"] == Point(x=1, y=2)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"a": "x"}', "tool 'add': a: Input should be a valid integer"),
        ("{}", "tool 'add': a: Field required"),
        ('{"a": 1, "c": 2}', "tool 'add': c: Extra inputs are not permitted"),
        ('{"a": 1,', "tool 'add': arguments are not valid JSON"),
        ("[1, 2]", "tool 'add': arguments must be a JSON object, got list"),
        ({"a": [1]}, "tool 'add': a: Input should be a valid integer"),
    ],
)
def test_validate_errors_name_the_tool_and_field(arguments: dict[str, Any] | str, expected: str) -> None:
    with pytest.raises(ToolArgumentsError) as info:
        add.validate(arguments)
    assert str(info.value).startswith(expected)


def test_invoke_raises_tool_arguments_error_before_calling() -> None:
    calls: list[int] = []

    @tool
    def record(n: int) -> None:
        """Record."""
        calls.append(n)

    with pytest.raises(ToolArgumentsError, match="n: Field required"):
        record.invoke({}, CTX)
    assert calls == []


def test_context_is_injected_and_left_out_of_schema() -> None:
    seen: list[ToolContext] = []

    @tool
    def charge(amount: int, ctx: ToolContext) -> str:
        """Charge a card."""
        seen.append(ctx)
        return ctx.idempotency_key

    assert set(charge.parameters["properties"]) == {"amount"}
    assert charge.invoke({"amount": 5}, ToolContext("run-9", "call-3", attempt=2)) == "run-9:call-3"
    assert seen == [ToolContext(run_id="run-9", tool_call_id="call-3", attempt=2)]
    with pytest.raises(ToolArgumentsError, match="ctx: Extra inputs"):
        charge.validate({"amount": 5, "ctx": {}})


def test_idempotency_key() -> None:
    assert ToolContext(run_id="r", tool_call_id="c", attempt=3).idempotency_key == "r:c"
    assert CTX.attempt == 1


def test_tool_stays_callable_like_the_function() -> None:
    assert add(2, 3) == 5
    assert add(a=2) == 3
    assert add.__name__ == "add"
    assert add.__doc__ is not None and add.__doc__.startswith("Add two numbers.")


def test_async_tool_via_invoke_and_ainvoke() -> None:
    @tool
    async def slow_double(n: int, ctx: ToolContext) -> dict[str, Any]:
        """Double, slowly."""
        await asyncio.sleep(0)
        return {"n": n * 2, "call": ctx.tool_call_id}

    assert slow_double.is_async
    assert json.loads(slow_double.invoke({"n": 2}, CTX)) == {"n": 4, "call": "call-1"}
    assert json.loads(asyncio.run(slow_double.ainvoke('{"n": 3}', CTX))) == {"n": 6, "call": "call-1"}


def test_async_tool_invoke_inside_running_loop_is_a_clear_error() -> None:
    @tool
    async def nothing() -> str:
        """Nothing."""
        return ""

    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"use `await tool\.ainvoke"):
            nothing.invoke({}, CTX)

    asyncio.run(main())


def test_sync_tool_via_ainvoke_runs_in_a_thread() -> None:
    import threading

    @tool
    def where() -> str:
        """Thread name."""
        return threading.current_thread().name

    name = asyncio.run(where.ainvoke({}, CTX))
    assert name != threading.current_thread().name


def test_results_are_strings() -> None:
    @tool
    def value(kind: str) -> Any:
        """Return various things."""
        return {
            "str": "plain text",
            "int": 42,
            "none": None,
            "dict": {"a": [1, 2]},
            "model": Point(x=1, y=2),
            "dataclass": Box(width=3, label="b"),
            "nested": {"p": Point(x=0, y=1)},
            "odd": complex(1, 2),
        }[kind]

    assert value.invoke({"kind": "str"}, CTX) == "plain text"
    assert value.invoke({"kind": "int"}, CTX) == "42"
    assert value.invoke({"kind": "none"}, CTX) == "null"
    assert json.loads(value.invoke({"kind": "dict"}, CTX)) == {"a": [1, 2]}
    assert json.loads(value.invoke({"kind": "model"}, CTX)) == {"x": 1.0, "y": 2.0}
    assert json.loads(value.invoke({"kind": "dataclass"}, CTX)) == {"width": 3, "label": "b"}
    assert json.loads(value.invoke({"kind": "nested"}, CTX)) == {"p": {"x": 0.0, "y": 1.0}}
    assert value.invoke({"kind": "odd"}, CTX) == '"(1+2j)"'


def test_flags() -> None:
    @tool(requires_confirmation=True, idempotent=True)
    def delete(path: str) -> str:
        """Delete a file."""
        return path

    assert delete.requires_confirmation and delete.idempotent
    assert delete.manifest()["requires_confirmation"] is True
    assert delete.manifest()["idempotent"] is True
    assert not add.requires_confirmation and not add.idempotent


@pytest.mark.parametrize("bad", ["has space", "dot.name", "", "x" * 65, "emoji🙂"])
def test_bad_tool_name(bad: str) -> None:
    def fn() -> None:
        """Nothing."""

    with pytest.raises(ConfigurationError, match="is not valid"):
        tool(name=bad)(fn)


def test_unsupported_signatures() -> None:
    def star(*args: int) -> None:
        """Nothing."""

    with pytest.raises(ConfigurationError, match="passable by keyword"):
        tool(star)

    def two_contexts(a: ToolContext, b: ToolContext) -> None:
        """Nothing."""

    with pytest.raises(ConfigurationError, match="more than one"):
        tool(two_contexts)


def test_optional_tool_context_is_injected_and_left_out_of_the_schema() -> None:
    from agents_celery.tools import ToolContext, tool

    @tool
    def record(key: str, ctx: ToolContext | None = None) -> str:
        """Record a key."""
        return ctx.idempotency_key if ctx else "no context"

    assert list(record.parameters["properties"]) == ["key"]
    assert record.invoke({"key": "k"}, ToolContext(run_id="r", tool_call_id="c")) == "r:c"

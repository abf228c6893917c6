"""Tools: plain Python functions the model may call, with a JSON schema built from their type hints.

::

    @tool
    def add(a: int, b: int = 1) -> int:
        '''Add two numbers.

        Args:
            a: The first number.
            b: The second number.
        '''
        return a + b

    add.openai_schema()   # {"type": "function", "function": {"name": "add", ...}}
    add.invoke('{"a": 2}', ToolContext(run_id="r1", tool_call_id="c1"))   # '3'
    add(2, 3)             # 5: a Tool stays callable like the function it wraps

A parameter annotated :class:`ToolContext` (any name) is left out of the schema and receives the run id
and tool call id, so a tool with side effects can pass ``context.idempotency_key`` to the system it calls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from .errors import ConfigurationError, ToolArgumentsError
from .greenlets import green, run_coroutine

__all__ = ["Tool", "ToolContext", "tool"]

#: OpenAI's rule for function names.
_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_SECTION_RE = re.compile(r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples?|Notes?|Warnings?):\s*$")
_ARG_LINE_RE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@dataclass(frozen=True)
class ToolContext:
    """What a tool learns about the call it serves.

    Attributes:
        run_id: Id of the run that called the tool.
        tool_call_id: Id the model gave this call; stable across retries of the step.
        attempt: 1 on the first execution, higher when the call is executed again after a crash.
        client: What the client that started the run passed along (AG-UI ``state``, ``context``,
            ``forwarded_props``); empty for runs started otherwise.
        timeout: Seconds the step waits for this call (the tool's ``timeout``, else
            ``AGENTS_CELERY_TOOL_TIMEOUT_SECONDS``); None outside a step.
    """

    run_id: str
    tool_call_id: str
    attempt: int = 1
    client: Mapping[str, Any] = field(default_factory=dict)
    timeout: float | None = None

    @property
    def idempotency_key(self) -> str:
        """A key that is the same every time this very call is retried: ``"<run_id>:<tool_call_id>"``."""
        return f"{self.run_id}:{self.tool_call_id}"


class Tool:
    """A function the model may call. Build one with :func:`tool`.

    Attributes:
        name: Name the model calls the tool by.
        description: What the tool does, for the model.
        parameters: JSON schema (an object) of the arguments.
        requires_confirmation: Whether a run pauses for a human decision before calling it.
        idempotent: Whether calling it twice with the same arguments is harmless (it may be re-run after a crash).
        timeout: Seconds a call may take before the step walks away from it and the model gets an error
            result (None: ``AGENTS_CELERY_TOOL_TIMEOUT_SECONDS``).
        is_async: Whether ``fn`` is a coroutine function.
        fn: The wrapped function.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_confirmation: bool = False,
        idempotent: bool = False,
        timeout: float | None = None,
    ) -> None:
        self.fn = fn
        self.name = name if name is not None else fn.__name__
        if not _NAME_RE.match(self.name):
            raise ConfigurationError(
                f"tool name {self.name!r} is not valid: use 1 to 64 letters, digits, '_' or '-' (OpenAI's rule); "
                "pass name=... to @tool to choose another"
            )
        doc = inspect.getdoc(fn) or ""
        self.description = description if description is not None else _first_paragraph(doc)
        self.requires_confirmation = requires_confirmation
        self.idempotent = idempotent
        if timeout is not None and not timeout > 0:
            raise ConfigurationError(
                f"tool {self.name!r}: timeout must be a positive number of seconds, got {timeout!r}"
            )
        self.timeout = timeout
        self.is_async = inspect.iscoroutinefunction(fn)
        self._context_param, fields = _signature_fields(fn, self.name, _arg_descriptions(doc))
        self._args_model = _build_model(self.name, fields)
        self._aliases = {alias: field_name for field_name, (_, info) in fields.items() if (alias := info.alias)}
        self.parameters = _clean_schema(self._args_model.model_json_schema(by_alias=True))
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", self.name)
        self.__qualname__ = getattr(fn, "__qualname__", self.name)
        self.__module__ = getattr(fn, "__module__", __name__)
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly, as if the decorator were not there."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        flags = f"requires_confirmation={self.requires_confirmation}, idempotent={self.idempotent}"
        return f"Tool(name={self.name!r}, {flags})"

    def validate(self, arguments: dict[str, Any] | str) -> dict[str, Any]:
        """Check arguments against the tool's parameters.

        Args:
            arguments: The arguments as the model sent them: a JSON string, or an already decoded dict.

        Returns:
            The keyword arguments to call ``fn`` with, coerced to the annotated types (defaults filled in).

        Raises:
            ToolArgumentsError: The JSON is invalid, is not an object, or fields are missing, unknown or invalid.
        """
        data = self._decode(arguments)
        try:
            parsed = self._args_model.model_validate(data)
        except pydantic.ValidationError as exc:
            raise ToolArgumentsError(f"tool {self.name!r}: {_format_errors(exc)}") from None
        return {alias: getattr(parsed, field_name) for alias, field_name in self._aliases.items()}

    def invoke(self, arguments: dict[str, Any] | str, context: ToolContext) -> str:
        """Validate the arguments, call the tool and return its result as a string.

        An async tool runs on the process's one asyncio loop (:mod:`agents_celery.greenlets`), which MCP connections
        and pydantic-ai agents share, and this thread waits for it; from async code use :meth:`ainvoke`.

        Args:
            arguments: JSON string or dict of arguments.
            context: The call's context, handed to the tool if it declares a ``ToolContext`` parameter.

        Returns:
            The result: a ``str`` as returned, anything else JSON-encoded.

        Raises:
            ToolArgumentsError: The arguments do not match the tool's parameters.
            RuntimeError: The tool is async and an event loop is already running in this thread.
        """
        kwargs = self._call_kwargs(arguments, context)
        if not self.is_async:
            return _result_to_str(self.fn(**kwargs))
        if green() or not _loop_running():  # greenlets share their thread's running loop: the process's one loop
            return _result_to_str(run_coroutine(self.fn(**kwargs)))
        raise RuntimeError(
            f"tool {self.name!r} is async and an event loop is already running in this thread; "
            "use `await tool.ainvoke(...)` instead of `tool.invoke(...)`"
        )

    async def ainvoke(self, arguments: dict[str, Any] | str, context: ToolContext) -> str:
        """Like :meth:`invoke`, from async code; a sync tool runs in a worker thread (:func:`asyncio.to_thread`)."""
        kwargs = self._call_kwargs(arguments, context)
        if self.is_async:
            return _result_to_str(await self.fn(**kwargs))
        return _result_to_str(await asyncio.to_thread(self.fn, **kwargs))

    def manifest(self) -> dict[str, Any]:
        """What a worker publishes about the tool (JSON-serializable)."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "requires_confirmation": self.requires_confirmation,
            "idempotent": self.idempotent,
            "timeout": self.timeout,
        }

    def openai_schema(self) -> dict[str, Any]:
        """The tool as an entry of the Chat Completions ``tools`` list."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def _decode(self, arguments: dict[str, Any] | str) -> Any:
        if not isinstance(arguments, str):
            data: Any = arguments
        elif not arguments.strip():
            # Some servers send "" for a call without arguments.
            data = {}
        else:
            try:
                data = json.loads(arguments)
            except json.JSONDecodeError as exc:
                raise ToolArgumentsError(f"tool {self.name!r}: arguments are not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ToolArgumentsError(f"tool {self.name!r}: arguments must be a JSON object, got {type(data).__name__}")
        return data

    def _call_kwargs(self, arguments: dict[str, Any] | str, context: ToolContext) -> dict[str, Any]:
        kwargs = self.validate(arguments)
        if self._context_param is not None:
            kwargs[self._context_param] = context
        return kwargs


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_confirmation: bool = False,
    idempotent: bool = False,
    timeout: float | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_confirmation: bool = False,
    idempotent: bool = False,
    timeout: float | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a function into a :class:`Tool`; use as ``@tool`` or ``@tool(requires_confirmation=True)``.

    Args:
        fn: The function (when used as a bare decorator).
        name: Name for the model; defaults to the function's name.
        description: Description for the model; defaults to the docstring's first paragraph.
        requires_confirmation: Pause the run for a human decision before each call.
        idempotent: The tool may safely run again with the same arguments (after a crash mid-call).
        timeout: Seconds a call may take; past it the step walks away and the model gets an error result.

    Returns:
        The tool, or a decorator that makes one.

    Raises:
        ConfigurationError: The name is not a valid OpenAI function name, a parameter cannot be described, or
            ``timeout`` is not a positive number.
    """

    def wrap(func: Callable[..., Any]) -> Tool:
        return Tool(
            func,
            name=name,
            description=description,
            requires_confirmation=requires_confirmation,
            idempotent=idempotent,
            timeout=timeout,
        )

    return wrap(fn) if fn is not None else wrap


def _loop_running() -> bool:
    """Whether an event loop runs in this thread (a coroutine calling :meth:`Tool.invoke`)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _result_to_str(result: Any) -> str:
    """Turn a tool's return value into the text handed back to the model.

    Args:
        result: What the tool returned.

    Returns:
        A ``str`` unchanged; anything else as JSON (pydantic models and dataclasses as their fields,
        unknown objects via ``str``).
    """
    if isinstance(result, str):
        return result
    return json.dumps(result, default=_json_default, ensure_ascii=False)


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def _first_paragraph(doc: str) -> str:
    lines: list[str] = []
    for line in doc.splitlines():
        if not line.strip() or _SECTION_RE.match(line.strip()):
            break
        lines.append(line.strip())
    return " ".join(lines)


def _arg_descriptions(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section."""
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() in ("Args:", "Arguments:")), None)
    if start is None:
        return {}
    header_indent = _indent(lines[start])
    descriptions: dict[str, list[str]] = {}
    entry_indent: int | None = None
    current: str | None = None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        indent = _indent(line)
        if indent <= header_indent:
            break
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_LINE_RE.match(line.strip())
        if indent == entry_indent and match:
            current = match.group(1)
            descriptions[current] = [match.group(2).strip()]
        elif indent > entry_indent and current is not None:
            descriptions[current].append(line.strip())
    return {name: " ".join(part for part in parts if part) for name, parts in descriptions.items()}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


_Fields = dict[str, tuple[Any, Any]]


def _signature_fields(fn: Callable[..., Any], tool_name: str, docs: dict[str, str]) -> tuple[str | None, _Fields]:
    """The pydantic fields of the arguments model, and the name of the ``ToolContext`` parameter if any.

    Fields get neutral names (``f0``, ``f1``...) with the parameter name as alias, so a parameter may be called
    ``schema``, ``json`` or ``model_name`` without clashing with ``BaseModel``'s own attributes.
    """
    try:
        hints = inspect.get_annotations(fn, eval_str=True)
    except Exception as exc:
        raise ConfigurationError(
            f"tool {tool_name!r}: cannot resolve the type hints ({exc}); define the types at module level"
        ) from exc
    context_param: str | None = None
    fields: _Fields = {}
    for param in inspect.signature(fn).parameters.values():
        annotation = hints.get(param.name, Any)
        if _is_context(annotation):
            if context_param is not None:
                raise ConfigurationError(f"tool {tool_name!r}: more than one parameter is annotated ToolContext")
            context_param = param.name
            continue
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise ConfigurationError(
                f"tool {tool_name!r}: parameter {param.name!r} must be passable by keyword (no *args, **kwargs, "
                "or positional-only parameters)"
            )
        default = ... if param.default is param.empty else param.default
        info = Field(default, alias=param.name, description=docs.get(param.name))
        fields[f"f{len(fields)}"] = (annotation, info)
    return context_param, fields


def _is_context(annotation: Any) -> bool:
    """``ToolContext`` itself, or ``ToolContext | None`` / ``Optional[ToolContext]``."""
    if annotation is ToolContext:
        return True
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and args == [ToolContext]


def _build_model(tool_name: str, fields: _Fields) -> type[BaseModel]:
    try:
        return pydantic.create_model(  # type: ignore[call-overload, no-any-return]
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid", populate_by_name=False, arbitrary_types_allowed=False),
            **fields,
        )
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError, NameError) as exc:
        raise ConfigurationError(f"tool {tool_name!r}: cannot build an argument schema: {exc}") from exc


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's generated titles, which only repeat the names."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return schema


def _format_errors(exc: pydantic.ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)

"""One segment of an Agents SDK run: the SDK's own ``Runner`` driven once, its model calls and function tools
journaled as units through the guests' shared segment (:mod:`agents_celery.contrib.guests.segment`, whose docstring
says how a unit is run or replayed).

Only the SDK's public seams are used:

- **The model** is :class:`JournaledModel`, the run config's ``model``: every model call of every agent of the run
  reaches it, and it calls that agent's own model (``agent.model``: a ``Model``, or a name the SDK's default
  provider resolves) inside a unit named ``<agent>.model``. The current agent is the one the runner's
  ``on_llm_start`` hook names (:class:`SegmentHooks`). The unit's live stream is the model's Responses stream events,
  as our events (:class:`.events.ResponseStream`); its result is the terminal response (output, usage, id), which
  a replay hands back to the runner as a ``response.completed`` event without calling the model.
- **Function tools**: each ``FunctionTool``'s ``on_invoke_tool`` is wrapped once (:func:`wrap_tool`), in place; the
  wrapper is transparent outside a worker's segment (a script's ``Runner.run`` is a plain run). Inside one, a call
  is a unit named ``tool:<name>`` through the effect ledger (``run_id:call_id``); its result, as the model is
  shown it (``ItemHelpers.tool_call_output_item``), is journaled with its TOOL_CALL_RESULT.
- **MCP servers** (``mcp_servers=[...]``): each server's ``call_tool`` is wrapped the same way (:func:`wrap_server`):
  a call is a unit named ``mcp:<server>.<tool>`` through the effect ledger, journaled with the server's
  ``CallToolResult``; the segment connects the servers for its run (:mod:`.guest`).

A unit's identity (:func:`~agents_celery.contrib.guests.segment.digest`) is its kind, agent, the model's name and the
names of the tools and handoffs it offers for a model call; the tool and the call id for a tool call. Never the
prompt: dynamic instructions (the date) differ on every attempt, and the recorded response stands.

The results the model is shown of calls that ran no unit of ours (a rejected approval, a handoff, a tool the wrapper
did not see) are read off the next model call's input, and a handoff shows as the agent changing between two model
calls: both are kept for the next unit (:meth:`~agents_celery.contrib.guests.segment.GuestSegment.keep`), so a replay
writes them once.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agents import Agent as SdkAgent
from agents import FunctionTool, ItemHelpers, RunHooks, Usage
from agents.items import ModelResponse
from agents.models import get_default_model_settings
from agents.models.interface import Model, ModelProvider
from agents.models.multi_provider import MultiProvider
from openai.types.responses import Response, ResponseCompletedEvent, ResponseFunctionToolCall

from ...events import NewEvent
from ..guests.segment import GuestCall, GuestSegment, digest
from .events import ResponseStream, handoff, tool_result

_CURRENT: contextvars.ContextVar[Segment | None] = contextvars.ContextVar("agents_celery_sdk_segment", default=None)

#: The attribute :func:`idempotent` sets on a tool.
IDEMPOTENT = "__agents_celery_idempotent__"
#: The attribute our wrapper carries (a tool wrapped once stays so).
_WRAPPED = "__agents_celery_journaled__"
#: The Agents SDK's marker of a sync function tool's invoker (kept on our wrapper: the SDK reads it).
_SYNC_MARKER = "__agents_sync_function_tool__"
#: What a recorded response keeps of the SDK's ``Response``: the runner reads its output, usage and id.
_KEPT = ("id", "created_at", "model", "output", "usage")


def current_segment() -> Segment | None:
    """The segment the running task belongs to (None outside a worker's segment)."""
    return _CURRENT.get()


def idempotency_key(ctx: Any) -> str | None:
    """The idempotency key of the tool call ``ctx`` (the SDK's ``ToolContext``) is running for on a worker,
    ``<run_id>:<tool_call_id>``, the key of its effect-ledger entry: pass it to external APIs so that a call run
    again (approved after a crash) is recognised there. None outside a worker's segment."""
    segment = current_segment()
    call_id = getattr(ctx, "tool_call_id", None)
    if segment is None or not call_id:
        return None
    return f"{segment.run_id}:{call_id}"


def idempotent(tool: FunctionTool) -> FunctionTool:
    """Mark ``tool`` safe to run twice: a call of it that started in a crashed attempt runs again instead of pausing
    the run as "may have run". Returns the tool (use it around ``function_tool``)."""
    setattr(tool, IDEMPOTENT, True)
    return tool


def wrap_tool(tool: FunctionTool) -> None:
    """Route ``tool``'s calls through the segment running them (a journaled unit); in place, once. Outside a
    worker's segment the wrapper calls the tool's own invoker as it is."""
    original = tool.on_invoke_tool
    if getattr(original, _WRAPPED, False):
        return

    async def on_invoke_tool(ctx: Any, arguments: str) -> Any:
        segment = current_segment()
        if segment is None:
            return await original(ctx, arguments)
        return await segment.tool_call(tool, original, ctx, arguments)

    setattr(on_invoke_tool, _WRAPPED, True)
    if getattr(original, _SYNC_MARKER, False):
        setattr(on_invoke_tool, _SYNC_MARKER, True)
    tool.on_invoke_tool = on_invoke_tool


def wrap_tools(tools: list[Any]) -> None:
    for tool in tools:
        if isinstance(tool, FunctionTool):
            wrap_tool(tool)


def wrap_server(server: Any) -> None:
    """Route the calls of an agent's MCP server (``call_tool``) through the segment running them (a journaled
    unit); in place, once, transparent outside a worker's segment. The SDK makes an MCP server's function tools
    anew for every run, so the server, which stays, is where its calls are met."""
    original = server.call_tool
    if getattr(original, _WRAPPED, False):
        return

    async def call_tool(tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None) -> Any:
        segment = current_segment()
        if segment is None:
            return await (original(tool_name, arguments) if meta is None else original(tool_name, arguments, meta))
        return await segment.mcp_call(server, original, tool_name, arguments, meta)

    setattr(call_tool, _WRAPPED, True)
    server.call_tool = call_tool


def wrap_graph(agent: SdkAgent[Any], seen: set[int] | None = None) -> None:
    """Wrap the function tools and MCP servers of ``agent`` and of the agents it hands off to (given as agents)."""
    seen = set() if seen is None else seen
    if id(agent) in seen:
        return
    seen.add(id(agent))
    wrap_tools(list(agent.tools))
    for server in agent.mcp_servers:
        wrap_server(server)
    for other in agent.handoffs:
        if isinstance(other, SdkAgent):
            wrap_graph(other, seen)


@dataclass
class Segment(GuestSegment):
    """One attempt at one segment of an Agents SDK run."""

    current: ClassVar[contextvars.ContextVar[Any]] = _CURRENT

    #: The agent whose model call is next (the runner's ``on_llm_start`` names it), and the last one's.
    agent: SdkAgent[Any] | None = None
    last_agent: str | None = None
    #: Edited arguments of approved calls (call id -> JSON), applied when the call runs.
    edits: dict[str, str] = field(default_factory=dict)
    #: The calls of this segment (its model calls asked for them, or it resumed them): results are shown for these.
    calls: set[str] = field(default_factory=set)
    #: The calls whose TOOL_CALL_RESULT is written or kept.
    resulted: set[str] = field(default_factory=set)
    #: Model units met (run or replayed).
    model_calls: int = 0
    #: What a unit raised where the SDK turns any exception into a model-visible error (an MCP server's
    #: ``call_tool``): raised again at the next model call or at the segment's end, out of the SDK's reach.
    escaped: BaseException | None = None
    _handoff_tools: set[str] = field(default_factory=set)
    _last_calls: dict[str, str] = field(default_factory=dict)

    def reraise(self) -> None:
        """Raise what escaped the SDK's error handling, if anything did (:attr:`escaped`)."""
        if self.escaped is not None:
            raise self.escaped

    # -- model calls ------------------------------------------------------------------------------------------

    def before_model(self, agent: SdkAgent[Any], input: Any, handoffs: list[Any]) -> None:
        """Keep what the runner did since the last model call: the results of this segment's calls the model is
        now shown, and a handoff (the agent changed)."""
        for item in input if isinstance(input, list) else []:
            if not isinstance(item, dict) or item.get("type") != "function_call_output":
                continue
            call_id = item.get("call_id")
            if isinstance(call_id, str) and call_id in self.calls and call_id not in self.resulted:
                self.resulted.add(call_id)
                self.keep([tool_result(call_id, item.get("output"))])
        if self.last_agent is not None and agent.name != self.last_agent:
            moved = next((c for c, name in self._last_calls.items() if name in self._handoff_tools), None)
            self.keep([handoff(self.last_agent, agent.name, moved)])
        self.last_agent = agent.name
        self._handoff_tools = {getattr(h, "tool_name", "") for h in handoffs}

    def after_model(self, output: list[Any]) -> None:
        """Note the calls a model response asked for (recorded or live)."""
        self.model_calls += 1
        self._last_calls = {}
        for item in output:
            data = item if isinstance(item, dict) else item.model_dump()
            if data.get("type") == "function_call":
                self.calls.add(data["call_id"])
                self._last_calls[data["call_id"]] = data.get("name", "")

    def finish(self, items: list[Any]) -> list[NewEvent]:
        """The events kept when the run's loop returned, with the results of this segment's calls the model was
        never shown (a run that stops at a tool; the calls a pause left done): for the step's commit."""
        for item in items:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                call_id = item.get("call_id")
                if isinstance(call_id, str) and call_id in self.calls and call_id not in self.resulted:
                    self.resulted.add(call_id)
                    self.keep([tool_result(call_id, item.get("output"))])
        return self.take_kept()

    # -- tool calls -------------------------------------------------------------------------------------------

    async def tool_call(self, tool: FunctionTool, original: Callable[..., Any], ctx: Any, arguments: str) -> Any:
        """A function tool's call as a unit: through the effect ledger, journaled with its TOOL_CALL_RESULT; the
        edited arguments of an approval applied; a call the user rejected after it may have run is not run."""
        call_id = str(getattr(ctx, "tool_call_id", "") or "")
        self.calls.add(call_id)
        rejected = self.rejection(call_id)
        if rejected is not None:
            self.resulted.add(call_id)
            self.keep([tool_result(call_id, rejected)])
            return rejected
        arguments = self.edits.get(call_id, arguments)
        raw_call = ResponseFunctionToolCall(type="function_call", call_id=call_id, name=tool.name, arguments=arguments)
        returned: list[Any] = []

        async def body() -> object:
            output = await original(ctx, arguments)
            returned.append(output)
            shown: object = ItemHelpers.tool_call_output_item(raw_call, output)["output"]
            return shown

        call = GuestCall(call_id, tool.name, arguments, idempotent=bool(getattr(tool, IDEMPOTENT, False)))
        result = await self.journaled(
            f"tool:{tool.name}",
            digest("tool", tool.name, call_id),
            body,
            call=call,
            result_events=lambda shown: [tool_result(call_id, shown)],
        )
        self.resulted.add(call_id)
        return returned[0] if returned else result

    async def mcp_call(
        self, server: Any, original: Any, tool_name: str, arguments: dict[str, Any] | None, meta: Any
    ) -> Any:
        """An MCP server's tool call as a unit named ``mcp:<server>.<tool>``, through the effect ledger. The SDK does
        not hand ``call_tool`` the model's call id: the call is known by its place (the segment, and how many calls
        of that name came before it in the segment: the same on every attempt), its TOOL_CALL_RESULT read off the
        next model call's input. A call the user rejected after it may have run is answered without the server."""
        from mcp.types import CallToolResult, TextContent

        name = f"mcp:{server.name}.{tool_name}"
        call_id = f"{name}@{self.number}.{self.ordinals.get(name, 0)}"
        rejected = self.rejection(call_id)
        if rejected is not None:
            return CallToolResult(content=[TextContent(type="text", text=rejected)], is_error=False)

        async def body() -> object:
            got = await (original(tool_name, arguments) if meta is None else original(tool_name, arguments, meta))
            dumped: object = got.model_dump(mode="json", exclude_none=True)
            return dumped

        call = GuestCall(call_id, tool_name, arguments or {})
        try:
            recorded = await self.journaled(name, digest("mcp", server.name, tool_name), body, call=call)
        except Exception as exc:  # the SDK would make ours a tool error the model sees: kept to raise again
            if _ours(exc):
                self.escaped = self.escaped or exc
            raise
        return CallToolResult.model_validate(recorded)


class SegmentHooks(RunHooks[Any]):
    """The runner's hooks of a segment: each model call's agent, for :class:`JournaledModel`."""

    def __init__(self, model: JournaledModel) -> None:
        self.model = model

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        self.model.agent = agent


class JournaledModel(Model):
    """The run config's model in a segment: each call, to the current agent's own model, a journaled unit."""

    def __init__(self, segment: Segment, provider: ModelProvider | None = None) -> None:
        self.segment = segment
        self.provider = provider or MultiProvider()
        self.agent: SdkAgent[Any] | None = None

    def _inner(self, agent: SdkAgent[Any]) -> Model:
        return agent.model if isinstance(agent.model, Model) else self.provider.get_model(agent.model)

    def _unit(self, agent: SdkAgent[Any], inner: Model, tools: list[Any], handoffs: list[Any]) -> tuple[str, str]:
        names = sorted(getattr(t, "name", type(t).__name__) for t in tools)
        moves = sorted(getattr(h, "tool_name", "") for h in handoffs)
        model = getattr(inner, "model", None) or type(inner).__name__
        return f"{agent.name}.model", digest("model", agent.name, str(model), names, moves)

    def _settings(self, agent: SdkAgent[Any], settings: Any) -> Any:
        """The agent's own settings where the runner gave a model of ours the empty ones it gives any run-wide
        model (a model named by a string gets the SDK's defaults for that name, as without us)."""
        if not isinstance(agent.model, Model) and settings == type(settings)():
            return agent.model_settings if agent.model_settings is not None else get_default_model_settings()
        return settings

    def _begin(self, input: Any, tools: list[Any], handoffs: list[Any]) -> tuple[SdkAgent[Any], Model]:
        self.segment.reraise()  # before this call's input (with the error the SDK made of it) is taken in
        agent = self.agent
        if agent is None:
            raise RuntimeError("JournaledModel called outside a run whose hooks name the agent (SegmentHooks)")
        wrap_tools(list(agent.tools))  # an agent reached through a Handoff object is first met here
        self.segment.before_model(agent, input, handoffs)
        return agent, self._inner(agent)

    def stream_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        return self._stream(system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, kwargs)

    async def _stream(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        kwargs: dict[str, Any],
    ) -> AsyncIterator[Any]:
        agent, inner = self._begin(input, tools, handoffs)
        settings = self._settings(agent, model_settings)
        stream = ResponseStream()

        async def body() -> object:
            completed: Any = None
            done: list[Any] = []
            source: AsyncIterator[Any] = inner.stream_response(
                system_instructions, input, settings, tools, output_schema, handoffs, tracing, **kwargs
            )
            async for event in source:
                for ev in stream.feed(event):
                    self.segment.emit(ev)
                kind = getattr(event, "type", "")
                if kind == "response.completed":
                    completed = event.response
                elif kind == "response.output_item.done":
                    done.append(event.item)
                elif kind in ("response.failed", "response.incomplete", "error", "response.error"):
                    raise RuntimeError(f"the model's stream ended with {kind}: {_error_of(event)}")
            if completed is None:
                raise RuntimeError("the model's stream ended without a completed response")
            return _recorded(completed, done)

        name, identity = self._unit(agent, inner, tools, handoffs)
        recorded: Any = await self.segment.journaled(name, identity, body, stream=stream)
        response = _response(recorded)
        self.segment.after_model(list(response.output))
        yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        agent, inner = self._begin(input, tools, handoffs)
        settings = self._settings(agent, model_settings)

        async def body() -> object:
            got = await inner.get_response(
                system_instructions, input, settings, tools, output_schema, handoffs, tracing, **kwargs
            )
            usage = {"input_tokens": got.usage.input_tokens, "output_tokens": got.usage.output_tokens}
            output = [item.model_dump(mode="json") for item in got.output]
            return {"id": got.response_id, "output": output, "usage": {**usage, "requests": got.usage.requests}}

        name, identity = self._unit(agent, inner, tools, handoffs)
        recorded: Any = await self.segment.journaled(name, identity, body)
        output = list(_response({"output": recorded["output"]}).output)
        self.segment.after_model(output)
        used = recorded.get("usage") or {}
        usage = Usage(
            requests=used.get("requests", 1),
            input_tokens=used.get("input_tokens", 0),
            output_tokens=used.get("output_tokens", 0),
            total_tokens=used.get("input_tokens", 0) + used.get("output_tokens", 0),
        )
        return ModelResponse(output=output, usage=usage, response_id=recorded.get("id"))


def _ours(exc: BaseException) -> bool:
    """Whether ``exc`` is the step's to handle (a call that may have run, a stop, a lost lease, a journal that does
    not fit, Redis not answering), not the tool's."""
    from ...engine.steps import Cancelled
    from ...errors import AgentsCeleryError
    from ...storage.connections import is_unavailable
    from ..guests.segment import MayHaveRun

    return isinstance(exc, AgentsCeleryError | Cancelled | MayHaveRun) or is_unavailable(exc)


def _error_of(event: Any) -> str:
    response = getattr(event, "response", None)
    error = getattr(response, "error", None) or getattr(event, "message", None)
    return str(error) if error else "no reason given"


def _recorded(response: Response, done: list[Any]) -> dict[str, Any]:
    """What a model unit journals of the terminal response: its id, output (the items its stream finished, when
    the terminal response carries none, as the runner does), usage and model; not its instructions or tools."""
    data = response.model_dump(mode="json", include=set(_KEPT))
    if not data.get("output") and done:
        data["output"] = [item.model_dump(mode="json") for item in done]
    return data


def _response(recorded: dict[str, Any]) -> Response:
    """The SDK's ``Response`` of a recorded unit (what the runner reads: output, usage, id)."""
    data = {
        "id": "resp_replayed",
        "created_at": 0,
        "model": "unknown",
        **{k: v for k, v in recorded.items() if v is not None},
        "object": "response",
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
    }
    return Response.model_validate(data)


def dumped(items: list[Any]) -> list[dict[str, Any]]:
    """Input items as JSON dicts (the SDK's ``to_input_list()`` may hold models)."""
    out = []
    for item in items:
        value = item if isinstance(item, dict) else item.model_dump(mode="json", exclude_unset=True)
        out.append(json.loads(json.dumps(value, default=str)))
    return out

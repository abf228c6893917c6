"""An Agents SDK agent as an agent of ours: its manifest, and each step of its runs as one segment.

A segment is the SDK's own ``Runner.run_streamed`` driven to its end (:mod:`.segment` journals its units): from the
run's messages the first time, from the SDK's saved ``RunState`` after a pause for approvals. It ends with the run
(its final output) or with a pause: the SDK's interruptions (``needs_approval`` tools), saved with
``RunState.to_json()`` in the run's state; or a call that may have run in a crashed attempt. ``continue_run``
decisions become ``state.approve(item)`` / ``state.reject(item, rejection_message=...)`` on the saved state, and
an approval's edited arguments are what the call runs with.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent as SdkAgent
from agents import AgentOutputSchema, AgentOutputSchemaBase, FunctionTool, RunConfig, Runner, RunState
from agents.run_config import ToolExecutionConfig

from ...agent import Agent
from ...content import refs_in
from ...engine.steps import Cancelled, StepContext, StepResult, completed, paused
from ...errors import AgentsCeleryError
from ...runs import RunState as OurState
from ...runs import ToolCall
from ...storage.connections import is_unavailable
from ..guests.agent import GuestTool, Journals, ModelName, drive, output_value, split_decided, with_may_have_run
from ..guests.segment import MayHaveRun
from .items import Split, sdk_items, split_messages, typed
from .segment import IDEMPOTENT, JournaledModel, Segment, SegmentHooks, dumped, wrap_graph

#: The key of a run's ``client`` dict under which a caller passes the SDK run's options (``context``,
#: ``max_turns``): what ``CeleryRunner.run(..., context=..., max_turns=...)`` sends.
CLIENT_KEY = "openai_agents"
#: The SDK's own default.
DEFAULT_MAX_TURNS = 10
_INVALID = re.compile(r"[^A-Za-z0-9_.-]")


def served_name(agent: SdkAgent[Any]) -> str:
    """The name an SDK agent is served under: its own, with what our agent names may not hold (spaces ...) as
    ``_`` (``"Billing agent"`` is served as ``Billing_agent``)."""
    name = _INVALID.sub("_", agent.name.strip())[:64].lstrip("_.-")
    return name or "agent"


class SdkGuest(Agent):
    """An Agents SDK agent served by our workers (made by the agents module loader, :func:`.served`)."""

    guest = True

    def __init__(self, agent: SdkAgent[Any]) -> None:
        model = agent.model
        model_name = model if isinstance(model, str) else getattr(model, "model", None) or type(model).__name__
        tools = [GuestTool(spec) for spec in tool_manifests(agent)]
        description = agent.handoff_description or ""
        name = served_name(agent)
        super().__init__(name, model=ModelName(str(model_name or "default")), tools=tools, description=description)  # type: ignore[arg-type]
        self.sdk_agent = agent
        self._journals = Journals()
        wrap_graph(agent)
        #: The MCP servers of the agents its runs may reach (given as agents): each segment connects them.
        self._servers = servers_of(agent)

    def manifest(self) -> dict[str, Any]:
        handoffs = [getattr(h, "name", None) or getattr(h, "agent_name", "") for h in self.sdk_agent.handoffs]
        return {
            **super().manifest(),
            "framework": "openai-agents",
            "output_schema": output_schema(self.sdk_agent),
            "handoffs": handoffs,
        }

    def run_step(self, ctx: StepContext) -> StepResult:
        """One segment: the SDK's runner under the journal, until the run ends or pauses."""
        state = ctx.state
        decided, deferred = split_decided(state)
        refs = refs_in(state.messages)
        parts = ctx.store.parts.fetch(state, refs) if refs else {}
        split = split_messages(state.messages, state.history_len)
        segment = Segment.of_step(ctx, self._journals.of(ctx), decided)
        saved = state.guest_state
        options = state.client.get(CLIENT_KEY) or {}
        agent = with_client_tools(self.sdk_agent, state.client_tools, deferred)
        try:
            if saved is None:
                asked = options.get("input")  # CeleryRunner's list input: the items as the caller gave them
                taken = [typed(i) for i in asked] if isinstance(asked, list) else split.new
                given = _context_items(state) + sdk_items([*split.history, *taken], parts)
                result = drive(ctx, segment, self._run(agent, segment, given, options))
            else:
                resumed = _Resume(saved, deferred, sdk_items(split.new, parts))
                result = drive(ctx, segment, self._resume(agent, segment, resumed, options))
        except MayHaveRun as exc:
            return paused(self, state.model_copy(update={"tool_calls": with_may_have_run(state, exc.call)}), [])
        if saved is None:
            given_count, prompts = len(given), split.new
        else:
            given_count, prompts = int(saved["given"]), split.own[: int(saved["prompts"])]
        return self._settle(state, segment, result, split, given_count, prompts)

    def _config(self, segment: Segment) -> tuple[RunConfig, SegmentHooks]:
        model = JournaledModel(segment)
        config = RunConfig(
            model=model,
            workflow_name=self.name,  # tracing as the process set it up (agents.set_tracing_disabled ...)
            # One call after another: the order of a segment's units is the same on every attempt.
            tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1),
        )
        return config, SegmentHooks(model)

    async def _run(
        self, agent: SdkAgent[Any], segment: Segment, given: list[dict[str, Any]], options: dict[str, Any]
    ) -> Any:
        token = segment.enter()
        try:
            async with connected(self._servers):
                return await self._first(agent, segment, given, options)
        finally:
            segment.leave(token)

    async def _first(
        self, agent: SdkAgent[Any], segment: Segment, given: list[dict[str, Any]], options: dict[str, Any]
    ) -> Any:
        config, hooks = self._config(segment)
        result = Runner.run_streamed(
            agent,
            given,  # type: ignore[arg-type]
            context=options.get("context"),
            max_turns=int(options.get("max_turns") or DEFAULT_MAX_TURNS),
            run_config=config,
            hooks=hooks,
        )
        return await _drained(result, segment)

    async def _resume(self, agent: SdkAgent[Any], segment: Segment, resumed: _Resume, options: dict[str, Any]) -> Any:
        token = segment.enter()
        try:
            async with connected(self._servers):
                return await self._again(agent, segment, resumed, options)
        finally:
            segment.leave(token)

    async def _again(self, agent: SdkAgent[Any], segment: Segment, resumed: _Resume, options: dict[str, Any]) -> Any:
        run_state = await RunState.from_json(agent, resumed.saved["run_state"])
        resumed.decide(run_state, segment)
        if resumed.new:
            run_state.add_input(resumed.new)  # type: ignore[arg-type]
        config, hooks = self._config(segment)
        result = Runner.run_streamed(
            agent,
            run_state,
            max_turns=int(options.get("max_turns") or DEFAULT_MAX_TURNS),
            run_config=config,
            hooks=hooks,
        )
        return await _drained(result, segment)

    def _settle(
        self,
        state: OurState,
        segment: Segment,
        result: Any,
        split: Split,
        given: int,
        prompts: list[dict[str, Any]],
    ) -> StepResult:
        """The run after a segment that returned: paused for approvals, or completed with its final output."""
        items = dumped(result.to_input_list())
        events = segment.finish(items)
        messages = [*split.kept, *prompts, *(typed(i) for i in items[given:])]  # the prompts as we store them
        used = result.context_wrapper.usage
        usage = {
            **state.usage,
            "prompt_tokens": used.input_tokens,
            "completion_tokens": used.output_tokens,
            "total_tokens": used.input_tokens + used.output_tokens,
        }
        update: dict[str, Any] = {
            "messages": messages,
            "usage": usage,
            "segment": state.segment + 1,
            "turns": state.turns + segment.model_calls,
            "tool_calls": [],
            "guest_state": None,
        }
        if result.interruptions:
            clients = {t.get("name") for t in state.client_tools}
            update["tool_calls"] = [_pending(item, clients) for item in result.interruptions]
            update["guest_state"] = {
                "run_state": result.to_state().to_json(),
                "given": given,
                "prompts": len(prompts),
            }
            return paused(self, state.model_copy(update=update), events)
        update["output"] = output_value(result.final_output)
        return completed(state.model_copy(update=update), events)


class _Resume:
    """A saved ``RunState`` and the decisions on its interruptions."""

    def __init__(self, saved: dict[str, Any], decisions: list[ToolCall], new: list[dict[str, Any]]) -> None:
        self.saved = saved
        self.decisions = {c.id: c for c in decisions}
        self.new = new

    def decide(self, run_state: RunState[Any, Any], segment: Segment) -> None:
        """Our decisions as the SDK's: ``approve`` (edited arguments kept for the call), ``reject`` (the note as
        the rejection message, else the SDK's own); the resumed calls are the segment's."""
        for item in run_state.get_interruptions():
            raw = item.raw_item
            call_id = str(getattr(raw, "call_id", None) or (raw.get("call_id") if isinstance(raw, dict) else ""))
            decision = self.decisions.get(call_id)
            if decision is None or decision.decision == "pending":
                continue
            segment.calls.add(call_id)
            if decision.decision == "rejected":
                run_state.reject(item, rejection_message=decision.note or None)
                continue
            arguments = getattr(raw, "arguments", None)
            if isinstance(arguments, str) and decision.args != _args(arguments):
                segment.edits[call_id] = decision.arguments
            run_state.approve(item)
            agent = getattr(item, "agent", None)
            if isinstance(agent, SdkAgent):
                wrap_graph(agent)


def _args(arguments: str) -> dict[str, Any]:
    return ToolCall(id="-", name="-", arguments=arguments).args


def _pending(item: Any, clients: set[Any]) -> ToolCall:
    """An SDK interruption (a ``ToolApprovalItem``) as our pending call: a call for a human's decision, or a call of
    one of the client's own tools (``clients``), which the client answers with its result."""
    raw = item.raw_item
    data = raw if isinstance(raw, dict) else raw.model_dump()
    name = str(getattr(item, "tool_name", None) or data.get("name") or "tool")
    client = name in clients
    return ToolCall(
        id=str(data.get("call_id") or data.get("id") or ""),
        name=name,
        arguments=str(data.get("arguments") or "{}"),
        requires_confirmation=not client,
        decision="pending",
        pause_reason="client_tool" if client else "confirmation_required",
    )


def with_client_tools(agent: SdkAgent[Any], specs: list[dict[str, Any]], decided: list[ToolCall]) -> SdkAgent[Any]:
    """The run's agent: ``agent``, with the client's own tools (AG-UI frontend tools, the Responses API's
    ``function`` tools) beside its own when the client brought any (a clone: the agents module's agent is left as it
    is). A call of one interrupts the run as an approval would (``needs_approval``): the run pauses for the client's
    answer (``client_tool``), and once approved the call returns the result the client sent (``decided``)."""
    if not specs:
        return agent
    answers = {c.id: c.result for c in decided if c.pause_reason == "client_tool"}
    own = {getattr(t, "name", None) for t in agent.tools}
    tools = [_client_tool(spec, answers) for spec in specs if spec.get("name") and spec["name"] not in own]
    return agent.clone(tools=[*agent.tools, *tools])


def _client_tool(spec: dict[str, Any], answers: dict[str, str | None]) -> FunctionTool:
    async def answered(ctx: Any, arguments: str) -> str:
        return answers.get(str(getattr(ctx, "tool_call_id", ""))) or ""

    return FunctionTool(
        name=str(spec["name"]),
        description=str(spec.get("description") or ""),
        params_json_schema=spec.get("parameters") or {"type": "object", "properties": {}},
        on_invoke_tool=answered,
        strict_json_schema=False,
        needs_approval=True,
    )


async def _drained(result: Any, segment: Segment) -> Any:
    """Read the streamed run to its end (our events come from its units, not from here); a cancellation (a stop)
    cancels the run's own task too. What a unit of ours raised inside a tool call (a call that may have run, a
    stop, a lost lease, a journal that does not fit) comes out as itself, not as the SDK's ``UserError`` around it,
    nor as the tool error the SDK made of it inside an MCP call (:meth:`.segment.Segment.reraise`)."""
    try:
        async for _event in result.stream_events():
            pass
    except asyncio.CancelledError:
        result.cancel()
        raise
    except Exception as exc:
        ours = _ours(exc)
        if ours is exc:
            raise
        raise ours from None
    segment.reraise()  # a call that may have run, met where the SDK made it a tool error: the segment pauses
    return result


def _ours(exc: BaseException) -> BaseException:
    """The exception of ours among ``exc`` and its causes (agents-celery's, a step's, or Redis not answering a
    journal or ledger write: a blip gives the step back instead of failing the run); else ``exc``."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, AgentsCeleryError | Cancelled | MayHaveRun) or is_unavailable(seen):
            return seen
        seen = seen.__cause__
    return exc


def servers_of(agent: SdkAgent[Any]) -> list[Any]:
    """The MCP servers of ``agent`` and of the agents it hands off to (given as agents), each once."""
    found: dict[int, Any] = {}
    pending, seen = [agent], set()
    while pending:
        one = pending.pop()
        if id(one) in seen:
            continue
        seen.add(id(one))
        found.update((id(s), s) for s in one.mcp_servers)
        pending += [h for h in one.handoffs if isinstance(h, SdkAgent)]
    return list(found.values())


#: (process, server) -> the lock a segment holds while it has that MCP server connected.
_SERVER_LOCKS: dict[tuple[int, int], asyncio.Lock] = {}


@contextlib.asynccontextmanager
async def connected(servers: list[Any]) -> AsyncIterator[None]:
    """The MCP servers connected for one segment (``connect()``, then ``cleanup()`` in the same task, as the SDK
    asks). A server object is the agents module's, one per process: a segment holds it while it runs, so the segments
    of one process that reach the same MCP server run one after another (each connects it for itself)."""
    if not servers:
        yield
        return
    pid = os.getpid()
    locks = [_SERVER_LOCKS.setdefault((pid, id(s)), asyncio.Lock()) for s in servers]
    async with contextlib.AsyncExitStack() as stack:
        for lock in sorted(locks, key=id):  # one order for every segment: no two wait for each other
            await stack.enter_async_context(lock)
        for server in servers:
            await server.connect()
            stack.push_async_callback(server.cleanup)
        yield


def _context_items(state: OurState) -> list[dict[str, Any]]:
    """What the client brought for the agent (AG-UI ``context``, Responses ``instructions``) as a developer message
    in front of the run's input."""
    context = state.client.get("context")
    lines = [f"- {c.get('description', '')}: {c.get('value', '')}" for c in context or [] if isinstance(c, dict)]
    if not lines:
        return []
    return [{"type": "message", "role": "developer", "content": "Context from the client:\n" + "\n".join(lines)}]


def output_schema(agent: SdkAgent[Any]) -> dict[str, Any] | None:
    """The JSON Schema of the agent's structured output, as the SDK gives it; None for text output."""
    kind = agent.output_type
    if kind is None or kind is str:
        return None
    try:
        schema = kind if isinstance(kind, AgentOutputSchemaBase) else AgentOutputSchema(kind)
        return dict(schema.json_schema())
    except Exception:  # an output type the SDK cannot give a schema of: the agent is still served
        return None


def tool_manifests(agent: SdkAgent[Any]) -> list[dict[str, Any]]:
    """The agent's function tools as our manifests list tools (MCP tools are known only at run time)."""
    found = []
    for tool in agent.tools:
        if not isinstance(tool, FunctionTool):
            continue
        found.append(
            {
                "name": tool.name,
                "description": tool.description or "",
                "parameters": tool.params_json_schema,
                "requires_confirmation": bool(tool.needs_approval),  # a policy (a callable) may ask: shown as asking
                "idempotent": bool(getattr(tool, IDEMPOTENT, False)),
                "timeout": tool.timeout_seconds,
            }
        )
    return found

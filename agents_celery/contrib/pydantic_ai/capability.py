"""``CeleryDurability``: the capability that makes a pydantic-ai agent durable on our workers.

It is pydantic-ai's public backend API for third-party engines (``pydantic_ai.durable_exec``): a
``BaseDurabilityCapability`` whose backend (:class:`CeleryBackend`, a ``JournalCallableOperationBackend``) runs
every unit (model request, tool call, MCP ``get_tools``/``call_tool``, event handling) through the segment the
worker is running (:mod:`.segment`), which journals it in Redis. Outside a worker's segment the capability is
transparent: ``agent.run(...)`` in a script is a plain in-process run.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic_ai import ApprovalRequired, DeferredToolRequests, DeferredToolResults, RunContext, ToolDenied, ToolsetTool
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.capabilities import ValidatedToolArgs
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationId,
    JournalCallableOperationBackend,
    RoleBasedOperationConfig,
    conversation_id_from_run_id,
)
from pydantic_ai.messages import AgentStreamEvent, ToolCallPart
from pydantic_ai.models import Model
from pydantic_ai.tools import ToolDefinition

from .segment import current_segment

#: The per-tool key of a tool's metadata: ``metadata={"agents_celery": {"idempotent": True}}`` lets a call that
#: started in a crashed attempt run again instead of pausing the run as "may have run".
TOOL_CONFIG_KEY = "agents_celery"

UnitConfig = Mapping[str, Any]


def _tool_config(operation_id: DurableOperationId, tool: object | None, tool_name: str) -> UnitConfig | Literal[False]:
    del operation_id, tool_name
    if not isinstance(tool, ToolsetTool) or not tool.tool_def.metadata:
        return {}
    config = tool.tool_def.metadata.get(TOOL_CONFIG_KEY)
    if config is False:
        return False
    return dict(config) if isinstance(config, Mapping) else {}


class CeleryBackend(JournalCallableOperationBackend[UnitConfig]):
    """Runs each unit as a journaled unit of the worker's current segment."""

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: UnitConfig,
    ) -> object:
        segment = current_segment()
        if segment is None:  # not inside a worker's segment (in_durable_context is False there)
            return await body()
        return await segment.unit(operation_id, name, body, cache_key, config)


async def _to_log(ctx: RunContext[Any], stream: AsyncIterable[AgentStreamEvent]) -> None:
    """The run's event stream handler: every event into the segment's log (live for a model unit's)."""
    segment = current_segment()
    async for event in stream:
        if segment is not None:
            segment.on_event(event)


async def _logged(source: AsyncIterator[AgentStreamEvent]) -> AsyncIterator[AgentStreamEvent]:
    """``source``'s events, each into the segment's log before it is handed on."""
    while True:
        try:
            event = await anext(source)
        except StopAsyncIteration:
            return
        segment = current_segment()
        if segment is not None:
            segment.on_event(event)
        yield event


@dataclass(init=False)
class CeleryDurability(BaseDurabilityCapability[Any]):
    """Makes a pydantic-ai agent durable on agents-celery workers.

    Add it to an agent with a name, in an agents module::

        agent = Agent(model, name="support", capabilities=[CeleryDurability()])

    ``agents-celery worker --agents that.module`` then serves the agent beside ours: every run is one or more
    segments (a Celery step each), each unit of which is journaled in Redis, fenced by the step's lease; a worker
    killed mid-run costs only the unit it was in. A tool whose metadata says
    ``{"agents_celery": {"idempotent": True}}`` runs again after such a crash; any other tool call that started
    and was not recorded pauses the run as "may have run" for a human to decide.

    Args:
        models: Other models a run may pick by id (``agent.run(model="<id>")``), as pydantic-ai's engines take.
        event_stream_handler: Also given every event, as it comes (the run's log gets each one just before it).
        name: The prefix of the agent's unit names (default: the agent's name).
    """

    engine_spec: ClassVar = DurabilityEngineSpec(
        engine_name="agents-celery",
        durable_unit_noun="unit",
        durable_container_noun="segment",
        codec=JSON_CODEC,
        toolset_lifecycles={"function": "enter-never", "mcp": "enter-in-durable-unit", "dynamic": "enter-never"},
        sequential_tools_in_durable_context=True,
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        tool_config_key=TOOL_CONFIG_KEY,
    )

    def __init__(
        self,
        *,
        models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[Any] | None = None,
        name: str | None = None,
    ) -> None:
        self._user_handler = event_stream_handler
        super().__init__(models=models, event_stream_handler=self._handle, name=name)

    async def _handle(self, ctx: RunContext[Any], stream: AsyncIterable[AgentStreamEvent]) -> None:
        if self._user_handler is None:
            await _to_log(ctx, stream)
            return
        # The user's handler reads the stream, and each event goes to the log as it hands it on: tokens stay live
        # (reading the whole stream first would log nothing until the model finished, and lose it all on a stop).
        # What the handler leaves unread is logged after it returns.
        source = aiter(stream)
        await self._user_handler(ctx, _logged(source))
        await _to_log(ctx, source)

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: ValidatedToolArgs
    ) -> ValidatedToolArgs:
        """A call the user rejected after it may have run in a crashed attempt is deferred before it runs, so
        that :meth:`handle_deferred_tool_calls` denies it: the model gets pydantic-ai's own denied tool return."""
        segment = current_segment()
        if segment is not None and segment.rejection(call.tool_call_id) is not None:
            raise ApprovalRequired()
        return args

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        """Denies the rejected may-have-run calls (``ToolDenied`` with the user's note); any other deferred call is
        left to pause the run."""
        segment = current_segment()
        if segment is None:
            return None
        denied: dict[str, bool | Any] = {}
        for part in requests.approvals:
            message = segment.rejection(part.tool_call_id)
            if message is not None:
                denied[part.tool_call_id] = ToolDenied(message)
        return DeferredToolResults(approvals=denied) if denied else None

    @property
    def in_durable_context(self) -> bool:
        return current_segment() is not None

    def get_durable_operation_backend(self) -> CeleryBackend:
        config = RoleBasedOperationConfig[UnitConfig](
            model={}, event={}, capability={}, tool={}, resolve_tool=_tool_config
        )
        return CeleryBackend(agent_name=self.name, default_model_id=self.default_model_id, config=config)

    def get_default_run_id(self) -> str | None:
        segment = current_segment()
        return None if segment is None else f"{segment.run_id}:{segment.number}"

    def get_default_conversation_id(self, run_id: str) -> str | None:
        segment = current_segment()
        return None if segment is None else conversation_id_from_run_id(segment.session_id)

"""One segment of a pydantic-ai run: its units, as pydantic-ai's durable backend hands them over, journaled through
the guests' shared segment (:mod:`agents_celery.contrib.guests.segment`, whose docstring says how a unit is run or
replayed).

pydantic-ai names every unit (``JournalOperationNamer``) and gives its ``cache_key``; what makes a unit the one the
journal recorded is :func:`identity`: its kind; for a model request, the model and the names of the tools it offers
(another model or tool set is another agent); for a tool call, the tool and the call id the recorded model response
gave. Not the request's messages: instructions that say the date or time differ on every attempt. A model unit's
``PartStartEvent`` / ``PartDeltaEvent`` go to the log live (:class:`.events.ModelStream`); a tool's result event is
kept for the unit that delivers it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

from pydantic_ai import RunContext
from pydantic_ai.durable_exec import ModelRequestId, ToolsetCallToolId
from pydantic_ai.models import ModelRequestParameters

from ...runs import ToolCall
from ..guests.segment import GuestCall, GuestSegment, MayHaveRun, digest, pending_call
from .events import ModelStream, tool_result

__all__ = ["MayHaveRun", "Segment", "current_segment", "identity"]

_CURRENT: contextvars.ContextVar[Segment | None] = contextvars.ContextVar("agents_celery_pai_segment", default=None)


def current_segment() -> Segment | None:
    """The segment the running task belongs to (None outside a worker's segment)."""
    return _CURRENT.get()


def identity(operation_id: Any, cache_key: tuple[object, ...]) -> str:
    """A digest of what makes a unit the one the journal recorded, beyond its name and ordinal: its kind; for a
    model request, the model and the names of the tools it offers (another model or tool set is another agent);
    for a tool call, the tool and the call id the recorded model response gave. Not the request's messages."""
    parts: list[Any] = [type(operation_id).__name__]
    if isinstance(operation_id, ModelRequestId):
        ctx = _run_context(cache_key)
        model = ctx.model if ctx is not None else None
        parts += [getattr(model, "system", None), getattr(model, "model_name", None), _tool_names(cache_key)]
    elif isinstance(operation_id, ToolsetCallToolId):
        parts += [cache_key[0] if cache_key else None, _tool_call_id(operation_id, cache_key)]
    return digest(*parts)


def _run_context(cache_key: tuple[object, ...]) -> RunContext[Any] | None:
    return next((v for v in cache_key if isinstance(v, RunContext)), None)


def _tool_names(cache_key: tuple[object, ...]) -> list[str]:
    """The names of the tools a model request offers (its function and output tools), sorted."""
    params = next((v for v in cache_key if isinstance(v, ModelRequestParameters)), None)
    if params is None:
        return []
    return sorted(t.name for t in [*params.function_tools, *params.output_tools])


class Segment(GuestSegment):
    """One attempt at one segment of a pydantic-ai run: the units pydantic-ai's backend hands over."""

    current: ClassVar[contextvars.ContextVar[Any]] = _CURRENT

    def on_event(self, event: Any) -> None:
        """An event of the run: live into the log inside a model unit, else kept for the unit's journal write."""
        stream = self.streaming
        if stream is not None:
            for ev in stream.feed(event):
                self.emit(ev)
        else:
            self.keep(tool_result(event))

    async def unit(
        self,
        operation_id: Any,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: Mapping[str, Any],
    ) -> object:
        """Run or replay one unit (see :mod:`agents_celery.contrib.guests.segment`)."""
        call_id = _tool_call_id(operation_id, cache_key)
        call = None
        if call_id is not None:
            tool, args = _name_and_args(cache_key)
            call = GuestCall(call_id, tool, args, idempotent=bool(config.get("idempotent")))
        stream = ModelStream() if isinstance(operation_id, ModelRequestId) else None
        return await self.journaled(name, identity(operation_id, cache_key), body, call=call, stream=stream)


def _tool_call_id(operation_id: Any, cache_key: tuple[object, ...]) -> str | None:
    """The tool call id of a call_tool unit (from its run context), None for other units."""
    if not isinstance(operation_id, ToolsetCallToolId):
        return None
    ctx = _run_context(cache_key)
    return ctx.tool_call_id if ctx is not None else None


def _name_and_args(cache_key: tuple[object, ...]) -> tuple[str, Any]:
    """A call_tool unit's tool name and arguments (its ``cache_key``'s first two items)."""
    name = cache_key[0] if cache_key and isinstance(cache_key[0], str) else "tool"
    return name, cache_key[1] if len(cache_key) > 1 else {}


def _call_of(call_id: str, cache_key: tuple[object, ...], approvals: int) -> ToolCall:
    """The pending call of a "may have run" pause (``approvals``: how many times it was approved again already)."""
    name, args = _name_and_args(cache_key)
    return pending_call(GuestCall(call_id, name, args), approvals)

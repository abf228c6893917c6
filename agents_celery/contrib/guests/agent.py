"""What every guest agent shares: its tools as our manifests see them, the pauses of its segments, its output.

A guest (a pydantic-ai agent, an Agents SDK agent) is an :class:`~agents_celery.agent.Agent` of ours whose
``run_step`` runs one segment of the framework's own loop (:mod:`.segment`, :mod:`.loop`). The framework calls its
tools itself; ours only describe them (:class:`GuestTool`). A segment that meets a call which may have run in a
crashed attempt pauses the run (:func:`with_may_have_run`); the decided calls it resumed are kept for its replay.
"""

from __future__ import annotations

import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from pydantic_core import to_jsonable_python

from ...engine.steps import Cancelled, StepContext
from ...errors import FencedError
from ...runs import RunState, ToolCall
from ...storage.journal import Journal
from ...tools import Tool
from .loop import WalkedAway, run_segment
from .segment import GuestSegment

T = TypeVar("T")


class ModelName:
    """What our Agent keeps as a guest's model: only the name (the framework calls its own model)."""

    def __init__(self, name: str) -> None:
        self.name = name


def _runs_in_the_framework() -> None:
    """Never called: the guest framework calls the tool itself, inside its segment."""


class GuestTool(Tool):
    """A guest's function tool as our manifests, decisions and interrupts see it (name, description, parameters,
    whether it needs approval, whether it is idempotent); the engine never invokes it."""

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__(
            _runs_in_the_framework,
            name=spec["name"],
            description=spec["description"],
            requires_confirmation=spec["requires_confirmation"],
            idempotent=spec["idempotent"],
            timeout=spec["timeout"],
        )
        self.parameters = spec["parameters"]


#: Marks a decided deferred call kept while the segment it resumed pauses again (for a call that may have run, maybe
#: the same call): its replay needs the same decisions, and the new pause's decision is not its own.
ANSWERED = "answered:"


def with_may_have_run(state: RunState, call: ToolCall) -> list[ToolCall]:
    """The run's calls once ``call`` may have run: the decided deferred calls kept (under :data:`ANSWERED` ids),
    the calls decided at earlier may-have-run pauses of the segment, and ``call``, pending."""
    kept = []
    for c in state.tool_calls:
        if c.pause_reason == "may_have_run":
            if c.id != call.id:
                kept.append(c)
        elif c.id.startswith(ANSWERED):
            kept.append(c)
        else:
            kept.append(c.model_copy(update={"id": ANSWERED + c.id}))
    return [*kept, call]


def split_decided(state: RunState) -> tuple[dict[str, ToolCall], list[ToolCall]]:
    """The run's decided calls as a segment takes them: those of "may have run" pauses (by id), and the deferred
    ones (approvals, client tools), their :data:`ANSWERED` marks taken off."""
    decided = {c.id: c for c in state.tool_calls if c.pause_reason == "may_have_run"}
    deferred = [
        c.model_copy(update={"id": c.id.removeprefix(ANSWERED)})
        for c in state.tool_calls
        if c.pause_reason != "may_have_run"
    ]
    return decided, deferred


def output_value(output: Any) -> Any:
    """A run's output as its state keeps it: text as it is, structured output (a pydantic model, a dataclass, ...)
    as its JSON value, as our own agents' typed output is kept (``GET /runs/<id>``'s ``output`` is the object)."""
    if isinstance(output, str):
        return output
    return to_jsonable_python(output)


def first_error(group: BaseExceptionGroup[Any]) -> BaseException:
    """The error that matters in a task group's exception group: its first leaf."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class Journals:
    """The journal of each run store a guest agent meets (one per worker, in practice)."""

    def __init__(self) -> None:
        self._journals: dict[int, Journal] = {}
        self._lock = threading.Lock()

    def of(self, ctx: StepContext) -> Journal:
        with self._lock:
            journal = self._journals.get(id(ctx.store))
            if journal is None:
                journal = self._journals[id(ctx.store)] = Journal(ctx.store.redis, ctx.store.keys)
                journal.fence = ctx.store.fence or None  # a unit's result is what a replay trusts: fenced like a commit
            return journal


def drive(ctx: StepContext, segment: GuestSegment, coro: Coroutine[Any, Any, T]) -> T:
    """Run a segment's coroutine on the process loop for the step (:func:`.loop.run_segment`): a stop ends the step
    cancelled (the open ends of a model unit it cut short written first), a lost lease gives it up."""
    s = ctx.settings
    try:
        with ctx.writer.standing_by():  # the segment's events come from the loop's thread meanwhile
            return run_segment(coro, ctx.stop, ctx.lost, s.stop_grace_seconds, min(s.stop_poll_seconds, 0.2))
    except WalkedAway as exc:
        if exc.reason == "stopped":
            for event in segment.open_ends():  # a model unit stopped mid-stream: its messages end here
                ctx.writer.emit(event)
            raise Cancelled() from None
        raise FencedError(f"run {ctx.state.run_id!r}: lease lost; another attempt owns the run") from None

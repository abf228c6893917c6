"""One segment of a pydantic-ai run: its units, journaled in Redis, and their events.

A segment is one ``agent.run(...)`` in one step (a Celery task). Every unit the run meets is numbered in order
(``seq``; tools run one after another inside a segment, so the order is the same on every attempt). A unit the
journal holds returns its recorded result without running, after checking that it is the same unit: the same
name, ordinal and identity (:func:`identity`), else the run fails (:class:`~agents_celery.errors.JournalMismatchError`)
rather than hand a recorded result to another unit. The identity is not the unit's input: a request's messages
change between attempts (a date in the instructions) while the unit is the same one, and its recorded result
stands, as Temporal's and DBOS's replays do. A unit not recorded runs, and its result is written with the events
it produced in one fenced Lua call (:meth:`agents_celery.storage.journal.Journal.write`). A model unit's text
and tool-call deltas go to the log live, as they stream. A tool call goes through the effect ledger first: a call
that started in a crashed attempt and was never recorded pauses the run as "may have run" (unless the tool is
idempotent), as our own tools do. A stop request or a lost lease is checked before every unit.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.durable_exec import ModelRequestId, ToolsetCallToolId
from pydantic_ai.models import ModelRequestParameters
from pydantic_core import to_jsonable_python

from ...errors import JournalMismatchError
from ...events import UNIT_SAVED, EventType, NewEvent, make_event
from ...runs import ToolCall
from ...storage.journal import Journal, JournalEntry
from ...storage.ledger import Ledger
from .events import ModelStream, tool_result

_CURRENT: contextvars.ContextVar[Segment | None] = contextvars.ContextVar("agents_celery_segment", default=None)


def current_segment() -> Segment | None:
    """The segment the running task belongs to (None outside a worker's segment)."""
    return _CURRENT.get()


class MayHaveRun(Exception):
    """A tool call started in an attempt that crashed before recording it: a human decides."""

    def __init__(self, call: ToolCall) -> None:
        super().__init__(f"tool call {call.id!r} ({call.name}) may have run in a crashed attempt")
        self.call = call


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
    text = json.dumps(parts, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _run_context(cache_key: tuple[object, ...]) -> RunContext[Any] | None:
    return next((v for v in cache_key if isinstance(v, RunContext)), None)


def _tool_names(cache_key: tuple[object, ...]) -> list[str]:
    """The names of the tools a model request offers (its function and output tools), sorted."""
    params = next((v for v in cache_key if isinstance(v, ModelRequestParameters)), None)
    if params is None:
        return []
    return sorted(t.name for t in [*params.function_tools, *params.output_tools])


@dataclass
class Segment:
    """The state of one attempt at one segment of a run."""

    run_id: str
    session_id: str
    number: int
    token: str
    journal: Journal
    ledger: Ledger
    #: Sends an event to the log at once (the step's EventWriter.emit).
    emit: Callable[[NewEvent], None]
    #: Events emitted but not yet written (the step's EventWriter.drain): written in front of a unit's own.
    drain: Callable[[], list[NewEvent]]
    #: Raises when the run was stopped (Cancelled) or the lease was lost (FencedError).
    check: Callable[[], None]
    #: Decided calls of a "may have run" pause: approved re-runs, rejections (by tool call id).
    decided: Mapping[str, ToolCall] = field(default_factory=dict)
    recorded: dict[int, JournalEntry] = field(default_factory=dict)
    seq: int = 0
    ordinals: dict[str, int] = field(default_factory=dict)
    #: Units run (not replayed) by this attempt, and replayed.
    ran: int = 0
    replayed: int = 0
    _stream: ModelStream | None = None
    _buffer: list[NewEvent] = field(default_factory=list)

    def enter(self) -> contextvars.Token[Segment | None]:
        self.recorded = self.journal.entries(self.run_id, self.number)
        return _CURRENT.set(self)

    @staticmethod
    def leave(token: contextvars.Token[Segment | None]) -> None:
        _CURRENT.reset(token)

    def rejection(self, call_id: str | None) -> str | None:
        """What the model is told of a call that may have run in a crashed attempt and that the user rejected
        (None for any other call): the capability denies it through pydantic-ai's own path (``ToolDenied``)."""
        decided = self.decided.get(call_id or "")
        if decided is None or decided.decision != "rejected":
            return None
        return f"The user rejected this tool call; it did not run again. {decided.note or ''}".rstrip()

    def open_ends(self) -> list[NewEvent]:
        """The ends of what a model unit that was walked away from left open (after its coroutine unwound)."""
        return self._stream.close() if self._stream is not None else []

    def on_event(self, event: Any) -> None:
        """An event of the run: live into the log inside a model unit, else kept for the unit's journal write."""
        if self._stream is not None:
            for ev in self._stream.feed(event):
                self.emit(ev)
        else:
            self._buffer += tool_result(event)

    async def unit(
        self,
        operation_id: Any,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: Mapping[str, Any],
    ) -> object:
        """Run or replay one unit (see the module docstring)."""
        self.check()
        seq, ordinal = self.seq, self.ordinals.get(name, 0)
        self.seq, self.ordinals[name] = seq + 1, ordinal + 1
        entry = JournalEntry(name, ordinal, identity(operation_id, cache_key), None)
        recorded = self.recorded.get(seq)
        if recorded is not None:
            if (recorded.name, recorded.ordinal, recorded.digest) != (entry.name, entry.ordinal, entry.digest):
                raise JournalMismatchError(_mismatch(self, seq, recorded, entry))
            self.replayed += 1
            return recorded.result
        call_id = _tool_call_id(operation_id, cache_key)
        if call_id is not None:
            ready = self._from_ledger(call_id, cache_key, config)
            if ready is not None:
                return self._record(seq, entry, ready, call_id)
        self._buffer = []
        self._stream = ModelStream() if isinstance(operation_id, ModelRequestId) else None
        result = await body()  # a cancelled body leaves its stream open: the step closes it (open_ends)
        closers = self._stream.close() if self._stream is not None else []
        self._stream = None
        self._buffer = [*closers, *self._buffer]
        self.ran += 1
        return self._record(seq, entry, result, call_id)

    def _record(self, seq: int, entry: JournalEntry, result: object, call_id: str | None) -> object:
        saved = make_event(EventType.CUSTOM, name=UNIT_SAVED, value={"unit": seq})
        events, self._buffer = [*self.drain(), *self._buffer, saved], []
        effect = None
        if call_id is not None:
            done = {"status": "done", "token": self.token, "result": json.dumps(result), "error": None}
            effect = (call_id, json.dumps(done))
        recorded = JournalEntry(entry.name, entry.ordinal, entry.digest, result)
        self.journal.write(self.run_id, self.token, self.number, seq, recorded, events, effect)
        return result

    def _from_ledger(self, call_id: str, cache_key: tuple[object, ...], config: Mapping[str, Any]) -> object | None:
        """What the effect ledger says of a tool call about to run: its recorded result (done in an attempt that
        crashed before journaling it), or None to run it; raises MayHaveRun for a call started and not done."""
        decided = self.decided.get(call_id)
        approval = decided.rerun if decided is not None else 0
        if approval:  # approved again after a crash: one execution per approval
            entry = self.ledger.rerun(self.run_id, call_id, self.token, approval)
        else:
            entry = self.ledger.begin(self.run_id, call_id, self.token)
        if entry is not None and entry.status == "done":
            done: object = json.loads(entry.result or "null")
            return done
        if entry is not None and not config.get("idempotent"):
            raise MayHaveRun(_call_of(call_id, cache_key, approval))
        return None


def _tool_call_id(operation_id: Any, cache_key: tuple[object, ...]) -> str | None:
    """The tool call id of a call_tool unit (from its run context), None for other units."""
    if not isinstance(operation_id, ToolsetCallToolId):
        return None
    ctx = _run_context(cache_key)
    return ctx.tool_call_id if ctx is not None else None


def _call_of(call_id: str, cache_key: tuple[object, ...], approvals: int) -> ToolCall:
    """The pending call of a "may have run" pause (``approvals``: how many times it was approved again already)."""
    name = cache_key[0] if cache_key and isinstance(cache_key[0], str) else "tool"
    args = cache_key[1] if len(cache_key) > 1 else {}
    return ToolCall(
        id=call_id,
        name=name,
        arguments=json.dumps(to_jsonable_python(args, fallback=str)),
        decision="pending",
        pause_reason="may_have_run",
        rerun=approvals,
    )


def _mismatch(segment: Segment, seq: int, recorded: JournalEntry, met: JournalEntry) -> str:
    return (
        f"run {segment.run_id!r} segment {segment.number}: unit #{seq} was recorded as {recorded.name!r} "
        f"(#{recorded.ordinal} of that name, identity {recorded.digest[:12]}) but the replay met {met.name!r} "
        f"(#{met.ordinal}, identity {met.digest[:12]}); the agent, its model, tools or toolsets changed while the run "
        "was in flight, so its journal no longer fits: start a new run"
    )

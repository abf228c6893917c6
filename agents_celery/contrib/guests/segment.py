"""One segment of a guest agent's run: its units, journaled in Redis, and their events. Framework-neutral: the
pydantic-ai guest (:mod:`agents_celery.contrib.pydantic_ai.segment`) and the Agents SDK guest
(:mod:`agents_celery.contrib.openai_agents.segment`) each say what a unit of theirs is called and what makes it
the same unit, and run it through :meth:`GuestSegment.journaled`.

A segment is one run of the framework's own loop in one step (a Celery task). Every unit the run meets is numbered
in order (``seq``; tools run one after another inside a segment, so the order is the same on every attempt). A
unit the journal holds returns its recorded result without running, after checking that it is the same unit: the
same name, ordinal and identity digest, else the run fails (:class:`~agents_celery.errors.JournalMismatchError`)
rather than hand a recorded result to another unit. The identity is not the unit's input: a request's messages
change between attempts (a date in the instructions) while the unit is the same one, and its recorded result
stands, as Temporal's and DBOS's replays do. A unit not recorded runs, and its result is written with the events
it produced in one fenced Lua call (:meth:`agents_celery.storage.journal.Journal.write`). A model unit's text and
tool-call deltas go to the log live, as they stream (its :class:`Stream`). A tool call goes through the effect
ledger first: a call that started in a crashed attempt and was never recorded pauses the run as "may have run"
(unless the tool is idempotent), as our own tools do. A stop request or a lost lease is checked before every unit.

Events a guest learns of between units (a tool result it reads off the next request, a handoff) are kept, not
written: the next unit writes them first, as a unit of their own named ``events``, so a replay that meets them
again at the same place skips them instead of writing them twice. What is kept when the segment ends goes with the
step's commit (:meth:`GuestSegment.take_kept`).
"""

from __future__ import annotations

import contextvars
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

from pydantic_core import to_jsonable_python

from ...errors import JournalMismatchError
from ...events import UNIT_SAVED, EventType, NewEvent, make_event
from ...runs import ToolCall
from ...storage.journal import Journal, JournalEntry
from ...storage.ledger import Ledger

if TYPE_CHECKING:
    from ...engine.stepcontext import StepContext

#: The name of the unit that writes the events a guest kept between two units.
EVENTS_UNIT = "events"


class MayHaveRun(Exception):
    """A tool call started in an attempt that crashed before recording it: a human decides."""

    def __init__(self, call: ToolCall) -> None:
        super().__init__(f"tool call {call.id!r} ({call.name}) may have run in a crashed attempt")
        self.call = call


class Stream(Protocol):
    """What turns one model unit's framework events into ours as they stream; :meth:`close` ends what is open."""

    def close(self) -> list[NewEvent]: ...


@dataclass(frozen=True)
class GuestCall:
    """A tool call a unit runs: its id (the effect ledger's key within the run), tool and arguments."""

    id: str
    name: str
    args: Any = None
    #: The tool may run again after a crash instead of pausing the run as "may have run".
    idempotent: bool = False


def digest(*parts: Any) -> str:
    """A unit's identity digest: a hash of what makes it the unit the journal recorded (module docs)."""
    text = json.dumps(list(parts), separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class GuestSegment:
    """The state of one attempt at one segment of a run. Each guest's subclass has its own :attr:`current`, the
    segment its framework's code (a backend, a model wrapper, a tool wrapper) is running in."""

    current: ClassVar[contextvars.ContextVar[Any]]

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
    _stream: Any = None
    _buffer: list[NewEvent] = field(default_factory=list)

    @classmethod
    def of_step(cls, ctx: StepContext, journal: Journal, decided: Mapping[str, ToolCall]) -> Self:
        """The segment the step's run is at, worked on by the step's attempt (its token, writer and checks)."""
        state = ctx.state
        return cls(
            state.run_id,
            state.session_id,
            state.segment,
            ctx.token,
            journal,
            ctx.store.ledger,
            emit=ctx.writer.emit,
            drain=ctx.writer.drain,
            check=ctx.check,
            decided=decided,
        )

    def enter(self) -> contextvars.Token[Any]:
        """Read the segment's journal and make this the current segment of the running task."""
        self.recorded = self.journal.entries(self.run_id, self.number)
        return self.current.set(self)

    def leave(self, token: contextvars.Token[Any]) -> None:
        self.current.reset(token)

    def rejection(self, call_id: str | None) -> str | None:
        """What the model is told of a call that may have run in a crashed attempt and that the user rejected
        (None for any other call)."""
        decided = self.decided.get(call_id or "")
        if decided is None or decided.decision != "rejected":
            return None
        return f"The user rejected this tool call; it did not run again. {decided.note or ''}".rstrip()

    def open_ends(self) -> list[NewEvent]:
        """The ends of what a model unit that was walked away from left open (after its coroutine unwound)."""
        return self._stream.close() if self._stream is not None else []

    @property
    def streaming(self) -> Any:
        """The stream of the model unit running now (None between model units)."""
        return self._stream

    def keep(self, events: list[NewEvent]) -> None:
        """Events for the next unit's journal write (or the step's commit, if no unit comes)."""
        self._buffer += events

    def take_kept(self) -> list[NewEvent]:
        """The events kept and not yet written (the segment ended: they go with the step's commit)."""
        kept, self._buffer = self._buffer, []
        return kept

    async def journaled(
        self,
        name: str,
        identity: str,
        body: Callable[[], Awaitable[object]],
        *,
        call: GuestCall | None = None,
        stream: Stream | None = None,
        result_events: Callable[[object], list[NewEvent]] | None = None,
    ) -> object:
        """Run or replay one unit (module docs). ``call``: the tool call it is (through the effect ledger);
        ``stream``: the model unit's live stream (its events are emitted as it is fed, the rest closed at the end);
        ``result_events``: the events a unit that ran writes with its result."""
        self.check()
        if self._buffer:
            self._events_unit()
        seq, ordinal = self._next(name)
        entry = JournalEntry(name, ordinal, identity, None)
        recorded = self.recorded.get(seq)
        if recorded is not None:
            _same(self, seq, recorded, entry)
            self.replayed += 1
            return recorded.result
        if call is not None:
            ready = self._from_ledger(call)
            if ready is not None:
                return self._record(seq, entry, ready, call.id, result_events)
        self._buffer = []
        self._stream = stream
        result = await body()  # a cancelled body leaves its stream open: the step closes it (open_ends)
        closers = self._stream.close() if self._stream is not None else []
        self._stream = None
        self._buffer = [*closers, *self._buffer]
        self.ran += 1
        return self._record(seq, entry, result, call.id if call is not None else None, result_events)

    def _next(self, name: str) -> tuple[int, int]:
        seq, ordinal = self.seq, self.ordinals.get(name, 0)
        self.seq, self.ordinals[name] = seq + 1, ordinal + 1
        return seq, ordinal

    def _events_unit(self) -> None:
        """Write the kept events as a unit of their own (or skip them: a replay met them recorded)."""
        seq, ordinal = self._next(EVENTS_UNIT)
        entry = JournalEntry(EVENTS_UNIT, ordinal, digest(EVENTS_UNIT), None)
        recorded = self.recorded.get(seq)
        if recorded is not None:
            _same(self, seq, recorded, entry)
            self._buffer = []
            return
        self._record(seq, entry, None, None, None)

    def _record(
        self,
        seq: int,
        entry: JournalEntry,
        result: object,
        call_id: str | None,
        result_events: Callable[[object], list[NewEvent]] | None,
    ) -> object:
        saved = make_event(EventType.CUSTOM, name=UNIT_SAVED, value={"unit": seq})
        own = result_events(result) if result_events is not None else []
        events, self._buffer = [*self.drain(), *self._buffer, *own, saved], []
        effect = None
        if call_id is not None:
            done = {"status": "done", "token": self.token, "result": json.dumps(result), "error": None}
            effect = (call_id, json.dumps(done))
        recorded = JournalEntry(entry.name, entry.ordinal, entry.digest, result)
        self.journal.write(self.run_id, self.token, self.number, seq, recorded, events, effect)
        return result

    def _from_ledger(self, call: GuestCall) -> object | None:
        """What the effect ledger says of a tool call about to run: its recorded result (done in an attempt that
        crashed before journaling it), or None to run it; raises MayHaveRun for a call started and not done."""
        decided = self.decided.get(call.id)
        approval = decided.rerun if decided is not None else 0
        if approval:  # approved again after a crash: one execution per approval
            entry = self.ledger.rerun(self.run_id, call.id, self.token, approval)
        else:
            entry = self.ledger.begin(self.run_id, call.id, self.token)
        if entry is not None and entry.status == "done":
            done: object = json.loads(entry.result or "null")
            return done
        if entry is not None and not call.idempotent:
            raise MayHaveRun(pending_call(call, approval))
        return None


def pending_call(call: GuestCall, approvals: int) -> ToolCall:
    """The pending call of a "may have run" pause (``approvals``: how many times it was approved again already)."""
    args = call.args if call.args is not None else {}
    arguments = args if isinstance(args, str) else json.dumps(to_jsonable_python(args, fallback=str))
    return ToolCall(
        id=call.id,
        name=call.name,
        arguments=arguments,
        decision="pending",
        pause_reason="may_have_run",
        rerun=approvals,
    )


def _same(segment: GuestSegment, seq: int, recorded: JournalEntry, met: JournalEntry) -> None:
    """Raise JournalMismatchError unless ``met`` is the unit recorded at ``seq``."""
    if (recorded.name, recorded.ordinal, recorded.digest) == (met.name, met.ordinal, met.digest):
        return
    raise JournalMismatchError(
        f"run {segment.run_id!r} segment {segment.number}: unit #{seq} was recorded as {recorded.name!r} "
        f"(#{recorded.ordinal} of that name, identity {recorded.digest[:12]}) but the replay met {met.name!r} "
        f"(#{met.ordinal}, identity {met.digest[:12]}); the agent, its model, tools or toolsets changed while the run "
        "was in flight, so its journal no longer fits: start a new run"
    )

"""What a step works with and returns: :class:`StepContext`, :class:`StepResult`, and the step's own events.

The step functions (:mod:`.modelturn`, :mod:`.toolstep`, :mod:`.endings`) build on these; :mod:`.steps` gathers
them for the engine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..agent import Agent
from ..errors import FencedError
from ..events import EventType, NewEvent, make_event, now_ms
from ..hooks import Hooks, StepInfo
from ..runs import RunState
from ..settings import Settings
from ..storage.eventlog import LogStatus
from ..storage.ledger import Effect
from ..storage.pending import Pending
from ..storage.store import RunStore
from . import children
from .calls import CallAbandoned, Watch
from .writer import EventWriter


class Cancelled(Exception):
    """A stop request was noticed inside a step (``abandoned``: a call the step walked away from for it)."""

    def __init__(self, abandoned: CallAbandoned | None = None) -> None:
        super().__init__("stopped")
        self.abandoned = abandoned


@dataclass
class StepContext:
    """What a step works with."""

    state: RunState
    agent: Agent
    step: int
    attempt: int
    token: str
    store: RunStore
    settings: Settings
    writer: EventWriter
    info: StepInfo
    #: Worker-level hooks, then the agent's own: model and tool hooks go to both.
    hooks: list[Hooks] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event = field(default_factory=threading.Event)
    #: Calls a function whenever ``stop`` or ``lost`` is set (:meth:`agents_celery.storage.leases.Holding.listen`).
    listen: Callable[[Callable[[], None]], Callable[[], None]] | None = None
    #: This attempt wrote a STEP_STARTED, so whatever ends it must write the STEP_FINISHED.
    step_open: bool = False
    #: Calls the claim already started in the effect ledger (see :attr:`agents_celery.storage.store.Claim.effects`).
    effects: dict[str, Effect | None] = field(default_factory=dict)
    #: Ledger results sent to Redis whose replies the engine reads before it commits.
    sent: list[Pending] = field(default_factory=list)
    #: How many messages the run's inbox holds (the claim's count); more than ``state.inbox_taken``: new ones.
    inbox: int = 0
    #: Attempts of this step that died of a connection error: not counted in ``max_step_attempts``.
    blips: int = 0
    #: Attempts of this step that journaled new work before they died (a guest's segment): not counted either.
    advanced: int = 0
    #: Tool calls this attempt invoked (or was about to): an attempt given back forgets the others' ledger entries.
    invoked: set[str] = field(default_factory=set)
    #: Sends a step's task, ``send(run_id, step, agent_id)``: a child run's first step (agents as tools).
    send: Callable[[str, int, str], None] | None = None

    def watch(self) -> Watch:
        """What a call waited on by this step watches for (:func:`agents_celery.engine.calls.run_call`)."""
        s = self.settings
        poll = min(s.stop_poll_seconds, 0.2)
        return Watch(self.stop, self.lost, s.stop_grace_seconds, poll, self.writer, self.listen)

    def starter(self) -> children.Starter:
        """What the step's agent calls start their child runs with (:func:`agents_celery.engine.children.collect`)."""
        s = self.settings
        return children.Starter(self.store, self.send, self.agent, s.max_agent_depth, s.max_children, self.check)

    def check(self) -> None:
        """Raise Cancelled when a stop was requested, FencedError once the heartbeat lost the lease."""
        if self.lost.is_set():
            raise FencedError(f"run {self.state.run_id!r}: lease lost; another attempt owns the run")
        if self.stop.is_set():
            raise Cancelled()


@dataclass
class StepResult:
    """The new state and the events to commit with it."""

    state: RunState
    events: list[NewEvent]
    log_status: LogStatus
    #: Child runs the step waits for: the commit sends no next step (the children's ends wake the run).
    waits: list[str] = field(default_factory=list)
    #: What the run's record says it waits for: set to ``waits`` (a list), or left alone (None).
    awaiting: list[str] | None = None


def walked_away(ctx: StepContext, exc: CallAbandoned) -> BaseException:
    """What a call walked away from means for the step: cancelled, superseded, or given back (shutdown)."""
    if exc.reason == "stopped":
        return Cancelled(exc)
    if exc.reason == "lost":
        return FencedError(f"run {ctx.state.run_id!r}: lease lost; another attempt owns the run")
    return exc


def sleep_unless_stopped(ctx: StepContext, seconds: float) -> None:
    """Wait ``seconds`` (a model retry's backoff); raise Cancelled at once if a stop comes meanwhile."""
    with ctx.writer.standing_by():
        if ctx.stop.wait(seconds):
            raise Cancelled()


def step_name(kind: str, step: int) -> str:
    return f"model_turn:{step}" if kind == "model" else f"tools:{step}"


def step_event(type_: EventType, kind: str, step: int, attempt: int) -> NewEvent:
    """A STEP_STARTED or STEP_FINISHED, exactly as :func:`make_event` writes it (tests/test_events.py checks).

    Every step writes two and every claim sends two, so they skip make_event's checks: all their fields are
    the engine's own (two ints and one of two names).
    """
    if kind not in ("model", "tools") or type(step) is not int or type(attempt) is not int:
        meta = {"step": step, "kind": kind, "attempt": attempt}
        return make_event(type_, step_name=step_name(kind, step), metadata=meta)
    return NewEvent(
        type_,
        f'{{"type":"{type_.value}","timestamp":{now_ms()},'
        f'"metadata":{{"step":{step},"kind":"{kind}","attempt":{attempt}}},"step_name":"{step_name(kind, step)}"}}',
    )


def step_started(kind: str, step: int, attempt: int) -> NewEvent:
    """The STEP_STARTED of an attempt (the claim writes a first attempt's; the engine a retried one's)."""
    return step_event(EventType.STEP_STARTED, kind, step, attempt)


def step_finished(ctx: StepContext, kind: str) -> NewEvent:
    """The STEP_FINISHED of this attempt of the step."""
    return step_event(EventType.STEP_FINISHED, kind, ctx.step, ctx.attempt)


def with_step_finished(ctx: StepContext, result: StepResult) -> StepResult:
    """``result`` with the step's STEP_FINISHED in front of its run-ending events, if it has none (a workflow's
    steps have STEP_FINISHED events of their own: only the engine step's, by its name, counts)."""
    own = f'"step_name":"{step_name(ctx.info.kind, ctx.step)}"'
    if not ctx.step_open or any(e.type is EventType.STEP_FINISHED and own in e.json for e in result.events):
        return result
    return replace(result, events=[step_finished(ctx, ctx.info.kind), *result.events])

"""The engine: one attempt at one step of one run, as the Celery step task calls it.

``execute(run_id, step)`` reads as the step does: **claim** (take the run's lease and load the checkpoint in
one Lua call), **do the step** (a model turn or the tool calls of a turn, :mod:`.steps`, with a heartbeat
renewing the lease; a retried attempt first closes what the crashed one left open), **commit** (the new
checkpoint by compare-and-set on the step number, fenced by the lease, with the step's events), then enqueue
the next step. A delivery for a step that is already committed, or that another attempt holds, does nothing
and emits nothing. A workflow's step and the first step of the child run it waits for then run on the same thread,
one after another, with no broker hop between them (:mod:`.inline`).

Each attempt is an :class:`~.attempt.Attempt` (token, number, claim, lease, the step's context), made by the
claim and passed whole through :meth:`Engine._run` and the commit. What the broker adds around it (a claim sent as
the message arrived, the next step's message pushed by the commit, the step's own message acked by it) comes in
one object, the :class:`~.attempt.Delivery`, and the commit only asks it what to carry; the engine never imports
Celery or kombu.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Literal

import redis

from ..agent import Agent
from ..content import shown_as
from ..errors import (
    AbandonedRunError,
    ConfigurationError,
    FencedError,
    RunFinishedError,
    StateError,
    StopStep,
)
from ..events import EventType, NewEvent, close_open, make_event
from ..hooks import Hooks, StepInfo, call_hooks
from ..models import ScriptedModel
from ..runs import RunState, RunStatus
from ..settings import Settings
from ..storage.connections import UNAVAILABLE, connect, is_unavailable
from ..storage.leases import LeaseKeeper, Leases, new_token
from ..storage.pending import Pending
from ..storage.scripts import InboxGrew
from ..storage.store import Claim, RunStore
from .attempt import PLAIN, Attempt, Delivery, first_started
from .calls import SHUTTING_DOWN, CallAbandoned
from .inline import INLINE_STEPS, SETTLED, Due, Here
from .lifecycle import Lifecycle
from .steps import (
    Cancelled,
    StepContext,
    StepResult,
    cancelled,
    failed,
    goes_on,
    model_turn,
    step_started,
    tool_step,
    user_message_events,
    with_step_finished,
)
from .summary import due, summary_step
from .writer import EventWriter

log = logging.getLogger(__name__)

#: Sends the task for ``(run_id, step, agent_id)``.
Enqueue = Callable[[str, int, str], None]
#: Sends a run's webhook: ``notify(state, committed_steps)``.
Notify = Callable[[RunState, int], None]
#: Errors of the connection to Redis rather than of the run: an attempt that dies of one is a blip, not counted
#: in ``max_step_attempts``. The list is storage's :data:`~agents_celery.storage.connections.UNAVAILABLE`, the one
#: the HTTP front ends answer 503 for.
BLIPS = UNAVAILABLE
#: What became of an attempt whose step did not fail on its own (:meth:`Engine.fate_of`), and what the log says.
Fate = Literal["fenced", "given back"]
_FATES: dict[Fate, str] = {
    "fenced": "lost the lease; another attempt owns the run",
    "given back": "step given back: the worker shuts down, or Redis or the broker failed under this attempt",
}

#: Pauses before each try to give a blip's lease back (the first at once, on a fresh connection): about 1.3 s
#: in all, well inside a lease; past them the lease expires by itself and the attempt counts.
GIVE_BACK_PAUSES = (0.0, 0.05, 0.25, 1.0)


class Engine:
    """Executes steps. One per worker process; shared by its threads."""

    def __init__(
        self,
        store: RunStore,
        agents: Mapping[str, Agent],
        enqueue: Enqueue,
        hooks: Sequence[Hooks] = (),
        notify: Notify | None = None,
    ):
        self.store = store
        self.settings: Settings = store.settings
        self.agents = agents
        self.enqueue = enqueue
        #: Sends the run's webhook when it pauses or ends (``notify(state, committed_steps)``).
        self.notify = notify
        #: Follows a run through its pause or end (webhook, indexes, session, children, parent).
        self.lifecycle = Lifecycle(store, enqueue, notify, wake=self._wake)
        #: Worker-level hooks (``configure(app, hooks=...)``): told everything an agent's own hooks are told.
        self.hooks = list(hooks)
        self.leases = Leases(store.redis, store.keys)
        s = self.settings
        own = partial(connect, s.redis_url, health_check_interval=30)  # the keeper's own client on greenlets
        self.keeper = LeaseKeeper(self.leases, s.lease_ttl_ms, s.heartbeat_seconds, s.stop_poll_seconds, own)
        #: What counts as a blip: :data:`BLIPS`, plus the broker's connection errors (the broker layer adds them:
        #: a step that sends a task, a child run's first step, and loses the broker retries like one losing Redis).
        self.blips: tuple[type[BaseException], ...] = BLIPS
        #: Steps one delivery runs on its thread after its own (:mod:`.inline`), at most.
        self.inline_steps = INLINE_STEPS
        self._here = Here()

    @property
    def _away(self) -> tuple[type[BaseException], ...]:
        """Redis or the broker away: the errors an attempt is given back for."""
        return (redis.RedisError, *self.blips)

    def _is_blip(self, exc: BaseException) -> bool:
        """A connection error of Redis or the broker, not a cluster client's misuse that only looks like one."""
        return isinstance(exc, self.blips) and (is_unavailable(exc) or not isinstance(exc, UNAVAILABLE))

    def fresh_claim(self, run_id: str, step: int) -> tuple[str, Claim]:
        """A new lease token and the claim of an attempt at ``step`` made with it."""
        token = new_token()
        return token, self.store.claim(run_id, step, token, first_started(step))

    def execute(self, run_id: str, step: int, delivery: Delivery = PLAIN) -> str:
        """Run one attempt of ``step``; return what happened (``committed``, ``stale``, ``busy`` ...). Then run
        the steps it queued on this thread (:mod:`.inline`): a woken workflow's step, its child's first step."""
        here = self._here
        if here.running:  # a step of this thread asking (none does: they queue): one attempt, nothing drained
            return self._attempt(run_id, step, delivery)
        here.running, here.ran = True, 0
        try:
            outcome = self._attempt(run_id, step, delivery)
            self._drain(here)
        finally:
            here.running = False
            while here.due:  # left by an error: through the broker
                self._send_quietly(here.due.popleft())
        return outcome

    def _attempt(self, run_id: str, step: int, delivery: Delivery) -> str:
        """One attempt of ``step``. A child run's first step its workflow's step held back and did not end waiting
        for (it failed, or ended at once) is sent after it."""
        here = self._here
        outer, here.held = here.held, None
        try:
            attempt = self._claim(run_id, step, delivery)
            if attempt.claim.outcome != "OK":
                log.info("run=%s step=%d: nothing to do (%s)", run_id, step, attempt.claim.outcome.lower())
                return attempt.claim.outcome.lower()
            try:
                self._run(attempt)
            finally:
                self._let_go(attempt)
            return attempt.outcome
        finally:
            held, here.held = here.held, outer
            if held is not None:
                self._send_quietly(held)

    def _drain(self, here: Here) -> None:
        """Run the steps queued on this thread, one after another, each of which may queue more. Past
        ``inline_steps`` of them, past half a lease's time, or when the worker shuts down, they go through the
        broker: a message the worker's consumer claimed as it arrived meanwhile waits for this thread, its lease
        unrenewed until its step starts."""
        budget = time.monotonic() + self.settings.lease_ttl_seconds / 2
        while here.due:
            due = here.due.popleft()
            if here.ran >= self.inline_steps or time.monotonic() > budget or SHUTTING_DOWN.is_set():
                self._send_quietly(due)
                continue
            here.ran += 1
            try:
                outcome = self._attempt(due.run_id, due.step, PLAIN)
            except Exception as exc:  # Redis or the broker away: the step is sent (the sweeper covers a lost send)
                log.warning("run=%s step=%d: run here but failed (%s); the step is sent", due.run_id, due.step, exc)
                self._send_quietly(due)
                continue
            log.debug("run=%s step=%d: run here after the step before (%s)", due.run_id, due.step, outcome)
            if due.held and outcome not in SETTLED:  # a child's first step has no message yet: this is its retry
                self._send_quietly(due)
            elif outcome != "committed":
                self._wake_if_settled(due)

    def _send_quietly(self, due: Due) -> None:
        """Send a step queued or held on this thread through the broker (a lost send is the sweeper's)."""
        try:
            self.enqueue(due.run_id, due.step, due.agent_id)
        except Exception as exc:
            log.warning("run=%s step=%d: could not send the step (%s); the sweeper will", due.run_id, due.step, exc)
        self._wake_if_settled(due)

    def _wake_if_settled(self, due: Due) -> None:
        """A held child whose step did not commit here: if it paused or ended already (an earlier attempt of its
        workflow's step started it, and it ran), its end woke nobody, so its workflow's step is sent now."""
        if due.parent is None:
            return
        try:
            if self.store.any_settled([due.run_id]):
                self.enqueue(*due.parent)
        except Exception as exc:
            log.warning("run=%s: could not wake its parent (%s); the sweeper will", due.run_id, exc)

    def _run(self, attempt: Attempt) -> None:
        """The step under the attempt's lease, then its commit; an attempt superseded or given back says so in
        ``attempt.outcome`` (and ``attempt.blip``)."""
        try:
            self._commit(attempt, self._do_step(attempt))
        except BaseException as exc:
            fate = self.fate_of(exc)
            if fate is None:
                raise
            log.warning("run=%s step=%d: %s (%s)", attempt.run_id, attempt.step, _FATES[fate], exc)
            attempt.outcome, attempt.blip = fate, fate == "given back" and self._is_blip(exc)
        finally:
            self._unhold(attempt)

    def _unhold(self, attempt: Attempt) -> None:
        """The keeper stops renewing the attempt's lease: its commit gave it up, or the attempt ends without one."""
        if attempt.lease is not None:
            self.keeper.drop(attempt.lease)
            attempt.lease = None

    def fate_of(self, exc: BaseException) -> Fate | None:
        """What an exception out of a step means for its attempt, decided here once (dramatiq's ``throws``):
        ``fenced`` when another attempt owns the run now (our lease expired and it took over, or finished the run);
        ``given back`` when the worker walks away from a call to shut down, or Redis or the broker failed under
        the attempt (a blip when it was a connection error: not counted against the step's attempts). None: the
        step's own failure, which the run's outcome says."""
        if isinstance(exc, (FencedError, RunFinishedError, StateError)):
            return "fenced"
        if isinstance(exc, (CallAbandoned, *self._away)):
            return "given back"
        return None

    def _let_go(self, attempt: Attempt) -> None:
        """An attempt that did not commit gives its lease up (the commit gave it up in the same round trip): as
        a blip when a connection error ended it, else released."""
        if attempt.outcome == "committed":
            return
        run_id, step = attempt.run_id, attempt.step
        self.store.states.forget(run_id)
        if attempt.blip:
            self._blip(attempt)
            return
        try:
            self.leases.release(run_id, attempt.token)
        except redis.RedisError as exc:  # Redis still away: the lease expires by itself
            log.warning("run=%s step=%d: could not release the lease (%s)", run_id, step, exc)

    def _claim(self, run_id: str, step: int, delivery: Delivery) -> Attempt:
        """The attempt, with its token and claim. A claim whose reply a connection error lost may have taken the
        lease and counted an attempt: that lease is given back as a blip and the step sent again; when it never
        ran, the claim is made once more on a fresh connection."""
        token, sent = new_token(), time.monotonic()
        try:
            token, claim = delivery.claim(
                run_id, step, lambda: (token, self.store.claim(run_id, step, token, first_started(step)))
            )
        except BLIPS as exc:
            log.warning("run=%s step=%d: a claim failed on its connection (%s)", run_id, step, exc)
            claim = Claim("BUSY", lost=True)
        attempt = Attempt(run_id, step, token, claim, delivery, claimed=sent)
        if not claim.lost:
            return attempt
        attempt.claim = Claim("BUSY")
        self.store.connection_lost()
        given = self._give_back(attempt)
        if given is None:  # Redis does not answer: the sweeper sends the step again once it does
            return attempt
        if given:  # the claim had run: its attempt is a blip, handed to a new delivery
            self._send_again(run_id, step)
            return attempt
        try:  # it had not run (or another attempt holds the lease, and this one finds it BUSY)
            attempt.claimed = time.monotonic()
            attempt.token, attempt.claim = self.fresh_claim(run_id, step)
        except BLIPS as exc:
            log.warning("run=%s step=%d: the claim failed again (%s); the sweeper retries", run_id, step, exc)
        return attempt

    def _blip(self, attempt: Attempt) -> None:
        """An attempt died of a connection error: drop the process's idle connections (all broken alike), give
        the lease back as a blip (with the tool calls it never invoked) and send the step again at once."""
        self.store.connection_lost()
        if self._give_back(attempt):
            self._send_again(attempt.run_id, attempt.step, attempt.state.agent_id)

    def _give_back(self, attempt: Attempt) -> bool | None:
        """Give the lease back as a blip (:meth:`RunStore.give_back`), retried a few times on fresh connections;
        whether it was recorded as one, None when Redis did not answer (the lease then expires by itself)."""
        run_id, step = attempt.run_id, attempt.step
        for pause in GIVE_BACK_PAUSES:
            time.sleep(pause)
            try:
                return self.store.give_back(run_id, step, attempt.token, attempt.not_run)
            except BLIPS as exc:
                self.store.connection_lost()
                error = exc
        log.warning("run=%s step=%d: could not give the lease back (%s); it expires by itself", run_id, step, error)
        return None

    def _wake(self, run_id: str, step: int, agent_id: str) -> None:
        """Wake a parent run whose child paused or ended: a run of an agent that ``wakes_inline`` (a workflow) takes
        its step on this thread once the child's step is done (:meth:`_drain`: no broker hop between its steps);
        any other's step is sent."""
        agent = self.agents.get(agent_id)
        if agent is None or not agent.wakes_inline or not self._here.running:
            self.enqueue(run_id, step, agent_id)
            return
        self._here.due.append(Due(run_id, step, agent_id))

    def _send_child(self, run_id: str, step: int, agent_id: str) -> None:
        """How a workflow's step sends a child run's first step: the first child it starts is held back, to run on
        this thread once the step committed waiting for it (:meth:`_after_commit`); the others are sent."""
        here = self._here
        if here.held is None and here.running:
            here.held = Due(run_id, step, agent_id, held=True)
        else:
            self.enqueue(run_id, step, agent_id)

    def _send_again(self, run_id: str, step: int, agent_id: str | None = None) -> None:
        """Send a given-back step again (a lost send is the sweeper's: the lease is free, the step is due)."""
        try:
            if agent_id is None:
                agent_id = self.store.run_fields(run_id, "agent_id")[0] or ""
            self.enqueue(run_id, step, agent_id)
        except Exception as exc:  # the broker or Redis away too
            log.warning("run=%s step=%d: could not send the step again (%s); the sweeper will", run_id, step, exc)
        else:
            log.info("run=%s step=%d: sent again after a connection error", run_id, step)

    def _do_step(self, attempt: Attempt) -> StepResult:
        """The step's work under the lease: the result to commit (with the events not yet appended). When it
        fails, ``attempt.not_run`` gets the tool calls it never invoked. The keeper renews the lease from here
        until the commit gave it up (:meth:`_unhold`): on a busy gevent worker a step's commit can reach Redis
        many seconds after its work ended (the greenlet waits for the hub), and a lease left unrenewed meanwhile
        expired; the commit was refused and the turn ran again (824 of 1,000 runs, with a core burnt beside
        tests/test_gevent_capacity.py)."""
        state = attempt.state
        agent = self.agents.get(state.active_agent or state.agent_id)
        attempt.lease = self.keeper.hold(attempt.run_id, attempt.token, taken=attempt.claimed)
        try:
            window = self.settings.green_batch_ms / 1000
            with EventWriter(self.store.log, attempt.run_id, attempt.token, window) as writer:
                ctx = attempt.ctx = self._context(attempt, agent, writer)
                if attempt.number > 1:
                    self._reopen(ctx, attempt.claim)
                result = with_step_finished(ctx, self._decide(ctx, agent, ctx.hooks))
                result.events[:0] = writer.take()  # committed with the checkpoint, in the same round trip
            for call in attempt.sent:
                call.wait()  # the results are in the ledger before the checkpoint that relies on them
        except BaseException:
            _read_quietly(attempt.sent)
            if state.next == "tools" and attempt.ctx is not None:
                invoked = attempt.ctx.invoked
                attempt.not_run += [
                    c.id for c in state.tool_calls if not c.done and not c.agent and c.id not in invoked
                ]
            raise
        return result

    def _context(self, attempt: Attempt, agent: Agent | None, writer: EventWriter) -> StepContext:
        """The step's context, built whole: the attempt's claim, lease and writer, the agent and its hooks."""
        claim, state, lease = attempt.claim, attempt.state, attempt.lease
        assert lease is not None
        if claim.stop_reason:  # a stop requested before the claim: the step sees it at once
            lease.stop.set()
        return StepContext(
            state=state,
            # An agent no worker here serves: _decide fails the run before anything asks it for more than its name.
            agent=agent or Agent(name=state.active_agent or state.agent_id, model=ScriptedModel([""])),
            step=attempt.step,
            attempt=attempt.number,
            token=attempt.token,
            store=self.store,
            settings=self.settings,
            writer=writer,
            info=StepInfo(attempt.run_id, state.agent_id, state.session_id, attempt.step, state.next, attempt.number),
            hooks=[*self.hooks, *(agent.hooks if agent else [])],
            stop=lease.stop,
            lost=lease.lost,
            listen=lease.listen,
            step_open=claim.attempt == 1,  # the claim wrote this attempt's STEP_STARTED
            effects=claim.effects,
            sent=attempt.sent,
            inbox=claim.inbox,
            blips=claim.blips,
            advanced=claim.advanced,
            send=self._send_child if agent is not None and agent.wakes_inline else self.enqueue,
        )

    def _reopen(self, ctx: StepContext, claim: Claim) -> None:
        """A retried attempt: close what the crashed one left open, then write its own STEP_STARTED (unless it is
        past its attempts: it fails the run at once)."""
        self._close_abandoned(ctx, claim)
        if claim.counted <= self.settings.max_step_attempts:
            ctx.writer.emit(step_started(ctx.info.kind, ctx.step, ctx.attempt))
            ctx.step_open = True

    def _commit(self, attempt: Attempt, result: StepResult) -> None:
        """Commit ``result`` as the next step (a user message that came while the turn ran gets a turn of its
        own), then follow it through: hooks, the next step, the run's end."""
        assert attempt.ctx is not None
        info, hooks = attempt.ctx.info, attempt.ctx.hooks
        try:
            enqueued = self._commit_once(attempt, result)
        except InboxGrew:
            result = goes_on(result)
            enqueued = self._commit_once(attempt, result)
        self._unhold(attempt)
        call_hooks(hooks, "after_commit", info)
        self._after_commit(result, attempt.step, enqueued=enqueued)
        call_hooks(hooks, "after_step", info, result.state.status.value)
        attempt.outcome = "committed"  # the commit gave the lease up in the same round trip

    def _commit_once(self, attempt: Attempt, result: StepResult) -> bool:
        """One commit of ``result`` as step ``step + 1``; whether it pushed the next step's task (the delivery
        says what the commit carries for the broker)."""
        state, step = result.state, attempt.step
        push = result.log_status == "live" and not result.waits
        if attempt.lease is not None:  # a renewal failing from now on is this commit's doing (or it is refused)
            attempt.lease.committing = True
        with attempt.delivery.committing(attempt.run_id, step + 1, state.agent_id, push) as carried:
            self.store.commit(
                state,
                attempt.token,
                step,
                step + 1,
                result.events,
                result.log_status,
                task=carried.task,
                ack=carried.ack,
                task_id=carried.task_id,
                awaiting=result.awaiting,  # noted by the commit itself: no round trip of its own
            )
        return carried.task is not None

    def _decide(self, ctx: StepContext, agent: Agent | None, hooks: list[Hooks]) -> StepResult:
        state = ctx.state
        if agent is None:
            missing = ConfigurationError(
                f"no worker here serves agent {(state.active_agent or state.agent_id)!r}; start one with its module"
            )
            return failed(state, missing)
        counted = ctx.attempt - ctx.blips - ctx.advanced
        if counted > self.settings.max_step_attempts:
            blips = f" (and interrupted {ctx.blips} times by connection errors)" if ctx.blips else ""
            saved = f" (and {ctx.advanced} more times that saved work before they died)" if ctx.advanced else ""
            error = AbandonedRunError(
                f"step {ctx.step} of run {state.run_id!r} was attempted {counted - 1} times without "
                f"committing{blips}{saved}"
            )
            return failed(state, error)
        if ctx.stop.is_set():
            return cancelled(state)
        if state.status in (RunStatus.QUEUED, RunStatus.SCHEDULED):
            delayed = state.status == RunStatus.SCHEDULED
            ctx.state = state = state.moved_to(RunStatus.RUNNING)
            # Visible as running at once; the attempt keeps its lease.
            self.store.commit(state, ctx.token, ctx.step, ctx.step, [], "live", release=False)
            if delayed:  # queued and running share an index; a delayed run leaves the scheduled one
                self.store.reindex(state, watch_in=self.settings.lease_ttl_seconds)
        if state.next == "model" and ctx.inbox > state.inbox_taken:
            ctx.state = state = self._take_inbox(ctx)
        try:
            call_hooks(hooks, "before_step", ctx.info)
            return _one_step(ctx, agent)
        except Cancelled as exc:
            return cancelled(ctx.state, _abandoned_event(exc.abandoned))
        except StopStep as exc:
            return failed(ctx.state, exc)
        except Exception as exc:
            if self.fate_of(exc) is not None:
                raise  # superseded, shutting down, or Redis or the broker away: :meth:`_run` decides
            # A bug in a model adapter, a hook or here: another attempt would fail the same way, so fail the
            # run now with the reason instead of burning its attempts.
            log.exception("run=%s step=%d: unexpected error; the run fails", ctx.state.run_id, ctx.step)
            return failed(ctx.state, exc)

    def _take_inbox(self, ctx: StepContext) -> RunState:
        """The user messages sent to the run since its last model turn, taken into the conversation and the log
        (committed before the turn, at the same step: a retried attempt finds them taken, so never twice)."""
        state = ctx.state
        texts = self.store.inbox(state.run_id, state.inbox_taken)  # (or content parts, with images and files)
        events = ctx.writer.drain()  # whatever this attempt wrote so far stays in front
        for text in texts:
            events += user_message_events(shown_as(text))
        messages = [*state.messages, *({"role": "user", "content": t} for t in texts)]
        state = state.model_copy(update={"messages": messages, "inbox_taken": state.inbox_taken + len(texts)})
        self.store.commit(state, ctx.token, ctx.step, ctx.step, events, "live", release=False)
        # Redis holds these messages now: the step's own commit appends only what the turn adds.
        return state.stored_as(None if self.settings.state_schema == 1 else state.messages)

    def _close_abandoned(self, ctx: StepContext, claim: Claim) -> None:
        """Close what a crashed attempt of this step left open, so the stream stays valid AG-UI."""
        start = claim.step_offset if claim.step_offset is not None else claim.next_offset
        closers = close_open(self.store.log.read(ctx.state.run_id, after=start - 1))
        closers.append(
            make_event(
                EventType.CUSTOM,
                name="attempt_abandoned",
                value={"step": ctx.step, "attempt": ctx.attempt - 1, "next_attempt": ctx.attempt},
            )
        )
        for ev in closers:
            ctx.writer.emit(ev)

    def _after_commit(self, result: StepResult, step: int, enqueued: bool) -> None:
        state = result.state
        if result.log_status == "live":
            # The run stays in the sweeper's index while live; the commit's timestamp tells the sweeper
            # when this enqueue was due, so no index write is needed per step.
            if result.waits:  # a child that ended before this commit could not wake the run: wake it here
                held, others = self._here.held, result.waits
                if held is not None and held.run_id in result.waits:  # its first step runs next, on this thread
                    self._here.held = None
                    self._here.due.append(replace(held, parent=(state.run_id, step + 1, state.agent_id)))
                    others = [w for w in result.waits if w != held.run_id]  # that one tells by its attempt
                if others and self.store.any_settled(others):
                    self.enqueue(state.run_id, step + 1, state.agent_id)
            elif not enqueued:
                self.enqueue(state.run_id, step + 1, state.agent_id)
            return
        self.lifecycle.follow_through(state, step + 1)  # webhook, indexes, session, children, parent


def _one_step(ctx: StepContext, agent: Agent) -> StepResult:
    """The step itself: a model turn or a tool step; for a guest agent (pydantic-ai), one segment of its own loop."""
    if agent.guest:
        return agent.run_step(ctx)  # type: ignore[no-any-return]
    return _model_step(ctx) if ctx.state.next == "model" else tool_step(ctx)


def _abandoned_event(abandoned: CallAbandoned | None) -> list[NewEvent]:
    """A CUSTOM ``call_abandoned`` event for a call the step walked away from (none otherwise)."""
    if abandoned is None:
        return []
    value = {"call": abandoned.what, "reason": abandoned.reason, "seconds": round(abandoned.seconds, 3)}
    return [make_event(EventType.CUSTOM, name="call_abandoned", value=value)]


def _model_step(ctx: StepContext) -> StepResult:
    """A model turn, or first the summary step it needs (:mod:`.summary`): a step of its own."""
    plan = due(ctx)
    return summary_step(ctx, plan) if plan is not None else model_turn(ctx)


def _read_quietly(sent: list[Pending]) -> None:
    """Read the replies of ledger writes an attempt sent before it failed (Redis has them either way)."""
    for call in sent:
        try:
            call.wait()
        except Exception as exc:  # the attempt's own error is the one that matters
            log.warning("a tool result may not be in the ledger: %s", exc)

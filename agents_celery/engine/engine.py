"""The engine: one attempt at one step of one run, as the Celery step task calls it.

``execute(run_id, step)``: take the run's lease (one Lua call that also loads the checkpoint), close what
a crashed earlier attempt left open, do the step (:mod:`agents_celery.engine.steps`) with a heartbeat renewing
the lease, commit the new checkpoint by compare-and-set on the step number (fenced by the lease), then
enqueue the next step (the commit script pushes it itself when the broker is the same Redis, and acks the
step's own message: :mod:`agents_celery.broker.acks`). A delivery for a step that is already committed, or that
another attempt holds, does nothing and emits nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import redis

from ..agent import Agent
from ..errors import AbandonedRunError, ConfigurationError, FencedError, RunFinishedError, StateError, StopStep
from ..events import EventType, NewEvent, close_open, make_event
from ..hooks import Hooks, StepInfo, call_hooks
from ..runs import RunStatus
from ..settings import Settings
from ..storage.leases import LeaseKeeper, Leases, new_token
from ..storage.store import Ack, Claim, RunStore, Sent, SentClaim
from .steps import (
    Cancelled,
    StepContext,
    StepResult,
    cancelled,
    failed,
    model_turn,
    step_started,
    tool_step,
    with_step_finished,
)
from .writer import EventWriter

log = logging.getLogger(__name__)

#: Sends the task for ``(run_id, step, agent_id)``.
Enqueue = Callable[[str, int, str], None]
#: The step queue's key and the message for ``(run_id, step, agent_id)`` when the commit can push it itself.
TaskFor = Callable[[str, int, str], "tuple[str, str] | None"]


@dataclass(frozen=True)
class Ahead:
    """A claim sent ahead of its attempt (:meth:`Engine.claim_ahead`)."""

    run_id: str
    step: int
    token: str
    claim: SentClaim

    def close(self) -> None:
        """Its attempt will not run: read the reply anyway (the lease it took expires; the sweeper retries)."""
        self.claim.sent.close()


class Engine:
    """Executes steps. One per worker process; shared by its threads."""

    def __init__(
        self,
        store: RunStore,
        agents: Mapping[str, Agent],
        enqueue: Enqueue,
        hooks: Sequence[Hooks] = (),
        task_for: TaskFor | None = None,
        on_ack: Callable[[str, bool], None] | None = None,
    ) -> None:
        self.store = store
        self.task_for = task_for
        # Told (tag, False) just before a commit that acks the delivered message is sent, (tag, True) once it
        # succeeded (agents_celery.broker.acks.commit_acks).
        self.on_ack = on_ack
        self.settings: Settings = store.settings
        self.agents = agents
        self.enqueue = enqueue
        self.hooks = list(hooks)
        self.leases = Leases(store.redis, store.keys)
        s = self.settings
        self.keeper = LeaseKeeper(self.leases, s.lease_ttl_ms, s.heartbeat_seconds, s.stop_poll_seconds)

    def claim_ahead(self, run_id: str, step: int) -> Ahead:
        """Send the claim of an attempt at ``step`` now; :meth:`execute` reads its reply (``ahead=``)."""
        token = new_token()
        started = _first_started(step)
        return Ahead(run_id, step, token, self.store.claim_sent(run_id, step, token, started))

    def execute(self, run_id: str, step: int, ack: Ack | None = None, ahead: Ahead | None = None) -> str:
        """Run one attempt of ``step``; return what happened (``committed``, ``stale``, ``busy`` ...).

        ``ack``: the delivered message, for the commit to ack (only a ``committed`` attempt acked it).
        ``ahead``: the claim :meth:`claim_ahead` sent for this very attempt, if any.
        """
        if ahead is not None and (ahead.run_id, ahead.step) == (run_id, step):
            token = ahead.token
            claim = self.store.claim_read(ahead.claim)
        else:
            if ahead is not None:
                ahead.close()
            token = new_token()
            started = _first_started(step)
            claim = self.store.claim(run_id, step, token, started)
        if claim.outcome != "OK":
            log.info("run=%s step=%d: nothing to do (%s)", run_id, step, claim.outcome.lower())
            return claim.outcome.lower()
        outcome = "failed"
        try:
            outcome = self._attempt(run_id, step, token, claim, ack)
        except (FencedError, RunFinishedError, StateError) as exc:
            # Superseded: our lease expired and another attempt took over (or already finished the run).
            log.warning("run=%s step=%d: lost the lease; another attempt owns the run (%s)", run_id, step, exc)
            outcome = "fenced"
        finally:
            if outcome != "committed":  # the commit gave the lease up in the same round trip
                self.store.states.forget(run_id)
                self.leases.release(run_id, token)
        return outcome

    def _attempt(self, run_id: str, step: int, token: str, claim: Claim, ack: Ack | None) -> str:
        assert claim.state is not None
        state = claim.state
        agent = self.agents.get(state.agent_id)
        kind = state.next
        info = StepInfo(run_id, state.agent_id, state.session_id, step, kind, claim.attempt)
        hooks = [*self.hooks, *(agent.hooks if agent else [])]
        holding = self.keeper.hold(run_id, token)
        sent: list[Sent] = []  # ledger results sent during the step; their replies are read before the commit
        try:
            with EventWriter(self.store.log, run_id, token) as writer:
                # agent may be None: _decide fails the run before anything uses it
                ctx = StepContext(state, agent, step, claim.attempt, token, self.store, self.settings, writer, info)  # type: ignore[arg-type]
                ctx.stop, ctx.lost, ctx.sent = holding.stop, holding.lost, sent
                if claim.stop_reason:
                    ctx.stop.set()
                ctx.step_open = claim.attempt == 1  # the claim wrote this attempt's STEP_STARTED
                ctx.effects = claim.effects
                if claim.attempt > 1:
                    self._close_abandoned(ctx, claim)
                    if claim.attempt <= self.settings.max_step_attempts:
                        writer.emit(step_started(kind, step, claim.attempt))
                        ctx.step_open = True
                result = with_step_finished(ctx, self._decide(ctx, agent, hooks))
                unwritten = writer.take()  # committed with the checkpoint, in the same round trip
        except BaseException:
            _read_quietly(sent)
            raise
        finally:
            self.keeper.drop(holding)
        first_status = result.state.status
        task = None
        try:
            if result.log_status == "live" and self.task_for is not None:
                task = self.task_for(run_id, step + 1, result.state.agent_id)
        finally:
            for call in sent:
                call.wait()  # the results are in the ledger before the checkpoint that relies on them
        events = [*unwritten, *result.events]
        if ack is not None and self.on_ack is not None:
            self.on_ack(ack.tag, False)
        self.store.commit(result.state, token, step, step + 1, events, result.log_status, task=task, ack=ack)
        if ack is not None and self.on_ack is not None:
            self.on_ack(ack.tag, True)
        call_hooks(hooks, "after_commit", info)
        self._after_commit(result, step, enqueued=task is not None)
        call_hooks(hooks, "after_step", info, first_status.value)
        return "committed"

    def _decide(self, ctx: StepContext, agent: Agent | None, hooks: list[Hooks]) -> StepResult:
        state = ctx.state
        if agent is None:
            missing = ConfigurationError(f"no worker here serves agent {state.agent_id!r}; start one with its module")
            return failed(ctx, state, missing)
        if ctx.attempt > self.settings.max_step_attempts:
            error = AbandonedRunError(
                f"step {ctx.step} of run {state.run_id!r} was attempted {ctx.attempt - 1} times without committing"
            )
            return failed(ctx, state, error)
        if ctx.stop.is_set():
            return cancelled(ctx, state)
        if state.status == RunStatus.QUEUED:
            ctx.state = state = state.moved_to(RunStatus.RUNNING)
            # Visible as running at once; the attempt keeps its lease.
            self.store.commit(state, ctx.token, ctx.step, ctx.step, [], "live", release=False)
        try:
            call_hooks(hooks, "before_step", ctx.info)
            return model_turn(ctx) if state.next == "model" else tool_step(ctx)
        except Cancelled:
            return cancelled(ctx, ctx.state)
        except StopStep as exc:
            return failed(ctx, ctx.state, exc)
        except (FencedError, RunFinishedError, StateError, redis.RedisError):
            raise  # superseded, or Redis away: the sweeper gives the step to another attempt
        except Exception as exc:
            # A bug in a model adapter, a hook or here: another attempt would fail the same way, so fail the
            # run now with the reason instead of burning its attempts.
            log.exception("run=%s step=%d: unexpected error; the run fails", ctx.state.run_id, ctx.step)
            return failed(ctx, ctx.state, exc)

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
            if not enqueued:
                self.enqueue(state.run_id, step + 1, state.agent_id)
            return
        self.store.unwatch(state.run_id)
        if result.log_status == "ended":
            self.store.session_sync(state)
            self.store.session_release(state.session_id, state.run_id)


def _read_quietly(sent: list[Sent]) -> None:
    """Read the replies of ledger writes an attempt sent before it failed (Redis has them either way)."""
    for call in sent:
        try:
            call.wait()
        except Exception as exc:  # the attempt's own error is the one that matters
            log.warning("a tool result may not be in the ledger: %s", exc)


def _first_started(step: int) -> tuple[NewEvent, NewEvent]:
    """The STEP_STARTED of a first attempt, as a model turn and as a tool step: the claim writes the one that fits."""
    return step_started("model", step, 1), step_started("tools", step, 1)

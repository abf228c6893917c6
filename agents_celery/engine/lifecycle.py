"""The run lifecycle: the one place a run's pause or end is followed through, and where a paused run resumes.

As rq's ``job_lifecycle.py`` is for a job: whoever commits a run's end (the engine after a step, the Runtime
stopping a run nobody works on) or finds one whose worker died before following it through (the sweeper)
calls :meth:`Lifecycle.settled`, which, in this order:

1. sends the run's webhook, and the end of a run a user's Celery canvas waits for (before the run leaves the
   sweeper's index: a crash here leaves it there, and the sweeper sends them instead; both are at least once);
2. moves the run in the indexes (out of the live one, into those of its status);
3. when it ended: appends its messages to its session's history (once), frees the session, starts the next run
   waiting in the session's line, keeps its ended children as long as itself and stops its live ones;
4. wakes its parent (a child paused or ended: the parent's step collects it).

Every part is idempotent, so doing it twice (the sweeper after a half-done one) is harmless. The callers'
side (the Runtime) ends and resumes idle runs here too: :meth:`cancel_idle` takes the lease of a run nobody
works on (:meth:`idle_lease`) and :meth:`cancel` commits its end (stopped while paused, queued, scheduled or
between steps); :meth:`still_paused` holds a paused run's lease while :meth:`resume` commits it going on (a
continue). A run a worker holds ends in the engine (the stop is a request it honours). No Celery here: steps
are sent through the callbacks given.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import redis

from ..errors import AgentsCeleryError, RunBusyError, RunNotPausedError
from ..events import EventType, NewEvent, close_open, make_event
from ..runs import RunState, RunStatus
from ..storage.leases import Leases
from ..storage.store import RunStore
from . import children
from .waiting import SendFirst, start_next

log = logging.getLogger(__name__)

#: Sends a step of an existing run: ``send(run_id, step, agent_id)``.
Send = Callable[[str, int, str], None]
#: Sends a run's webhook: ``notify(state, committed_steps)``.
Notify = Callable[[RunState, int], None]


class Lifecycle:
    """Follows runs through their pauses, ends and resumes, over ``store``.

    Args:
        send: Sends a step of an existing run (a woken parent, a resumed run).
        wake: Wakes a parent whose child paused or ended (the engine runs a workflow's step on the same thread, once
            the child's step is done).
        notify: Sends a run's webhook (None: no webhooks from here).
        first: Sends the first step of a run that waited for its session (default: ``send(run_id, 0, agent)``).
    """

    def __init__(
        self,
        store: RunStore,
        send: Send,
        notify: Notify | None = None,
        first: SendFirst | None = None,
        wake: Send | None = None,
    ) -> None:
        self.store = store
        self.send = send
        #: Wakes a parent run whose child paused or ended (default: ``send`` its step).
        self.wake = wake or send
        self.notify = notify
        self.first: SendFirst = first or (lambda run_id, agent_id, _queue: send(run_id, 0, agent_id))
        self.leases = Leases(store.redis, store.keys)

    def follow_through(self, state: RunState, steps: int) -> None:
        """Follow through a commit that paused or ended the run (``steps``: its committed steps)."""
        if self.notify is not None and (state.webhook_url or state.canvas is not None):
            self.notify(state, steps)  # webhooks; the end of a run a Celery canvas waits for
        self.store.reindex(state)
        if state.status.is_final:
            self.store.sessions.sync(state)
            if self.store.sessions.release_and_peek(state.session_id, state.run_id) is not None:
                start_next(self.store, self.first, state.session_id)  # a run waits in the session's line
            self._children_follow(state)
        children.wake_parent(self.store, self.wake, state)

    def _children_follow(self, state: RunState) -> None:
        """A parent run ended: its ended children are kept as long as it is, its live ones are stopped."""
        if not state.children:
            return
        try:
            found = self.store.states_of(state.children)
        except (AgentsCeleryError, redis.ConnectionError):  # its children keep their own retention
            return
        ended = [child for child in found.values() if child.status.is_final]
        if ended:
            self.store.keep_with(*ended)
        for child in found.values():
            if not child.status.is_final:
                self.store.request_stop(child.run_id, f"its parent run {state.run_id} ended ({state.status.value})")

    def idle_lease(self, run_id: str) -> str | None:
        """The run's lease, if no worker is working on it. A worker that just paused the run releases it within
        milliseconds, and nobody else would end a paused run, so for a paused run wait for it (a lease TTL)."""
        settings = self.store.settings
        deadline = time.monotonic() + settings.lease_ttl_seconds
        while True:
            token = self.leases.acquire(run_id, settings.lease_ttl_ms)
            if token is not None or time.monotonic() > deadline:
                return token
            state, _ = self.store.load(run_id)
            if state.status != RunStatus.PAUSED:
                return None  # a working step holds it and honours a stop request at its next check
            time.sleep(0.01)

    @contextlib.contextmanager
    def still_paused(self, run_id: str, step: int) -> Iterator[tuple[RunState, str]]:
        """The run's state and lease, the run still paused at ``step`` (to :meth:`resume` it); the lease is
        released after.

        Raises:
            RunBusyError: another continue or a stop holds it. RunNotPausedError: it moved on meanwhile.
        """
        token = self.idle_lease(run_id)
        if token is None:
            raise RunBusyError(f"run {run_id!r} is being continued or stopped by another caller right now")
        try:
            state, now = self.store.load(run_id)
            if state.status != RunStatus.PAUSED or now != step:
                raise RunNotPausedError(f"run {run_id!r} is {state.status.value}, not paused; nothing to continue")
            yield state, token
        finally:
            self.leases.release(run_id, token)

    def cancel_idle(self, run_id: str) -> RunState | None:
        """End the run as cancelled if no worker is working on it (a worker holding it honours the stop request
        at its next check); the cancelled state, or None when a worker holds it or it had ended."""
        token = self.idle_lease(run_id)
        if token is None:
            return None
        try:
            return self.cancel(run_id, token)
        finally:
            self.leases.release(run_id, token)

    def cancel(self, run_id: str, token: str) -> RunState | None:
        """End a run nobody works on as cancelled (``token``: its lease), with its final event, and follow that
        through; the cancelled state, or None when the run had ended already."""
        state, step = self.store.load(run_id)
        if state.status.is_final:
            return None
        closers = self._left_open(run_id)
        closers += children.unfinished(state)  # the children it waited for (stopped before it) end with it
        if state.status == RunStatus.PAUSED:
            # A paused run's log ends with RUN_FINISHED (interrupt); AG-UI clients accept only a new
            # RUN_STARTED after it, so the cancellation opens a segment of its own.
            meta = {"continued": True, "stopping": True}
            closers.append(make_event(EventType.RUN_STARTED, thread_id=state.session_id, run_id=run_id, metadata=meta))
        done = make_event(
            EventType.RUN_FINISHED, thread_id=state.session_id, run_id=run_id, outcome={"type": "cancelled"}
        )
        cancelled = state.moved_to(RunStatus.CANCELLED)
        self.store.commit(cancelled, token, step, step, [*closers, done], "ended")
        self.store.sessions.leave_line(state.session_id, run_id)  # if it was waiting for its session
        self.follow_through(cancelled, step)
        return cancelled

    def _left_open(self, run_id: str) -> list[NewEvent]:
        """What a crashed attempt of the run's current step left open (closed before the run ends)."""
        attempt, step_offset = self.store.run_fields(run_id, "attempt", "step_offset")
        if not attempt or int(attempt) <= 0 or step_offset is None:
            return []
        return close_open(self.store.log.read(run_id, after=int(step_offset) - 1))

    def resume(
        self,
        state: RunState,
        token: str,
        step: int,
        metadata: dict[str, Any],
        *,
        events: Sequence[NewEvent] = (),
        awaiting: Sequence[str] | None = None,
        send: bool = True,
    ) -> None:
        """Commit a paused run going on (``state``: as it goes on, running), under its lease ``token``: a new
        RUN_STARTED with ``metadata`` and ``events``; ``awaiting``: the child runs it waits for from now on;
        ``send``: send its next step now."""
        if state.usage:  # the running total where the new segment starts: a Responses response's usage is its own
            metadata = {**metadata, "usage": dict(state.usage)}
        started = make_event(EventType.RUN_STARTED, thread_id=state.session_id, run_id=state.run_id, metadata=metadata)
        self.store.commit(state, token, step, step, [started, *events], "live", awaiting=awaiting)
        self.store.reindex(state, watch_in=self.store.settings.enqueue_grace_seconds)
        if send:
            self.send(state.run_id, step, state.agent_id)


def by_record(store: RunStore, send_to: Callable[[str, int, str, str, str, str], None]) -> Send:
    """A :data:`Send` that sends to the queue and in the chain of tasks the run's record names:
    ``send_to(run_id, step, agent_id, queue, root_id, parent_id)`` ('' for an id the record lacks)."""

    def send(run_id: str, step: int, agent_id: str) -> None:
        queue, root, parent = store.run_fields(run_id, "queue", "root_task", "last_task")
        send_to(run_id, step, agent_id, queue or store.settings.queue, root or "", parent or "")

    return send

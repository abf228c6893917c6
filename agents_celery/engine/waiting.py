"""Runs waiting for their session: created with ``multitask_strategy`` ``enqueue`` (or ``interrupt``, which also
stops the live run) while another run held the session. They are ``queued`` and in the session's line
(``storage.keys``: ``waiting``); :func:`start_next` starts the first one once the session is free.

It is called where a session is freed (the engine after a run ends, the Runtime after a stop) and by the
sweeper, which looks at a waiting run every enqueue grace: so a crash between a run's end and the start of
the next only delays it. A waiting run sees the session's history as it is when it starts, not as it was
when it was created.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..errors import AgentsCeleryError
from ..runs import RunState
from ..storage.leases import Leases
from ..storage.store import RunStore

log = logging.getLogger(__name__)

#: Sends a run's first step: ``send(run_id, agent_id, queue)``.
SendFirst = Callable[[str, str, str], None]


def start_next(store: RunStore, send: SendFirst, session_id: str) -> str | None:
    """Start the first run in the session's line if the session is free; the run started (None: none)."""
    leases = Leases(store.redis, store.keys)
    while (run_id := store.sessions.first_in_line(session_id)) is not None:
        if not store.sessions.take(session_id, run_id, None):
            return None  # a run holds the session: its end calls this again
        store.sessions.leave_line(session_id, run_id)
        try:
            state, step = store.load(run_id)
        except AgentsCeleryError:  # expired or deleted while it waited
            store.sessions.release(session_id, run_id)
            continue
        if state.status.is_final:  # stopped while it waited
            store.sessions.release(session_id, run_id)
            continue
        token = leases.acquire(run_id, store.settings.lease_ttl_ms)
        if token is None:  # a stop is ending it right now: give the session back, keep its place
            store.sessions.release(session_id, run_id)
            store.sessions.leave_line(session_id, run_id, front=True)
            return None
        try:
            history = store.sessions.history(session_id)
            state = with_history(state, history)
            store.commit(state, token, step, step, [], "live", release=False)
            store.started_waiting(run_id)
        finally:
            leases.release(run_id, token)
        (queue,) = store.run_fields(run_id, "queue")
        send(run_id, state.agent_id, queue or store.settings.queue)
        log.info("session=%s: run %s started after the one before it ended", session_id, run_id)
        return run_id
    return None


def with_history(state: RunState, history: list[dict[str, Any]]) -> RunState:
    """A waiting run as it starts: the session's ``history`` as it is now, in place of the history it was
    created with (its first ``history_len`` messages), then its own messages. No I/O."""
    messages = [*history, *state.messages[state.history_len :]]
    return state.model_copy(update={"messages": messages, "history_len": len(history)})

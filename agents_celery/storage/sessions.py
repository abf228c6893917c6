"""Sessions: the active run, the line of runs waiting for it, the conversation history, the owner, AG-UI segments.

Keys (see :mod:`agents_celery.storage.keys`, "Per session"): ``active``, ``waiting``, ``history``, ``synced``,
``owner``, ``parts`` and ``agui`` under ``<p>:session:{<sid>}``; a session's keys share its id as their hash tag,
so each script touches one slot. Scripts: ``lua/session_take.lua``, ``session_release.lua``, ``session_sync.lua``,
``session_own.lua``, ``session_admit.lua`` (a new run's admission in one round trip). The session indexes
(``<p>:sessions``...) belong to :mod:`agents_celery.storage.index`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import redis

from ..runs import RunState
from ..settings import Settings
from .index import RunIndex
from .keys import Keys
from .parts import Parts
from .replies import as_text
from .scripts import pipelined, register


def owner_value(user_id: str | None) -> str:
    """How a session's owner is stored: ``u:<id>``, or ``-`` for none."""
    return "-" if user_id is None else f"u:{user_id}"


def owner_of(value: str) -> str | None:
    """The user id a stored owner names (None: a run without a user started the session)."""
    return None if value == "-" else value.removeprefix("u:")


class Sessions:
    """Every session's keys (``RunStore.sessions``)."""

    def __init__(self, client: redis.Redis, keys: Keys, settings: Settings, index: RunIndex, parts: Parts) -> None:
        self.redis = client
        self.keys = keys
        self.settings = settings
        self._index = index
        self._parts = parts
        self._take = register(client, "session_take")
        self._release = register(client, "session_release")
        self._sync = register(client, "session_sync")
        #: Called with the session id after a history append (the failover fence: ``RunStore.fence.session``).
        self.fence: Callable[[str], Any] | None = None
        self._own = register(client, "session_own")
        self._admit = register(client, "session_admit")

    # -- the active run ------------------------------------------------------------------------------

    def active(self, session_id: str) -> str | None:
        """The session's queued, running or paused run (None: the session is free)."""
        value = self.redis.get(self.keys.session(session_id).active)
        return as_text(value) if value is not None else None

    def take(self, session_id: str, run_id: str, previous: str | None) -> bool:
        """Make ``run_id`` the session's active run if the active one is still ``previous`` (or none)."""
        key = self.keys.session(session_id).active
        return bool(self._take(keys=[key], args=[run_id, previous or ""]))

    def admit(
        self, session_id: str, run_id: str, user_id: str | None, own_session: bool = False
    ) -> tuple[list[dict[str, Any]] | None, str]:
        """A new run's admission, in one round trip: record ``user_id`` as the session's owner unless it has one,
        take the session if it is free or ``run_id`` holds it already; ``(history, run_id)`` then, else
        ``(None, the holder's run id)``. The session of a run started without a ``session_id`` (``own_session``)
        lives as long as the run; the sync at its end extends the owner as far as its history."""
        sk = self.keys.session(session_id)
        session_ttl = max(int(self.settings.session_ttl_seconds * 1000), self.settings.retention_ms)
        ttl = self.settings.retention_ms if own_session else session_ttl
        reply = self._admit(keys=[sk.owner, sk.active, sk.history], args=[owner_value(user_id), ttl, run_id])
        if int(reply[0]) == 1:
            return [json.loads(m) for m in reply[1:]], run_id
        return None, as_text(reply[1])

    def release(self, session_id: str, run_id: str) -> None:
        """Free the session if ``run_id`` is still its active run."""
        key = self.keys.session(session_id).active
        self._release(keys=[key], args=[run_id])

    def release_and_peek(self, session_id: str, run_id: str) -> str | None:
        """:meth:`release`, then :meth:`first_in_line`, in one round trip (in that order: a run that joins the
        line after the peek finds the session free when it looks)."""
        sk = self.keys.session(session_id)
        replies = pipelined(self.redis, [(self._release, [sk.active], [run_id])], after=[("LINDEX", sk.waiting, 0)])
        return as_text(replies[1]) if replies[1] is not None else None

    # -- the line of waiting runs ----------------------------------------------------------------------

    def wait_in_line(self, session_id: str, run_id: str) -> None:
        """Put a run at the end of the session's line (it starts when the runs before it ended)."""
        self.redis.rpush(self.keys.session(session_id).waiting, run_id)

    def first_in_line(self, session_id: str) -> str | None:
        value = self.redis.lindex(self.keys.session(session_id).waiting, 0)
        return as_text(value) if value is not None else None

    def leave_line(self, session_id: str, run_id: str, front: bool = False) -> None:
        """Take a run out of the session's line (``front``: put it back at the head instead)."""
        key = self.keys.session(session_id).waiting
        self.redis.lrem(key, 1, run_id)
        if front:
            self.redis.lpush(key, run_id)

    # -- history and owner -------------------------------------------------------------------------------

    def history(self, session_id: str) -> list[dict[str, Any]]:
        """The session's conversation: the messages of its completed runs, in order."""
        return [json.loads(m) for m in self.redis.lrange(self.keys.session(session_id).history, 0, -1)]

    def sync(self, state: RunState) -> None:
        """Append a finished run's messages to its session's history, once (idempotent)."""
        sk = self.keys.session(state.session_id)
        # A session made for this run alone ends with it: its history is kept as long as the run's log.
        ttl = str(self.settings.retention_ms if state.own_session else int(self.settings.session_ttl_seconds * 1000))
        messages = [json.dumps(m) for m in state.new_messages] if state.status == "completed" else []
        copies = self._parts.to_session(state, int(ttl))  # first: the history never names a part the session lacks
        pipelined(self.redis, [(self._sync, [sk.history, sk.synced, sk.owner], [state.run_id, ttl, *messages])], copies)
        if self.fence:  # the next run of the session reads this history: on a replica too before we go on
            self.fence(state.session_id)

    def append(self, session_id: str, token: str, messages: list[dict[str, Any]]) -> None:
        """Append messages a client added (``POST /v1/conversations/{id}/items``), once per ``token``."""
        sk = self.keys.session(session_id)
        ttl = int(self.settings.session_ttl_seconds * 1000)
        self._sync(keys=[sk.history, sk.synced, sk.owner], args=[token, ttl, *(json.dumps(m) for m in messages)])
        if self.fence:
            self.fence(session_id)

    def owner(self, session_id: str) -> tuple[bool, str | None]:
        """Whether the session has an owner recorded, and who (None: a run without a user started it)."""
        raw = self.redis.get(self.keys.session(session_id).owner)
        if raw is None:
            return False, None
        return True, owner_of(as_text(raw))

    def own(self, session_id: str, user_id: str | None) -> str | None:
        """Record ``user_id`` as the session's owner unless it has one; returns the owner as recorded."""
        ttl = max(int(self.settings.session_ttl_seconds * 1000), self.settings.retention_ms)
        recorded = self._own(keys=[self.keys.session(session_id).owner], args=[owner_value(user_id), ttl])
        return owner_of(as_text(recorded))

    # -- AG-UI segments ----------------------------------------------------------------------------------

    def segment(self, session_id: str, name: str) -> tuple[str, int] | None:
        """Where the AG-UI stream named ``name`` (a runId, or ``resume:<ids>``) starts: run id and offset."""
        raw = self.redis.hget(self.keys.session(session_id).agui, name)
        if raw is None:
            return None
        run_id, _, after = as_text(raw).partition(" ")
        return run_id, int(after)

    def mark_segment(self, session_id: str, names: Sequence[str], run_id: str, after: int) -> None:
        """Record that the AG-UI streams ``names`` start after ``after`` in ``run_id`` (first record wins)."""
        key = self.keys.session(session_id).agui
        with self.redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hsetnx(key, name, f"{run_id} {after}")
            pipe.pexpire(key, int(self.settings.session_ttl_seconds * 1000))
            pipe.execute()

    # -- removal -----------------------------------------------------------------------------------------

    def delete(self, session_id: str, user_ids: Sequence[str | None]) -> None:
        """Remove a session's conversation and its index entries (its runs are deleted one by one first)."""
        sk = self.keys.session(session_id)
        with self.redis.pipeline(transaction=False) as pipe:
            for key in (sk.history, sk.synced, sk.agui, sk.owner, sk.parts):
                pipe.delete(key)  # one key a command: a cluster pipeline takes no other
            self._index.forget_session(pipe, session_id, None)
            for user_id in {u for u in user_ids if u}:
                self._index.forget_session(pipe, session_id, user_id)
            pipe.execute()

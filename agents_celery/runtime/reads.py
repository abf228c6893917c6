"""What the :class:`~agents_celery.runtime.Runtime` reads and deletes: agents, runs, sessions (a mixin).

Plain reads of the store (and the deletes of ended runs and idle sessions); no step is sent from here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from ..agent import Agent
from ..conversation import as_chat
from ..errors import (
    RunExpiredError,
    RunLiveError,
    RunNotFoundError,
    SessionBusyError,
    SessionNotFoundError,
    UnknownAgentError,
    ValidationError,
)
from ..runs import RunPage, RunStatus, RunView, SessionInfo, SessionPage, SessionView
from ..settings import Settings
from ..storage.index import Filters
from ..storage.store import RunStore
from .admission import DELETING, Admission, idempotent_run_id

#: The manifests read inside :meth:`Inspection.manifests_read_once` (per thread or greenlet): name -> manifest.
_READ_ONCE: ContextVar[dict[str, dict[str, Any]] | None] = ContextVar("agents_celery_read_once", default=None)


class Inspection:
    """Reads of agents, runs and sessions, and deletes (mixed into the Runtime, which sets these attributes)."""

    settings: Settings
    store: RunStore
    admission: Admission
    local_agents: dict[str, Agent]

    # -- agents ----------------------------------------------------------------------------------------

    def agent_manifest(self, agent: Agent | str) -> dict[str, Any]:
        """The manifest of an agent given by object or name.

        Args:
            agent: The agent, or its name: one this Runtime knows, else one a worker published.

        Returns:
            The agent's manifest, as workers publish it.

        Raises:
            UnknownAgentError: nobody serves an agent of that name.
        """
        if isinstance(agent, Agent):
            return agent.manifest()
        if agent in self.local_agents:
            return self.local_agents[agent].manifest()
        read = _READ_ONCE.get()
        manifest = read.get(agent) if read is not None else None
        if manifest is None:
            manifest = self.store.agents.get(agent)
            if read is not None and manifest is not None:
                read[agent] = manifest
        if manifest is None:
            known = [m["name"] for m in self.store.agents.all()]
            raise UnknownAgentError(f"no agent named {agent!r}; known agents: {known}. Is a worker serving it?")
        return manifest

    @contextlib.contextmanager
    def manifests_read_once(self) -> Iterator[None]:
        """Within the block, each agent's manifest is read from Redis once, by this thread or greenlet (the HTTP
        API reads it to answer 404 before it parses the body, then starts the run, which needs it again)."""
        token = _READ_ONCE.set({})
        try:
            yield
        finally:
            _READ_ONCE.reset(token)

    def agents(self) -> list[dict[str, Any]]:
        """Manifests of every agent workers published (and local ones), in module order.

        Returns:
            The published manifests, then those of the local agents no worker published.
        """
        published = self.store.agents.all()
        names = {m["name"] for m in published}
        return published + [a.manifest() for a in self.local_agents.values() if a.name not in names]

    # -- runs ------------------------------------------------------------------------------------------

    def live_run(self, session_id: str) -> RunView | None:
        """The session's run that has not ended (queued, running or paused), or None.

        A session's active run that cannot be read (expired, half-written) is None: the Runtime heals the session
        when a run starts. So is an ended run whose worker has not given the session back yet (it is about to).

        Args:
            session_id: The session's id.

        Returns:
            The run as :meth:`get` shows it, or None.
        """
        run_id = self.store.sessions.active(session_id)
        if run_id is None:
            return None
        try:
            view = self.get(run_id)
        except Exception:  # expired or half-written
            return None
        return None if view.status.is_final else view

    def get(self, run_id: str) -> RunView:
        """The run's committed state and where its log stands.

        Args:
            run_id: The run's id.

        Returns:
            The run's :class:`RunView`.

        Raises:
            RunNotFoundError: no run has that id.
            RunExpiredError: the run existed and its retention passed.
        """
        state, _ = self.store.load(run_id)
        info = self.store.log.info(run_id)
        (queue,) = self.store.run_fields(run_id, "queue")
        return RunView(
            run_id=run_id,
            agent_id=state.agent_id,
            session_id=state.session_id,
            user_id=state.user_id,
            queue=queue or self.settings.queue,
            status=state.status,
            last_offset=info.last_offset,
            output=state.output,
            error=state.error.model_dump() if state.error else None,
            pending=state.pending,
            tool_calls=state.tool_calls,
            messages=as_chat(state.new_messages),
            stop_requested=self.store.stop_requested(run_id),
            usage=state.usage,
            created_at=state.created_at,
            schedule_id=state.schedule_id,
            active_agent=state.active_agent,
            parent_run_id=state.parent_run_id,
            children=[self._child(child_id) for child_id in state.children],
            last_position=self.store.log.last_position(run_id),
        )

    def _child(self, run_id: str) -> dict[str, str]:
        """A child run as its parent's view lists it (``gone`` once it expired or was deleted)."""
        try:
            child, _ = self.store.load(run_id)
        except (RunNotFoundError, RunExpiredError):
            return {"run_id": run_id, "agent_id": "", "status": "gone"}
        return {"run_id": run_id, "agent_id": child.agent_id, "status": child.status.value}

    def idempotent_run(self, idempotency_key: str, user_id: str | None = None) -> str | None:
        """The id of the run :meth:`stream` created for ``idempotency_key`` (and user), or None.

        Args:
            idempotency_key: The key the run was started with.
            user_id: The user the key is scoped to.

        Returns:
            The run id, or None when no run was created with that key.

        Raises:
            ValidationError: the key is not 1 to 255 characters.
        """
        run_id = idempotent_run_id(idempotency_key, user_id)
        (sent,) = self.store.run_fields(run_id, "request")
        return run_id if sent is not None else None

    def runs(
        self,
        *,
        status: RunStatus | str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
        keep: Callable[[RunView], bool] | None = None,
    ) -> RunPage:
        """Runs matching every filter given, newest first.

        A page may hold fewer than ``limit`` runs when few match. Ended runs are listed until their retention is
        over.

        Args:
            status: Only runs in this status (a :class:`RunStatus` or its value).
            agent_id: Only runs of this agent.
            session_id: Only runs of this session.
            user_id: Only runs of this user.
            limit: How many runs a page holds at most.
            cursor: The ``next_cursor`` of the page before (None: the first page).
            keep: Filters further (the API's authorization): a run is listed when it returns True.

        Returns:
            The page. Its ``next_cursor`` asks for the next page (None: the last).

        Raises:
            ValidationError: ``status`` is not a run status, ``limit`` is out of range, or ``cursor`` is not one
                this API returned.
        """
        if status is not None and not isinstance(status, RunStatus):
            try:
                status = RunStatus(status)
            except ValueError:
                known = ", ".join(s.value for s in RunStatus)
                raise ValidationError(f"status must be one of {known}, got {status!r}") from None
        filters = Filters(status, agent_id or None, session_id or None, user_id or None)
        return self.store.index.page(filters, limit, cursor, keep)

    def delete_run(self, run_id: str) -> None:
        """Delete an ended run: its log, state and index entries (it is then unknown: 404).

        Its ended child runs are deleted with it.

        Args:
            run_id: The run's id.

        Raises:
            RunLiveError: the run has not ended (stop it first).
            RunNotFoundError: no run has that id.
            RunExpiredError: the run existed and its retention passed.
        """
        state, _ = self.store.load(run_id)
        if not state.status.is_final:
            raise RunLiveError(f"run {run_id!r} is {state.status.value}; stop it before deleting it")
        for child_id in state.children:  # kept as long as their parent, deleted with it
            with contextlib.suppress(RunNotFoundError, RunExpiredError, RunLiveError):
                self.delete_run(child_id)
        self.store.delete_run(state)

    # -- sessions --------------------------------------------------------------------------------------

    def session_owner(self, session_id: str) -> tuple[bool, str | None]:
        """Whether the session exists with an owner, and who: the user of its first run (None: no user).

        A session kept from before owners were recorded is given the user of its newest run, once.

        Args:
            session_id: The session's id.

        Returns:
            Whether the session has an owner, and the owner's user id.
        """
        return self.admission.owner(session_id)

    def claim_session(self, session_id: str, user_id: str | None) -> str | None:
        """The session's owner, recording ``user_id`` as it when the session has none yet (first caller wins).

        Args:
            session_id: The session's id.
            user_id: The user to record as the owner (None: no user).

        Returns:
            The owner's user id: the one recorded before, else ``user_id``.
        """
        return self.admission.claim(session_id, user_id)

    def sessions(
        self,
        *,
        user_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
        keep: Callable[[str], bool] | None = None,
    ) -> SessionPage:
        """Sessions (of ``user_id``, or all), most recently active first.

        Args:
            user_id: Only the sessions of this user (None: all).
            limit: How many sessions a page holds at most.
            cursor: The ``next_cursor`` of the page before (None: the first page).
            keep: Filters further by session id: a session is listed when it returns True.

        Returns:
            The page. Its ``next_cursor`` asks for the next page (None: the last).

        Raises:
            ValidationError: ``limit`` is out of range, or ``cursor`` is not one this API returned.
        """
        found, next_cursor = self.store.index.sessions_page(user_id or None, limit, cursor, keep)
        infos = [SessionInfo(sid, ms, self.store.sessions.active(sid), self.session_owner(sid)[1]) for sid, ms in found]
        return SessionPage(infos, next_cursor)

    def session(self, session_id: str, limit: int = 100) -> SessionView:
        """A session's conversation (the history its next run sees) and its newest ``limit`` runs.

        Args:
            session_id: The session's id.
            limit: How many of its runs to show, newest first.

        Returns:
            The session's messages, runs, active run and owner.

        Raises:
            SessionNotFoundError: nothing of the session is kept.
            ValidationError: ``limit`` is out of range.
        """
        page = self.runs(session_id=session_id, limit=limit)
        messages = self.store.sessions.history(session_id)
        active = self.store.sessions.active(session_id)
        if not page.runs and not messages and active is None:
            raise SessionNotFoundError(f"session {session_id!r} does not exist (or has expired)")
        return SessionView(session_id, messages, page.runs, active, self.session_owner(session_id)[1])

    def delete_session(self, session_id: str) -> None:
        """Delete a session: its conversation and its runs.

        Args:
            session_id: The session's id.

        Raises:
            SessionBusyError: a run of it is queued, running or paused, or the session is being deleted.
            SessionNotFoundError: nothing of the session is kept.
        """
        view = self.session(session_id, limit=1)
        if view.active_run_id == DELETING:
            raise SessionBusyError(f"session {session_id!r} is being deleted by another request")
        if view.active_run_id is not None:
            raise SessionBusyError(
                f"session {session_id!r} has a live run ({view.active_run_id}); stop it before deleting the session"
            )
        if not self.store.sessions.take(session_id, DELETING, None):
            raise SessionBusyError(f"session {session_id!r} is being deleted, or a run started in it just now")
        users: list[str | None] = []
        try:
            while page := self.runs(session_id=session_id, limit=100).runs:
                for run in page:
                    if not run.status.is_final:  # started before this call took the session: keep it all
                        raise SessionBusyError(f"session {session_id!r} has a live run ({run.run_id})")
                    self.delete_run(run.run_id)
                    users.append(run.user_id)
            self.store.sessions.delete(session_id, users)
        finally:
            self.store.sessions.release(session_id, DELETING)

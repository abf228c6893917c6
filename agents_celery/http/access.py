"""Who may do what: the one access check every route asks (see :mod:`.protocol` for the rules in words).

:class:`Access` is asked by the routes of :class:`~agents_celery.http.protocol.API` and by the AG-UI endpoint
(:mod:`.agui.endpoint`) alike, with the resource an action touches, never None when one exists. What the rule refuses on
a resource answers 404 (its existence is not revealed); a refused start or list of an agent 403.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import (
    ForbiddenError,
    NotFoundError,
    RunExpiredError,
    RunNotFoundError,
    ScheduleNotFoundError,
    SessionBusyError,
    SessionNotFoundError,
)
from ..runs import RunView, SessionInfo
from ..runtime import Runtime
from ..schedule import Schedule
from ..storage.eventlog import LogInfo
from .messages import Action, Authorize, Request, Resource


class Access:
    """The access checks over one Runtime, with the front end's ``authorize`` hook (None: everyone may)."""

    def __init__(self, runtime: Runtime, authorize: Authorize | None = None) -> None:
        self.runtime = runtime
        self.authorize = authorize

    def rule(self, req: Request) -> Authorize | None:
        """The rule deciding for this request: its own (per-request front ends), else the API's."""
        return req.authorize or self.authorize

    def allow(
        self, req: Request, action: Action, resource: Resource | None = None, agent_id: str | None = None
    ) -> None:
        """Nothing when the caller may ``action`` the resource (or the agent); else 404 (a resource) or 403."""
        rule = self.rule(req)
        if rule is None or rule(action, req.user_id, resource, agent_id):
            return
        raise hidden(resource) if resource is not None else forbidden(action, agent_id)

    def session(self, req: Request, session_id: str | None, action: Action, agent_id: str | None) -> None:
        """The access check of a route that names a session: asked with the session when it exists (404 when
        refused, as for a hidden run). A start records the caller as the owner of a session nobody owns yet."""
        if not session_id or self.rule(req) is None:
            return
        if action == "start":
            owner = self.runtime.claim_session(session_id, req.user_id)
        else:
            known, owner = self.runtime.session_owner(session_id)
            if not known:
                return
        info = SessionInfo(session_id, 0, self.runtime.store.sessions.active(session_id), owner)
        self.allow(req, action, info, agent_id)

    def may_interrupt(self, req: Request, session_id: str | None, agent_id: str) -> None:
        """An ``interrupt`` start stops the session's live run: the caller must be allowed to stop it."""
        active = self.runtime.store.sessions.active(session_id) if session_id and self.rule(req) else None
        if active is None:
            return
        try:
            view = self.runtime.get(active)
        except (RunNotFoundError, RunExpiredError):
            return
        rule = self.rule(req)
        if rule is not None and not view.status.is_final and not rule("stop", req.user_id, view, view.agent_id):
            raise SessionBusyError(f"session {session_id!r} is busy, and you may not interrupt its live run")

    def run(self, req: Request, run_id: str, action: Action, agent_id: str | None = None) -> LogInfo:
        """The run's log (404 for an unknown agent or run, a run of another agent, or one the caller may not see)."""
        if agent_id is not None:
            self.runtime.agent_manifest(agent_id)
        info = self.runtime.store.log.info(run_id)
        if agent_id is not None and info.agent_id != agent_id:
            raise RunNotFoundError(f"agent {agent_id!r} has no run {run_id!r}")
        if self.rule(req) is not None:  # the rule decides on the run as it stands
            self.allow(req, action, self.runtime.get(run_id), info.agent_id)
        return info

    def keep(self, req: Request, action: Action = "read") -> Callable[[RunView], bool] | None:
        """What the caller may see of a listing (None: everything)."""
        rule = self.rule(req)
        if rule is None:
            return None
        return lambda view: bool(rule(action, req.user_id, view, view.agent_id))


def hidden(resource: Resource) -> NotFoundError:
    """The 404 of a resource the caller may not see: worded as for one that does not exist."""
    if isinstance(resource, RunView):
        return RunNotFoundError(f"run {resource.run_id!r} does not exist")
    if isinstance(resource, Schedule):
        return ScheduleNotFoundError(f"no schedule {resource.schedule_id!r}")
    return SessionNotFoundError(f"session {resource.session_id!r} does not exist (or has expired)")


def forbidden(action: Action, agent_id: str | None) -> ForbiddenError:
    """The 403 of a start or listing the rule refuses."""
    what = f"runs of agent {agent_id!r}" if agent_id else "agents"
    return ForbiddenError(f"you may not {action} {what}")

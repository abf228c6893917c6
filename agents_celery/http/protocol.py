"""The HTTP API, written once: each route is a method of :class:`API` that takes a :class:`Request` and returns
a :class:`Reply`. The Flask blueprint and the Django app only translate their framework's request into a
``Request`` and a ``Reply`` into their framework's response (JSON, an SSE stream, or a wait for the run).

Every route validates what it can (agent, run, state, body) *before* it answers, so an unknown run is a 404,
not a 200 stream carrying an error event. Runs always execute on the workers: a client that disconnects from a
stream never cancels its run.

**Who may do what.** The bearer API key (``AGENTS_CELERY_API_KEY``) guards every route but ``/health``. On top
of it, a front end may pass an :data:`Authorize` hook: it is asked before each action (``list``, ``start``,
``read``, ``continue``, ``stop``, ``delete``) with the caller's user id and the resource the action touches,
never None when one exists: the run (:class:`RunView`), the session (:class:`SessionInfo` or
:class:`SessionView`: its ``user_id`` is its owner, the user of its first run) or the schedule
(:class:`Schedule`); each has ``user_id``. A start into an existing session is asked with the session, an
``interrupt`` start also ``stop`` with the session's live run. What the rule refuses on a resource answers 404
(its existence is not revealed), a refused start or list of an agent 403. Runs, sessions and schedules record
the user id of the caller that made them. Without a hook every caller may do everything (the API key decides).

**Statuses.** ``/runs/...`` routes and the JSON of ``/agents/.../runs`` answers (202, cancel) spell a run's
status as the library does (``queued``, ``running``, ``paused``, ``completed``, ``failed``, ``cancelled``).
Only the AgentOS dialect's own objects (the run output of ``stream=false`` and the streamed events) use
Agno's spelling (``PENDING``, ``RUNNING``, ``PAUSED`` ...), because AgentOS clients expect it.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

from ..errors import (
    AgentsCeleryError,
    AuthenticationError,
    BadRequestError,
    DecisionError,
    ForbiddenError,
    NotFoundError,
    PayloadTooLargeError,
    RedisUnavailableError,
    RunExpiredError,
    RunNotFoundError,
    ScheduleNotFoundError,
    SessionBusyError,
    SessionNotFoundError,
    StateError,
    ValidationError,
)
from ..events import Event, parse_position
from ..runs import RunView, SessionInfo, SessionView, ToolCall
from ..runtime import Runtime
from ..schedule import Schedule
from ..storage.eventlog import LogInfo, check_offset
from .agentos import AGNO_STATUS, tool_object
from .aguirun import AguiEndpoint
from .bodies import ContinueBody, Limits, MessageBody, ResumeBody, RunBody, ScheduleBody, int_param, parse
from .sse import LogStream
from .streams import Streams

Action = Literal["list", "start", "read", "continue", "stop", "delete"]
#: What an action touches: a run, a session or a schedule (each has ``user_id``, its owner).
Resource = RunView | SessionInfo | SessionView | Schedule
#: ``authorize(action, user_id, resource, agent_id)`` -> whether the caller may; ``resource`` is None only for a
#: listing or a start that names nothing existing.
Authorize = Callable[[Action, "str | None", "Resource | None", "str | None"], bool]

#: Most specific first: the first class an error is an instance of decides its status.
STATUS: tuple[tuple[type[AgentsCeleryError], int], ...] = (
    (AuthenticationError, 401),
    (ForbiddenError, 403),
    (PayloadTooLargeError, 413),
    (BadRequestError, 400),
    (DecisionError, 400),
    (ValidationError, 422),
    (NotFoundError, 404),
    (RunExpiredError, 410),
    (StateError, 409),
    (RedisUnavailableError, 503),
)


def status_of(exc: AgentsCeleryError) -> int:
    """The HTTP status of a library error (500 for one with no status of its own)."""
    return next((s for cls, s in STATUS if isinstance(exc, cls)), 500)


#: The inspector's files and their types.
UI_FILES = {
    "index.html": "text/html; charset=utf-8",
    "run.html": "text/html; charset=utf-8",
    "ui.js": "text/javascript; charset=utf-8",
    "ui.css": "text/css; charset=utf-8",
}
#: Its pages load only their own script and style, and talk only to this API.
UI_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-cache",
}


def _limit(value: str | None) -> int:
    """The ``limit`` query parameter of a listing (20 when absent)."""
    limit = int_param(value, "limit")
    return 20 if limit is None else limit


def position_param(value: str | None, name: str) -> tuple[int, str | None] | None:
    """An optional position from a query parameter or header: an offset (ASCII digits only: no ``1_0``, no other
    scripts' digits; -1 or more), optionally with the tag of the event read there (``140.1a2b3c4d``)."""
    if value is None or value == "":
        return None
    try:
        offset, tag = parse_position(value)
        return check_offset(offset, name), tag
    except (ValueError, ValidationError):
        raise BadRequestError(f"{name} must be an offset (-1 or more), or offset.tag, got {value!r}") from None


class Headers(dict[str, str]):
    """Request headers by lower-cased name; ``get`` takes any case."""

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        super().__init__((name.lower(), value) for name, value in pairs)

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)


@dataclass
class Request:
    """What the protocol needs of an HTTP request; each front end builds one from its framework's."""

    method: str
    headers: Headers
    query: Mapping[str, str]
    #: The body as fields (JSON object, or form fields), parsed on first use (BadRequestError if malformed).
    body: Callable[[], dict[str, Any]]
    #: The caller's user id, from the front end's login (None: anonymous, or a machine client with the key).
    user_id: str | None = None
    #: The URL of ``GET /runs/<run_id>`` under the front end's prefix (for ``Location`` headers).
    run_url: Callable[[str], str] = lambda run_id: f"/runs/{run_id}"
    #: This request's own access rule, when the front end decides per request (Django: the user, staff, the
    #: API key); None: the API's.
    authorize: Authorize | None = None


@dataclass
class Wait:
    """Answer once the run ended or paused (or after ``seconds``): its AgentOS run output as JSON."""

    run_id: str
    after: int
    seconds: float


@dataclass
class Reply:
    """What to answer: ``status`` and ``body`` (JSON), or an SSE ``stream``, or a :class:`Wait`."""

    status: int = 200
    body: Any = None
    stream: LogStream | None = None
    wait: Wait | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: A body that is not JSON (the inspector's pages): ``body`` is its bytes.
    content_type: str | None = None


def error_reply(exc: AgentsCeleryError) -> Reply:
    """The JSON error answer for a library error: ``{"detail", "code"}`` with its status."""
    status = status_of(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    return Reply(status, {"detail": str(exc), "code": exc.code}, headers=headers)


class API:
    """The routes of the HTTP API over one Runtime (see the module docs)."""

    def __init__(
        self,
        runtime: Runtime,
        streams: Streams,
        *,
        keepalive_seconds: float = 15.0,
        block_seconds: float = 600.0,
        authorize: Authorize | None = None,
    ) -> None:
        self.runtime = runtime
        self.streams = streams
        self.keepalive_seconds = keepalive_seconds
        self.block_seconds = block_seconds
        self.authorize = authorize
        settings = runtime.settings
        #: How big and deep a request body may be (front ends check the size before they read the body).
        self.limits = Limits(settings.max_body_bytes, settings.max_json_depth)

    # -- access ----------------------------------------------------------------------------------------

    def authenticate(self, headers: Headers) -> None:
        """Check the bearer API key (when one is set); AuthenticationError otherwise."""
        key = self.runtime.settings.api_key
        if not key:
            return
        scheme, _, given = (headers.get("Authorization") or "").strip().partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), key.encode()):
            return
        raise AuthenticationError("send 'Authorization: Bearer <key>' with the API key (AGENTS_CELERY_API_KEY)")

    def _rule(self, req: Request) -> Authorize | None:
        return req.authorize or self.authorize

    def _allow(
        self, req: Request, action: Action, resource: Resource | None = None, agent_id: str | None = None
    ) -> None:
        rule = self._rule(req)
        if rule is None or rule(action, req.user_id, resource, agent_id):
            return
        raise _hidden(resource) if resource is not None else _forbidden(action, agent_id)

    def _session_access(self, req: Request, session_id: str | None, action: Action, agent_id: str | None) -> None:
        """The access check of a route that names a session: asked with the session when it exists (404 when
        refused, as for a hidden run). A start records the caller as the owner of a session nobody owns yet."""
        if not session_id or self._rule(req) is None:
            return
        if action == "start":
            owner = self.runtime.claim_session(session_id, req.user_id)
        else:
            known, owner = self.runtime.session_owner(session_id)
            if not known:
                return
        info = SessionInfo(session_id, 0, self.runtime.store.session_active(session_id), owner)
        self._allow(req, action, info, agent_id)

    def _may_interrupt(self, req: Request, session_id: str | None, agent_id: str) -> None:
        """An ``interrupt`` start stops the session's live run: the caller must be allowed to stop it."""
        active = self.runtime.store.session_active(session_id) if session_id and self._rule(req) else None
        if active is None:
            return
        try:
            view = self.runtime.get(active)
        except (RunNotFoundError, RunExpiredError):
            return
        rule = self._rule(req)
        if rule is not None and not view.status.is_final and not rule("stop", req.user_id, view, view.agent_id):
            raise SessionBusyError(f"session {session_id!r} is busy, and you may not interrupt its live run")

    def _run(self, req: Request, run_id: str, action: Action, agent_id: str | None = None) -> LogInfo:
        """The run's log (404 for an unknown agent or run, a run of another agent, or one the caller may not see)."""
        if agent_id is not None:
            self.runtime.agent_manifest(agent_id)
        info = self.runtime.store.log.info(run_id)
        if agent_id is not None and info.agent_id != agent_id:
            raise RunNotFoundError(f"agent {agent_id!r} has no run {run_id!r}")
        if req.authorize is not None or self.authorize is not None:  # the rule decides on the run as it stands
            self._allow(req, action, self.runtime.get(run_id), info.agent_id)
        return info

    # -- service routes --------------------------------------------------------------------------------

    def health(self) -> Reply:
        try:
            self.runtime.redis.ping()
        except Exception as exc:  # redis errors and socket errors alike: not healthy
            return Reply(503, {"status": "unavailable", "detail": f"Redis does not answer: {exc}"})
        return Reply(200, {"status": "ok"})

    # -- agents ----------------------------------------------------------------------------------------

    def list_agents(self, req: Request) -> Reply:
        self._allow(req, "list")
        return Reply(200, [_agent(m) for m in self.runtime.agents()])

    def get_agent(self, req: Request, agent_id: str) -> Reply:
        self._allow(req, "list", agent_id=agent_id)
        return Reply(200, _agent(self.runtime.agent_manifest(agent_id)))

    def create_run(self, req: Request, agent_id: str) -> Reply:
        manifest = self.runtime.agent_manifest(agent_id)  # 404 before looking at the body
        self._allow(req, "start", agent_id=agent_id)
        body = parse(req.body(), RunBody, limits=self.limits)
        user_id = req.user_id or body.user_id
        if req.user_id and body.user_id and body.user_id != req.user_id:
            raise ForbiddenError(f"you are user {req.user_id!r}: you may not start runs as {body.user_id!r}")
        self._session_access(req, body.session_id, "start", agent_id)
        if body.multitask_strategy == "interrupt":
            self._may_interrupt(req, body.session_id, agent_id)
        stream = self.runtime.stream(
            agent_id,
            body.message,
            session_id=body.session_id,
            user_id=user_id,
            idempotency_key=req.headers.get("Idempotency-Key") or None,
            start_after=body.start_after,
            start_at=body.start_at,
            webhook_url=body.webhook_url,
            multitask_strategy=body.multitask_strategy,
        )
        return self._finish(req, stream.run_id, stream.session_id, -1, body, manifest)

    def continue_run(self, req: Request, agent_id: str, run_id: str) -> Reply:
        info = self._run(req, run_id, "continue", agent_id)
        body = parse(req.body(), ContinueBody, ("tools",), self.limits, {"tools": self.runtime.settings.max_decisions})
        _check_session(info, body.session_id)
        decisions = [t.decision() for t in body.tools or []]
        before = self.runtime.store.log.info(run_id).last_offset  # the continue's RUN_STARTED comes right after
        self.runtime.continue_run(run_id, decisions or None)
        manifest = self.runtime.agent_manifest(agent_id)
        return self._finish(req, run_id, info.session_id, before, body, manifest)

    def resume_run(self, req: Request, agent_id: str, run_id: str) -> Reply:
        info = self._run(req, run_id, "read", agent_id)
        body = parse(req.body(), ResumeBody, limits=self.limits)
        _check_session(info, body.session_id)
        after = -1 if body.last_event_index is None else body.last_event_index
        status = AGNO_STATUS[self.runtime.get(run_id).status.value]
        confirm = _confirm_tools(self.runtime.agent_manifest(agent_id))
        if info.status == "live":
            head: dict[str, Any] = {
                "event": "catch_up",
                "run_id": run_id,
                "status": status,
                "missed_events": max(0, info.last_offset - after),
                "current_event_count": info.next_offset,
            }
            subscribed = {"event": "subscribed", "run_id": run_id, "last_event_index": info.last_offset}
            mark = (info.last_offset, subscribed)
            stream = LogStream(run_id, after, "agentos", True, self.keepalive_seconds, [head], mark, confirm)
        else:
            head = {
                "event": "replay",
                "run_id": run_id,
                "status": status,
                "total_events": info.next_offset,
                "last_event_index_requested": body.last_event_index,
            }
            stream = LogStream(run_id, after, "agentos", True, self.keepalive_seconds, [head], None, confirm)
        stream.info = info
        return Reply(200, stream=stream)

    def cancel_run(self, req: Request, agent_id: str, run_id: str) -> Reply:
        self._run(req, run_id, "stop", agent_id)
        reason = req.body().get("reason") if req.method == "POST" else None
        text = reason if isinstance(reason, str) and reason.strip() else "stopped by request"
        view = self.runtime.stop(run_id, text[:500])
        return Reply(200, {"run_id": run_id, "status": view.status.value, "stop_requested": True})

    # -- runs ------------------------------------------------------------------------------------------

    def get_run(self, req: Request, run_id: str) -> Reply:
        self._run(req, run_id, "read")
        return Reply(200, self.runtime.get(run_id).to_dict())

    # -- schedules ---------------------------------------------------------------------------------------

    def create_schedule(self, req: Request) -> Reply:
        body = parse(req.body(), ScheduleBody, limits=self.limits)
        self.runtime.agent_manifest(body.agent_id)
        self._allow(req, "start", agent_id=body.agent_id)
        self._session_access(req, body.session_id, "start", body.agent_id)
        found = self.runtime.schedule(
            body.agent_id,
            body.message,
            cron=body.cron,
            every=body.every_seconds,
            session_id=body.session_id,
            name=body.name,
            user_id=req.user_id,
        )
        return Reply(201, found.to_dict())

    def list_schedules(self, req: Request) -> Reply:
        self._allow(req, "list")
        rule = self._rule(req)
        shown = [s for s in self.runtime.schedules() if rule is None or rule("read", req.user_id, s, s.agent_id)]
        return Reply(200, {"schedules": [s.to_dict() for s in shown]})

    def _schedule(self, req: Request, schedule_id: str, action: Action) -> Schedule:
        found = self.runtime.get_schedule(schedule_id)
        self._allow(req, action, found, found.agent_id)
        return found

    def get_schedule(self, req: Request, schedule_id: str) -> Reply:
        return Reply(200, self._schedule(req, schedule_id, "read").to_dict())

    def pause_schedule(self, req: Request, schedule_id: str, paused: bool) -> Reply:
        self._schedule(req, schedule_id, "stop" if paused else "start")
        return Reply(200, self.runtime.pause_schedule(schedule_id, paused).to_dict())

    def delete_schedule(self, req: Request, schedule_id: str) -> Reply:
        self._schedule(req, schedule_id, "delete")
        self.runtime.delete_schedule(schedule_id)
        return Reply(204)

    # -- the AG-UI endpoint (http/aguirun.py) -----------------------------------------------------------

    def agui_run(self, req: Request, agent_id: str) -> Reply:
        """``POST /agui/<agent_id>``: a RunAgentInput in, an AG-UI 1.0 event stream out."""
        return AguiEndpoint(self).run(req, agent_id)

    def agui_connect(self, req: Request, agent_id: str) -> Reply:
        """``POST /agui/<agent_id>/connect``: the thread's run, from where it stands."""
        return AguiEndpoint(self).connect(req, agent_id)

    # -- the run inspector (static pages; the data comes through the API like any client's) ----------------

    def ui(self, name: str) -> Reply:
        """A file of the inspector: ``index.html`` (runs), ``run.html`` (one run), ``ui.js``, ``ui.css``."""
        kind = UI_FILES.get(name)
        if kind is None:
            raise NotFoundError(f"the inspector has no file {name!r}")
        body = resources.files(__package__).joinpath("ui", name).read_bytes()
        return Reply(200, body, headers=dict(UI_HEADERS), content_type=kind)

    # -- runs and sessions as resources ----------------------------------------------------------------

    def _keep(self, req: Request, action: Action = "read") -> Callable[[RunView], bool] | None:
        """What the caller may see of a listing (None: everything)."""
        rule = self._rule(req)
        if rule is None:
            return None
        return lambda view: bool(rule(action, req.user_id, view, view.agent_id))

    def list_runs(self, req: Request) -> Reply:
        self._allow(req, "list")
        q = req.query
        try:
            page = self.runtime.runs(
                status=q.get("status") or None,
                agent_id=q.get("agent_id") or None,
                session_id=q.get("session_id") or None,
                user_id=q.get("user_id") or None,
                limit=_limit(q.get("limit")),
                cursor=q.get("cursor") or None,
                keep=self._keep(req),
            )
        except BadRequestError:
            raise
        except ValidationError as exc:  # a bad query parameter
            raise BadRequestError(str(exc)) from None
        return Reply(200, page.to_dict())

    def send_message(self, req: Request, run_id: str) -> Reply:
        """``POST /runs/<run_id>/messages``: steer a live run (taken in at its next model turn)."""
        self._run(req, run_id, "continue")
        body = parse(req.body(), MessageBody, limits=self.limits)
        sent = self.runtime.send_message(run_id, body.message)
        return Reply(202, {"run_id": run_id, "messages_sent": sent})

    def delete_run(self, req: Request, run_id: str) -> Reply:
        self._run(req, run_id, "delete")
        self.runtime.delete_run(run_id)
        return Reply(204)

    def list_sessions(self, req: Request) -> Reply:
        self._allow(req, "list")
        rule = self._rule(req)

        def visible(session_id: str) -> bool:  # as the session is: its owner decides
            if rule is None:
                return True
            known, owner = self.runtime.session_owner(session_id)
            return known and bool(rule("read", req.user_id, SessionInfo(session_id, 0, None, owner), None))

        try:
            page = self.runtime.sessions(
                user_id=req.query.get("user_id") or None,
                limit=_limit(req.query.get("limit")),
                cursor=req.query.get("cursor") or None,
                keep=visible,
            )
        except BadRequestError:
            raise
        except ValidationError as exc:
            raise BadRequestError(str(exc)) from None
        return Reply(200, page.to_dict())

    def _session(self, req: Request, session_id: str, action: Action) -> SessionView:
        """The session, if the caller may ``action`` it (404 otherwise: not even its existence)."""
        view = self.runtime.session(session_id)
        self._allow(req, action, view)
        return view

    def get_session(self, req: Request, session_id: str) -> Reply:
        return Reply(200, self._session(req, session_id, "read").to_dict())

    def delete_session(self, req: Request, session_id: str) -> Reply:
        self._session(req, session_id, "delete")
        self.runtime.delete_session(session_id)
        return Reply(204)

    def run_events(self, req: Request, run_id: str) -> Reply:
        fmt = req.query.get("format", "canonical")
        if fmt not in ("canonical", "agui"):
            raise BadRequestError(f"format must be 'canonical' or 'agui', got {fmt!r}")
        until = req.query.get("until", "pause" if fmt == "agui" else "end")
        if until not in ("pause", "end"):
            raise BadRequestError(f"until must be 'pause' or 'end', got {until!r}")
        position = position_param(req.headers.get("Last-Event-ID"), "Last-Event-ID")
        position = position or position_param(req.query.get("after"), "after")
        after, tag = position or (-1, None)
        info = self._run(req, run_id, "read")
        if tag is not None:
            self.streams.log.verify(run_id, after, tag)  # 409 log_rewound: "your offset N is not ours"
        if after > info.last_offset and info.status != "ended":
            raise BadRequestError(f"after={after} is past the run's last offset {info.last_offset}")
        if after >= info.last_offset and (info.status == "ended" or (until == "pause" and info.status == "paused")):
            return Reply(204)  # nothing more will come: tells an EventSource to stop reconnecting
        stream = LogStream(run_id, after, fmt, until == "pause", self.keepalive_seconds, info=info)  # type: ignore[arg-type]
        if fmt == "agui":
            stream.child_log = self.child_log
        return Reply(200, stream=stream)

    def child_log(self, run_id: str) -> list[Event]:
        """A child run's whole log, for its parent's AG-UI stream (nothing once it expired or was deleted)."""
        try:
            return self.runtime.store.log.read(run_id, -1)
        except (RunNotFoundError, RunExpiredError):
            return []

    # -- answers ---------------------------------------------------------------------------------------

    def _finish(
        self, req: Request, run_id: str, session_id: str, after: int, body: Any, manifest: dict[str, Any]
    ) -> Reply:
        """The answer to a start or continue: SSE, 202, or (a Wait for) the run's JSON once it ends or pauses."""
        if body.stream:
            confirm = _confirm_tools(manifest)
            stream = LogStream(run_id, after, "agentos", True, self.keepalive_seconds, (), None, confirm)
            return Reply(200, stream=stream)
        if body.background:
            status = self.runtime.get(run_id).status.value
            answer = {"run_id": run_id, "session_id": session_id, "status": status}
            return Reply(202, answer, headers={"Location": req.run_url(run_id)})
        return Reply(200, wait=Wait(run_id, after, self.block_seconds))

    def run_output(self, run_id: str) -> Reply:
        """The run as AgentOS's ``RunOutput`` JSON (what a :class:`Wait` answers)."""
        return Reply(200, run_output(self.runtime.get(run_id)))


def _hidden(resource: Resource) -> NotFoundError:
    """The 404 of a resource the caller may not see: worded as for one that does not exist."""
    if isinstance(resource, RunView):
        return RunNotFoundError(f"run {resource.run_id!r} does not exist")
    if isinstance(resource, Schedule):
        return ScheduleNotFoundError(f"no schedule {resource.schedule_id!r}")
    return SessionNotFoundError(f"session {resource.session_id!r} does not exist (or has expired)")


def _forbidden(action: Action, agent_id: str | None) -> ForbiddenError:
    what = f"runs of agent {agent_id!r}" if agent_id else "agents"
    return ForbiddenError(f"you may not {action} {what}")


def _agent(manifest: dict[str, Any]) -> dict[str, Any]:
    """A manifest with AgentOS's ``id`` key added."""
    return {"id": manifest["name"], **{k: v for k, v in manifest.items() if k != "position"}}


def _confirm_tools(manifest: dict[str, Any]) -> frozenset[str]:
    return frozenset(t["name"] for t in manifest.get("tools", []) if t.get("requires_confirmation"))


def _check_session(info: LogInfo, session_id: str | None) -> None:
    if session_id and session_id != info.session_id:
        raise RunNotFoundError(f"run {info.run_id!r} is not in session {session_id!r}")


def _confirmed(call: ToolCall) -> bool | None:
    return None if call.decision in (None, "pending") else call.decision == "approved"


def _tool(call: ToolCall) -> dict[str, Any]:
    return tool_object(
        call.id,
        call.name,
        call.args,
        result=call.result,
        error=call.error,
        requires_confirmation=call.requires_confirmation,
        confirmed=_confirmed(call),
        note=call.note,
    )


def run_output(view: RunView) -> dict[str, Any]:
    """A run as AgentOS's ``RunOutput`` JSON (``tools``: the pending calls while paused)."""
    paused = view.status.value == "paused"
    calls = view.pending if paused else view.tool_calls
    return {
        "run_id": view.run_id,
        "agent_id": view.agent_id,
        "agent_name": view.agent_id,
        "session_id": view.session_id,
        "status": AGNO_STATUS[view.status.value],
        "content": view.output,
        "content_type": "str",
        "is_paused": paused,
        "tools": [_tool(c) for c in calls],
        "messages": view.messages,
        "error": view.error,
        "created_at": view.created_at // 1000,
        "event_index": view.last_offset,
    }

"""The HTTP API, written once: each route is a method of :class:`API` that takes a :class:`Request` and returns
a :class:`Reply`; which path and method calls which is the route table (:mod:`.routes`). The Flask blueprint and
the Django app only translate their framework's request into a ``Request`` and a ``Reply`` into their framework's
response (JSON, an SSE stream, or a wait for the run).

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
from collections.abc import Callable
from importlib import resources
from typing import Any, ClassVar

from ..content import check_parts
from ..conversation import user_messages
from ..errors import (
    AuthenticationError,
    BadRequestError,
    ForbiddenError,
    NotFoundError,
    RunExpiredError,
    RunNotFoundError,
    UnknownAgentError,
    ValidationError,
)
from ..events import Event
from ..output import check_schema
from ..runs import SessionInfo, SessionView
from ..runtime import Runtime
from ..schedule import Schedule
from ..storage.eventlog import LogInfo
from ..workflows.workflow import is_workflow
from .a2a.endpoint import A2AEndpoint
from .access import Access
from .agentos.render import AGNO_STATUS, run_output
from .agentos.workflows import WorkflowsEndpoint
from .agui.endpoint import AguiEndpoint
from .aisdk.endpoint import ChatEndpoint
from .bodies import ContinueBody, Limits, MessageBody, ResumeBody, RunBody, ScheduleBody, int_param, parse
from .messages import Action, Authorize, Headers, Reply, Request, Resource, Wait, error_reply, position_param, status_of
from .responses.endpoint import ResponsesEndpoint
from .routes import Route
from .sse import Dialect, LogStream
from .streams import Streams
from .uploads import message_of, part_bytes

#: The routes (API methods) whose body may carry a message's images and files.
CONTENT_ROUTES = frozenset({"create_run", "agui_run", "send_message", "create_response", "aisdk_chat", "a2a_rpc"})

#: Names the front ends and tests import from here (they live in :mod:`.messages` and :mod:`.access`).
__all__ = [
    "API",
    "Access",
    "Action",
    "Authorize",
    "Headers",
    "Reply",
    "Request",
    "Resource",
    "Wait",
    "error_reply",
    "position_param",
    "run_output",
    "status_of",
]

#: The inspector's files and their types.
UI_FILES = {
    "index.html": "text/html; charset=utf-8",
    "run.html": "text/html; charset=utf-8",
    "ui.js": "text/javascript; charset=utf-8",
    "ui.css": "text/css; charset=utf-8",
}
#: Its pages load only their own script and style, and talk only to this API; images only as this API serves
#: them (a run's images, fetched with the key and shown from ``blob:`` URLs), never from elsewhere.
UI_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' blob:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-cache",
}


def _limit(value: str | None) -> int:
    """The ``limit`` query parameter of a listing (20 when absent)."""
    limit = int_param(value, "limit")
    return 20 if limit is None else limit


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
        #: Who may do what (the ``authorize`` hook and the checks every route asks).
        self.access = Access(runtime, authorize)
        settings = runtime.settings
        #: How big and deep a request body may be (front ends check the size before they read the body).
        self.limits = Limits(settings.max_body_bytes, settings.max_json_depth)
        self._content_limits = self.limits.with_content(settings.max_input_bytes)
        # The dialects' endpoints, which the route table names as ``<endpoint>.<method>`` (``responses.create``).
        self.agui = AguiEndpoint(runtime, self.access, keepalive_seconds, self.child_log)
        self.aisdk = ChatEndpoint(runtime, self.access, keepalive_seconds)
        self.a2a = A2AEndpoint(runtime, self.access, keepalive_seconds, block_seconds)
        self.responses = ResponsesEndpoint(runtime, self.access, self.limits, keepalive_seconds, block_seconds)
        self.workflows = WorkflowsEndpoint(runtime, self.access, self.limits, keepalive_seconds, block_seconds)

    #: The dialect endpoints a route may call (:attr:`~.routes.Route.call`), by the attribute that holds each.
    ENDPOINTS: ClassVar[dict[str, type]] = {
        "agui": AguiEndpoint,
        "aisdk": ChatEndpoint,
        "a2a": A2AEndpoint,
        "responses": ResponsesEndpoint,
        "workflows": WorkflowsEndpoint,
    }

    def handler(self, route: Route) -> Callable[..., Reply]:
        """What ``route`` calls, with the request and the path's parameters: a method of this API or of one of
        its endpoints."""
        owner, _, method = route.target.rpartition(".")
        found: Callable[..., Reply] = getattr(getattr(self, owner) if owner else self, method)
        return found

    @classmethod
    def unbound_handler(cls, route: Route) -> Callable[..., Any]:
        """The function :meth:`handler` gives a bound method of (its first arguments: the object, the request)."""
        owner, _, method = route.target.rpartition(".")
        found: Callable[..., Any] = getattr(cls.ENDPOINTS[owner] if owner else cls, method)
        return found

    def limits_for(self, name: str) -> Limits:
        """The body limits of the route ``name`` (an API method): routes that take a message with images and
        files (:data:`CONTENT_ROUTES`) take bodies as large as a run's parts may be."""
        return self._content_limits if name in CONTENT_ROUTES else self.limits

    # -- access ----------------------------------------------------------------------------------------

    @property
    def authorize(self) -> Authorize | None:
        """The front end's access rule (None: the API key decides)."""
        return self.access.authorize

    @authorize.setter
    def authorize(self, rule: Authorize | None) -> None:
        self.access.authorize = rule

    def authenticate(self, headers: Headers) -> None:
        """Check the bearer API key (when one is set); AuthenticationError otherwise."""
        key = self.runtime.settings.api_key
        if not key:
            return
        scheme, _, given = (headers.get("Authorization") or "").strip().partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), key.encode()):
            return
        raise AuthenticationError("send 'Authorization: Bearer <key>' with the API key (AGENTS_CELERY_API_KEY)")

    # -- service routes --------------------------------------------------------------------------------

    def health(self) -> Reply:
        try:
            self.runtime.redis.ping()
        except Exception as exc:  # redis errors and socket errors alike: not healthy
            return Reply(503, {"status": "unavailable", "detail": f"Redis does not answer: {exc}"})
        return Reply(200, {"status": "ok"})

    # -- agents ----------------------------------------------------------------------------------------

    def list_agents(self, req: Request) -> Reply:
        self.access.allow(req, "list")
        return Reply(200, [_agent(m) for m in self.runtime.agents() if not is_workflow(m)])  # (/workflows lists those)

    def get_agent(self, req: Request, agent_id: str) -> Reply:
        self.access.allow(req, "list", agent_id=agent_id)
        return Reply(200, _agent(self._agent_manifest(agent_id)))

    def _agent_manifest(self, agent_id: str) -> dict[str, Any]:
        """An agent's manifest: 404 for a workflow (its routes are ``/workflows/...``) as for a name nobody serves."""
        manifest = self.runtime.agent_manifest(agent_id)
        if is_workflow(manifest):
            raise UnknownAgentError(f"{agent_id!r} is a workflow: run it at /workflows/{agent_id}/runs")
        return manifest

    def create_run(self, req: Request, agent_id: str) -> Reply:
        with self.runtime.manifests_read_once():  # one read of the manifest: here, and in Runtime.stream
            return self._create_run(req, agent_id)

    def _create_run(self, req: Request, agent_id: str) -> Reply:
        manifest = self._agent_manifest(agent_id)  # 404 before looking at the body
        self.access.allow(req, "start", agent_id=agent_id)
        body = parse(req.body(), RunBody, ("output_schema",), limits=self.limits_for("create_run"))
        if body.output_schema is not None:  # before the session check records an owner
            check_schema(body.output_schema)
        message = message_of(body.message, req.files())
        check_parts(message, self.runtime.settings)  # before the session check records an owner: a 413 creates nothing
        user_id = req.user_id or body.user_id
        if req.user_id and body.user_id and body.user_id != req.user_id:
            raise ForbiddenError(f"you are user {req.user_id!r}: you may not start runs as {body.user_id!r}")
        self.access.session(req, body.session_id, "start", agent_id)
        if body.multitask_strategy == "interrupt":
            self.access.may_interrupt(req, body.session_id, agent_id)
        stream = self.runtime.stream(
            agent_id,
            message,
            session_id=body.session_id,
            user_id=user_id,
            idempotency_key=req.headers.get("Idempotency-Key") or None,
            start_after=body.start_after,
            start_at=body.start_at,
            webhook_url=body.webhook_url,
            multitask_strategy=body.multitask_strategy,
            output_schema=body.output_schema,
        )
        # The stream's ids are known: its SSE response skips reading them back (it reads the status as it goes).
        known = LogInfo(stream.run_id, "live", 1, stream.session_id, stream.agent_id)
        return self._finish(req, stream.run_id, stream.session_id, -1, body, manifest, known)

    def continue_run(self, req: Request, agent_id: str, run_id: str) -> Reply:
        info = self.access.run(req, run_id, "continue", agent_id)
        body = parse(req.body(), ContinueBody, ("tools",), self.limits, {"tools": self.runtime.settings.max_decisions})
        _check_session(info, body.session_id)
        decisions = [t.decision() for t in body.tools or []]
        before = self.runtime.store.log.info(run_id).last_offset  # the continue's RUN_STARTED comes right after
        self.runtime.continue_run(run_id, decisions or None)
        manifest = self.runtime.agent_manifest(agent_id)
        return self._finish(req, run_id, info.session_id, before, body, manifest)

    def resume_run(self, req: Request, agent_id: str, run_id: str) -> Reply:
        info = self.access.run(req, run_id, "read", agent_id)
        body = parse(req.body(), ResumeBody, limits=self.limits)
        _check_session(info, body.session_id)
        after = -1 if body.last_event_index is None else body.last_event_index
        status = AGNO_STATUS[self.runtime.get(run_id).status.value]
        confirm = _confirm_tools(self.runtime.agent_manifest(agent_id))
        mark: tuple[int, dict[str, Any]] | None = None
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
        else:
            head = {
                "event": "replay",
                "run_id": run_id,
                "status": status,
                "total_events": info.next_offset,
                "last_event_index_requested": body.last_event_index,
            }
        stream = LogStream(
            run_id,
            after,
            "agentos",
            until_pause=True,
            keepalive_seconds=self.keepalive_seconds,
            head=[head],
            subscribed=mark,
            confirm_tools=confirm,
            info=info,
        )
        return Reply(200, stream=stream)

    def cancel_run(self, req: Request, agent_id: str, run_id: str) -> Reply:
        self.access.run(req, run_id, "stop", agent_id)
        reason = req.body().get("reason") if req.method == "POST" else None
        text = reason if isinstance(reason, str) and reason.strip() else "stopped by request"
        view = self.runtime.stop(run_id, text[:500])
        return Reply(200, {"run_id": run_id, "status": view.status.value, "stop_requested": True})

    # -- runs ------------------------------------------------------------------------------------------

    def get_run(self, req: Request, run_id: str) -> Reply:
        self.access.run(req, run_id, "read")
        return Reply(200, self.runtime.get(run_id).to_dict())

    def run_input(self, req: Request, run_id: str) -> Reply:
        """``GET /runs/<run_id>/input``: the run's user messages as stored (images and files as reference parts,
        each with the ``url`` of its data under this API)."""
        self.access.run(req, run_id, "read")
        state, _ = self.runtime.store.load(run_id)
        messages = user_messages(state.new_messages)  # a pydantic-ai run keeps its prompts as its own messages
        return Reply(200, {"run_id": run_id, "messages": [_with_part_urls(m, req, run_id) for m in messages]})

    def run_part(self, req: Request, run_id: str, n: str) -> Reply:
        """``GET /runs/<run_id>/parts/<n>``: the bytes of an image or file of the run's message."""
        self.access.run(req, run_id, "read")
        part = self.runtime.store.parts.own(run_id, int(n)) if n.isascii() and n.isdigit() and len(n) < 9 else None
        if part is None:
            raise NotFoundError(f"run {run_id!r} has no part {n}")
        media_type, data, filename = part_bytes(part)
        if filename is None:  # an image keeps its file name on the run's reference to it
            state, _ = self.runtime.store.load(run_id)
            filename = _name_of(user_messages(state.new_messages), f"{run_id}/{n}")
        headers = {
            "X-Content-Type-Options": "nosniff",
            # an SVG or HTML file shown from this origin could run script: never (a download, in a sandbox)
            "Content-Security-Policy": "default-src 'none'; sandbox",
            "Content-Disposition": f'attachment; filename="{_safe_name(filename or f"part-{n}")}"',
        }
        return Reply(200, data, headers=headers, content_type=media_type)

    # -- schedules ---------------------------------------------------------------------------------------

    def create_schedule(self, req: Request) -> Reply:
        body = parse(req.body(), ScheduleBody, limits=self.limits)
        self.runtime.agent_manifest(body.agent_id)
        self.access.allow(req, "start", agent_id=body.agent_id)
        self.access.session(req, body.session_id, "start", body.agent_id)
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
        self.access.allow(req, "list")
        rule = self.access.rule(req)
        shown = [s for s in self.runtime.schedules() if rule is None or rule("read", req.user_id, s, s.agent_id)]
        return Reply(200, {"schedules": [s.to_dict() for s in shown]})

    def _schedule(self, req: Request, schedule_id: str, action: Action) -> Schedule:
        found = self.runtime.get_schedule(schedule_id)
        self.access.allow(req, action, found, found.agent_id)
        return found

    def get_schedule(self, req: Request, schedule_id: str) -> Reply:
        return Reply(200, self._schedule(req, schedule_id, "read").to_dict())

    def pause_schedule(self, req: Request, schedule_id: str, paused: bool = True) -> Reply:
        self._schedule(req, schedule_id, "stop" if paused else "start")
        return Reply(200, self.runtime.pause_schedule(schedule_id, paused).to_dict())

    def resume_schedule(self, req: Request, schedule_id: str) -> Reply:
        return self.pause_schedule(req, schedule_id, False)

    def delete_schedule(self, req: Request, schedule_id: str) -> Reply:
        self._schedule(req, schedule_id, "delete")
        self.runtime.delete_schedule(schedule_id)
        return Reply(204)

    # -- the run inspector (static pages; the data comes through the API like any client's) ----------------

    def ui(self, name: str) -> Reply:
        """A file of the inspector: ``index.html`` (runs), ``run.html`` (one run), ``ui.js``, ``ui.css``."""
        kind = UI_FILES.get(name)
        if kind is None:
            raise NotFoundError(f"the inspector has no file {name!r}")
        body = resources.files(__package__).joinpath("ui", name).read_bytes()
        return Reply(200, body, headers=dict(UI_HEADERS), content_type=kind)

    # -- runs and sessions as resources ----------------------------------------------------------------

    def list_runs(self, req: Request) -> Reply:
        self.access.allow(req, "list")
        q = req.query
        try:
            page = self.runtime.runs(
                status=q.get("status") or None,
                agent_id=q.get("agent_id") or None,
                session_id=q.get("session_id") or None,
                user_id=q.get("user_id") or None,
                limit=_limit(q.get("limit")),
                cursor=q.get("cursor") or None,
                keep=self.access.keep(req),
            )
        except BadRequestError:
            raise
        except ValidationError as exc:  # a bad query parameter
            raise BadRequestError(str(exc)) from None
        return Reply(200, page.to_dict())

    def send_message(self, req: Request, run_id: str) -> Reply:
        """``POST /runs/<run_id>/messages``: steer a live run (taken in at its next model turn)."""
        self.access.run(req, run_id, "continue")
        body = parse(req.body(), MessageBody, limits=self.limits_for("send_message"))
        sent = self.runtime.send_message(run_id, message_of(body.message, req.files()))
        return Reply(202, {"run_id": run_id, "messages_sent": sent})

    def delete_run(self, req: Request, run_id: str) -> Reply:
        self.access.run(req, run_id, "delete")
        self.runtime.delete_run(run_id)
        return Reply(204)

    def list_sessions(self, req: Request) -> Reply:
        self.access.allow(req, "list")
        rule = self.access.rule(req)

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
        self.access.allow(req, action, view)
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
        dialect: Dialect = "agui" if fmt == "agui" else "canonical"
        until = req.query.get("until", "pause" if fmt == "agui" else "end")
        if until not in ("pause", "end"):
            raise BadRequestError(f"until must be 'pause' or 'end', got {until!r}")
        position = position_param(req.headers.get("Last-Event-ID"), "Last-Event-ID")
        position = position or position_param(req.query.get("after"), "after")
        after, tag = position or (-1, None)
        info = self.access.run(req, run_id, "read")
        if tag is not None:
            self.streams.log.verify(run_id, after, tag)  # 409 log_rewound: "your offset N is not ours"
        if after > info.last_offset and info.status != "ended":
            raise BadRequestError(f"after={after} is past the run's last offset {info.last_offset}")
        if after >= info.last_offset and (info.status == "ended" or (until == "pause" and info.status == "paused")):
            return Reply(204)  # nothing more will come: tells an EventSource to stop reconnecting
        stream = LogStream(
            run_id, after, dialect, until_pause=until == "pause", keepalive_seconds=self.keepalive_seconds, info=info
        )
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
        self,
        req: Request,
        run_id: str,
        session_id: str,
        after: int,
        body: Any,
        manifest: dict[str, Any],
        info: LogInfo | None = None,
    ) -> Reply:
        """The answer to a start or continue: SSE, 202, or (a Wait for) the run's JSON once it ends or pauses
        (``info``: the run's log ids, when the caller knows them)."""
        if body.stream:
            confirm = _confirm_tools(manifest)
            stream = LogStream(
                run_id,
                after,
                "agentos",
                until_pause=True,
                keepalive_seconds=self.keepalive_seconds,
                confirm_tools=confirm,
                info=info,
            )
            return Reply(200, stream=stream)
        if body.background:
            status = self.runtime.get(run_id).status.value
            answer = {"run_id": run_id, "session_id": session_id, "status": status}
            return Reply(202, answer, headers={"Location": req.run_url(run_id)})
        return Reply(200, wait=Wait(run_id, after, self.block_seconds))

    def run_output(self, run_id: str) -> Reply:
        """The run as AgentOS's ``RunOutput`` JSON (what a :class:`Wait` answers)."""
        return Reply(200, run_output(self.runtime.get(run_id)))


def _agent(manifest: dict[str, Any]) -> dict[str, Any]:
    """A manifest with AgentOS's ``id`` key added."""
    return {"id": manifest["name"], **{k: v for k, v in manifest.items() if k != "position"}}


def _confirm_tools(manifest: dict[str, Any]) -> frozenset[str]:
    served = [t for ts in manifest.get("toolsets", []) for t in ts.get("tools", [])]  # MCP tools last served
    return frozenset(t["name"] for t in [*manifest.get("tools", []), *served] if t.get("requires_confirmation"))


def _with_part_urls(message: dict[str, Any], req: Request, run_id: str) -> dict[str, Any]:
    """A stored user message, each reference part of this run given the ``url`` of its bytes."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    base = req.run_url(run_id)
    out = []
    for part in content:
        ref = part.get("ref") if isinstance(part, dict) else None
        if isinstance(ref, str) and ref.rpartition("/")[0] == run_id:
            part = {**part, "url": f"{base}/parts/{ref.rpartition('/')[2]}"}
        out.append(part)
    return {**message, "content": out}


def _name_of(messages: list[dict[str, Any]], ref: str) -> str | None:
    """The file name the reference part ``ref`` carries in ``messages`` (None: it has none)."""
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("ref") == ref and isinstance(part.get("filename"), str):
                return str(part["filename"])
    return None


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._- " else "_" for c in name)[:200] or "part"


def _check_session(info: LogInfo, session_id: str | None) -> None:
    if session_id and session_id != info.session_id:
        raise RunNotFoundError(f"run {info.run_id!r} is not in session {session_id!r}")

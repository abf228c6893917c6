"""The blueprint: AgentOS-compatible ``/agents/...`` routes, ``/runs/...`` routes, health and the OpenAPI spec.

Every route validates what it can (agent, run, state, body) *before* it returns a response, so an unknown
run is a 404, not a 200 stream carrying an error event. Runs always execute on the workers: a client that
disconnects from a stream never cancels its run.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterable
from typing import Any

import redis
from flask import Blueprint, Response, current_app, jsonify, request
from werkzeug.exceptions import HTTPException

from ...errors import (
    AgentsCeleryError,
    AuthenticationError,
    BadRequestError,
    DecisionError,
    NotFoundError,
    RedisUnavailableError,
    RunExpiredError,
    RunNotFoundError,
    StateError,
    ValidationError,
)
from ...http import sse
from ...http.agentos import AGNO_STATUS, tool_object
from ...http.bodies import ContinueBody, ResumeBody, RunBody, fields_of, int_param, parse
from ...http.openapi import spec
from ...http.streams import Streams
from ...runs import RunView, ToolCall
from ...runtime import Runtime
from ...storage.eventlog import LogInfo

EXTENSION = "agents_celery"
#: Where ``init_app`` keeps the API's stream client (:class:`~agents_celery.http.streams.Streams`).
STREAMS = "agents_celery.streams"

blueprint = Blueprint("agents_celery", __name__)

#: Most specific first: the first class an error is an instance of decides its status.
STATUS: tuple[tuple[type[AgentsCeleryError], int], ...] = (
    (BadRequestError, 400),
    (DecisionError, 400),
    (ValidationError, 422),
    (NotFoundError, 404),
    (RunExpiredError, 410),
    (StateError, 409),
    (RedisUnavailableError, 503),
)


def runtime() -> Runtime:
    """The Runtime that ``init_app`` stored on the current app."""
    rt: Runtime = current_app.extensions[EXTENSION]
    return rt


def streams() -> Streams:
    """The stream client that ``init_app`` stored on the current app."""
    found: Streams = current_app.extensions[STREAMS]
    return found


def sse_response(frames: Iterable[str], status: int = 200) -> Response:
    """A streaming ``text/event-stream`` response over ``frames``."""
    return Response(frames, status=status, mimetype=sse.CONTENT_TYPE, headers=dict(sse.HEADERS))


def _body() -> dict[str, Any]:
    """The request's body as fields (JSON, urlencoded or multipart)."""
    return fields_of(request.mimetype or "", request.form, request.get_data(cache=True))


def _keepalive() -> float:
    return float(current_app.config.get("AGENTS_CELERY_KEEPALIVE_SECONDS", 15.0))


def error_response(status: int, detail: str, code: str) -> Response:
    response = jsonify({"detail": detail, "code": code})
    response.status_code = status
    if status == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


# -- auth and errors -----------------------------------------------------------------------------------


@blueprint.before_request
def _authenticate() -> Response | None:
    key = runtime().settings.api_key
    if not key or request.endpoint == f"{blueprint.name}.health":
        return None
    given = request.headers.get("Authorization", "")
    if given.startswith("Bearer ") and hmac.compare_digest(given[7:].strip().encode(), key.encode()):
        return None
    return error_response(
        401, "send 'Authorization: Bearer <key>' with the API key (AGENTS_CELERY_API_KEY)", AuthenticationError.code
    )


@blueprint.errorhandler(AgentsCeleryError)
def _library_error(exc: AgentsCeleryError) -> Response:
    status = next((s for cls, s in STATUS if isinstance(exc, cls)), 500)
    if status == 500:
        current_app.logger.exception("unexpected error", exc_info=exc)
    return error_response(status, str(exc), exc.code)


@blueprint.errorhandler(redis.ConnectionError)
@blueprint.errorhandler(redis.TimeoutError)
def _redis_down(exc: redis.RedisError) -> Response:
    return error_response(503, f"Redis does not answer: {exc}", RedisUnavailableError.code)


def http_error(exc: HTTPException) -> Response:
    """Werkzeug's HTTP errors (404 unknown route, 405, 400 unreadable body ...) as JSON."""
    code = (exc.name or "error").lower().replace(" ", "_")
    response = error_response(exc.code or 500, exc.description or exc.name, code)
    if exc.code == 405 and exc.response is None:
        allowed = getattr(exc, "valid_methods", None)
        if allowed:
            response.headers["Allow"] = ", ".join(allowed)
    return response


blueprint.register_error_handler(HTTPException, http_error)


# -- helpers ---------------------------------------------------------------------------------------------


def _run_under(agent_id: str, run_id: str) -> LogInfo:
    """The run's log info; 404 for an unknown agent, an unknown run, or a run of another agent."""
    rt = runtime()
    rt.agent_manifest(agent_id)
    info = rt.store.log.info(run_id)
    if info.agent_id != agent_id:
        raise RunNotFoundError(f"agent {agent_id!r} has no run {run_id!r}")
    return info


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


def _finish(run_id: str, session_id: str, after: int, body_stream: bool, background: bool) -> Response:
    """The answer to a start or continue: SSE, 202, or the run's JSON once it ends or pauses."""
    rt = runtime()
    if body_stream:
        frames = sse.agentos_frames(rt, streams(), run_id, after, keepalive_seconds=_keepalive())
        return sse_response(frames)
    if background:
        status = AGNO_STATUS[rt.get(run_id).status.value]
        return _json({"run_id": run_id, "session_id": session_id, "status": status}, 202)
    deadline = time.monotonic() + float(current_app.config.get("AGENTS_CELERY_BLOCK_SECONDS", 600.0))
    for ev in sse.follow(streams(), run_id, after, until_pause=True, keepalive_seconds=1.0):
        if ev is None and time.monotonic() > deadline:
            break  # the run goes on; the JSON says it is still running
    return _json(run_output(rt.get(run_id)))


def _json(value: Any, status: int = 200) -> Response:
    response = jsonify(value)
    response.status_code = status
    return response


# -- service routes ----------------------------------------------------------------------------------------


@blueprint.get("/health")
def health() -> Response:
    try:
        runtime().redis.ping()
    except (redis.RedisError, OSError) as exc:
        return _json({"status": "unavailable", "detail": f"Redis does not answer: {exc}"}, 503)
    return _json({"status": "ok"})


@blueprint.get("/openapi.json")
def openapi() -> Response:
    prefix = request.path.removesuffix("/openapi.json")
    return _json(spec(prefix))


# -- agents ------------------------------------------------------------------------------------------------


@blueprint.get("/agents")
def list_agents() -> Response:
    return _json([_agent(m) for m in runtime().agents()])


@blueprint.get("/agents/<agent_id>")
def get_agent(agent_id: str) -> Response:
    return _json(_agent(runtime().agent_manifest(agent_id)))


def _agent(manifest: dict[str, Any]) -> dict[str, Any]:
    """A manifest with AgentOS's ``id`` and ``name`` keys added."""
    return {"id": manifest["name"], **{k: v for k, v in manifest.items() if k != "position"}}


@blueprint.post("/agents/<agent_id>/runs")
def create_run(agent_id: str) -> Response:
    rt = runtime()
    rt.agent_manifest(agent_id)  # 404 before looking at the body
    body = parse(_body(), RunBody)
    stream = rt.stream(
        agent_id,
        body.message,
        session_id=body.session_id,
        user_id=body.user_id,
        idempotency_key=request.headers.get("Idempotency-Key") or None,
    )
    if stream.agent_id != agent_id:  # an Idempotency-Key reused for another agent
        raise BadRequestError(f"Idempotency-Key already names run {stream.id!r} of agent {stream.agent_id!r}")
    return _finish(stream.id, stream.session_id, -1, body.stream, body.background)


@blueprint.post("/agents/<agent_id>/runs/<run_id>/continue")
def continue_run(agent_id: str, run_id: str) -> Response:
    info = _run_under(agent_id, run_id)
    body = parse(_body(), ContinueBody, json_fields=("tools",))
    _check_session(info, body.session_id)
    rt = runtime()
    before = rt.get(run_id).last_offset  # the continue's RUN_STARTED comes right after it
    decisions = [t.decision() for t in body.tools or []]
    rt.continue_run(run_id, decisions or None)
    return _finish(run_id, info.session_id, before, body.stream, body.background)


@blueprint.post("/agents/<agent_id>/runs/<run_id>/resume")
def resume_run(agent_id: str, run_id: str) -> Response:
    info = _run_under(agent_id, run_id)
    body = parse(_body(), ResumeBody)
    _check_session(info, body.session_id)
    rt = runtime()
    after = -1 if body.last_event_index is None else body.last_event_index
    status = AGNO_STATUS[rt.get(run_id).status.value]
    if info.status == "live":
        head: dict[str, Any] = {
            "event": "catch_up",
            "run_id": run_id,
            "status": status,
            "missed_events": max(0, info.last_offset - after),
            "current_event_count": info.next_offset,
        }
        subscribed = {"event": "subscribed", "run_id": run_id, "last_event_index": info.last_offset}
        frames = sse.agentos_frames(
            rt,
            streams(),
            run_id,
            after,
            head=[head],
            subscribed=(info.last_offset, subscribed),
            keepalive_seconds=_keepalive(),
            info=info,
        )
    else:
        head = {
            "event": "replay",
            "run_id": run_id,
            "status": status,
            "total_events": info.next_offset,
            "last_event_index_requested": body.last_event_index,
        }
        frames = sse.agentos_frames(
            rt, streams(), run_id, after, head=[head], keepalive_seconds=_keepalive(), info=info
        )
    return sse_response(frames)


@blueprint.route("/agents/<agent_id>/runs/<run_id>/cancel", methods=["POST"])
@blueprint.route("/agents/<agent_id>/runs/<run_id>/stop", methods=["POST"], endpoint="stop_run")
def cancel_run(agent_id: str, run_id: str) -> Response:
    _run_under(agent_id, run_id)
    view = runtime().stop(run_id)
    return _json({"run_id": run_id, "status": AGNO_STATUS[view.status.value], "stop_requested": True})


# -- runs ----------------------------------------------------------------------------------------------------


@blueprint.get("/runs/<run_id>")
def get_run(run_id: str) -> Response:
    view = runtime().get(run_id)
    out = view.to_dict()
    out["agent"] = view.agent_id
    out["pending_approvals"] = [_tool(c) for c in view.pending]
    return _json(out)


@blueprint.get("/runs/<run_id>/events")
def run_events(run_id: str) -> Response:
    fmt = request.args.get("format", "canonical")
    if fmt not in ("canonical", "agui"):
        raise BadRequestError(f"format must be 'canonical' or 'agui', got {fmt!r}")
    until = request.args.get("until", "pause" if fmt == "agui" else "end")
    if until not in ("pause", "end"):
        raise BadRequestError(f"until must be 'pause' or 'end', got {until!r}")
    header = int_param(request.headers.get("Last-Event-ID"), "Last-Event-ID")
    after = header if header is not None else int_param(request.args.get("after"), "after")
    after = -1 if after is None else after
    if after < -1:
        raise BadRequestError(f"after must be -1 or an offset, got {after}")
    info = runtime().store.log.info(run_id)
    if after >= info.last_offset and (info.status == "ended" or (until == "pause" and info.status == "paused")):
        return Response(status=204)  # nothing more will come: tells an EventSource to stop reconnecting
    frames = sse.log_frames(
        runtime(),
        streams(),
        run_id,
        after,
        agui=fmt == "agui",
        until_pause=until == "pause",
        keepalive_seconds=_keepalive(),
        info=info,
    )
    return sse_response(frames)

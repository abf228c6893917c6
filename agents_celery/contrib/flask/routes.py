"""The Flask blueprint: the routes of :class:`agents_celery.http.protocol.API`, translated to Flask.

One rule per route of the table (:mod:`agents_celery.http.routes`), all served by one generic view; written by
hand beside it: ``/health`` and the inspector's static files (no API key), ``/openapi.json``. Each view builds a
:class:`~agents_celery.http.protocol.Request` from Flask's request, asks the API, and turns its
:class:`~agents_celery.http.protocol.Reply` into a Flask response (JSON, an SSE stream, or the run's JSON once it
ended or paused). The protocol itself (bodies, errors, dialects, SSE) lives in :mod:`agents_celery.http`.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Mapping
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, request, url_for
from werkzeug.exceptions import HTTPException
from werkzeug.formparser import parse_form_data

from ...errors import AgentsCeleryError
from ...http import sse, waiting
from ...http.bodies import Limits, check_size, fields_of, read_capped
from ...http.messages import Upload, error_answer
from ...http.openapi import spec
from ...http.protocol import API, Headers, Reply, Request, error_reply, status_of
from ...http.routes import OPENAI, ROUTES, SPECIAL, Route, openai_path, template
from ...storage.connections import UNAVAILABLE, unavailable
from . import csrf

#: Where ``init_app`` keeps the Runtime, and the API (:class:`~agents_celery.http.protocol.API`).
EXTENSION = "agents_celery"
PROTOCOL = "agents_celery.api"

blueprint = Blueprint("agents_celery", __name__)


def api() -> API:
    """The API that ``init_app`` stored on the current app."""
    found: API = current_app.extensions[PROTOCOL]
    return found


FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def _body(limits: Limits) -> dict[str, Any]:
    check_size(request.content_length, limits)  # before reading it
    kind = request.mimetype or ""
    if request.content_length is not None:
        return fields_of(kind, request.form, request.get_data(cache=True), limits)
    data = _chunked(limits)
    return fields_of(kind, _form(data)[0] if kind in FORMS else {}, data, limits)


def _chunked(limits: Limits) -> bytes:
    """A chunked body (no Content-Length), read once, at most one byte past the limit."""
    if "agents_celery_body" not in g:
        g.agents_celery_body = read_capped(request.stream.read, limits)
    data: bytes = g.agents_celery_body
    return data


def _form(data: bytes) -> tuple[Mapping[str, str], Any]:
    """The form fields and files of a chunked body already read (Flask's ``request.form`` would read the stream
    again)."""
    environ = {**request.environ, "wsgi.input": io.BytesIO(data), "wsgi.input_terminated": True}  # ends there
    _, form, files = parse_form_data(environ)
    return form, files


def _files(limits: Limits) -> list[Upload]:
    """The files of a multipart body's ``files`` field."""
    if request.mimetype != "multipart/form-data":
        return []
    check_size(request.content_length, limits)
    files = request.files if request.content_length is not None else _form(_chunked(limits))[1]
    return [Upload(f.filename or "", f.mimetype or "", f.read()) for f in files.getlist("files") if f.filename]


def _request(name: str = "") -> Request:
    user_id = current_app.config.get("AGENTS_CELERY_USER_ID")
    limits = api().limits_for(name)
    return Request(
        method=request.method,
        headers=Headers(request.headers.items()),
        query=request.args,
        body=lambda: _body(limits),
        user_id=user_id() if callable(user_id) else None,
        run_url=lambda run_id: url_for(f"{blueprint.name}.get_run", run_id=run_id),
        files=lambda: _files(limits),
    )


def respond(reply: Reply) -> Response:
    """The Flask response for a protocol reply."""
    if reply.stream is not None:
        frames = reply.stream.frames(api().streams.log)
        return Response(
            frames, status=reply.status, mimetype=sse.CONTENT_TYPE, headers={**sse.HEADERS, **reply.headers}
        )
    if reply.wait is not None and reply.wait.keepalive is not None:
        body = waiting.spaced(reply.wait, api().streams.log)
        return Response(body, status=reply.status, mimetype="application/json", headers=reply.headers)
    if reply.wait is not None:
        return respond(_wait(reply))
    if reply.status == 204:
        return Response(status=204)
    if reply.content_type is not None:
        return Response(reply.body, status=reply.status, content_type=reply.content_type, headers=reply.headers)
    response = jsonify(reply.body)
    response.status_code = reply.status
    response.headers.update(reply.headers)
    return response


def _wait(reply: Reply) -> Reply:
    """Follow the run until it ends or pauses (at most ``seconds``), then its JSON (still running, past it)."""
    wait, protocol = reply.wait, api()
    assert wait is not None
    stream = sse.LogStream(wait.run_id, wait.after, "canonical", until_pause=True, keepalive_seconds=1.0)
    deadline = time.monotonic() + wait.seconds
    for _ in stream.frames(protocol.streams.log):
        if time.monotonic() > deadline:
            break  # the run goes on; the JSON says it is still running
    return wait.answer() if wait.answer is not None else protocol.run_output(wait.run_id)


# -- auth and errors -----------------------------------------------------------------------------------


#: Endpoints anyone may ask (http/routes.py's open specials): the health check, and the inspector's static files
#: (no data in them).
OPEN = {f"{blueprint.name}.{special.name}" for special in SPECIAL if special.open}


@blueprint.before_request
def authenticate_first() -> Response | None:
    """401 unless the request carries the API key (when one is set); then 403 for a cross-site forgery (a
    state-changing cookie request from another site, :mod:`.csrf`). ``/health`` is open."""
    if request.endpoint in OPEN or request.path == "/health":
        return None
    headers = Headers(request.headers.items())
    try:
        api().authenticate(headers)
    except AgentsCeleryError as exc:
        return respond(error_reply(exc, openai=_openai()))
    return _cross_site(headers)


def _cross_site(headers: Headers) -> Response | None:
    """403 ``csrf_failed`` for a state-changing cookie request that does not prove it comes from this site
    (see :mod:`agents_celery.contrib.flask.csrf`); nothing of it is read or done."""
    config = current_app.config
    why = csrf.refusal(
        request.method,
        headers,
        f"{request.scheme}://{request.host}",
        config.get("AGENTS_CELERY_TRUSTED_ORIGINS", frozenset()),
        config.get("AGENTS_CELERY_CSRF_HEADER"),
    )
    if why is None:
        return None
    return respond(error_answer(403, why, "csrf_failed", openai=_openai()))


def _openai() -> bool:
    """Whether the request is to the OpenAI Responses API (``/v1``): its errors take OpenAI's shape."""
    if request.endpoint is not None:
        return request.endpoint.rpartition(".")[2] in OPENAI
    return openai_path(request.path)  # no route matched it


@blueprint.errorhandler(AgentsCeleryError)
def _library_error(exc: AgentsCeleryError) -> Response:
    if status_of(exc) == 500:
        current_app.logger.exception("unexpected error", exc_info=exc)
    return respond(error_reply(exc, openai=_openai()))


def _redis_down(exc: Exception) -> Response:
    """Redis, or a node of the Redis Cluster, does not answer (:data:`~agents_celery.storage.connections.UNAVAILABLE`):
    503, as the library's own :class:`RedisUnavailableError`. A cluster error that is a bug stays a 500."""
    down = unavailable(exc)
    if down is None:
        raise exc
    return respond(error_reply(down, openai=_openai()))


for _error in UNAVAILABLE:
    blueprint.register_error_handler(_error, _redis_down)


def http_error(exc: HTTPException) -> Response:
    """Werkzeug's HTTP errors (404 unknown route, 405, 413, 400 unreadable body ...) as JSON."""
    code = (exc.name or "error").lower().replace(" ", "_")
    allowed = getattr(exc, "valid_methods", None) if exc.code == 405 and exc.response is None else None
    headers = {"Allow": ", ".join(allowed)} if allowed else {}
    detail = exc.description or exc.name
    return respond(error_answer(exc.code or 500, detail, code, openai=_openai(), headers=headers))


blueprint.register_error_handler(HTTPException, http_error)


# -- routes: /health and this document, then the table (http/routes.py) ------------------------------------


@blueprint.get("/health")
def health() -> Response:
    return respond(api().health())


@blueprint.get("/openapi.json")
def openapi() -> Response:
    prefix = request.path.removesuffix("/openapi.json")
    return respond(Reply(200, spec(prefix)))


def _view(route: Route) -> Callable[..., Response]:
    """The view of one route of the table: the API's method, with the request and the path's parameters."""

    def view(**params: Any) -> Response:
        return respond(api().handler(route)(_request(route.name), **params))

    return view


def _rule(route: Route) -> str:
    return template(route.path, lambda name, kind: f"<{_CONVERTERS[kind]}:{name}>")


_CONVERTERS = {"str": "string", "int": "int"}

for _route in ROUTES:  # the table (http/routes.py); 405 with Allow for a method no rule of a path takes
    blueprint.add_url_rule(_rule(_route), _route.name, _view(_route), methods=[_route.method])


# -- the run inspector -------------------------------------------------------------------------------------


@blueprint.get("/ui")
def ui_root() -> Response:
    return Response(status=308, headers={"Location": request.path + "/"})  # its pages link relative to /ui/


@blueprint.get("/ui/")
def ui_index() -> Response:
    return respond(api().ui("index.html"))


@blueprint.get("/ui/runs/<run_id>")
def ui_run(run_id: str) -> Response:
    return respond(api().ui("run.html"))


@blueprint.get("/ui/<name>")
def ui_file(name: str) -> Response:
    return respond(api().ui(name))

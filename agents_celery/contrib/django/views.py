"""The views: each route of :class:`agents_celery.http.protocol.API`, translated to Django (async views).

One generic view per path of the route table (:func:`table_view`, :mod:`agents_celery.http.routes`); written by
hand: ``/health``, ``/openapi.json``, the inspector's static files and the JSON 404 for any other path.

A view builds the protocol's :class:`~agents_celery.http.protocol.Request` from Django's request (the API key,
or the Django user and the CSRF check, decide who the caller is and what it may do), calls the API in a
thread (it speaks to Redis synchronously), and turns the :class:`~agents_celery.http.protocol.Reply` into a
response: JSON, or an SSE stream read with the asyncio Redis client under ASGI (no thread held while it
waits) and with the sync one under WSGI.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import wraps
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import RequestDataTooBig
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict, StreamingHttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.urls import reverse
from django.utils.module_loading import import_string
from django.views.decorators.csrf import csrf_exempt

from ...errors import AgentsCeleryError, AuthenticationError, BadRequestError, PayloadTooLargeError
from ...http import sse, waiting
from ...http.bodies import Limits, check_size, fields_of, read_capped
from ...http.messages import Upload, error_answer
from ...http.openapi import spec
from ...http.protocol import API, Action, Headers, Reply, Request, Resource, Wait, error_reply
from ...http.routes import OPENAI, Route, openai_path
from ...storage.connections import UNAVAILABLE, unavailable
from .apps import config

View = Callable[..., Awaitable[HttpResponse]]


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> HttpResponse:
    response = JsonResponse(body, status=status, safe=False, json_dumps_params={"ensure_ascii": False})
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def route(*methods: str, openai: bool | None = False) -> Callable[[View], View]:
    """An async API view for ``methods``: JSON 405 for others, JSON errors for the library's exceptions, and 503
    when Redis (or the Redis Cluster) does not answer. ``openai``: the errors take OpenAI's shape (the ``/v1``
    routes); None: when the request's path is under ``/v1`` (the view of paths no route matched)."""

    def decorate(view: View) -> View:
        @wraps(view)
        async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            shaped = openai_path(request.path) if openai is None else openai
            if request.method not in methods:
                detail = f"{request.method} is not allowed here; use {', '.join(methods)}"
                allow = {"Allow": ", ".join(methods)}
                return respond(request, error_answer(405, detail, "method_not_allowed", openai=shaped, headers=allow))
            try:
                return await view(request, *args, **kwargs)
            except AgentsCeleryError as exc:
                return respond(request, error_reply(exc, openai=shaped))
            except UNAVAILABLE as exc:  # Redis, or a node of the Redis Cluster, does not answer: 503
                down = unavailable(exc)
                if down is None:
                    raise
                return respond(request, error_reply(down, openai=shaped))

        exempt: View = csrf_exempt(wrapper)  # the views check CSRF themselves, for session-authenticated requests
        return exempt

    return decorate


# -- who is calling ------------------------------------------------------------------------------------


def _user(request: HttpRequest) -> tuple[str | None, bool, Any]:
    """(user id, is staff, the user) of a session-authenticated request; (None, False, None) otherwise."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None, False, None
    return str(user.pk), bool(user.is_staff), user


def _csrf_refusal(request: HttpRequest, openai: bool) -> HttpResponse | None:
    """A JSON 403 when a session-authenticated POST fails Django's CSRF check, as any Django view would."""
    middleware = CsrfViewMiddleware(lambda r: HttpResponse())
    middleware.process_request(request)
    refused = middleware.process_view(request, _csrf_probe, (), {})
    if refused is None:
        return None
    detail = "CSRF verification failed: send the X-CSRFToken header"
    return respond(request, error_answer(403, detail, "csrf_failed", openai=openai))


def _csrf_probe(request: HttpRequest) -> None:  # a view without csrf_exempt, for the middleware's check
    return None


#: The user id of what anonymous callers start (with ``ALLOW_ANONYMOUS``): theirs together, and never the runs of
#: API-key clients (whose user id is None).
ANONYMOUS = "(anonymous)"


def _rule(user_id: str | None, staff: bool, user: Any) -> Callable[..., bool]:
    """The access rule of one caller (see the package docs)."""
    custom = config().front_end("AUTHORIZE", None)
    if custom is not None:  # the project's rule, with the Django user (None for an anonymous caller)
        hook = import_string(custom) if isinstance(custom, str) else custom
        return lambda action, _uid, resource, agent_id: bool(hook(action, user, resource, agent_id))

    def rule(action: Action, caller: str | None, resource: Resource | None, agent_id: str | None) -> bool:
        # A run, session or schedule is its owner's (and staff's); anonymous callers own what they started.
        return resource is None or resource.user_id == user_id or staff

    return rule


async def protocol_request(request: HttpRequest, api: API, name: str = "") -> Request | HttpResponse:
    """The protocol's Request for a Django request (to the API's ``name`` route), or the answer that refuses it
    (401, CSRF 403)."""
    headers = Headers(request.headers.items())
    limits = api.limits_for(name)

    def body() -> dict[str, Any]:
        check_size(int(request.headers.get("Content-Length") or 0) or None, limits)
        kind = request.content_type or ""
        if "chunked" in request.headers.get("Transfer-Encoding", "").lower():
            return _chunked_body(request, kind, limits)  # no Content-Length: at most the limit + 1 bytes read
        try:
            if kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
                return fields_of(kind, request.POST, b"", limits)  # Django parsed it (its body can't be read again)
            return fields_of(kind, {}, request.body, limits)
        except RequestDataTooBig:  # Django's own limit, under ours (a JSON body with images, say)
            raise PayloadTooLargeError(
                "the body is over Django's DATA_UPLOAD_MAX_MEMORY_SIZE; raise it, or send images and files in a "
                "multipart form's files field (they do not count against it)"
            ) from None

    files = functools.partial(_files, request, limits)
    run_url = functools.partial(_run_url, request)

    if headers.get("Authorization"):  # a machine client: the API key, and nothing else, decides
        if not api.runtime.settings.api_key:
            raise AuthenticationError("this API has no API key (AGENTS_CELERY API_KEY); log in instead")
        api.authenticate(headers)
        # no rule: may do anything
        return Request(request.method or "GET", headers, request.GET, body, None, run_url, files=files)
    user_id, staff, user = await sync_to_async(_user, thread_sensitive=True)(request)
    if user_id is None:
        if not config().front_end("ALLOW_ANONYMOUS", False):
            raise AuthenticationError("log in, or send 'Authorization: Bearer <key>' with the API key")
        rule = _rule(ANONYMOUS, False, None)
        return Request(request.method or "GET", headers, request.GET, body, ANONYMOUS, run_url, rule, files)
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        refused = _csrf_refusal(request, name in OPENAI)
        if refused is not None:
            return refused
    rule = _rule(user_id, staff, user)
    return Request(request.method or "GET", headers, request.GET, body, user_id, run_url, rule, files)


def _files(request: HttpRequest, limits: Limits) -> list[Upload]:
    """The files of a multipart body's ``files`` field."""
    if request.content_type != "multipart/form-data":
        return []
    check_size(int(request.headers.get("Content-Length") or 0) or None, limits)
    return [Upload(f.name or "", f.content_type or "", f.read()) for f in request.FILES.getlist("files")]


def _run_url(request: HttpRequest, run_id: str) -> str:
    """The URL of ``GET /runs/<run_id>`` under the prefix (and namespace) the app's URLs are mounted at."""
    match = request.resolver_match
    if match is not None and match.namespace:
        return str(reverse(f"{match.namespace}:get_run", kwargs={"run_id": run_id}))
    return str(request.path).split("/agents/", 1)[0] + f"/runs/{run_id}"


def _chunked_body(request: HttpRequest, kind: str, limits: Limits) -> dict[str, Any]:
    """A chunked body (no Content-Length), read once up to one byte past the limit (``request.body`` reads it all;
    under WSGI Django reads nothing of it, so the server's dechunked input is read when it says it ends)."""
    cached = getattr(request, "_agents_celery_body", None)
    if cached is None:
        environ = getattr(request, "environ", {})
        read = environ["wsgi.input"].read if environ.get("wsgi.input_terminated") else request.read
        cached = read_capped(read, limits)
        request._agents_celery_body = cached
    if kind == "multipart/form-data":
        raise BadRequestError("send a multipart body with a Content-Length (Django does not parse a chunked one)")
    form = QueryDict(cached) if kind == "application/x-www-form-urlencoded" else {}
    return fields_of(kind, form, cached, limits)


async def call(request: HttpRequest, route: Route, **params: Any) -> HttpResponse:
    """Ask what ``route`` calls (with the path's parameters) and answer as it says."""
    api = config().api
    req = await protocol_request(request, api, route.name)
    if isinstance(req, HttpResponse):
        return req
    reply = await sync_to_async(api.handler(route), thread_sensitive=False)(req, **params)
    if reply.wait is not None and reply.wait.keepalive is not None:
        return _spaced(request, api, reply.wait)
    if reply.wait is not None:
        reply = await _wait(request, api, reply)
    return respond(request, reply)


def _spaced(request: HttpRequest, api: API, wait: Wait) -> HttpResponse:
    """A wait that keeps its connection alive (:mod:`agents_celery.http.waiting`): 200 and the headers at once."""
    if isinstance(request, ASGIRequest):
        body: Any = waiting.aspaced(wait, config().async_log())
    else:
        body = waiting.spaced(wait, api.streams.log)
    return StreamingHttpResponse(body, status=200, content_type="application/json")


async def _wait(request: HttpRequest, api: API, reply: Reply) -> Reply:
    """Follow the run until it ends or pauses (at most the wait's seconds), then its JSON."""
    wait = reply.wait
    assert wait is not None
    stream = sse.LogStream(wait.run_id, wait.after, "canonical", until_pause=True, keepalive_seconds=1.0)
    deadline = time.monotonic() + wait.seconds
    if isinstance(request, ASGIRequest):
        async for _ in stream.aframes(config().async_log()):
            if time.monotonic() > deadline:
                break
    else:
        for _ in stream.frames(api.streams.log):
            if time.monotonic() > deadline:
                break
    if wait.answer is not None:
        answered: Reply = await sync_to_async(wait.answer, thread_sensitive=False)()
        return answered
    answer: Reply = await sync_to_async(api.run_output, thread_sensitive=False)(wait.run_id)
    return answer


def respond(request: HttpRequest, reply: Reply) -> HttpResponse:
    """The Django response for a protocol reply."""
    if reply.stream is not None:
        if isinstance(request, ASGIRequest):
            frames: Any = reply.stream.aframes(config().async_log())
        else:
            frames = reply.stream.frames(config().api.streams.log)
        response = StreamingHttpResponse(frames, status=reply.status, content_type=sse.CONTENT_TYPE)
        for name, value in {**sse.HEADERS, **reply.headers}.items():
            response[name] = value
        return response
    if reply.status == 204:
        return HttpResponse(status=204)
    if reply.content_type is not None:
        page = HttpResponse(reply.body, status=reply.status, content_type=reply.content_type)
        for name, value in reply.headers.items():
            page[name] = value
        return page
    return _json(reply.status, reply.body, reply.headers)


# -- routes: /health and this document, the table's paths (urls.py), any other path ----------------------


@route("GET")
async def health(request: HttpRequest) -> HttpResponse:
    reply = await sync_to_async(config().api.health, thread_sensitive=False)()
    return respond(request, reply)


@route("GET")
async def openapi(request: HttpRequest) -> HttpResponse:
    return _json(200, spec(request.path.removesuffix("/openapi.json")))


def table_view(routes: Sequence[Route]) -> View:
    """The one view of a path of the route table (:mod:`agents_celery.http.routes`): the route of the request's
    method asks the API (a JSON 405 with ``Allow`` for another method)."""
    by_method = {r.method: r for r in routes}

    @route(*by_method, openai=routes[0].openai)
    async def view(request: HttpRequest, **params: Any) -> HttpResponse:
        return await call(request, by_method[request.method or "GET"], **params)

    return view


@route("GET", "POST", "PUT", "PATCH", "DELETE", openai=None)
async def not_found(request: HttpRequest, path: str = "") -> HttpResponse:
    req = await protocol_request(request, config().api)  # a stranger learns nothing of the routes
    if isinstance(req, HttpResponse):
        return req
    detail = f"no route {request.path!r}"
    return respond(request, error_answer(404, detail, "not_found", openai=openai_path(request.path)))


# -- the run inspector (static files, open to anyone: the data comes through the API) ------------------------


@route("GET")
async def ui_root(request: HttpRequest) -> HttpResponse:
    return HttpResponse(status=308, headers={"Location": request.path + "/"})  # its pages link relative to ui/


@route("GET")
async def ui_index(request: HttpRequest) -> HttpResponse:
    return respond(request, config().api.ui("index.html"))


@route("GET")
async def ui_run(request: HttpRequest, run_id: str) -> HttpResponse:
    return respond(request, config().api.ui("run.html"))


@route("GET")
async def ui_file(request: HttpRequest, name: str) -> HttpResponse:
    return respond(request, config().api.ui(name))

"""The HTTP API: a Flask blueprint you mount in your app, or a standalone app.

::

    from agents_celery.contrib.flask import create_app, init_app, make_blueprint

    app = create_app()                       # standalone (what ``agents-celery api`` serves)

    init_app(my_app, runtime=Runtime())      # or inside an existing Flask app
    my_app.register_blueprint(make_blueprint(), url_prefix="/ai")

``init_app`` stores the :class:`~agents_celery.Runtime` in ``app.extensions["agents_celery"]``; nothing is
global. Config keys (``create_app`` also reads them from the environment): ``AGENTS_CELERY_KEEPALIVE_SECONDS``
(idle SSE comment interval, default 15) and ``AGENTS_CELERY_BLOCK_SECONDS`` (how long ``stream=false`` waits
for a run to end or pause, default 600; past it the JSON shows the run still running) and
``AGENTS_CELERY_API_REDIS_MAX_CONNECTIONS`` (default 2000: how many streams one process can hold open; each
holds one Redis connection of the API's stream client, see :mod:`agents_celery.http.streams`; the Runtime's
own pool is widened to the same size). With ``AGENTS_CELERY_TRACING=1`` ``create_app`` opens an OpenTelemetry
span per request and carries it into the step tasks (see :mod:`agents_celery.contrib.flask.tracing`). Serving it:
:mod:`agents_celery.contrib.flask.serve`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable

from flask import Blueprint, Flask

from ...agent import load_agents
from ...broker.extension import host_app
from ...http.protocol import API, Authorize
from ...http.streams import MAX_CONNECTIONS, Streams, widen_pool
from ...runtime import Runtime
from ...settings import Settings, load_settings
from . import csrf
from .routes import EXTENSION, PROTOCOL, authenticate_first, blueprint, http_error

__all__ = ["blueprint", "close_app", "create_app", "init_app", "make_blueprint"]

log = logging.getLogger(__name__)
#: Logged once per app when it serves with no API key and no ``authorize`` hook.
OPEN_WARNING = (
    "agents-celery API: no AGENTS_CELERY_API_KEY and no authorize hook: anyone who reaches this API can read "
    "every run and approve tool calls; set AGENTS_CELERY_API_KEY or pass init_app(..., authorize=...)"
)


def make_blueprint() -> Blueprint:
    """The API blueprint (register it once per app, under any ``url_prefix``)."""
    return blueprint


def init_app(
    app: Flask,
    runtime: Runtime | None = None,
    settings: Settings | None = None,
    *,
    authorize: Authorize | None = None,
    user_id: Callable[[], str | None] | None = None,
    trusted_origins: Iterable[str] | None = None,
    csrf_header: str | None = None,
) -> Runtime:
    """Give ``app`` a Runtime (a new one from ``settings`` / the environment when none is passed).

    A new Runtime knows the agents of ``AGENTS_CELERY_AGENTS`` (``agents-celery api --agents``) even
    before a worker has published them; without it the API lists what workers published.

    Args:
        authorize: ``authorize(action, user_id, resource, agent_id) -> bool``, asked before each action
            (``list``, ``start``, ``read``, ``continue``, ``stop``, ``delete``) with the run, session or schedule
            it touches, so your app's login applies (see :mod:`agents_celery.http.protocol`, docs/security.md).
            Default: everyone may (the API key, if set, still applies).
        user_id: Returns the current request's user id (e.g. from Flask-Login's ``current_user``); runs record
            it, and ``authorize`` is told it.
        trusted_origins: Other sites (``https://app.example.com``) whose pages may POST, PUT, PATCH or DELETE
            with the user's cookie (CSRF, see :mod:`agents_celery.contrib.flask.csrf`); this site's own pages
            always may. Default: config ``AGENTS_CELERY_TRUSTED_ORIGINS`` (a list, or comma-separated).
        csrf_header: A header (e.g. ``X-Requested-With``) whose presence also lets a cookie request through:
            pages of other sites cannot add it without a CORS preflight. Default: none.
    """
    if runtime is None:
        settings = settings or load_settings()
        local = list(load_agents(settings.agents).values()) if settings.agents else []
        # the host's Celery app (Flask's ``app.extensions["celery"]``, or one configure() joined) and its broker
        celery_app = host_app(settings, [app.extensions.get("celery")])
        runtime = Runtime(settings=settings, agents=local, celery_app=celery_app)
    rt = runtime
    app.extensions[EXTENSION] = rt
    app.config.setdefault("AGENTS_CELERY_KEEPALIVE_SECONDS", 15.0)
    app.config.setdefault("AGENTS_CELERY_BLOCK_SECONDS", 600.0)
    app.config.setdefault("AGENTS_CELERY_API_REDIS_MAX_CONNECTIONS", MAX_CONNECTIONS)
    size = int(app.config["AGENTS_CELERY_API_REDIS_MAX_CONNECTIONS"])
    app.config.setdefault("AGENTS_CELERY_IDLE_CLOSE_SECONDS", 30.0)
    streams = Streams(rt, size, float(app.config["AGENTS_CELERY_IDLE_CLOSE_SECONDS"]))
    widen_pool(rt, size)
    app.extensions[PROTOCOL] = API(
        rt,
        streams,
        keepalive_seconds=float(app.config["AGENTS_CELERY_KEEPALIVE_SECONDS"]),
        block_seconds=float(app.config["AGENTS_CELERY_BLOCK_SECONDS"]),
        authorize=authorize,
    )
    if user_id is not None:
        app.config["AGENTS_CELERY_USER_ID"] = user_id
    origins = app.config.get("AGENTS_CELERY_TRUSTED_ORIGINS", ()) if trusted_origins is None else trusted_origins
    app.config["AGENTS_CELERY_TRUSTED_ORIGINS"] = csrf.trusted(origins)
    if csrf_header is not None:
        app.config["AGENTS_CELERY_CSRF_HEADER"] = csrf_header
    if authorize is None and not rt.settings.api_key:
        log.warning(OPEN_WARNING)
    return rt


def close_app(app: Flask) -> None:
    """Close the Redis clients ``init_app`` gave ``app`` (its Runtime's and its stream client's)."""
    protocol = app.extensions.pop(PROTOCOL, None)
    if protocol is not None:
        protocol.streams.close()
    runtime = app.extensions.pop(EXTENSION, None)
    if runtime is not None:
        runtime.close()


def create_app(runtime: Runtime | None = None, settings: Settings | None = None) -> Flask:
    """A standalone Flask app serving the API at the root, with JSON answers for unknown routes too."""
    app = Flask("agents_celery")
    app.json.sort_keys = False  # type: ignore[attr-defined]
    if os.environ.get("AGENTS_CELERY_TRUSTED_ORIGINS"):  # CSRF: other sites whose pages may POST with a cookie
        app.config["AGENTS_CELERY_TRUSTED_ORIGINS"] = os.environ["AGENTS_CELERY_TRUSTED_ORIGINS"]
    for name in ("AGENTS_CELERY_KEEPALIVE_SECONDS", "AGENTS_CELERY_BLOCK_SECONDS", "AGENTS_CELERY_IDLE_CLOSE_SECONDS"):
        if os.environ.get(name):
            app.config[name] = float(os.environ[name])
    pool_size = os.environ.get("AGENTS_CELERY_API_REDIS_MAX_CONNECTIONS")
    if pool_size:
        app.config["AGENTS_CELERY_API_REDIS_MAX_CONNECTIONS"] = int(pool_size)
    rt = init_app(app, runtime, settings)
    app.before_request(authenticate_first)  # for every path, so a 404 or 405 is not answered to a stranger
    app.register_blueprint(make_blueprint())
    app.register_error_handler(404, http_error)
    app.register_error_handler(405, http_error)
    if tracing_requested():
        from .tracing import instrument

        instrument(rt.celery_app, app)  # a span per request, carried into the steps it enqueues
    return app


def tracing_requested() -> bool:
    """``AGENTS_CELERY_TRACING`` is set to a true value (OpenTelemetry must be installed and configured)."""
    return os.environ.get("AGENTS_CELERY_TRACING", "").lower() in ("1", "true", "yes", "on")

"""Celery wiring: ``configure(app)`` joins an existing Celery app as a guest; ``create_celery_app()`` makes one.

``configure`` changes nothing the host's own tasks see. The step task carries its own options (JSON
serializer, late ack, reject on a lost worker, no result), its route is added in front of the host's routes
(whatever form they take) and matches the step task only, and ``json`` is added to ``accept_content`` if the
host accepts only other formats (its own tasks keep their serializer). Worker-wide settings the step needs
(prefetch 1, soft shutdown) belong to the worker process: ``agents-celery worker`` applies
:func:`worker_settings` to the app it runs; a worker shared with the host's tasks should set them itself (see
the README's operations section).

Settings come from, highest first: the ``settings`` argument, the app's ``agents_celery`` setting (a dict,
e.g. ``app.conf.agents_celery = {"queue": "ai"}``, or ``CELERY_AGENTS_CELERY`` in Django settings loaded with
the ``CELERY`` namespace), the environment (``AGENTS_CELERY_*``), the defaults.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

from celery import Celery, signals
from celery.concurrency import get_implementation

from ..agent import Agent, load_agents
from ..engine.calls import shut_down
from ..errors import ConfigurationError
from ..greenlets import green
from ..hooks import Hooks, LoggingHooks
from ..settings import Settings, load_settings, settings_from
from . import a2apush, signatures, webhooks
from .extension import EXTENSION, AgentsCelery, extension
from .observability import register_metrics
from .publisher import OWN_TASK_OPTIONS, STEP_TASK

#: kombu Redis transport options for a consumer that must not go deaf (kombu 5.7's docs: "a consumer stuck on a
#: half-open connection recovers within about ``brpop_timeout + 2 * health_check_interval`` seconds", 51 s by its
#: default of 25): 7 s with ours. ``socket_timeout`` bounds a publish on a dead connection (kombu's default waits
#: forever; a sweeper's re-send would hang with it). Given to a Redis broker that is ours: our own app's
#: (:func:`create_celery_app`), or a host app's that had no broker (:func:`configure` sets it), under whatever
#: transport options it set itself. A host's own broker connection is the host's: set them there.
BROKER_HEALTH: dict[str, Any] = {"health_check_interval": 3, "socket_timeout": 10}
_REDIS_BROKERS = ("redis", "rediss", "redis+socket", "sentinel")
#: The Celery setting the host's configuration may hold agents-celery's settings in (a dict).
HOST_SETTING = "agents_celery"

__all__ = [
    "STEP_TASK",
    "AgentsCelery",
    "configure",
    "create_celery_app",
    "extension",
    "settings_for",
    "worker_settings",
]


def settings_for(app: Celery) -> Settings:
    """The settings of ``app``: its ``agents_celery`` setting, else Django's ``AGENTS_CELERY`` (in a Django
    project), over the environment, over the defaults."""
    host = app.conf.get(HOST_SETTING)
    if host is not None and not isinstance(host, Mapping):
        raise ConfigurationError(f"app.conf.{HOST_SETTING} must be a dict of settings, got {type(host).__name__}")
    if host is not None:
        return settings_from(host, f"app.conf.{HOST_SETTING}")
    django = _django_settings()
    if django is not None:
        return settings_from(django, "settings.AGENTS_CELERY")
    return settings_from(None, "")


def _django_settings() -> Mapping[str, Any] | None:
    """Django's ``AGENTS_CELERY`` dict, when this process runs a Django project (its settings module is set,
    and ``django.conf`` is loaded, as ``app.config_from_object("django.conf:settings")`` does)."""
    conf = sys.modules.get("django.conf")
    settings = getattr(conf, "settings", None)
    if settings is None or not (os.environ.get("DJANGO_SETTINGS_MODULE") or getattr(settings, "configured", False)):
        return None
    value = getattr(settings, "AGENTS_CELERY", None)
    if value is not None and not isinstance(value, Mapping):
        raise ConfigurationError(f"settings.AGENTS_CELERY must be a dict, got {type(value).__name__}")
    return value


def worker_settings(settings: Settings) -> dict[str, Any]:
    """Worker-wide Celery settings the steps rely on; ``agents-celery worker`` applies them to its app."""
    return {
        # Hold one message at a time: prefetched messages would wait behind a slow model call.
        "worker_prefetch_multiplier": 1,
        # On SIGTERM (a deploy), let running steps finish for this long, then hand them back.
        "worker_soft_shutdown_timeout": settings.soft_shutdown_seconds,
        "worker_enable_soft_shutdown_on_idle": True,
        "broker_connection_retry_on_startup": True,
    }


def _with_broker_health(app: Celery) -> None:
    """Add :data:`BROKER_HEALTH` to a Redis broker's transport options, under whatever the app set itself."""
    url = app.conf.broker_url
    first = (url[0] if isinstance(url, (list, tuple)) and url else str(url or "")).split(";")[0]
    if urlparse(first).scheme not in _REDIS_BROKERS:
        return
    options = dict(app.conf.broker_transport_options or {})
    missing = {key: value for key, value in BROKER_HEALTH.items() if key not in options}
    if missing:
        app.conf.broker_transport_options = {**options, **missing}


def _with_green_broker(app: Celery, concurrency: int) -> None:
    """A green pool's steps ack and publish through kombu's Redis connection pool, which holds 10 connections by
    default and then raises ``MaxConnectionsError``: give it one per step slot (unless the app set its own)."""
    url = app.conf.broker_url
    first = (url[0] if isinstance(url, (list, tuple)) and url else str(url or "")).split(";")[0]
    options = dict(app.conf.broker_transport_options or {})
    if urlparse(first).scheme in _REDIS_BROKERS and "max_connections" not in options:
        app.conf.broker_transport_options = {**options, "max_connections": max(10, concurrency + 10)}


class StepRouter:
    """Routes the step task (and nothing else) to the default agents queue; put in front of the host's routes."""

    def __init__(self, queue: str) -> None:
        self.queue = queue

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> dict[str, str] | None:
        return {"queue": self.queue} if name == STEP_TASK else None

    def __repr__(self) -> str:
        return f"StepRouter(queue={self.queue!r})"


def _with_step_route(routes: Any, router: StepRouter) -> tuple[Any, ...]:
    """The host's routes (None, a dict, a list or tuple of routers, a router function or its import path), with
    ``router`` in front; the host's own objects are kept as they are."""
    if routes is None:
        return (router,)
    if isinstance(routes, (list, tuple)):
        return (router, *(r for r in routes if not isinstance(r, StepRouter)))
    return (router, routes)


def configure(
    app: Celery,
    settings: Settings | None = None,
    *,
    agents: str | Sequence[str] | Mapping[str, Agent] | None = None,
    hooks: Sequence[Hooks] | None = None,
) -> AgentsCelery:
    """Join an existing Celery app as a guest; returns the extension (also ``app.agents_celery``).

    Args:
        app: The Celery app. Its broker is kept when it has one; otherwise the settings' broker is used.
        settings: Default: :func:`settings_for` (the app's ``agents_celery`` setting, then the environment).
        agents: Agents modules to serve (name or names), or agents by name. Defaults to ``AGENTS_CELERY_AGENTS``.
        hooks: Hooks run around every step of every agent (default: logging). They receive every call an
            agent's own hooks receive.

    Returns:
        The extension, also set as ``app.agents_celery``.

    Raises:
        ConfigurationError: the settings are invalid, ``app.conf.agents_celery`` or Django's ``AGENTS_CELERY`` is
            not a dict, or an agents module does not load.
    """
    settings = settings or settings_for(app)
    if agents is None:
        agents = settings.agents or {}
    registry = agents if isinstance(agents, Mapping) else load_agents(agents)
    if not app.conf.broker_url:  # the host had none: nothing of theirs changes
        app.conf.broker_url = settings.celery_broker_url
        if settings.broker_transport_options:
            app.conf.broker_transport_options = {
                **settings.broker_transport_options,
                **(app.conf.broker_transport_options or {}),
            }
        _with_broker_health(app)
    accepted = list(app.conf.accept_content or [])
    if "json" not in accepted and "application/json" not in accepted:
        app.conf.accept_content = [*accepted, "json"]  # step messages are JSON; the host's keep their format
    app.conf.task_routes = _with_step_route(app.conf.task_routes, StepRouter(settings.queue))
    ext = AgentsCelery(app, settings, registry, hooks if hooks is not None else [LoggingHooks()])
    setattr(app, EXTENSION, ext)
    _register_step(app, ext)
    webhooks.register(app, settings)
    a2apush.register(app, settings, lambda: ext.engine.store)
    signatures.register(app, settings)
    return ext


def _register_step(app: Celery, ext: AgentsCelery) -> None:
    # The step task carries its own options; commit_acks swaps in its own request class.
    request_class = {"Request": ext.step_messages.request_class} if ext.fast.enabled else {}

    @app.task(name=STEP_TASK, queue=ext.settings.queue, **OWN_TASK_OPTIONS, **request_class)  # type: ignore[untyped-decorator]
    def step(self: Any, run_id: str, step: int, agent: str | None = None) -> str:
        """One step of one run: a model turn or the tool calls of a turn."""
        return ext.execute(run_id, int(step), self.request)

    @signals.worker_init.connect(weak=False)  # type: ignore[untyped-decorator]
    def _init(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            pool = get_implementation(getattr(sender, "pool_cls", None) or ext.app.conf.worker_pool)
            ext.slots = int(getattr(sender, "concurrency", 0) or 0)  # before the engine makes its Redis pool
            if getattr(pool, "is_green", False):
                _with_green_broker(ext.app, ext.slots)
            ext.warm_up_models()  # in the main process, before a prefork pool forks its children

    @signals.worker_ready.connect(weak=False)  # type: ignore[untyped-decorator]
    def _ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            register_metrics()
            ext.on_worker_ready(getattr(sender, "pool", None))

    @signals.worker_shutting_down.connect(weak=False)  # type: ignore[untyped-decorator]
    def _shutting_down(sender: Any = None, how: str = "", **_: Any) -> None:
        # Steps waiting on a call get the soft-shutdown window to finish, then walk away from their calls
        # and give their steps back, so a tool that never returns cannot hold the worker's shutdown.
        delay = 0.0 if how == "Cold" else max(0.0, ext.settings.soft_shutdown_seconds - 1.0)
        _later(delay, shut_down)

    @signals.worker_shutdown.connect(weak=False)  # type: ignore[untyped-decorator]
    def _shutdown(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            ext.on_worker_shutdown()


def _later(delay: float, action: Any) -> None:
    """Call ``action`` after ``delay`` seconds without waiting here. On a gevent worker Celery sends
    ``worker_shutting_down`` from the hub, where starting a (green) ``threading.Timer`` blocks and gevent refuses
    (``BlockingSwitchOutError``): the hub schedules it instead (``gevent.spawn_later``)."""
    if green():
        import gevent

        gevent.spawn_later(delay, action)
        return
    timer = threading.Timer(delay, action)
    timer.daemon = True
    timer.start()


def create_celery_app(
    settings: Settings | None = None,
    *,
    agents: str | Sequence[str] | Mapping[str, Agent] | None = None,
    hooks: Sequence[Hooks] | None = None,
    main: str = "agents_celery",
) -> Celery:
    """A new Celery app of agents-celery's own: JSON only, the worker-wide settings applied, configured.

    Args:
        settings: Default: :func:`~agents_celery.settings.load_settings` (the environment).
        agents: Agents modules to serve (name or names), or agents by name, as :func:`configure` takes them.
        hooks: Hooks run around every step of every agent, as :func:`configure` takes them.
        main: The Celery app's main module name.

    Returns:
        The app, configured (:func:`configure`).

    Raises:
        ConfigurationError: the settings are invalid, or an agents module does not load.
    """
    settings = settings or load_settings()
    app = Celery(main, broker=settings.celery_broker_url)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        broker_transport_options=dict(settings.broker_transport_options),
        **worker_settings(settings),
    )
    _with_broker_health(app)
    configure(app, settings, agents=agents, hooks=hooks)
    return app

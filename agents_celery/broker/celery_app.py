"""Celery wiring: ``create_celery_app()`` for a new app, ``configure(app)`` for an existing one.

Durable defaults are set explicitly (each commented) and the one step task is registered under a stable
name, ``agents_celery.step``, with arguments ``(run_id, step)`` and the agent as a keyword, so Flower
shows each run's steps. Only ids and JSON cross the broker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from celery import Celery, signals
from celery.concurrency.solo import TaskPool as SoloPool
from celery.concurrency.thread import TaskPool as ThreadsPool

from ..agent import Agent, load_agents
from ..engine.engine import Ahead, Engine
from ..engine.sweeper import SweeperThread
from ..hooks import Hooks, LoggingHooks
from ..ids import pid
from ..settings import Settings, load_settings
from ..storage.connections import connect
from ..storage.store import Ack, RunStore
from .acks import StepRequest, claim_on_receipt, claimed_ahead, commit_acks
from .publisher import StepPublisher

log = logging.getLogger(__name__)

STEP_TASK = "agents_celery.step"
EXTENSION = "agents_celery"


def durable_defaults(settings: Settings) -> dict[str, Any]:
    """The Celery settings agents-celery relies on."""
    return {
        # Only JSON crosses the broker: ids and step numbers, never pickled objects.
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        # Ack after the step ran, so a worker killed mid-step leaves the message to be delivered again.
        "task_acks_late": True,
        # A pool child killed mid-step (OOM, kill -9) puts the message back at once instead of dropping it.
        "task_reject_on_worker_lost": True,
        # Hold one message at a time: prefetched messages would wait behind a slow model call.
        "worker_prefetch_multiplier": 1,
        # The Redis broker redelivers unacked messages only after this. The sweeper recovers crashed steps
        # in seconds, so this only bounds duplicate deliveries of very long steps; keep it long.
        "broker_transport_options": {"visibility_timeout": 3600, **settings.broker_transport_options},
        # On SIGTERM (a deploy), let running steps finish for this long, then hand them back.
        "worker_soft_shutdown_timeout": settings.soft_shutdown_seconds,
        "worker_enable_soft_shutdown_on_idle": True,
        # Step results live in our Redis keys; Celery's result backend is not used for steps.
        "task_ignore_result": True,
        "broker_connection_retry_on_startup": True,
        "task_routes": {STEP_TASK: {"queue": settings.queue}},
    }


class AgentsCelery:
    """What ``configure`` attaches to a Celery app (``app.extensions``-style, as ``app.agents_celery``)."""

    def __init__(self, app: Celery, settings: Settings, agents: Mapping[str, Agent], hooks: Sequence[Hooks]) -> None:
        self.app = app
        self.settings = settings
        self.agents = dict(agents)
        self.hooks = list(hooks)
        self._engine: Engine | None = None
        self._pid = 0
        self._lock = threading.Lock()
        self.sweeper: SweeperThread | None = None
        self.publisher = StepPublisher(app, STEP_TASK, settings.queue)

    def enqueue(self, run_id: str, step: int, agent_id: str) -> None:
        """Send the task for the step (by name: the sender needs no agent code)."""
        self.publisher.send(run_id, step, agent_id)

    def task_for(self, run_id: str, step: int, agent_id: str) -> tuple[str, str] | None:
        """The step's queue key and message, for the commit script to push when the broker is our Redis."""
        return self.publisher.task_for(run_id, step, agent_id, self.settings.redis_url)

    def ack_for(self, request: Any) -> Ack | None:
        """The delivered message of a step task, for its commit to ack, when the broker is our Redis."""
        tag = (getattr(request, "properties", None) or {}).get("delivery_tag")
        keys = self.publisher.ack_keys(self.settings.redis_url) if tag else None
        return Ack(keys[0], keys[1], str(tag)) if keys else None

    def claim_ahead(self, request: Any) -> Ahead | None:
        """Send the claim of a step message the consumer just received (its task reads the reply)."""
        args = request.args
        if len(args) < 2 or not isinstance(args[0], str):
            return None
        return self.engine.claim_ahead(args[0], int(args[1]))

    def backlog(self) -> int:
        """Messages waiting in the step queue (0 when the broker cannot tell: the sweeper then re-enqueues)."""
        try:
            with self.app.connection_for_write() as conn:
                declared = conn.default_channel.queue_declare(queue=self.settings.queue, passive=True)
                return int(declared.message_count)
        except Exception as exc:  # a queue not declared yet, a broker blip: fail open
            log.debug("sweeper: queue length unknown: %s", exc)
            return 0

    @property
    def engine(self) -> Engine:
        """The engine of this process (built after fork, so each pool child has its own Redis pool)."""
        with self._lock:
            if self._engine is None or self._pid != pid():
                client = connect(self.settings.redis_url, health_check_interval=30)
                store = RunStore(client, self.settings, own_connections=True)
                self._engine = Engine(
                    store, self.agents, self.enqueue, self.hooks, task_for=self.task_for, on_ack=commit_acks
                )
                self._pid = pid()
            return self._engine

    def on_worker_ready(self) -> None:
        """Publish manifests and start the sweeper (in the worker's main process)."""
        store = self.engine.store
        store.publish_manifests([a.manifest() for a in self.agents.values()])
        self.sweeper = SweeperThread(store, self.enqueue, self.backlog)
        self.sweeper.start()
        log.info("agents-celery worker ready: agents %s, queue %r", list(self.agents), self.settings.queue)

    def on_worker_shutdown(self) -> None:
        if self.sweeper is not None:
            self.sweeper.stop()


def configure(
    app: Celery,
    settings: Settings | None = None,
    *,
    agents: str | Sequence[str] | Mapping[str, Agent] | None = None,
    hooks: Sequence[Hooks] | None = None,
) -> AgentsCelery:
    """Configure an existing Celery app for agents-celery; returns the extension (also ``app.agents_celery``).

    Args:
        app: The Celery app. Its broker is kept when it has one; otherwise the settings' broker is used.
        settings: Defaults to :func:`~agents_celery.settings.load_settings` (the environment).
        agents: Agents modules to serve (name or names), or agents by name. Defaults to ``AGENTS_CELERY_AGENTS``.
        hooks: Hooks run around every step of every agent (default: logging).
    """
    settings = settings or load_settings()
    if agents is None:
        agents = settings.agents or {}
    registry = agents if isinstance(agents, Mapping) else load_agents(agents)
    if not app.conf.broker_url:
        app.conf.broker_url = settings.celery_broker_url
    defaults = durable_defaults(settings)
    # Keep transport options the app already has (a Sentinel master name, its own visibility timeout).
    existing = dict(app.conf.broker_transport_options or {})
    defaults["broker_transport_options"] = {**defaults["broker_transport_options"], **existing}
    app.conf.update(defaults)
    ext = AgentsCelery(app, settings, registry, hooks if hooks is not None else [LoggingHooks()])
    setattr(app, EXTENSION, ext)

    @app.task(  # type: ignore[untyped-decorator]
        name=STEP_TASK,
        shared=False,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        Request=StepRequest,
    )
    def step(self: Any, run_id: str, step: int, agent: str | None = None) -> str:
        """One step of one run: a model turn or the tool calls of a turn."""
        ahead = claimed_ahead((getattr(self.request, "properties", None) or {}).get("delivery_tag"))
        return ext.engine.execute(run_id, int(step), ack=ext.ack_for(self.request), ahead=ahead)

    @signals.worker_ready.connect(weak=False)  # type: ignore[untyped-decorator]
    def _ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            ext.on_worker_ready()
            if isinstance(getattr(sender, "pool", None), (ThreadsPool, SoloPool)):
                claim_on_receipt(ext.claim_ahead)  # the consumer and the tasks share the process

    @signals.worker_shutdown.connect(weak=False)  # type: ignore[untyped-decorator]
    def _shutdown(sender: Any = None, **_: Any) -> None:
        ext.on_worker_shutdown()

    return ext


def create_celery_app(
    settings: Settings | None = None,
    *,
    agents: str | Sequence[str] | Mapping[str, Agent] | None = None,
    hooks: Sequence[Hooks] | None = None,
    main: str = "agents_celery",
) -> Celery:
    """A new Celery app configured for agents-celery (broker from ``CELERY_BROKER_URL`` or the Redis URL)."""
    settings = settings or load_settings()
    app = Celery(main, broker=settings.celery_broker_url)
    configure(app, settings, agents=agents, hooks=hooks)
    return app


def extension(app: Celery) -> AgentsCelery:
    """The AgentsCelery attached by :func:`configure`."""
    ext = getattr(app, EXTENSION, None)
    if not isinstance(ext, AgentsCelery):
        raise RuntimeError("this Celery app is not configured for agents-celery; call configure(app) first")
    return ext

"""Celery wiring: ``create_celery_app()`` for a new app, ``configure(app)`` for an existing one.

Durable defaults are set explicitly (each commented) and the one step task is registered under a stable
name, ``agents_celery.step``, with arguments ``(run_id, step)`` and the agent as a keyword, so Flower
shows each run's steps. Only ids and JSON cross the broker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from celery import Celery, signals
from celery.concurrency.solo import TaskPool as SoloPool
from celery.concurrency.thread import TaskPool as ThreadsPool

from ..agent import Agent, load_agents
from ..engine.engine import PLAIN, Delivery, Engine, FreshClaim, first_started
from ..engine.sweeper import SweeperThread
from ..hooks import Hooks, LoggingHooks
from ..ids import pid
from ..settings import Settings, load_settings
from ..storage.connections import connect
from ..storage.leases import new_token
from ..storage.store import Ack, Claim, RunStore, SentClaim
from .fastpaths import FastPaths, StepRequest, claim_on_receipt, claimed_ahead, commit_acks
from .publisher import STEP_TASK, StepPublisher

log = logging.getLogger(__name__)

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
        #: Which fast paths this process uses (:mod:`agents_celery.broker.fastpaths`).
        self.fast = FastPaths.decide(settings.fast_paths)
        self.publisher = StepPublisher(app, settings.queue, self.fast)
        self._paths_known = False

    def enqueue(self, run_id: str, step: int, agent_id: str) -> None:
        """Send the task for the step (by name: the sender needs no agent code)."""
        self.publisher.send(run_id, step, agent_id)

    def check_paths(self, pool: Any = None) -> FastPaths:
        """Turn off the fast paths this app's broker does not allow (once per process; ``pool``: the worker's)."""
        fast, direct = self.fast, self.publisher.direct
        if not self._paths_known and fast.enabled:
            self._paths_known = True
            route = direct.route(self.settings.queue) if direct is not None else None
            if route is None:
                why = "the broker is not a plain redis:// URL, or a publish signal, option or setting changes messages"
                fast.off("direct_publish", why)
            if route is None or route[0] != self.settings.redis_url:
                fast.off("commit_pushes_next", "the broker is not the Redis that holds run state")
            if direct is None or direct.ack_keys(self.settings.redis_url) is None:
                fast.off("commit_acks", "the broker is not the Redis that holds run state")
        if pool is not None and not isinstance(pool, (ThreadsPool, SoloPool)):
            fast.off("claim_on_receipt", f"the {type(pool).__module__.rsplit('.', 1)[-1]} pool runs tasks elsewhere")
        elif not fast.on("commit_acks"):
            fast.off("claim_on_receipt", "it rides the commit_acks request")
        return fast

    def delivery(self, request: Any) -> Delivery:
        """What the broker adds to the attempt of a delivered step message (the plain path: nothing)."""
        fast = self.check_paths()
        if not fast.enabled:
            return PLAIN
        tag = (getattr(request, "properties", None) or {}).get("delivery_tag")
        ahead = claimed_ahead(tag) if fast.on("claim_on_receipt") else None
        next_task = self._next_task if fast.on("commit_pushes_next") else None
        ack = None
        if tag and fast.on("commit_acks"):
            keys = self.publisher.direct.ack_keys(self.settings.redis_url) if self.publisher.direct else None
            ack = Ack(keys[0], keys[1], str(tag)) if keys else None
        return FastDelivery(self.engine.store, ahead, next_task, ack)

    def _next_task(self, run_id: str, step: int, agent_id: str) -> tuple[str, str] | None:
        """The step queue's key and the next step's message, for the commit script to push."""
        direct = self.publisher.direct
        route = direct.route(self.settings.queue) if direct is not None else None
        if direct is None or route is None or route[0] != self.settings.redis_url:
            return None
        return route[1], direct.envelope(self.settings.queue, [run_id, step], {"agent": agent_id})

    def claim_ahead(self, request: Any) -> Ahead | None:
        """Send the claim of a step message the consumer just received (its task reads the reply)."""
        args = request.args
        if len(args) < 2 or not isinstance(args[0], str):
            return None
        return send_claim(self.engine, args[0], int(args[1]))

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
                fast = self.fast
                client = connect(self.settings.redis_url, health_check_interval=30)
                store = RunStore(
                    client,
                    self.settings,
                    own_connections=True,
                    send_ahead=fast.send_ahead,
                    idle_check=fast.idle_check,
                )
                self._engine = Engine(store, self.agents, self.enqueue, self.hooks)
                self._pid = pid()
            return self._engine

    def on_worker_ready(self, pool: Any = None) -> None:
        """Publish manifests and start the sweeper (in the worker's main process)."""
        store = self.engine.store
        store.publish_manifests([a.manifest() for a in self.agents.values()])
        self.sweeper = SweeperThread(store, self.enqueue, self.backlog)
        self.sweeper.start()
        fast = self.check_paths(pool)
        if fast.on("claim_on_receipt"):
            claim_on_receipt(self.claim_ahead)  # the consumer and the tasks share the process
        log.info("agents-celery worker ready: agents %s, queue %r", list(self.agents), self.settings.queue)
        log.info("agents-celery fast paths: %s", fast.describe())

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

    # The step task carries its own options; commit_acks swaps in its own request class.
    request_class = {"Request": StepRequest} if ext.fast.enabled else {}

    @app.task(  # type: ignore[untyped-decorator]
        name=STEP_TASK,
        shared=False,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        **request_class,
    )
    def step(self: Any, run_id: str, step: int, agent: str | None = None) -> str:
        """One step of one run: a model turn or the tool calls of a turn."""
        return ext.engine.execute(run_id, int(step), ext.delivery(self.request))

    @signals.worker_ready.connect(weak=False)  # type: ignore[untyped-decorator]
    def _ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            ext.on_worker_ready(getattr(sender, "pool", None))

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


# -- the engine's side of one delivered message (fast paths) -----------------------------------------------


@dataclass(frozen=True)
class Ahead:
    """A claim sent as its message arrived, before its attempt started."""

    run_id: str
    step: int
    token: str
    claim: SentClaim

    def close(self) -> None:
        """Its attempt will not run: read the reply anyway (the lease it took expires; the sweeper retries)."""
        self.claim.sent.close()


def send_claim(engine: Engine, run_id: str, step: int) -> Ahead:
    """Send the claim of an attempt at ``step`` now; the attempt reads its reply (:meth:`FastDelivery.claim`)."""
    token = new_token()
    return Ahead(run_id, step, token, engine.store.claim_sent(run_id, step, token, first_started(step)))


class FastDelivery(Delivery):
    """One delivered step message with the fast paths that apply to it: its claim sent on receipt, the next
    step's message pushed by the commit, its own message acked by the commit."""

    def __init__(self, store: RunStore, ahead: Ahead | None, next_task: Any, ack: Ack | None) -> None:
        self._store, self._ahead, self._next_task, self._ack = store, ahead, next_task, ack

    def claim(self, run_id: str, step: int, fresh: FreshClaim) -> tuple[str, Claim]:
        ahead = self._ahead
        if ahead is not None and (ahead.run_id, ahead.step) == (run_id, step):
            # BUSY when its reply was lost (it may have taken the lease: the sweeper retries once it expires)
            return ahead.token, self._store.claim_read(ahead.claim)
        if ahead is not None:
            ahead.close()
        return fresh()

    def next_task(self, run_id: str, step: int, agent_id: str) -> tuple[str, str] | None:
        return self._next_task(run_id, step, agent_id) if self._next_task is not None else None

    def ack(self) -> Ack | None:
        return self._ack

    def committing(self, ack: Ack) -> None:
        commit_acks(ack.tag, False)

    def committed(self, ack: Ack) -> None:
        commit_acks(ack.tag, True)

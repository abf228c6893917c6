"""What ``configure`` attaches to a Celery app: the agents it serves, the engine of this process, the sweeper,
the publisher, and which fast paths apply (``app.agents_celery``).

A step is sent to its agent's queue (``Agent(queue=...)``, else ``AGENTS_CELERY_QUEUE``), with the ids that
make Flower show a run's steps as one chain: the root is the run's first step task, the parent the task of the
step before (both kept in the run's record, so a continue from the API or a re-send by the sweeper links too).

A front end in the same process (the Django app, Flask's ``init_app``) sends its steps through the app
``configure`` joined, so through the host's broker, as the worker does: :func:`host_app` finds it. The apps
joined are kept weakly in :data:`JOINED` (newest last), the way Celery keeps its own apps.

Before a step is claimed, a worker process refuses it while too many calls it walked away from still hold their
threads (``max_abandoned_threads``, :mod:`agents_celery.engine.calls`): the step is handed back unclaimed (the
sweeper sends it again, to any worker) and the refusal is logged and counted. A step of a run its key prefix does
not hold is logged as a warning: another deployment's worker sharing its queue would otherwise mis-serve it
silently.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from celery import Celery
from celery.concurrency.solo import TaskPool as SoloPool
from celery.concurrency.thread import TaskPool as ThreadsPool

from ..agent import Agent
from ..engine.attempt import Carried, Delivery, FreshClaim, first_started
from ..engine.calls import ABANDONED
from ..engine.engine import Engine
from ..engine.sweeper import SweeperThread
from ..hooks import Hooks
from ..ids import pid
from ..settings import Settings
from ..storage.connections import connect, worker_pool
from ..storage.leases import new_token
from ..storage.store import Ack, Claim, RunStore, SentClaim
from .fastpaths import FastPaths, StepMessages
from .publisher import StepPublisher

log = logging.getLogger(__name__)

#: The attribute of a Celery app ``configure`` puts its :class:`AgentsCelery` in (``app.agents_celery``).
EXTENSION = "agents_celery"
#: The Celery apps :func:`configure <agents_celery.configure>` joined in this process (weakly), newest last.
JOINED: list[weakref.ref[Celery]] = []


def _joined(app: Celery) -> None:
    JOINED[:] = [r for r in JOINED if r() is not None and r() is not app] + [weakref.ref(app)]


def host_app(settings: Settings, candidates: Iterable[Any] = ()) -> Celery | None:
    """The host's Celery app a front end with ``settings`` sends its steps with: the first of ``candidates``
    (e.g. Flask's ``app.extensions["celery"]``), then of the apps joined in this process (newest first), that
    ``configure`` joined for the same Redis and key prefix. None when agents-celery's own broker is set
    (``CELERY_BROKER_URL`` in the environment or ``broker_url`` in its settings: that one wins) or none fits."""
    if settings.broker_url:
        return None
    joined = [r() for r in reversed(JOINED)]
    for app in [*candidates, *joined]:
        ext = getattr(app, EXTENSION, None)
        if isinstance(app, Celery) and isinstance(ext, AgentsCelery) and ext.app is app:
            mine = ext.settings
            if (mine.redis_url, mine.key_prefix) == (settings.redis_url, settings.key_prefix):
                return app
    return None


class AgentsCelery:
    """The agents-celery side of one Celery app (see the module docs)."""

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
        #: The step messages this process's consumer received and has not settled, shared with the steps'
        #: threads (``commit_acks``, ``claim_on_receipt``); the step task's request class holds them too.
        self.step_messages = StepMessages()
        self._paths_known = False
        #: How many steps this worker process runs at once (its pool's concurrency, from ``worker_init``; 0 until
        #: then): the engine's Redis pool has room for them (:func:`~agents_celery.storage.connections.worker_pool`).
        self.slots = 0
        _joined(app)

    def warm_up_models(self) -> None:
        """Have each agent's model load what its first turn would (a model's optional ``warm_up``, e.g.
        :meth:`OpenAIChat.warm_up <agents_celery.models.OpenAIChat.warm_up>`); one that fails is logged and left
        to load on its first turn."""
        seen: set[int] = set()
        for agent in self.agents.values():
            model = getattr(agent, "model", None)
            warm_up = getattr(model, "warm_up", None)
            if not callable(warm_up) or id(model) in seen:
                continue
            seen.add(id(model))
            try:
                warm_up()
            except Exception as exc:
                log.warning("agents-celery: warming up the model of %r failed: %s", getattr(agent, "name", "?"), exc)

    def queue_of(self, agent_id: str) -> str:
        """The queue an agent's steps go to."""
        agent = self.agents.get(agent_id)
        return (agent.queue if agent is not None else None) or self.settings.queue

    @property
    def queues(self) -> list[str]:
        """The queues of the agents this app serves (what its workers consume unless told otherwise)."""
        return sorted({self.queue_of(name) for name in self.agents} or {self.settings.queue})

    def enqueue(self, run_id: str, step: int, agent_id: str) -> None:
        """Send the task of the run's next step, from the step before (Celery links the two)."""
        self.publisher.send(run_id, step, agent_id, self.queue_of(agent_id))

    def resend(self, run_id: str, step: int, agent_id: str, queue: str, root_id: str, parent_id: str) -> None:
        """Send a step again (the sweeper), to the queue and in the chain the run's record names."""
        self.publisher.send(run_id, step, agent_id, queue, root_id=root_id or None, parent_id=parent_id or None)

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

    def execute(self, run_id: str, step: int, request: Any) -> str:
        """The step task's body: one attempt of the step, unless this process must refuse it (module docs)."""
        delivery = self.delivery(request)
        claimed = isinstance(delivery, FastDelivery) and delivery.claimed
        if not claimed and ABANDONED.refuse(self.settings.max_abandoned_threads):
            counts = ABANDONED.snapshot()
            log.warning(
                "run=%s step=%d: refused, %d abandoned calls still hold threads here (max_abandoned_threads=%d); "
                "the step is handed back (%d refused so far)",
                run_id,
                step,
                counts["abandoned_running"],
                self.settings.max_abandoned_threads,
                counts["refused_steps"],
            )
            self.engine.store.delivered(run_id)  # consumed, not claimed: the sweeper may send it again
            return "refused"
        outcome = self.engine.execute(run_id, step, delivery)
        if outcome == "notfound":
            log.warning(
                "run=%s step=%d: no such run under key prefix %r: another deployment's step on queue %r? Give each "
                "deployment its own queue (AGENTS_CELERY_QUEUE; unset, it follows the key prefix)",
                run_id,
                step,
                self.settings.key_prefix,
                (getattr(request, "delivery_info", None) or {}).get("routing_key"),
            )
        return outcome

    def delivery(self, request: Any) -> Delivery:
        """What the broker adds to the attempt of a delivered step message (the plain path: its task id)."""
        fast = self.check_paths()
        task_id = str(getattr(request, "id", "") or "")
        if not fast.enabled:
            return Delivery(task_id)
        tag = (getattr(request, "properties", None) or {}).get("delivery_tag")
        ahead = self.step_messages.claimed_ahead(tag) if fast.on("claim_on_receipt") else None
        next_task = self._next_task if fast.on("commit_pushes_next") else None
        ack = None
        if tag and fast.on("commit_acks"):
            keys = self.publisher.direct.ack_keys(self.settings.redis_url) if self.publisher.direct else None
            ack = Ack(keys[0], keys[1], str(tag)) if keys else None
        return FastDelivery(task_id, self.engine.store, ahead, next_task, ack, self.step_messages)

    def _next_task(self, run_id: str, step: int, agent_id: str) -> tuple[str, str] | None:
        """The step queue's key and the next step's message, for the commit script to push."""
        direct, queue = self.publisher.direct, self.queue_of(agent_id)
        route = direct.route(queue) if direct is not None else None
        if direct is None or route is None or route[0] != self.settings.redis_url:
            return None
        return route[1], direct.envelope(queue, [run_id, step], {"agent": agent_id})

    def claim_ahead(self, request: Any) -> Ahead | None:
        """Send the claim of a step message the consumer just received (its task reads the reply)."""
        args = request.args
        if len(args) < 2 or not isinstance(args[0], str):
            return None
        if ABANDONED.running >= self.settings.max_abandoned_threads:
            return None  # its task refuses it unclaimed (execute)
        return send_claim(self.engine, args[0], int(args[1]))

    def backlog(self, queue: str) -> int:
        """Messages waiting in ``queue`` (0 when the broker cannot tell: the sweeper then re-sends)."""
        try:
            with self.app.connection_for_write() as conn:
                declared = conn.default_channel.queue_declare(queue=queue, passive=True)
                return int(declared.message_count)
        except Exception as exc:  # a queue not declared yet, a broker blip: fail open
            log.debug("sweeper: length of queue %r unknown: %s", queue, exc)
            return 0

    @property
    def engine(self) -> Engine:
        """The engine of this process (built after fork, so each pool child has its own Redis pool)."""
        with self._lock:
            if self._engine is None or self._pid != pid():
                fast = self.fast
                client = connect(self.settings.redis_url, health_check_interval=30, **worker_pool(self.slots))
                store = RunStore(
                    client,
                    self.settings,
                    own_connections=True,
                    send_ahead=fast.send_ahead,
                    idle_check=fast.idle_check,
                )
                self._engine = Engine(store, self.agents, self.enqueue, self.hooks, self.publisher.notify)
                self._engine.blips = (*self._engine.blips, *broker_blips(self.app))
                self._pid = pid()
            return self._engine

    def on_worker_ready(self, pool: Any = None) -> None:
        """Publish manifests and start the sweeper (in the worker's main process; the worker_ready handler
        :func:`configure <agents_celery.configure>` connects registers the metrics command first)."""
        store = self.engine.store
        store.agents.publish([a.manifest() for a in self.agents.values()])
        self.sweeper = SweeperThread(store, self.resend, self.backlog, self.publisher.notify)
        self.sweeper.start()
        fast = self.check_paths(pool)
        if fast.on("claim_on_receipt"):
            self.step_messages.claim_on_receipt(self.claim_ahead)  # the consumer and the tasks share the process

        log.info("agents-celery worker ready: agents %s, queues %s", list(self.agents), self.queues)
        log.info("agents-celery fast paths: %s", fast.describe())

    def on_worker_shutdown(self) -> None:
        if self.sweeper is not None:
            self.sweeper.stop()


def extension(app: Celery) -> AgentsCelery:
    """The AgentsCelery attached by :func:`configure <agents_celery.configure>`."""
    ext = getattr(app, EXTENSION, None)
    if not isinstance(ext, AgentsCelery):
        raise RuntimeError("this Celery app is not configured for agents-celery; call configure(app) first")
    return ext


def broker_blips(app: Celery) -> tuple[type[BaseException], ...]:
    """The broker's connection errors (kombu's public ``connection_errors`` and ``OperationalError``): a step
    that loses the broker is given back like one losing Redis. Builtins (``OSError``) are left out: they are
    what a bug raises too."""
    from kombu.exceptions import OperationalError

    with app.connection_for_write() as conn:  # not connected: only its transport's error classes are read
        errors = [e for e in conn.connection_errors if e.__module__ != "builtins"]
    return (OperationalError, *errors)


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
    step's message pushed by the commit, its own message acked by the commit (``messages``: the app's, which
    hold this message's request)."""

    def __init__(
        self,
        task_id: str,
        store: RunStore,
        ahead: Ahead | None,
        next_task: Any,
        ack: Ack | None,
        messages: StepMessages,
    ) -> None:
        super().__init__(task_id)
        self._store, self._ahead, self._next_task, self._ack = store, ahead, next_task, ack
        self._messages = messages

    def claim(self, run_id: str, step: int, fresh: FreshClaim) -> tuple[str, Claim]:
        ahead = self._ahead
        if ahead is not None and (ahead.run_id, ahead.step) == (run_id, step):
            # BUSY when its reply was lost (it may have taken the lease: the sweeper retries once it expires)
            return ahead.token, self._store.claim_read(ahead.claim)
        if ahead is not None:
            ahead.close()
        return fresh()

    @property
    def claimed(self) -> bool:
        """Its claim was sent on receipt (it took an attempt already: the step is not refused then)."""
        return self._ahead is not None

    @contextmanager
    def committing(self, run_id: str, next_step: int, agent_id: str, push_next: bool) -> Iterator[Carried]:
        """The commit pushes the next step's message (when the run goes on at once) and acks this one: its
        prefetch slot is freed as the commit is sent, and the ack is marked done once it succeeded."""
        task = self._next_task(run_id, next_step, agent_id) if push_next and self._next_task is not None else None
        ack = self._ack
        if ack is not None:
            self._messages.commit_acks(ack.tag, False)
        yield Carried(task, ack, self.task_id)
        if ack is not None:
            self._messages.commit_acks(ack.tag, True)

"""The sweeper: gets runs moving again after a crash, in seconds rather than the broker's visibility timeout.

A run is in the live index (``<p>:live``, run id -> deadline) from its creation (or its continue) until it
pauses or ends; steps do not touch the index. A delayed run (``start_at`` in its record) waits there with its
start time as the deadline: the sweeper sends its first step then, whatever the queue's backlog.

The sweeper looks at runs past their deadline: if the lease
is held the step is still working (look again when the lease would expire); if the run paused or ended it
leaves the index; if its last commit is younger than the enqueue grace its next step is probably waiting
in the queue (look again when the grace is over); otherwise the lease expired (the worker died or hung) or
the next step was never enqueued (the worker died between commit and enqueue), and the sweeper enqueues
the run's current step again. A run whose tool step waits for child runs (``awaiting`` in its record) is
sent again only once one of them paused or ended (the child's end wakes it; this covers a child's worker
dying between its last commit and that wake). Duplicate deliveries are harmless: the claim script lets one
attempt in and the commit compares the step number. They are kept few all the same: a step sent again is
not sent once more while that copy is still unclaimed (no claim changed the step's ``attempt`` since), for
:data:`RESEND_WINDOW_SECONDS` (at least six enqueue graces); a consumer deaf for a while (a broker connection
gone half-open) finds one copy of the step when it hears again, not one per sweep.

It runs in a thread of every worker (started when the worker is ready). A lock lets one sweep run per
interval across all workers, so several workers do not do the work twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from ..storage.store import RunStore
from .lifecycle import Lifecycle, Notify, by_record
from .waiting import start_next

log = logging.getLogger(__name__)

#: Runs looked at per sweep.
BATCH = 200
#: How long a step sent again and not claimed since holds back another copy (at least six enqueue graces). Past
#: it the copy is presumed lost (a broker that lost its queue) and the step is sent again.
RESEND_WINDOW_SECONDS = 30.0

#: Sends a step again: ``resend(run_id, step, agent_id, queue, root_id, parent_id)``, to the run's own queue and
#: in its chain of tasks (the ids the run's record keeps; '' when it has none).
Resend = Callable[[str, int, str, str, str, str], None]
#: Messages waiting in a queue.
Backlog = Callable[[str], int]


def _due(store: RunStore, now_ms: int) -> list[str]:
    """Runs past their deadline, the earliest first, from every bucket of the live index (one bucket but on a
    Redis Cluster); at most :data:`BATCH`."""
    buckets = store.keys.buckets_of(store.keys.live)
    with store.redis.pipeline(transaction=False) as pipe:
        for key in buckets:
            pipe.zrangebyscore(key, 0, now_ms, start=0, num=BATCH, withscores=True)
        found: list[Any] = pipe.execute()
    rows = sorted((score, member.decode()) for batch in found for member, score in batch)
    return [run_id for _, run_id in rows[:BATCH]]


def sweep(
    store: RunStore,
    resend: Resend,
    now_ms: int | None = None,
    backlog: Backlog | None = None,
    notify: Notify | None = None,
) -> list[str]:
    """One pass; returns the run ids re-enqueued. Skips the pass when another sweeper holds the lock.

    ``backlog`` (a queue's length) keeps a run whose next step was never picked up from being sent again while
    its queue still holds messages: its step is most likely waiting there (behind others, or for a worker
    that consumes that queue to start), and a duplicate would only add to the pile. A run whose attempt died
    (lease expired) is sent again whatever the backlog: its message sits unacknowledged, not in the queue.
    """
    s = store.settings
    keys = store.keys
    interval_ms = max(int(s.sweep_interval_seconds * 1000) - 50, 50)
    if not store.redis.set(keys.sweeper, "1", nx=True, px=interval_ms):
        return []
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    due = _due(store, now_ms)
    grace_ms = int(s.enqueue_grace_seconds * 1000)
    requeued: list[str] = []
    backed_up = _Backlogs(backlog)

    for run_id in due:
        k = keys.run(run_id)
        with store.redis.pipeline(transaction=False) as pipe:
            fields = (
                "log",
                "step",
                "agent_id",
                "committed_ms",
                "attempt",
                "queue",
                "root_task",
                "last_task",
                "start_at",
                "waiting",
                "session_id",
                "awaiting",
            )
            pipe.hmget(k.run, *fields)
            pipe.pttl(k.lease)
            pipe.get(k.sent)
            row, lease_ms, sent = pipe.execute()
        log_status, step, agent_id, committed, attempt, queue, root, parent, start_at, waiting, session, awaiting = row
        sent_now = f"{int(step or 0)}:{int(attempt or 0)}"
        unclaimed = sent is not None and sent.decode() == sent_now
        queue_name = queue.decode() if queue else s.queue
        waited_ms = now_ms - int(committed or 0)
        if log_status is None:
            store.unwatch(run_id)
        elif log_status != b"live":  # paused or ended, and its worker died before saying so to the indexes
            _settle(store, resend, run_id, int(step), notify)
        elif start_at is not None:  # a delayed run: its first step goes now, or later
            if _start_delayed(store, resend, run_id, int(start_at), now_ms, agent_id, queue_name, root):
                requeued.append(run_id)
        elif waiting is not None:  # waiting for its session: started if the session is free
            _wake(store, resend, run_id, session.decode(), agent_id.decode(), queue_name, (root or b"").decode())
        elif lease_ms > 0:  # a step holds it: look again right after it would expire, not a full TTL later
            store.watch(run_id, lease_ms / 1000 + 0.05)
        elif waited_ms < grace_ms:  # committed just now: its next step is probably queued behind others
            store.watch(run_id, (grace_ms - waited_ms) / 1000 + 0.05)
        elif awaiting is not None and int(attempt or 0) == 0 and not store.any_settled(awaiting.decode().split(",")):
            store.watch(run_id, s.enqueue_grace_seconds)  # its children are working: they wake it when they end
        elif unclaimed or (int(attempt or 0) == 0 and backed_up(queue_name)):
            # the copy sent last is not claimed yet, or the step was never picked up and its queue is not empty
            store.watch(run_id, s.enqueue_grace_seconds)
        else:
            store.watch(run_id, s.enqueue_grace_seconds)
            ids = [(v or b"").decode() for v in (root, parent)]
            resend(run_id, int(step), agent_id.decode(), queue_name, *ids)
            window = max(RESEND_WINDOW_SECONDS, 6 * s.enqueue_grace_seconds)
            store.redis.set(k.sent, sent_now, px=int(window * 1000))
            requeued.append(run_id)
            log.warning(
                "run=%s step=%s: lease expired or step never enqueued; sent again to %r", run_id, int(step), queue_name
            )
    store.index.expire_due(now_ms)
    return requeued


class _Backlogs:
    """Whether a queue holds messages, asked once per pass and only if needed."""

    def __init__(self, backlog: Backlog | None) -> None:
        self.backlog = backlog
        self.waiting: dict[str, int] = {}

    def __call__(self, queue: str) -> bool:
        if self.backlog is None:
            return False
        if queue not in self.waiting:
            self.waiting[queue] = self.backlog(queue)
        return self.waiting[queue] > 0


def _start_delayed(
    store: RunStore, resend: Resend, run_id: str, start_at: int, now_ms: int, agent_id: bytes, queue: str, root: Any
) -> bool:
    """Send a delayed run's first step if its time has come (else look again then); whether it was sent."""
    if start_at > now_ms:
        store.watch(run_id, (start_at - now_ms) / 1000)
        return False
    store.started_delayed(run_id, now_ms)
    store.watch(run_id, store.settings.enqueue_grace_seconds)
    resend(run_id, 0, agent_id.decode(), queue, (root or b"").decode(), "")
    return True


def _wake(store: RunStore, resend: Resend, run_id: str, session_id: str, agent_id: str, queue: str, root: str) -> None:
    """A run waiting for its session: finish its start if it has the session (its starter died half-way), or
    start the first in line if the session is free; otherwise look again later."""
    if store.sessions.active(session_id) == run_id:
        store.started_waiting(run_id)
        resend(run_id, 0, agent_id, queue, root, "")
    else:
        start_next(store, lambda rid, agent, q: resend(rid, 0, agent, q, "", ""), session_id)
    store.watch(run_id, store.settings.enqueue_grace_seconds)


def _settle(store: RunStore, resend: Resend, run_id: str, step: int, notify: Notify | None) -> None:
    """A paused or ended run its worker did not follow through (it died between the commit and that): what the
    worker would have done (:meth:`Lifecycle.settled`: webhook again, at least once; indexes; for an end the
    session, the next run in its line and the children; the parent woken)."""

    def first(rid: str, agent_id: str, queue: str) -> None:
        resend(rid, 0, agent_id, queue, "", "")

    Lifecycle(store, by_record(store, resend), notify, first).follow_through(store.load(run_id)[0], step)


class SweeperThread(threading.Thread):
    """Calls :func:`sweep` every ``sweep_interval_seconds`` until stopped."""

    def __init__(
        self,
        store: RunStore,
        resend: Resend,
        backlog: Backlog | None = None,
        notify: Notify | None = None,
    ) -> None:
        super().__init__(name="agents-celery-sweeper", daemon=True)
        self.store, self.resend, self.backlog, self.notify = store, resend, backlog, notify
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.store.settings.sweep_interval_seconds):
            try:
                sweep(self.store, self.resend, backlog=self.backlog, notify=self.notify)
            except redis.RedisError as exc:
                log.warning("sweeper: Redis error, will retry: %s", exc)
            except Exception:
                log.exception("sweeper: unexpected error")

    def stop(self) -> None:
        self.stopped.set()

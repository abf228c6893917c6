"""The sweeper: gets runs moving again after a crash, in seconds rather than the broker's visibility timeout.

A run is in the live index (``<p>:live``, run id -> deadline) from its creation (or its continue) until it
pauses or ends; steps do not touch the index. The sweeper looks at runs past their deadline: if the lease
is held the step is still working (look again when the lease would expire); if the run paused or ended it
leaves the index; if its last commit is younger than the enqueue grace its next step is probably waiting
in the queue (look again when the grace is over); otherwise the lease expired (the worker died or hung) or
the next step was never enqueued (the worker died between commit and enqueue), and the sweeper enqueues
the run's current step again. Duplicate deliveries are harmless: the claim script lets one attempt in and the commit
compares the step number.

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
from .engine import Enqueue

log = logging.getLogger(__name__)

#: Runs looked at per sweep.
BATCH = 200


def sweep(
    store: RunStore, enqueue: Enqueue, now_ms: int | None = None, backlog: Callable[[], int] | None = None
) -> list[str]:
    """One pass; returns the run ids re-enqueued. Skips the pass when another sweeper holds the lock.

    ``backlog`` (the step queue's length) keeps a run whose next step was never picked up from being
    enqueued again while the queue still holds messages: under a backlog its step is most likely waiting
    there, and a duplicate would only add to the pile. A run whose attempt died (lease expired) is
    re-enqueued whatever the backlog: its message sits unacknowledged, not in the queue.
    """
    s = store.settings
    keys = store.keys
    interval_ms = max(int(s.sweep_interval_seconds * 1000) - 50, 50)
    if not store.redis.set(keys.sweeper, "1", nx=True, px=interval_ms):
        return []
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    found: Any = store.redis.zrangebyscore(keys.live, 0, now_ms, start=0, num=BATCH)
    due = [r.decode() for r in found]
    grace_ms = int(s.enqueue_grace_seconds * 1000)
    requeued: list[str] = []
    waiting: list[int] = []  # the backlog, asked once per pass and only if needed

    def backed_up() -> bool:
        if backlog is None:
            return False
        if not waiting:
            waiting.append(backlog())
        return waiting[0] > 0

    for run_id in due:
        k = keys.run(run_id)
        with store.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(k.run, "log", "step", "agent_id", "committed_ms", "attempt")
            pipe.pttl(k.lease)
            (log_status, step, agent_id, committed, attempt), lease_ms = pipe.execute()
        waited_ms = now_ms - int(committed or 0)
        if log_status is None or log_status != b"live":
            store.unwatch(run_id)
        elif lease_ms > 0:  # a step holds it: look again right after it would expire, not a full TTL later
            store.watch(run_id, lease_ms / 1000 + 0.05)
        elif waited_ms < grace_ms:  # committed just now: its next step is probably queued behind others
            store.watch(run_id, (grace_ms - waited_ms) / 1000 + 0.05)
        elif int(attempt or 0) == 0 and backed_up():  # never picked up, and the queue is not empty yet
            store.watch(run_id, s.enqueue_grace_seconds)
        else:
            store.watch(run_id, s.enqueue_grace_seconds)
            enqueue(run_id, int(step), agent_id.decode())
            requeued.append(run_id)
            log.warning("run=%s step=%s: lease expired or step never enqueued; enqueued again", run_id, int(step))
    return requeued


class SweeperThread(threading.Thread):
    """Calls :func:`sweep` every ``sweep_interval_seconds`` until stopped."""

    def __init__(self, store: RunStore, enqueue: Enqueue, backlog: Callable[[], int] | None = None) -> None:
        super().__init__(name="agents-celery-sweeper", daemon=True)
        self.store, self.enqueue, self.backlog = store, enqueue, backlog
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.store.settings.sweep_interval_seconds):
            try:
                sweep(self.store, self.enqueue, backlog=self.backlog)
            except redis.RedisError as exc:
                log.warning("sweeper: Redis error, will retry: %s", exc)
            except Exception:
                log.exception("sweeper: unexpected error")

    def stop(self) -> None:
        self.stopped.set()

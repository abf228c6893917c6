"""The floor for a durable step: a bare Celery chain hop (a task that SETs a key and enqueues the next).

Default Celery settings (no result backend, early ack, prefetch 4), the same Redis broker (db 11) as the agents
worker; only the broker keys are prefixed (``global_keyprefix``) and remote control is off, as for the agents
worker. ``celery -A bench.hop worker`` serves it.
"""

from __future__ import annotations

import os

import redis
from celery import Celery

from .common import REDIS_URL, mark_ready, prefix_broker_keys

_URL = os.environ.get("AGENTS_CELERY_REDIS_URL", REDIS_URL)
_QUEUE = os.environ.get("AGENTS_CELERY_QUEUE", "bench-hop")

app = Celery("bench_hop", broker=_URL)
app.conf.task_default_queue = _QUEUE
if os.environ.get("BENCH_HOP_DURABLE") == "1":
    # The same delivery settings the step task runs with (agents_celery.broker.celery_app.durable_defaults).
    app.conf.update(task_acks_late=True, task_reject_on_worker_lost=True, worker_prefetch_multiplier=1)
prefix_broker_keys(app, os.environ.get("BENCH_PREFIX", "bench-hop"))
mark_ready(app, os.environ.get("BENCH_PREFIX", "bench-hop"))
_redis = redis.Redis.from_url(_URL)


@app.task(name="bench.hop")  # type: ignore[untyped-decorator]
def hop(key: str, remaining: int) -> None:
    """SET the key, then enqueue the next hop; the last one pushes to ``<key>:done``."""
    _redis.set(key, remaining)
    if remaining > 1:
        hop.apply_async((key, remaining - 1))
    else:
        _redis.rpush(f"{key}:done", "1")


def configure(prefix: str, queue: str) -> None:
    """Point the sending side (the bench process) at the bench's prefix and queue."""
    app.conf.task_default_queue = queue
    prefix_broker_keys(app, prefix)


@app.task(name="bench.passes")  # type: ignore[untyped-decorator]
def passes(text: str, key: str = "", last: bool = False) -> str:
    """The same function the bench's workflow steps call (it passes its input on), as a task of a plain chain; the
    last one pushes to ``<key>:done``."""
    if last:
        _redis.rpush(f"{key}:done", "1")
    return text

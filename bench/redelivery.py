"""The floor for recovery after ``kill -9``: a bare Celery task redelivered to another worker by Celery itself.

``celery -A bench.redelivery worker`` serves ``bench.slow`` with late acks (the message stays unacked while the
task runs), ``task_reject_on_worker_lost`` and prefetch 1, on the same Redis broker as the agents workers, with
the Redis transport given the timings our recovery has: ``visibility_timeout`` = the lease TTL
(``BENCH_VISIBILITY``) and a look for expired messages every sweep interval (``BENCH_RESTORE_EVERY``:
``unacked_restore_interval``, with ``unacked_restore_throttle`` 1). Celery's defaults (1 h, and a look every
10 x 10 s) would make one sample take an hour. ``bench.slow`` records ``pid:time_ns`` and sleeps on its first
delivery."""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

from .common import REDIS_URL, mark_ready, prefix_broker_keys

_URL = os.environ.get("AGENTS_CELERY_REDIS_URL", REDIS_URL)
_QUEUE = os.environ.get("AGENTS_CELERY_QUEUE", "bench-redelivery")
_PREFIX = os.environ.get("BENCH_PREFIX", "bench-redelivery")

app = Celery("bench_redelivery", broker=_URL)
app.conf.update(
    task_default_queue=_QUEUE, task_acks_late=True, task_reject_on_worker_lost=True, worker_prefetch_multiplier=1
)
_redis = redis.Redis.from_url(_URL)


def configure(prefix: str, queue: str, visibility: float, restore_every: float) -> None:
    """Broker keys under ``prefix``, the ``queue`` to send to, and the redelivery timings (both sides)."""
    app.conf.task_default_queue = queue
    prefix_broker_keys(app, prefix)
    app.conf.broker_transport_options = {
        **app.conf.broker_transport_options,
        "visibility_timeout": visibility,
        "unacked_restore_interval": restore_every,
        "unacked_restore_throttle": 1,
    }


configure(
    _PREFIX, _QUEUE, float(os.environ.get("BENCH_VISIBILITY", "5")), float(os.environ.get("BENCH_RESTORE_EVERY", "1"))
)
mark_ready(app, _PREFIX)


def started_key(key: str) -> str:
    """The list ``bench.slow`` pushes ``pid:time_ns`` to each time it starts."""
    return f"{key}:started"


@app.task(name="bench.slow")  # type: ignore[untyped-decorator]
def slow(key: str, seconds: float) -> None:
    """Record where and when it starts; sleep on the first delivery only."""
    first = _redis.rpush(started_key(key), f"{os.getpid()}:{time.time_ns()}") == 1
    if first:
        time.sleep(seconds)

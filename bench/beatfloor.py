"""The floor for a scheduled run's latency: bare Celery beat sending a task at each whole second, and the task
noting how late it started (``celery -A bench.beatfloor beat -S bench.beatfloor:AlignedScheduler`` and
``celery -A bench.beatfloor worker``). The same beat loop, broker and worker pool a schedule's run goes through,
minus agents-celery: what any beat -> task path costs.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import redis
from celery import Celery
from celery.beat import Scheduler

from .common import REDIS_URL, mark_ready, prefix_broker_keys

_URL = os.environ.get("AGENTS_CELERY_REDIS_URL", REDIS_URL)
_QUEUE = os.environ.get("AGENTS_CELERY_QUEUE", "bench-beat")
_PREFIX = os.environ.get("BENCH_PREFIX", "bench-beat")

app = Celery("bench_beat", broker=_URL)
app.conf.task_default_queue = _QUEUE
prefix_broker_keys(app, _PREFIX)
mark_ready(app, _PREFIX)
_redis = redis.Redis.from_url(_URL)


def lateness_key(prefix: str) -> str:
    return f"{prefix}:bench:beat:late"


@app.task(name="bench.tick")  # type: ignore[untyped-decorator]
def tick(tick_ms: int) -> None:
    """Note how long after its tick this task started (ms)."""
    _redis.rpush(lateness_key(_PREFIX), time.time() * 1000 - tick_ms)


class AlignedScheduler(Scheduler):  # type: ignore[misc]
    """Sends ``bench.tick(tick_ms)`` at every whole second, and otherwise sleeps until the next one."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        now = time.time()
        due = getattr(self, "_due", None)
        if due is None:
            self._due = due = math.ceil(now)
        if now >= due:
            app.send_task("bench.tick", args=[int(due * 1000)], queue=_QUEUE)
            self._due = due = due + 1
        return max(0.0, due - time.time())

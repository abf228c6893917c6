"""Celery beat fires the stored schedules: ``celery beat -S agents_celery.broker.beat:RunScheduler`` (which
``agents-celery beat`` runs).

:class:`RunScheduler` is beat's own persistent scheduler (the app's ``beat_schedule`` entries still run, as
they would without it) that also asks Redis, at every tick, for schedules whose tick is due and starts their
runs (:meth:`agents_celery.Runtime.fire_schedules`). Schedules live in Redis, not in beat's file: any number
of beat processes may run; each tick's run has an idempotency key made of the schedule id and the tick's
time, so it is started once however many beats fire it, and a beat restarted after a crash fires the last tick
it missed once. Redis is asked at least every ``POLL_SECONDS``, so a schedule created through the API starts
on time without a beat restart.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery.beat import PersistentScheduler

log = logging.getLogger(__name__)

#: Longest wait between two looks at Redis.
POLL_SECONDS = 1.0


class RunScheduler(PersistentScheduler):  # type: ignore[misc]
    """Beat's scheduler, plus the schedules of agent runs stored in Redis."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._runtime: Any = None

    @property
    def runtime(self) -> Any:
        if self._runtime is None:
            from ..runtime import Runtime

            self._runtime = Runtime(celery_app=self.app)
        return self._runtime

    def tick(self, *args: Any, **kwargs: Any) -> float:
        wait: float = super().tick(*args, **kwargs)
        try:
            ours = self.runtime.fire_schedules()
        except redis.RedisError as exc:
            log.warning("agents-celery schedules: Redis error, will retry: %s", exc)
            ours = POLL_SECONDS
        return min(wait, POLL_SECONDS, ours if ours is not None else POLL_SECONDS)

    def close(self) -> None:
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None
        super().close()

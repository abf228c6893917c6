"""Leases: the token that lets one attempt write to a run.

A lease is a Redis string holding a random token with a short TTL, renewed by a heartbeat while the
attempt works. Every write to the run (events, checkpoints) is checked against it inside Redis, so a
worker that lost its lease (killed, paused, partitioned) can no longer write anything.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

import redis

from .keys import Keys
from .scripts import RELEASE, RENEW

log = logging.getLogger(__name__)


def new_token() -> str:
    """A fresh lease token."""
    return uuid.uuid4().hex


class Leases:
    """Acquire, renew and release run leases."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self._redis = client
        self._keys = keys
        self._renew = client.register_script(RENEW)
        self._release = client.register_script(RELEASE)

    def acquire(self, run_id: str, ttl_ms: int, token: str | None = None) -> str | None:
        """Take the run's lease if nobody holds it; return the token, or None when it is held."""
        token = token or new_token()
        ok = self._redis.set(self._keys.run(run_id).lease, token, nx=True, px=ttl_ms)
        return token if ok else None

    def renew(self, run_id: str, token: str, ttl_ms: int) -> bool:
        """Extend the lease; False when it is no longer ours."""
        return bool(self._renew(keys=[self._keys.run(run_id).lease], args=[token, ttl_ms]))

    def release(self, run_id: str, token: str) -> bool:
        """Give the lease up if it is still ours."""
        return bool(self._release(keys=[self._keys.run(run_id).lease], args=[token]))

    def holder(self, run_id: str) -> str | None:
        """The current token, or None when the lease is free."""
        value = self._redis.get(self._keys.run(run_id).lease)
        return value.decode() if isinstance(value, bytes) else value


class Heartbeat:
    """Renews a lease every ``interval`` seconds in a daemon thread while a step works.

    ``tick`` (optional) runs on every beat with the heartbeat's Redis round trip already done; the engine
    uses it to notice stop requests. ``lost`` is set once the lease could not be renewed.
    """

    def __init__(
        self,
        leases: Leases,
        run_id: str,
        token: str,
        ttl_ms: int,
        interval: float,
        tick: Callable[[], None] | None = None,
        tick_interval: float | None = None,
    ) -> None:
        self._leases, self._run_id, self._token, self._ttl_ms = leases, run_id, token, ttl_ms
        self._interval = interval
        self._tick = tick
        self._tick_interval = min(tick_interval or interval, interval)
        self._done = threading.Event()
        self.lost = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{run_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        waited = 0.0
        while not self._done.wait(self._tick_interval):
            waited += self._tick_interval
            try:
                if waited >= self._interval:
                    waited = 0.0
                    if not self._leases.renew(self._run_id, self._token, self._ttl_ms):
                        log.warning("run %r: lease lost; this attempt can no longer write", self._run_id)
                        self.lost.set()
                        return
                if self._tick is not None:
                    self._tick()
            except redis.RedisError as exc:  # a blip: try again next beat; the TTL covers a few misses
                log.warning("run %r: heartbeat failed: %s", self._run_id, exc)

"""Leases: the token that lets one attempt write to a run.

A lease is a Redis string holding a random token with a short TTL, renewed by the process's
:class:`LeaseKeeper` while the attempt works. Every write to the run (events, checkpoints) is checked
against it inside Redis, so a worker that lost its lease (killed, paused, partitioned) can no longer
write anything.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import redis

from ..ids import random_hex
from .keys import Keys
from .scripts import pipelined, register

log = logging.getLogger(__name__)


def new_token() -> str:
    """A fresh lease token."""
    return random_hex()


class Leases:
    """Acquire, renew and release run leases."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys
        self.renew_script = register(client, "renew")
        self._release = register(client, "release")

    def acquire(self, run_id: str, ttl_ms: int, token: str | None = None) -> str | None:
        """Take the run's lease if nobody holds it; return the token, or None when it is held."""
        token = token or new_token()
        ok = self.redis.set(self.keys.run(run_id).lease, token, nx=True, px=ttl_ms)
        return token if ok else None

    def renew(self, run_id: str, token: str, ttl_ms: int) -> bool:
        """Extend the lease; False when it is no longer ours."""
        return bool(self.renew_script(keys=[self.keys.run(run_id).lease], args=[token, ttl_ms]))

    def release(self, run_id: str, token: str) -> bool:
        """Give the lease up if it is still ours."""
        return bool(self._release(keys=[self.keys.run(run_id).lease], args=[token]))


@dataclass
class Holding:
    """One attempt's hold on a run, kept alive by the :class:`LeaseKeeper`."""

    run_id: str
    token: str
    #: Set once the lease could not be renewed: the attempt must stop writing.
    lost: threading.Event = field(default_factory=threading.Event)
    #: Set once a stop request for the run was seen.
    stop: threading.Event = field(default_factory=threading.Event)
    renewed: float = field(default_factory=time.monotonic)


class LeaseKeeper:
    """One thread per process renews the leases of every step working in it and watches for stop requests.

    Every ``poll`` seconds it checks the stop keys of all held runs; every ``renew`` seconds it renews
    their leases; both in one pipelined round trip. A step registers with :meth:`hold` and leaves with
    :meth:`drop`, so no thread is started per step.
    """

    def __init__(self, leases: Leases, ttl_ms: int, renew: float, poll: float) -> None:
        self._leases, self._ttl_ms, self._renew, self._poll = leases, ttl_ms, renew, min(poll, renew)
        self._held: dict[int, Holding] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    def hold(self, run_id: str, token: str) -> Holding:
        holding = Holding(run_id, token)
        with self._lock:
            self._held[id(holding)] = holding
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="agents-celery-leases", daemon=True)
                self._thread.start()
        return holding

    def drop(self, holding: Holding) -> None:
        with self._lock:
            self._held.pop(id(holding), None)

    def close(self) -> None:
        """Stop the thread (a process's keeper normally lives as long as the process)."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._closed.wait(self._poll):
            with self._lock:
                held = list(self._held.values())
            if held:
                try:
                    self.beat(held)
                except redis.RedisError as exc:  # a blip: the TTL covers a few missed beats
                    log.warning("lease keeper: Redis error, will retry: %s", exc)

    def beat(self, held: list[Holding]) -> None:
        """One round trip: stop checks for every holding, renewals for those due."""
        now = time.monotonic()
        due = [h for h in held if now - h.renewed >= self._renew]
        keys = self._leases.keys
        script = self._leases.renew_script
        replies = pipelined(
            self._leases.redis,
            [(script, [keys.run(h.run_id).lease], [h.token, self._ttl_ms]) for h in due],
            [("EXISTS", keys.run(h.run_id).stop) for h in held],
        )
        for h, stopped in zip(held, replies[: len(held)], strict=True):
            if stopped:
                h.stop.set()
        for h, renewed in zip(due, replies[len(held) :], strict=True):
            if renewed:
                h.renewed = now
            else:
                log.warning("run %r: lease lost; this attempt can no longer write", h.run_id)
                h.lost.set()

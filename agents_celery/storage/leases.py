"""Leases: the token that lets one attempt write to a run.

A lease is a Redis string holding a random token with a short TTL, renewed by the process's
:class:`LeaseKeeper` while the attempt works. Every write to the run (events, checkpoints) is checked
against it inside Redis, so a worker that lost its lease (killed, paused, partitioned) can no longer
write anything. On a gevent worker the keeper beats from an OS thread, so a busy hub does not let leases expire
(:class:`LeaseKeeper`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from ..errors import RedisUnavailableError
from ..greenlets import NativeFlag, Thread, caller_for, green, native_lock, os_thread
from ..ids import random_hex
from .connections import is_cluster
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


def _not_woken() -> None:
    """The placeholder :attr:`Holding.wake_stop` / :attr:`Holding.wake_lost` until :meth:`LeaseKeeper.hold` sets
    them."""


@dataclass
class Holding:
    """One attempt's hold on a run, kept alive by the :class:`LeaseKeeper`.

    The step waits on :attr:`stop` and :attr:`lost` (gevent's events on a gevent worker); the keeper, on an OS
    thread of its own there, sets them through :attr:`wake_stop` / :attr:`wake_lost`, which hand the set to the
    step's hub (:func:`agents_celery.greenlets.caller_for`).
    """

    run_id: str
    token: str
    #: Set once the lease could not be renewed: the attempt must stop writing.
    lost: threading.Event = field(default_factory=threading.Event)
    #: Set once a stop request for the run was seen.
    stop: threading.Event = field(default_factory=threading.Event)
    #: When the lease was last renewed (``time.monotonic``); written only by the keeper's thread.
    renewed: float = field(default_factory=time.monotonic)
    #: Set by the step as it sends the commit that gives the lease up: a renewal that fails from then on is the
    #: commit's doing (or the commit is refused, and says so), not a lost lease; the keeper stops renewing it.
    committing: bool = False
    wake_stop: Callable[[], None] = field(default=_not_woken, repr=False)
    wake_lost: Callable[[], None] = field(default=_not_woken, repr=False)
    #: Called right after :attr:`stop` or :attr:`lost` is set, where it is set (:meth:`listen`).
    listeners: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def listen(self, action: Callable[[], None]) -> Callable[[], None]:
        """Call ``action`` whenever :attr:`stop` or :attr:`lost` is set (a step waiting on a call wakes, instead of
        looking every poll); returns what stops it."""
        self.listeners.append(action)
        return lambda: self.listeners.remove(action)

    def signal(self, event: threading.Event) -> None:
        """Set ``event`` (:attr:`stop` or :attr:`lost`) and tell the listeners."""
        event.set()
        for action in list(self.listeners):
            action()


#: Makes the keeper's own client on a gevent worker (``LeaseKeeper(..., connect=...)``).
Connect = Callable[[], redis.Redis]


class LeaseKeeper:
    """One thread per process renews the leases of every step working in it and watches for stop requests.

    Every ``poll`` seconds it checks the stop keys of all held runs; every ``renew`` seconds it renews
    their leases; both in one pipelined round trip. A step registers with :meth:`hold` and leaves with
    :meth:`drop`, so no thread is started per step.

    On a gevent worker (:func:`agents_celery.greenlets.green`) the thread is an OS thread, not a greenlet: a
    greenlet runs only when the hub gets to it, so a sync tool computing without yielding, or a thousand streams
    on one core, would hold the beat back past the TTL and the sweeper would retry runs that are alive. The OS
    thread gets the interpreter at the GIL's switch interval however busy the hub is. It talks to Redis over a
    client of its own made by ``connect`` (redis-py's pool locks are gevent's there and the step greenlets' client
    stays theirs); the held set's lock is an OS lock held only to copy the dict; it wakes a step through the
    step's hub (:attr:`Holding.wake_stop`). On threads or prefork it is a plain thread on ``leases``' client.
    """

    def __init__(self, leases: Leases, ttl_ms: int, renew: float, poll: float, connect: Connect | None = None) -> None:
        self._leases, self._ttl_ms, self._renew, self._poll = leases, ttl_ms, renew, min(poll, renew)
        self._green = green()
        if self._green and connect is None:
            raise TypeError("a LeaseKeeper on greenlets needs connect= (its thread's own Redis client)")
        self._connect = connect
        self._held: dict[int, Holding] = {}
        self._lock = native_lock()
        self._thread: Thread | None = None
        self._closed = NativeFlag()

    def hold(self, run_id: str, token: str, taken: float | None = None) -> Holding:
        """Keep ``run_id``'s lease alive for ``token`` until :meth:`drop`. ``taken``: when the claim that took it
        was sent (``time.monotonic``): the first renewal is then due a heartbeat after the claim, not after this
        call, which on a busy gevent worker can come seconds later (the step's greenlet waits its turn)."""
        now = time.monotonic()
        holding = Holding(run_id, token, renewed=now if taken is None else taken)
        if now - holding.renewed > self._ttl_ms / 2000:  # the lease is half gone before its first renewal
            log.warning(
                "run %r: its step held the lease %.1f s after the claim took it (TTL %.1f s): the process is too busy",
                run_id,
                now - holding.renewed,
                self._ttl_ms / 1000,
            )
        holding.wake_stop = caller_for(functools.partial(holding.signal, holding.stop))
        holding.wake_lost = caller_for(functools.partial(holding.signal, holding.lost))
        with self._lock:
            self._held[id(holding)] = holding
            if self._thread is None or not self._thread.is_alive():
                self._thread = os_thread(self._run, "agents-celery-leases")
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
        leases: Leases | None = None if self._green else self._leases
        while not self._closed.wait(self._poll):
            with self._lock:
                held = list(self._held.values())
            if not held:
                continue
            try:
                if leases is None:
                    assert self._connect is not None
                    leases = Leases(self._connect(), self._leases.keys)
                self._beat(leases, held)
            except (redis.RedisError, RedisUnavailableError) as exc:  # a blip: the TTL covers a few missed beats
                log.warning("lease keeper: Redis error, will retry: %s", exc)

    def _beat(self, leases: Leases, held: list[Holding]) -> None:
        """One round trip: stop checks for every holding, renewals for those due (a lost lease is not ours again)."""
        now = time.monotonic()
        due = [h for h in held if now - h.renewed >= self._renew and not h.lost.is_set()]
        self._warn_if_late(now, due)
        keys = leases.keys
        script = leases.renew_script
        stops = [keys.run(h.run_id).stop for h in held]
        # One MGET for every stop key (a thousand EXISTS per poll were half the keeper's CPU on a gevent worker);
        # a Redis Cluster refuses keys of several slots in one command, so there it is one EXISTS each.
        one_each = is_cluster(leases.redis)
        checks = [("EXISTS", key) for key in stops] if one_each else [("MGET", *stops)]
        replies = pipelined(
            leases.redis, [(script, [keys.run(h.run_id).lease], [h.token, self._ttl_ms]) for h in due], checks
        )
        stopped = replies[: len(held)] if one_each else [v is not None for v in replies[0]]
        for h, stop in zip(held, stopped, strict=True):
            if stop and not h.stop.is_set():
                h.wake_stop()
        renewals = replies[len(checks) :]
        with self._lock:  # a step that committed meanwhile gave its lease up (and left, or is leaving): not lost
            failed = [h for h, renewed in zip(due, renewals, strict=True) if not renewed]
            failed = [h for h in failed if self._held.get(id(h)) is h]
            for h in failed:
                if h.committing:
                    del self._held[id(h)]
            failed = [h for h in failed if not h.committing]
        for h, renewed in zip(due, renewals, strict=True):
            if renewed:
                h.renewed = now
        for h in failed:
            if not h.lost.is_set():
                log.warning(
                    "run %r: lease lost %.1f s after its last renewal (TTL %.1f s); this attempt can no longer write",
                    h.run_id,
                    now - h.renewed,
                    self._ttl_ms / 1000,
                )
                h.wake_lost()

    def _warn_if_late(self, now: float, due: list[Holding]) -> None:
        """Say when renewals come half a TTL after the last (a late beat, or a step that held its lease late):
        the leases are at risk, and the log should say so before one is lost."""
        late = [now - h.renewed for h in due if now - h.renewed > self._ttl_ms / 2000]
        if late:
            log.warning(
                "lease keeper: %d leases renewed up to %.1f s after their last renewal (heartbeat %.1f s, TTL %.1f s)",
                len(late),
                max(late),
                self._renew,
                self._ttl_ms / 1000,
            )

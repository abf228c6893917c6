"""The failover fence: after a write that must not be lost, wait until replicas hold it (Redis ``WAIT``).

Redis replication is asynchronous: a master that dies (a Redis Cluster failover, a Sentinel one) takes with it
the writes its replicas had not received, acknowledged or not. For the events of a live step that is the same
hazard as an AOF that lost its last second: the run goes on from the last write the new master has, offsets
are written again with other events, and a reader that names what it saw (``offset.tag``) is told
(``log_rewound``). A commit, a run's creation, a change of its log's status, a tool call's ``started`` record,
a pydantic-ai unit's journal entry (:mod:`.journal`) and a session's history append are the writes worth
waiting for: each is what a retried step or the session's next run trusts (the committed state, the calls that
may have run, the conversation so far). With ``AGENTS_CELERY_WAIT_REPLICAS=n``
(0, the default: no wait) each of them is followed by ``WAIT n wait_replicas_timeout_ms``.

``WAIT`` counts the writes of the connection it is sent on, and a write through a pool or a cluster client may
go out on any connection of the master. So the fence sends, in one pipeline on one connection to the master
that holds the run, a write of its own (``<p>:run:{<rid>}:fence``, ``PX`` 1 s) and the ``WAIT``: replication is
in order, so replicas that acknowledged that write hold every earlier one of the master. One round trip plus
the replicas' acknowledgement (docs/cluster.md has its cost per commit). The fence never fails the write it
follows (that is done): too few acknowledgements in time, or a master that cannot be reached, are logged and
counted (:attr:`Fence.short`), and the step goes on: every later write of the run is checked against what the
master holds (a lost commit makes the next claim fail). Not so before a tool runs (:meth:`Fence.hold`): a tool's
effect cannot be taken back, so a ``started`` record whose master did not answer the ``WAIT`` (it may be gone, and
the record with it) stops the step as a connection error would, before the tool runs; the attempt is given back
and its calls with it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis

from ..errors import RedisUnavailableError
from .connections import is_cluster
from .keys import Keys

log = logging.getLogger(__name__)

#: Most one warning per this many seconds about writes the replicas did not acknowledge in time.
WARN_EVERY_SECONDS = 10.0


class Fence:
    """``fence(run_id)`` after a write of the run: waits for ``replicas`` acknowledgements (none: returns)."""

    def __init__(self, client: redis.Redis, keys: Keys, replicas: int, timeout_ms: int) -> None:
        self.redis, self.keys = client, keys
        self.replicas, self.timeout_ms = replicas, timeout_ms
        #: Fences that got fewer acknowledgements than asked (or no answer).
        self.short = 0
        self._warned = 0.0

    def __bool__(self) -> bool:
        return self.replicas > 0

    def __call__(self, run_id: str) -> int | None:
        """Replicas that acknowledged the run's writes so far (None: the fence is off, or the master did not
        answer)."""
        return self._wait(self.keys.run(run_id).fence, f"run={run_id}")

    def session(self, session_id: str) -> int | None:
        """:meth:`__call__` for the writes of a session (its history), on the master holding the session."""
        return self._wait(self.keys.session(session_id).fence, f"session={session_id}")

    def _wait(self, key: str, what: str) -> int | None:
        if self.replicas <= 0:
            return None
        try:
            with self._master_of(key).pipeline(transaction=False) as pipe:
                pipe.set(key, "1", px=1000)
                pipe.execute_command("WAIT", self.replicas, self.timeout_ms)
                _, acked = pipe.execute()
        except redis.RedisError as exc:
            self._short(what, f"the master did not answer ({exc})")
            return None
        if int(acked) < self.replicas:
            self._short(what, f"{acked} of {self.replicas} replicas acknowledged in {self.timeout_ms} ms")
        return int(acked)

    def hold(self, run_id: str) -> int | None:
        """:meth:`__call__` before a tool runs: the same wait, but a master that does not answer raises
        :class:`RedisUnavailableError` (a blip: the tool has not run, the attempt is given back) instead of
        letting the tool run on a ``started`` record the failover may have lost."""
        if self.replicas <= 0:
            return None
        acked = self(run_id)
        if acked is None:
            raise RedisUnavailableError(f"run {run_id}: the master did not answer the fence before a tool call")
        return acked

    def _master_of(self, key: str) -> Any:
        """A plain client of the master holding ``key`` (the client itself unless it is a cluster's)."""
        if not is_cluster(self.redis):
            return self.redis
        cluster: Any = self.redis
        return cluster.get_redis_connection(cluster.get_node_from_key(key))

    def _short(self, what: str, why: str) -> None:
        self.short += 1
        now = time.monotonic()
        if now - self._warned >= WARN_EVERY_SECONDS:
            self._warned = now
            log.warning("%s: a write may be lost at a failover: %s (%d such writes so far)", what, why, self.short)

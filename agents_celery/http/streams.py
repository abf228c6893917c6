"""The API's own Redis client for event streams, sized for many concurrent subscribers.

Every open stream (an SSE response, or a ``stream=false`` request waiting for its run) holds one connection
of this client while it waits in XREAD BLOCK, so its pool is sized to the number of streams a process serves
(``AGENTS_CELERY_API_REDIS_MAX_CONNECTIONS``, default 2000: match gunicorn's ``--worker-connections``). It is a
*blocking* pool: past the limit a stream waits up to :data:`POOL_WAIT_SECONDS` for a free connection instead
of failing at once. Its socket timeout (:data:`SOCKET_TIMEOUT_SECONDS`) exceeds the longest XREAD block
(:data:`agents_celery.http.sse.MAX_BLOCK_MS`); redis-py's 5 s default would be too short for longer blocks.
"""

from __future__ import annotations

import logging
import threading

from ..runtime import Runtime
from ..storage.connections import connect, idle_pools, is_cluster
from ..storage.eventlog import EventLog

log = logging.getLogger(__name__)

#: Name of the stream connections in Redis's CLIENT LIST (how an operator counts them).
CLIENT_NAME = "agents-celery-stream"
#: Default size of the stream client's pool (and of the Runtime's pool, when it is smaller).
MAX_CONNECTIONS = 2000
#: Seconds a stream waits for a free connection when the pool is exhausted.
POOL_WAIT_SECONDS = 5.0
#: Socket timeout of the stream client: above the longest XREAD BLOCK (1 s), with room for a slow Redis.
SOCKET_TIMEOUT_SECONDS = 10.0


class Streams:
    """What a stream reads through: a Redis client with a blocking pool of ``max_connections``, and the
    :class:`~agents_celery.storage.eventlog.EventLog` on it (log status checks go through the same connection).

    Every ``idle_close_seconds`` it closes the connections nobody is using, in its own pool and the Runtime's
    (``ConnectionPool.disconnect(inuse_connections=False)``): a burst of a thousand requests would otherwise
    leave a thousand idle connections, and their file descriptors, for the life of the process. A closed
    connection connects again when it is next used.
    """

    def __init__(self, runtime: Runtime, max_connections: int = MAX_CONNECTIONS, idle_close_seconds: float = 30.0):
        self.redis = connect(
            runtime.settings.redis_url,
            blocking_pool=True,
            max_connections=max_connections,
            timeout=POOL_WAIT_SECONDS,
            socket_connect_timeout=2,
            socket_timeout=SOCKET_TIMEOUT_SECONDS,
            health_check_interval=30,
            client_name=CLIENT_NAME,
        )
        self.keys = runtime.store.keys
        self.log = EventLog(
            self.redis,
            self.keys,
            retention_ms=runtime.settings.retention_ms,
            tombstone_ms=runtime.settings.tombstone_ms,
            idle_check=runtime.store.idle_check,
            reaped=True,  # the reaper below closes idle connections: a stream's goes back to the pool open
        )
        self.max_connections = max_connections
        self._pools = [*idle_pools(self.redis), *idle_pools(runtime.redis)]
        self._closed = threading.Event()
        self._reaper = threading.Thread(
            target=self._close_idle, args=(idle_close_seconds,), name="agents-celery-idle-close", daemon=True
        )
        self._reaper.start()

    def _close_idle(self, every: float) -> None:
        while not self._closed.wait(every):
            for pool in self._pools:
                try:
                    pool.disconnect(inuse_connections=False)
                except Exception as exc:  # never let the reaper die of a blip
                    log.debug("closing idle Redis connections failed: %s", exc)

    def close(self) -> None:
        self._closed.set()
        self.redis.close()


def widen_pool(runtime: Runtime, max_connections: int) -> None:
    """Let the Runtime's own pool (redis-py's default caps it at 100) open up to ``max_connections``, so many
    concurrent short requests under an async worker do not fail with "Too many connections"."""
    if is_cluster(runtime.redis):
        return  # one pool per node, each of redis-py's cluster default size
    pool = runtime.redis.connection_pool
    current = getattr(pool, "max_connections", None)
    if isinstance(current, int) and current < max_connections:
        pool.max_connections = max_connections

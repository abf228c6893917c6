"""Redis clients from the URLs the settings accept, Sentinel included.

- ``redis://``, ``rediss://``, ``unix://``: as redis-py reads them.
- ``redis+socket:///path/to/redis.sock?db=N``: a unix socket, in the form Celery's broker URLs use.
- ``redis+sentinel://[:password@]host:port[,host:port...]/service_name[/db]`` (or ``sentinel://``): asks the
  Sentinels for the current master of ``service_name`` and follows failovers.
- ``redis+cluster://[:password@]host:port[,host:port...]`` (or ``rediss+cluster://``): a Redis Cluster (any nodes
  as seeds); the client is redis-py's ``RedisCluster``, which finds the others and follows failovers and
  resharding (docs/cluster.md). redis-py's cluster client is not a ``redis.Redis``: :func:`is_cluster` tells, and
  the helpers below (:func:`keeping_one`, :func:`idle_pools`, :func:`atomic`) do the right thing for both.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import redis
import redis.asyncio as aredis
import redis.asyncio.cluster as acluster
import redis.asyncio.sentinel as asentinel
import redis.cluster
import redis.sentinel

from ..errors import ConfigurationError, RedisUnavailableError
from ..ids import pid
from ..settings import CLUSTER_SCHEMES, SENTINEL_SCHEMES, parse_cluster, parse_sentinel

#: The one list of errors that say Redis does not answer now, rather than that a command was wrong. The engine
#: gives an attempt that dies of one back as a blip (not counted against its attempts); the HTTP front ends
#: answer 503. It holds a connection refused, reset or timed out (a full pool's ``MaxConnectionsError`` is one), a
#: replica that became read-only in a failover (``READONLY``), and a Redis Cluster that cannot be reached or is
#: electing a master (``RedisClusterException`` "cannot be connected", ``CLUSTERDOWN``, ``TRYAGAIN``, a slot not
#: covered, redirections exhausted). ``RedisClusterException`` is not a ``RedisError``, so code catching
#: ``redis.ConnectionError`` alone lets these through. Our own :class:`RedisUnavailableError` says the same.
UNAVAILABLE: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.ReadOnlyError,
    redis.exceptions.ClusterError,
    redis.exceptions.TryAgainError,
    redis.exceptions.RedisClusterException,
    RedisUnavailableError,
)
#: ``RedisClusterException``s that are the command's fault (a transaction across slots, a pipeline misused): bugs,
#: not outages. Looked up by name: older redis-py versions have neither.
_MISUSE: tuple[type[Exception], ...] = tuple(
    getattr(redis.exceptions, name)
    for name in ("CrossSlotTransactionError", "InvalidPipelineStack")
    if hasattr(redis.exceptions, name)
)


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` is one of :data:`UNAVAILABLE` and not a misuse that only looks like one."""
    return isinstance(exc, UNAVAILABLE) and not isinstance(exc, _MISUSE)


def unavailable(exc: BaseException) -> RedisUnavailableError | None:
    """The :class:`RedisUnavailableError` (a 503) an error of :data:`UNAVAILABLE` stands for; None for any other."""
    if not is_unavailable(exc):
        return None
    if isinstance(exc, RedisUnavailableError):
        return exc
    return RedisUnavailableError(f"Redis does not answer: {exc}")


@contextlib.contextmanager
def answering() -> Iterator[None]:
    """Inside, an error of :data:`UNAVAILABLE` comes out as :class:`RedisUnavailableError` (a misuse as itself)."""
    try:
        yield
    except UNAVAILABLE as exc:
        down = unavailable(exc)
        if down is None or down is exc:
            raise
        raise down from exc


#: Options of a plain client that a cluster client does not take (it makes a pool per node itself).
_NOT_FOR_CLUSTER = ("timeout", "db", "connection_pool")


@functools.cache
def _driver_info() -> Any:
    """What our connections tell Redis they are (``CLIENT SETINFO``, shown by ``CLIENT LIST``): redis-py, and
    agents-celery as the driver on top of it. redis-py 8 builds this per connection otherwise, and looks its own
    version up in the installed packages each time (0.5 ms of CPU per connection: a burst of a thousand streams
    paid half a second). None when redis-py's connections take no ``driver_info`` (before 8: they look the
    version up once, at import)."""
    import inspect

    if "driver_info" not in inspect.signature(redis.connection.AbstractConnection.__init__).parameters:
        return None
    from importlib import metadata

    from redis.driver_info import DriverInfo

    try:
        ours = metadata.version("agents-celery")
    except metadata.PackageNotFoundError:  # run from a source tree, not installed
        ours = "source"
    return DriverInfo(lib_version=redis.__version__).add_upstream_driver("agents-celery", ours)


def _with_driver_info(options: dict[str, Any]) -> dict[str, Any]:
    info = _driver_info()
    if info is not None and not {"driver_info", "lib_name", "lib_version"} & options.keys():
        options["driver_info"] = info
    return options


def from_url(url: str) -> redis.Redis:
    """``redis.Redis.from_url(url)`` (a plain Redis URL, as kombu's Redis transport takes) with our connections'
    one ``DriverInfo`` (:func:`_driver_info`)."""
    return redis.Redis.from_url(url, **_with_driver_info({}))


def _socket(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    db = parse_qs(parsed.query).get("db", ["0"])[0]
    return parsed.path, int(db) if db.isdigit() else 0


def connect(url: str, *, blocking_pool: bool = False, **options: Any) -> redis.Redis:
    """A sync client for ``url``. ``options`` go to the connections (timeouts, ``max_connections`` ...);
    ``blocking_pool`` makes a full pool wait (``timeout`` seconds) instead of failing (not with Sentinel)."""
    scheme = urlparse(url).scheme
    if scheme in CLUSTER_SCHEMES:
        c = parse_cluster(url)
        for name in _NOT_FOR_CLUSTER:
            options.pop(name, None)
        nodes = [redis.cluster.ClusterNode(host, port) for host, port in c.hosts]  # type: ignore[no-untyped-call]
        try:  # a cluster client asks the seeds for the cluster's layout at once, not at its first command
            cluster: redis.Redis = redis.cluster.RedisCluster(  # type: ignore[assignment]
                startup_nodes=nodes, password=c.password, ssl=c.tls, **options
            )
        except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
            raise RedisUnavailableError(f"no node of the Redis Cluster at {url!r} answers: {exc}") from exc
        return cluster
    if scheme in SENTINEL_SCHEMES:
        s = parse_sentinel(url)
        options.pop("timeout", None)
        timeout = options.get("socket_connect_timeout")
        sentinel = redis.sentinel.Sentinel(s.hosts, socket_connect_timeout=timeout)  # type: ignore[no-untyped-call]
        master: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
            s.service, db=s.db, password=s.password, **options
        )
        return master
    pool_class = redis.BlockingConnectionPool if blocking_pool else redis.ConnectionPool
    options = _with_driver_info(options)
    if scheme == "redis+socket":
        path, db = _socket(url)
        pool = pool_class(connection_class=redis.UnixDomainSocketConnection, path=path, db=db, **options)
    else:
        pool = pool_class.from_url(url, **options)
    return redis.Redis(connection_pool=pool)


#: A worker's pool: how many connections one step slot may hold at once (its own command, and its model or tool
#: call's on a thread of its own, which keeps a connection there too), and how many the process adds (the event
#: flusher, the sweeper, claims sent ahead of their step).
PER_SLOT, PROCESS_CONNECTIONS = 2, 16
#: How long a command waits for a connection of a worker's pool when every one is in use (redis-py's default).
POOL_WAIT_SECONDS = 20.0


def worker_pool(slots: int) -> dict[str, Any]:
    """:func:`connect` options for the client of a worker process that runs ``slots`` steps at once.

    redis-py (6 and later) caps a pool at 100 connections and raises ``MaxConnectionsError`` ("Too many
    connections") at the 101st. A ``--pool gevent --concurrency 1000`` worker passed that whenever more than 100
    of its greenlets had a command in flight: at the end of a burst of turns, on a busy hub, where a greenlet
    holds its connection from its send until the hub comes back to read the reply. The engine took the error for
    Redis being away, gave the attempt back and ran the model turn again (tests/test_gevent_capacity.py: 37 runs
    of 1,000 ran their turn twice). So the pool has room for every slot, and when all of it is in use a command
    waits for a connection to come back (a blocking pool) instead of failing; it fails only after
    :data:`POOL_WAIT_SECONDS`. Connections are made on demand, so an idle worker holds few."""
    return {
        "blocking_pool": True,
        "max_connections": max(100, PER_SLOT * slots + PROCESS_CONNECTIONS),
        "timeout": POOL_WAIT_SECONDS,
    }


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a Redis Cluster client (sync or asyncio)."""
    return isinstance(client, (redis.cluster.RedisCluster, acluster.RedisCluster))


def atomic(client: redis.Redis) -> Any:
    """A MULTI/EXEC pipeline for commands on keys of one slot. A cluster client runs it as a transaction where
    redis-py can (6.1 and later); older ones cannot, and get a plain pipeline (the caller orders its commands so
    a crash between them leaves nothing a reader misreads)."""
    if is_cluster(client):
        try:
            return client.pipeline(transaction=True)
        except (redis.RedisError, redis.exceptions.RedisClusterException):  # redis-py < 6: "transaction is deprecated"
            return client.pipeline(transaction=False)
    return client.pipeline(transaction=True)


def idle_pools(client: redis.Redis) -> list[Any]:
    """The connection pools whose idle connections a reaper may close: the client's own, or (a cluster) none,
    since redis-py's cluster client keeps a pool per node and remakes them on failover itself."""
    return [] if is_cluster(client) else [client.connection_pool]


def keeping_one(client: redis.Redis) -> redis.Redis:
    """A client that keeps one connection of ``client``'s pool for all its commands until it is closed
    (redis-py's ``single_connection_client``), sharing ``client``'s response callbacks (a copy is ~13 KiB).

    For a reader that holds a connection anyway while it waits in XREAD BLOCK: taking it out of the pool and
    back for every batch costs a pid check each way and a read probing for stale data, five system calls.
    Call :func:`reconnect_if_closed` before each read, as the reader may sit idle between them. A cluster client
    is returned as it is (each command goes to the node of its key's slot, over that node's pool)."""
    if is_cluster(client):
        return client
    own = redis.Redis(connection_pool=client.connection_pool, single_connection_client=True)
    own.response_callbacks = client.response_callbacks
    return own


def let_go(client: redis.Redis, keep: bool = False) -> None:
    """End a :func:`keeping_one` client whose reader is done (a stream whose client went away, or ended): its
    connection is closed, not kept idle in the pool. A process that served a thousand streams would otherwise
    keep a thousand idle connections (and file descriptors) for good; opening one per stream costs one connect.
    With ``keep`` (the pool's owner closes idle connections on its own, as the API does every
    ``idle_close_seconds``) the connection goes back to the pool open, and the next stream skips the connect."""
    if is_cluster(client):
        return  # :func:`keeping_one` gave the shared cluster client itself
    conn = client.connection
    if conn is not None and not keep:
        conn.disconnect()  # type: ignore[no-untyped-call]
    client.close()  # gives the connection back to the pool, which reconnects a closed one if it is ever reused


def reconnect_if_closed(client: redis.Redis) -> None:
    """Disconnect the kept connection if Redis closed it while it sat idle (a restart, CLIENT KILL, an idle
    timeout), so the next command connects again instead of failing. An idle connection has nothing to read;
    if it has, it is closed or holds a stray reply, and either way it must go. This is the pool's own check on
    checkout (``Connection.can_read``: three system calls); the worker's fast path polls the socket instead
    (:func:`agents_celery.broker.fastpaths.reconnect_if_closed`, one)."""
    if is_cluster(client):
        return
    conn = client.connection
    if conn is None:
        return
    try:
        stale = conn.can_read(timeout=0)
    except (redis.ConnectionError, OSError):
        stale = True
    if stale:
        conn.disconnect()  # type: ignore[no-untyped-call]


#: Called before a command on a kept connection (see :func:`reconnect_if_closed`).
IdleCheck = Callable[[redis.Redis], None]


class ThreadClients:
    """One client per thread, each keeping a connection of ``client``'s pool for itself (redis-py's
    ``single_connection_client``), for the threads that send a command per step or per streamed token.

    A command through a pooled client checks a connection out and back in: a pid check each way and a
    non-blocking read probing for stale data, five system calls besides the send and the reply; on a VM with
    page-table isolation that doubled the CPU of a small script call after an idle gap. :meth:`get` looks at
    the kept connection first (``idle_check``, :func:`reconnect_if_closed` by default), so one Redis closed while the
    thread was idle connects again instead of failing. A thread's client goes back to the pool when the
    thread ends; a forked child builds its own. When no connection can be
    had, :meth:`get` returns the shared client, whose command then fails (or retries) the ordinary way.
    Under gevent or eventlet (``threading.local`` patched: one per greenlet, which lives for one task) every
    task would build a client of its own, so it stays out of the way and returns the shared client.
    """

    def __init__(self, client: redis.Redis, idle_check: IdleCheck = reconnect_if_closed) -> None:
        self.shared = client
        self._idle_check = idle_check
        self._local = threading.local()
        # real threads, not greenlets; a cluster client routes each command to its node's pool itself
        self._threads = threading.local.__module__ == "_thread" and not is_cluster(client)
        #: Bumped by :meth:`renew`; a thread whose client is older makes its connection again.
        self._generation = 0

    def renew(self) -> None:
        """Every thread's kept connection is made again before its next command: one of them failed with a
        connection error, so all of them may be broken (a reset that left idle sockets half-open shows on none
        of them before it is used). Thread-safe: each thread drops its own at its next :meth:`get`."""
        self._generation += 1

    def get(self) -> redis.Redis:
        """The calling thread's client."""
        if not self._threads:
            return self.shared
        local = self._local
        own: redis.Redis | None = getattr(local, "client", None)
        if own is not None and local.pid == pid():
            if local.generation != self._generation:
                local.generation = self._generation
                conn = own.connection
                if conn is not None:
                    conn.disconnect()  # type: ignore[no-untyped-call]
            else:
                self._idle_check(own)
            return own
        try:
            own = keeping_one(self.shared)
        except redis.RedisError:
            return self.shared
        local.client, local.pid, local.generation = own, pid(), self._generation
        return own


def connect_async(url: str, **options: Any) -> aredis.Redis:
    """An asyncio client for ``url`` (same URL forms as :func:`connect`)."""
    scheme = urlparse(url).scheme
    if scheme in CLUSTER_SCHEMES:
        c = parse_cluster(url)
        for name in _NOT_FOR_CLUSTER:
            options.pop(name, None)
        nodes = [acluster.ClusterNode(host, port) for host, port in c.hosts]
        cluster: aredis.Redis = acluster.RedisCluster(  # type: ignore[assignment]
            startup_nodes=nodes, password=c.password, ssl=c.tls, **options
        )
        return cluster
    if scheme in SENTINEL_SCHEMES:
        s = parse_sentinel(url)
        timeout = options.get("socket_connect_timeout")
        sentinel = asentinel.Sentinel(s.hosts, socket_connect_timeout=timeout)  # type: ignore[no-untyped-call]
        master: aredis.Redis = sentinel.master_for(s.service, db=s.db, password=s.password, **options)
        return master
    options = _with_driver_info(options)
    if scheme == "redis+socket":
        path, db = _socket(url)
        return aredis.Redis(unix_socket_path=path, db=db, **options)
    return aredis.Redis.from_url(url, **options)


def answers(url: str, timeout: float = 0.5) -> bool:
    """Whether a Redis answers PING at ``url`` within ``timeout`` seconds."""
    try:
        client = connect(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    except (redis.RedisError, ConfigurationError, RedisUnavailableError, ValueError):
        return False
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()

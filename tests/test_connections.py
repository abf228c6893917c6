"""Redis URLs beyond redis://: a unix socket in Celery's form, and Sentinel (a real sentinel process)."""

from __future__ import annotations

import gc
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import redis

from agents_celery import Runtime
from agents_celery.errors import ConfigurationError
from agents_celery.settings import load_settings, parse_sentinel
from agents_celery.storage.connections import (
    ThreadClients,
    answers,
    connect,
    keeping_one,
    reconnect_if_closed,
)
from agents_celery.testing.embedded import EmbeddedRedis, find_redis_server

from .conftest import TEST_REDIS_URL, wait_for
from .support.workers import Worker, worker_env


def test_sentinel_urls_parse_and_bad_ones_name_the_variable() -> None:
    s = parse_sentinel("redis+sentinel://:secret@10.0.0.1:26379,10.0.0.2:26380/mymaster/3")
    assert s.hosts == [("10.0.0.1", 26379), ("10.0.0.2", 26380)] and s.service == "mymaster"
    assert s.db == 3 and s.password == "secret"
    for bad in ("redis+sentinel://h:1", "sentinel://nohost/svc", "redis+sentinel://h:1/svc/x"):
        with pytest.raises(ConfigurationError, match="AGENTS_CELERY_REDIS_URL"):
            parse_sentinel(bad)
    settings = load_settings(redis_url="redis+sentinel://h1:26379,h2:26379/mymaster/2")
    assert settings.celery_broker_url == "sentinel://h1:26379/2;sentinel://h2:26379/2"
    assert settings.broker_transport_options == {"master_name": "mymaster"}


def test_unix_socket_in_celery_form() -> None:
    with EmbeddedRedis() as server:
        client = connect(f"redis+socket://{server.socket}?db=2")
        try:
            client.set("k", "v")
            assert client.get("k") == b"v" and client.connection_pool.connection_kwargs["db"] == 2
        finally:
            client.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def sentinel() -> Iterator[str]:
    """A real Sentinel watching the test Redis as ``mymaster``; yields its URL for the test database."""
    port = _free_port()
    directory = Path(tempfile.mkdtemp(prefix="sentinel-"))
    conf = directory / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 6379 1\n")
    proc = subprocess.Popen(
        [find_redis_server(), str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    url = f"redis+sentinel://127.0.0.1:{port}/mymaster{urlparse(TEST_REDIS_URL).path or '/0'}"

    try:
        wait_for(lambda: answers(url), timeout=15, what="the sentinel to find its master")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_a_run_through_sentinel(sentinel: str, key_prefix: str, fake_openai: Any, fast_settings: Any) -> None:
    queue = f"sentinel-{int(time.time() * 1000)}"
    # No broker URL: the broker follows the Sentinel too (kombu's sentinel:// transport, master_name set).
    env = worker_env(sentinel, "", key_prefix, queue, {"FAKE_OPENAI_URL": fake_openai.url})
    worker = Worker(env)
    settings = fast_settings.model_copy(update={"redis_url": sentinel, "broker_url": None, "queue": queue})
    assert settings.celery_broker_url.startswith("sentinel://")
    runtime = Runtime(settings=settings)
    try:
        worker.wait_ready()
        view = runtime.run("offline", "what time is it?", timeout=30)
        assert view.status == "completed" and view.output == "It is 12:00 UTC."
    finally:
        worker.stop()
        runtime.close()


# -- a thread's own connection (ThreadClients) ------------------------------------------------------------------


def _counting_checkouts(monkeypatch: pytest.MonkeyPatch, client: Any) -> list[int]:
    """Count the connections ``client``'s pool hands out from now on."""
    pool = client.connection_pool
    taken: list[int] = []
    checkout = pool.get_connection

    def counted(*args: Any, **kwargs: Any) -> Any:
        taken.append(1)
        return checkout(*args, **kwargs)

    monkeypatch.setattr(pool, "get_connection", counted)
    return taken


def test_a_thread_keeps_its_own_connection(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    client = connect(settings.redis_url)
    own = ThreadClients(client)
    taken = _counting_checkouts(monkeypatch, client)
    mine = own.get()
    ids = {mine.client_id() for _ in range(20)}
    assert own.get() is mine and len(ids) == 1 and len(taken) == 1  # one checkout, then none per command
    theirs: list[Any] = []
    thread = threading.Thread(target=lambda: theirs.append((own.get(), own.get().client_id())))
    thread.start()
    thread.join(10)
    assert theirs and theirs[0][0] is not mine and theirs[0][1] not in ids
    del theirs[:]
    gc.collect()  # the ended thread's client is gone: its connection is back in the pool
    assert len(client.connection_pool._in_use_connections) == 1
    mine.close()
    client.close()


def test_a_forked_child_builds_its_own(settings: Any) -> None:
    client = connect(settings.redis_url)
    own = ThreadClients(client)
    parent_id = own.get().client_id()
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report the id of its own connection, never touch the parent's
        try:
            os.write(writer, str(own.get().client_id()).encode())
        finally:
            os._exit(0)
    os.close(writer)
    child_id = int(os.read(reader, 64) or b"0")
    os.waitpid(pid, 0)
    os.close(reader)
    assert child_id and child_id != parent_id
    assert own.get().client_id() == parent_id  # the parent's connection still answers, unchanged
    client.close()


def test_no_connection_to_be_had_falls_back_to_the_shared_client() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    client = connect(f"redis://127.0.0.1:{port}/0", socket_connect_timeout=0.5)
    own = ThreadClients(client)
    assert own.get() is client
    with pytest.raises(redis.ConnectionError):
        own.get().ping()


def test_under_greenlets_every_thread_uses_the_shared_client(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    from gevent.local import local as greenlet_local

    monkeypatch.setattr(threading, "local", greenlet_local)  # what gevent's monkey-patching does
    client = connect(settings.redis_url)
    assert ThreadClients(client).get() is client
    client.close()


def test_a_thread_s_connection_dropped_by_redis_reconnects_and_runs_the_call_once(settings: Any) -> None:
    client = connect(settings.redis_url)
    own = ThreadClients(client)
    key = f"{settings.key_prefix}:test:dropped:{os.getpid()}"
    incr = client.register_script("return redis.call('INCR', KEYS[1])")
    mine = own.get()
    try:
        assert incr(keys=[key], client=own.get()) == 1
        client.client_kill_filter(_id=mine.client_id())  # what a Redis restart or an idle timeout does
        wait_for(lambda: select.select([mine.connection._sock], [], [], 0)[0], what="the close to arrive")  # type: ignore[union-attr]
        assert incr(keys=[key], client=own.get()) == 2  # on a new connection, and run once
        assert own.get() is mine and int(client.get(key) or 0) == 2
    finally:
        client.delete(key)
        mine.close()
        client.close()


def test_the_closed_check_works_on_sockets_numbered_past_1023(settings: Any) -> None:
    """An API process holding a thousand streams has sockets past FD_SETSIZE, where select() refuses them."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:  # raise our own soft limit as far as the hard one allows (an API process is run so too)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(2048, hard), hard))
    fillers = [socket.socket() for _ in range(1100)]
    client = connect(settings.redis_url)
    own = keeping_one(client)
    try:
        assert own.ping() and own.connection._sock.fileno() > 1023  # type: ignore[union-attr]
        reconnect_if_closed(own)  # an open connection is left alone
        first = own.client_id()
        client.client_kill_filter(_id=first)
        wait_for(lambda: own.connection._sock.recv(1, socket.MSG_PEEK) == b"", what="the close")  # type: ignore[union-attr]
        reconnect_if_closed(own)
        assert own.ping() and own.client_id() != first
    finally:
        own.close()
        client.close()
        for s in fillers:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# -- a worker's pool (worker_pool) ------------------------------------------------------------------------------

#: Greenlets that each hold a connection at the same moment (a BLPOP that waits half a second): more than redis-py's
#: default pool holds (100), and more than ``worker_pool(100)`` makes (216), so some wait for one to come back.
HOLDERS = 300
#: Run on greenlets (a gevent worker's process): ``HOLDERS`` commands in flight at once through ``connect(url,
#: **options)``, printing how each ended.
_BURST = """
from gevent import monkey; monkey.patch_all()
import collections, json, sys, gevent, redis
from agents_celery.storage.connections import connect, worker_pool
url, key, slots, holders = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
client = connect(url, **worker_pool(slots)) if slots else connect(url)
def hold():
    try:
        client.blpop([key], timeout=0.5)
        return "ok"
    except redis.ConnectionError as exc:
        return str(exc)
jobs = [gevent.spawn(hold) for _ in range(holders)]
gevent.joinall(jobs)
print(json.dumps(collections.Counter(job.value for job in jobs)))
"""


def _burst(settings: Any, slots: int) -> dict[str, int]:
    """How the commands of :data:`HOLDERS` greenlets in flight at once ended (``slots`` 0: redis-py's own pool)."""
    import json
    import sys

    key = f"{settings.key_prefix}:test:burst:{os.getpid()}"
    args = [sys.executable, "-c", _BURST, settings.redis_url, key, str(slots), str(HOLDERS)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.splitlines()[-1]))


def test_a_worker_pool_holds_every_greenlet_s_command_where_redis_py_s_own_fails(settings: Any) -> None:
    """The mechanism behind runs of tests/test_gevent_capacity.py running their turn twice: redis-py (6 and later)
    caps a pool at 100 connections and fails the 101st command in flight with "Too many connections", which the
    engine took for Redis being away (it gave the attempt back and ran the turn again). A worker's pool
    (``worker_pool``) has room for its slots, and past that a command waits for a connection instead of failing."""
    plain = _burst(settings, 0)
    assert plain.get("Too many connections", 0) >= HOLDERS - 100, plain  # redis-py's default: the mechanism
    assert _burst(settings, 1000) == {"ok": HOLDERS}  # room for every slot
    assert _burst(settings, 100) == {"ok": HOLDERS}  # 216 connections for 300 commands: the rest waited


def test_a_worker_s_engine_gets_a_pool_for_its_concurrency(settings: Any) -> None:
    """``worker_init`` tells the app its pool's concurrency before the engine makes its Redis client."""
    from celery import signals

    from agents_celery.broker.celery_app import create_celery_app
    from agents_celery.broker.extension import extension

    class Starting:
        """What ``worker_init`` is sent by: Celery's WorkController (the parts the app reads)."""

        pool_cls, concurrency = "threads", 1000

        def __init__(self, app: Any) -> None:
            self.app = app

    app = create_celery_app(settings, agents={})
    signals.worker_init.send(sender=Starting(app))
    pool = extension(app).engine.store.redis.connection_pool
    assert isinstance(pool, redis.BlockingConnectionPool) and pool.max_connections == 2016, pool
    pool.disconnect()


def test_our_connections_carry_one_driver_info_built_once(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """redis-py 8 looked its own version up among the installed packages for every connection it made (0.5 ms):
    ours share one DriverInfo naming agents-celery on top of redis-py. Older redis-py takes no driver_info (it
    reads the version once, at import) and is given none."""
    import inspect
    from importlib import metadata

    import redis.utils

    from agents_celery.storage.connections import from_url

    looked_up: list[int] = []

    # Ours, and the one the direct publisher LPUSHes steps through (a plain URL, as kombu takes).
    for client in (connect(settings.redis_url, max_connections=10), from_url(settings.redis_url)):
        try:
            kwargs = client.connection_pool.connection_kwargs
            if "driver_info" not in inspect.signature(redis.connection.AbstractConnection.__init__).parameters:
                assert not {"driver_info", "lib_name", "lib_version"} & kwargs.keys()
                continue
            name = f"redis-py(agents-celery_v{metadata.version('agents-celery')})"
            assert kwargs["driver_info"].formatted_name == name
            assert kwargs["driver_info"].lib_version == redis.__version__
            monkeypatch.setattr(redis.utils, "get_lib_version", lambda: looked_up.append(1) or "0")
            looked_up.clear()
            held = [client.connection_pool.get_connection() for _ in range(5)]  # five new connections
            for conn in held:
                client.connection_pool.release(conn)
            assert client.ping() and looked_up == []
        finally:
            client.close()


_GEVENT_POLL = """
from gevent import monkey
monkey.patch_all()
import select, socket, sys
import redis
from agents_celery.broker.fastpaths import _redispy
from agents_celery.storage.connections import connect, keeping_one

assert type(_redispy._poll()) is not type(select.poll())  # gevent's poll object is not the OS's
assert type(_redispy._poll()) is type(monkey.get_original("select", "poll")())
client = connect(sys.argv[1])
own = keeping_one(client)
first = own.client_id()
_redispy.reconnect_if_closed(own)
assert own.client_id() == first  # an open connection is left alone
client.client_kill_filter(_id=first)
while own.connection._sock.recv(1, socket.MSG_PEEK) != b"":
    pass
_redispy.reconnect_if_closed(own)
assert own.ping() and own.client_id() != first
print("ok")
"""


def test_the_fast_closed_check_polls_with_the_os_poll_under_gevent(settings: Any) -> None:
    """Under gevent's patched ``select`` the fast path's check of a kept connection uses the operating system's
    poll (1 us, not gevent's 20 us; a poll of no wait never blocks) and still tells a closed connection."""
    done = subprocess.run(
        [sys.executable, "-c", _GEVENT_POLL, settings.redis_url], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]

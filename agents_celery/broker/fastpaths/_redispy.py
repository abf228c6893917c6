"""redis-py's private side of the fast paths: a script call sent now and read later (``send_ahead``), and a kept
connection checked with one ``poll`` (``idle_poll``). See :mod:`agents_celery.broker.fastpaths`."""

from __future__ import annotations

import contextlib
import functools
import select
import sys
from typing import Any

import redis

from ...storage.pending import Pending

# -- redis-py: send now, read the reply later (send_ahead) ---------------------------------------------------


class Sent:
    """A script call written to Redis whose reply is read later, on a connection of its own meanwhile.

    With ``rerun`` (for an idempotent script), a call whose connection failed runs again the ordinary way;
    without, the connection error is raised (the script may or may not have run).
    """

    @classmethod
    def make(cls, client: redis.Redis, script: Any, keys: list[str], args: list[str], rerun: bool = True) -> Pending:
        return cls(client, script, keys, args, rerun)

    def __init__(self, client: redis.Redis, script: Any, keys: list[str], args: list[str], rerun: bool = True) -> None:
        self._client, self._script, self._keys, self._args, self._rerun = client, script, keys, args, rerun
        self._failed: redis.RedisError | None = None  # the send failed part way: it may have run
        self._conn: Any = None
        try:
            self._conn = _connection(client.connection_pool)
        except redis.RedisError:
            return  # nothing was sent: wait() runs it the ordinary way
        try:
            # redis-py 5.0-8.2: Connection.send_command / read_response (not documented for direct use)
            self._conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except redis.RedisError as exc:
            self._failed = exc
            self._drop()

    def wait(self) -> Any:
        """The script's reply. Runs it again the ordinary way when Redis did not know the script (it did not
        run) and, with ``rerun``, when the call was not sent or its connection failed."""
        if self._conn is not None:
            try:
                reply = self._conn.read_response()
            except redis.exceptions.NoScriptError:
                self._release()  # an error reply, read whole: the connection is clean
            except redis.ResponseError:
                self._release()
                raise
            except redis.ConnectionError:
                self._drop()
                if not self._rerun:
                    raise
            except BaseException:  # a timeout, an interrupt: the reply may still be on its way
                self._drop()
                raise
            else:
                self._release()
                return reply
        elif self._failed is not None and not self._rerun:
            raise redis.ConnectionError(f"the call was not sent whole: {self._failed}")
        return self._script(keys=self._keys, args=self._args)

    def close(self) -> None:
        """Read and drop the reply of a call nobody will use (its connection then goes back clean)."""
        with contextlib.suppress(Exception):
            if self._conn is not None:
                self.wait()

    def _release(self) -> None:
        self._client.connection_pool.release(self._conn)
        self._conn = None

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.disconnect()
            self._release()


def _connection(pool: Any) -> Any:
    """A connection from the pool (redis-py before 5.3 wants a command name; later ones warn about it)."""
    try:
        return pool.get_connection()
    except TypeError:
        return pool.get_connection("EVALSHA")


# -- redis-py: is a kept connection still open? (idle_poll) ---------------------------------------------------


def reconnect_if_closed(client: redis.Redis) -> None:
    """:func:`agents_celery.storage.connections.reconnect_if_closed` with one ``poll`` of no wait on the socket
    (redis-py 5.0-8.2: ``Connection._sock``) instead of the three system calls of ``can_read``. ``select``
    would refuse a socket numbered past 1023, which an API process holding a thousand streams has."""
    sock = getattr(client.connection, "_sock", None)
    if sock is not None:
        poller = _poll()
        poller.register(sock, select.POLLIN)
        if poller.poll(0):
            client.connection.disconnect()  # type: ignore[union-attr]


def _poll() -> Any:
    """A poll object of the operating system's ``select.poll``, also where gevent patched ``select``: a poll of no
    wait never blocks, and gevent's own costs 20 us against 1 us (watchers started and stopped; an API stream
    checks its connection before every read)."""
    return _os_poll()()


@functools.cache
def _os_poll() -> Any:
    if "gevent" in sys.modules:
        from gevent import monkey

        if monkey.is_module_patched("select"):
            return monkey.get_original("select", "poll")
    return select.poll  # unpatched: the operating system's (if gevent patches later, this stays the original)

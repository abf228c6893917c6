"""Fast paths: every use of a private attribute of Celery, kombu or redis-py, in one module, with one switch.

Each one saves a round trip or a few system calls on the step path; each has a plain equivalent on public APIs
only, which is what runs when it is off. ``AGENTS_CELERY_FAST_PATHS=0`` turns them all off; so does a
Celery, kombu or redis-py version outside the ranges they were written against and tested on
(:data:`TESTED`). The worker logs at start which are on and why any is off (:meth:`FastPaths.describe`).

=====================  ===============================================================  ==========================
fast path              what it does                                                    plain path when off
=====================  ===============================================================  ==========================
``send_ahead``         writes a script call to its connection now and reads the reply   the call is made at once
                       later (a tool's ledger result; a claim sent as its message       (:func:`~agents_celery.st
                       arrives). redis-py: ``ConnectionPool.get_connection``,           orage.pending.call_now`)
                       ``Connection.send_command`` / ``read_response``.
``idle_poll``          looks at a kept connection with one ``poll`` before a command    ``Connection.can_read(0)``,
                       (redis-py: ``Connection._sock``).                                the pool's own check
``direct_publish``     sends a step's message with one LPUSH of the JSON kombu's Redis  ``app.send_task``
                       transport would store (kombu's message layout, its queue key).
``commit_pushes_next`` the commit script pushes the next step's message itself when     the engine enqueues after
                       the broker is the state Redis (the same layout, inside Lua).     the commit
``commit_acks``        the commit script acks the step's own message (kombu's           Celery acks after the task
                       ``unacked`` / ``unacked_index`` keys); :class:`StepRequest`      returns
                       settles Celery's bookkeeping without a round trip (Celery's
                       ``Request._on_ack`` / ``_on_reject`` promises, kombu's
                       ``QoS._remove_from_indices``, ``Message._state``).
``claim_on_receipt``   the consumer sends a step's claim as it receives the message     the task claims when it
                       (threads and solo pools; needs ``commit_acks``' request class).  starts
=====================  ===============================================================  ==========================

Public APIs are used wherever they cost nothing measurable: ``Request.message`` and ``connection_errors``,
kombu's ``QoS.unacked_key`` / ``unacked_index_key`` names, ``QoS.restore_by_tag``.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import select
import threading
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any
from urllib.parse import urlparse

import redis
from celery import Celery, signals
from celery.worker.request import Request
from kombu.serialization import dumps
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from packaging.version import Version
from vine import promise

from ..ids import pid, random_uuid
from ..storage.pending import Pending, SendAhead, call_now

log = logging.getLogger(__name__)

#: The versions the fast paths were written against and tested on: (oldest, newest minor), inclusive.
TESTED: dict[str, tuple[str, str]] = {"celery": ("5.5", "5.7"), "kombu": ("5.5", "5.7"), "redis": ("5.0", "8.1")}

NAMES = ("send_ahead", "idle_poll", "direct_publish", "commit_pushes_next", "commit_acks", "claim_on_receipt")


def _untested() -> list[str]:
    """The packages whose installed version is outside :data:`TESTED` (compared by major.minor)."""
    out = []
    for package, (oldest, newest) in TESTED.items():
        try:
            installed = Version(version(package))
        except Exception:  # not installed as a distribution: nothing to compare
            continue
        minor = Version(f"{installed.major}.{installed.minor}")
        if not Version(oldest) <= minor <= Version(newest):
            out.append(f"{package} {installed} (tested {oldest}-{newest})")
    return out


@dataclass
class FastPaths:
    """Which fast paths this process may use, and why any is off.

    ``enabled`` is the switch (``AGENTS_CELERY_FAST_PATHS``) combined with the version check; each path then
    has its own conditions, which the broker wiring records with :meth:`off` as it finds them.
    """

    enabled: bool
    why_not: str = ""
    reasons: dict[str, str] = field(default_factory=dict)

    @classmethod
    def decide(cls, setting: bool) -> FastPaths:
        if not setting:
            return cls(False, "AGENTS_CELERY_FAST_PATHS=0")
        untested = _untested()
        if untested:
            return cls(False, "untested versions: " + ", ".join(untested))
        return cls(True)

    def on(self, name: str) -> bool:
        """Whether ``name`` is on (enabled, and not turned off for a reason of its own)."""
        return self.enabled and name not in self.reasons

    def off(self, name: str, why: str) -> None:
        """Turn ``name`` off for this process, saying why (the first reason stays)."""
        self.reasons.setdefault(name, why)

    def describe(self) -> str:
        """One line for the worker's log: each fast path, on or off (and why)."""
        if not self.enabled:
            return f"all off ({self.why_not})"
        return ", ".join(f"{n} off ({self.reasons[n]})" if n in self.reasons else f"{n} on" for n in NAMES)

    @property
    def send_ahead(self) -> SendAhead:
        return Sent.make if self.on("send_ahead") else call_now

    @property
    def idle_check(self) -> Any:
        from ..storage.connections import reconnect_if_closed as plain

        return reconnect_if_closed if self.on("idle_poll") else plain


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
            # redis-py 5.0-8.1: Connection.send_command / read_response (not documented for direct use)
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
    (redis-py 5.0-8.1: ``Connection._sock``) instead of the three system calls of ``can_read``. ``select``
    would refuse a socket numbered past 1023, which an API process holding a thousand streams has."""
    sock = getattr(client.connection, "_sock", None)
    if sock is not None:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        if poller.poll(0):
            client.connection.disconnect()  # type: ignore[union-attr]


# -- kombu: the message as its Redis transport stores it (direct_publish, commit_pushes_next, commit_acks) -----

#: Transport options that do not change where or how a priority-0 message is stored.
_HARMLESS_OPTIONS = {
    "visibility_timeout",
    "global_keyprefix",
    "unacked_restore_limit",
    "fanout_prefix",
    "health_check_interval",  # connection health only (celery_app.BROKER_HEALTH): the message is the same
    "socket_timeout",
}


#: What ``send_task`` puts in the ``ignore_result`` header when not told: False up to Celery 5.6, None from 5.7.
_SEND_TASK_IGNORE_RESULT = None if Version(version("celery")) >= Version("5.7") else False


class DirectPublisher:
    """Builds a step task's message as kombu 5.5-5.7's Redis transport stores it, to LPUSH it to its queue's list.

    ``app.send_task`` costs about five times the LPUSH it ends in: kombu builds a new redis-py client for every
    message, and Celery routes, declares and copies entities each time. The message is made with Celery's own
    ``amqp.create_task_message`` (same headers, ids and parent/root ids as ``send_task``), wrapped in the
    transport's envelope (base64 body, ``delivery_info``, ``delivery_tag``). :meth:`route` is None whenever the
    shortcut could change behaviour: another broker (RabbitMQ, Sentinel, TLS, several URLs), transport options
    it does not know, a receiver of Celery's publish signals (tracing propagates context through them),
    ``task_send_sent_event``, compression, a default priority or task annotations.
    """

    def __init__(self, app: Celery, task_name: str) -> None:
        self.app, self.task_name = app, task_name
        self._clients: dict[str, redis.Redis] = {}
        self._lock = threading.Lock()
        self._url: str | None = None
        self._prefix = ""
        self._known = False
        self._headers: tuple[int, dict[str, Any], str] | None = None  # pid, the task's headers, serializer

    def route(self, queue: str) -> tuple[str, str] | None:
        """The broker URL and the list key of ``queue``, or None when ``send_task`` must be used.

        The app's configuration is read at the first call; publish-signal receivers at every call."""
        publish_signals = (signals.before_task_publish, signals.after_task_publish)
        if any(signal.has_listeners(sender=self.task_name) for signal in publish_signals):
            return None
        if not self._known:
            self._url, self._known = self._configured_url(), True
        return None if self._url is None else (self._url, self._prefix + queue)

    def send(self, queue: str, args: list[Any], kwargs: dict[str, Any], **ids: str | None) -> bool:
        """LPUSH the message; False when the direct path does not apply (the caller sends it the plain way)."""
        route = self.route(queue)
        if route is None:
            return False
        self._client(route[0]).lpush(route[1], self.envelope(queue, args, kwargs, **ids))
        return True

    def ack_keys(self, redis_url: str) -> tuple[str, str] | None:
        """kombu's unacked index and hash keys when this app consumes from, and sends to, the Redis at
        ``redis_url`` (so a script there can ack a step's message); None otherwise."""
        if self.route("") is None or self._url != redis_url:
            return None
        conf = self.app.conf
        if (conf.broker_read_url or conf.broker_url) != redis_url:
            return None
        channel = kombu_redis.Channel  # the names kombu's QoS reads (public class attributes)
        return self._prefix + channel.unacked_index_key, self._prefix + channel.unacked_key

    def _configured_url(self) -> str | None:
        conf = self.app.conf
        if conf.task_send_sent_event or conf.broker_use_ssl or conf.task_compression:
            return None
        if conf.task_default_priority is not None or conf.task_annotations:  # they change the message
            return None
        url = conf.broker_write_url or conf.broker_url
        if not isinstance(url, str) or ";" in url or urlparse(url).scheme != "redis":
            return None
        options = dict(conf.broker_transport_options or {})
        if set(options) - _HARMLESS_OPTIONS:
            return None
        self._prefix = str(options.get("global_keyprefix") or "")
        return url

    def envelope(
        self,
        queue: str,
        args: list[Any],
        kwargs: dict[str, Any],
        *,
        task_id: str | None = None,
        root_id: str | None = None,
        parent_id: str | None = None,
    ) -> str:
        """The JSON kombu's Redis transport stores for this task (what ``send_task`` would LPUSH).

        Celery's ``create_task_message`` builds the headers once per process (they hold the process's
        name); each message then fills in its ids, arguments and their reprs. The parent and root ids are the
        given ones, else those of the task running in this thread, as ``send_task`` sets them (so Flower links
        the steps).
        """
        app = self.app
        task_id = task_id or random_uuid()
        parent = app.current_worker_task
        if parent is not None and root_id is None and parent_id is None:
            root_id = parent.request.root_id or parent.request.id
            parent_id = parent.request.id
        template, serializer = self._template()
        headers = {**template, "id": task_id, "root_id": root_id or task_id, "stamps": {}}
        headers.update(parent_id=parent_id, argsrepr=repr(args), kwargsrepr=repr(kwargs))
        body = [args, kwargs, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]
        if serializer == "json":  # what kombu's json serializer writes for these plain values
            content_type, encoding, raw = "application/json", "utf-8", json.dumps(body).encode()
        else:
            content_type, encoding, encoded = dumps(body, serializer=serializer)  # type: ignore[no-untyped-call]
            raw = encoded if isinstance(encoded, bytes) else encoded.encode(encoding)
        return json.dumps(
            {
                "body": base64.b64encode(raw).decode(),
                "content-encoding": encoding,
                "content-type": content_type,
                "headers": headers,
                "properties": {
                    "correlation_id": task_id,
                    "reply_to": app.thread_oid,
                    "delivery_mode": 2,
                    "delivery_info": {"exchange": "", "routing_key": queue},
                    "priority": 0,
                    "body_encoding": "base64",
                    "delivery_tag": random_uuid(),
                },
            }
        )

    def _template(self) -> tuple[dict[str, Any], str]:
        current = pid()
        if self._headers is None or self._headers[0] != current:
            message = self.app.amqp.create_task_message(
                "", self.task_name, [], {}, reply_to=self.app.thread_oid, ignore_result=_SEND_TASK_IGNORE_RESULT
            )
            if set(message.properties) != {"correlation_id", "reply_to"}:
                raise RuntimeError(f"unexpected task message properties: {sorted(message.properties)}")
            task = self.app.tasks.get(self.task_name)
            serializer = getattr(task, "serializer", None) or self.app.conf.task_serializer
            self._headers = (current, dict(message.headers), str(serializer))
        return self._headers[1], self._headers[2]

    def _client(self, url: str) -> redis.Redis:
        with self._lock:
            client = self._clients.get(url)
            if client is None:
                client = self._clients[url] = redis.Redis.from_url(url)
            return client

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()


# -- Celery: the ack rides the commit (commit_acks), the claim rides the receipt (claim_on_receipt) ---------

#: Delivered step messages whose ack may ride the commit, by delivery tag (until acked or rejected).
_PENDING: dict[str, StepRequest] = {}
_LOCK = threading.Lock()
#: Sends a received step's claim (see :func:`claim_on_receipt`); None: the task claims when it starts.
_CLAIM_AHEAD: Any = None


def claim_on_receipt(send: Any) -> None:
    """Have the consumer send each received step's claim at once (``send(request)`` returns an object with
    ``close()``); the task then reads the reply (:func:`claimed_ahead`) instead of making the round trip
    itself. Only for pools that run tasks in the consumer's process (threads, solo)."""
    global _CLAIM_AHEAD
    _CLAIM_AHEAD = send


def claimed_ahead(tag: str | None) -> Any:
    """The claim sent when the message with this delivery tag was received, once (None when there is none)."""
    with _LOCK:
        request = _PENDING.get(tag) if tag else None
        if request is None:
            return None
        ahead, request.ahead = request.ahead, None
    return ahead


def commit_acks(tag: str, committed: bool) -> None:
    """Called by the step's thread with ``committed=False`` just before it sends a commit that acks the
    message with this delivery tag (the prefetch slot is freed now), and with ``True`` once it succeeded."""
    with _LOCK:
        request = _PENDING.get(tag)
    if request is not None:
        if committed:
            request.commit_acked = True
        else:
            request.settle_early()


def _settle(message: Any, logger: logging.Logger, errors: Any) -> None:
    """kombu's ack minus the round trip: free the prefetch slot and mark the message acked."""
    if message.acknowledged:
        return
    virtual.QoS.ack(message.channel.qos, message.delivery_tag)  # type: ignore[no-untyped-call]
    message._state = "ACK"  # kombu 5.5-5.7: Message._state, what Message.ack sets


def _remove(message: Any, logger: logging.Logger, errors: Any) -> None:
    """The round trip kombu's ack would have made: the message leaves the unacked keys."""
    try:
        # kombu 5.5-5.7: QoS._remove_from_indices (ack's own removal, without touching the prefetch count)
        message.channel.qos._remove_from_indices(message.delivery_tag).execute()
    except errors as exc:
        logger.critical("Couldn't ack %r, reason:%r", message.delivery_tag, exc, exc_info=True)


def _requeue(message: Any, logger: logging.Logger, errors: Any) -> None:
    """What kombu's reject with requeue does: the message goes back into its queue (behind those waiting)."""
    try:
        message.channel.qos.restore_by_tag(message.delivery_tag, leftmost=True)
    except errors as exc:
        logger.critical("Couldn't requeue %r, reason:%r", message.delivery_tag, exc, exc_info=True)


class StepRequest(Request):  # type: ignore[misc]
    """The step task's request when ``commit_acks`` is on: its ack costs no round trip.

    With the Redis transport, a late-acked message waits in kombu's ``unacked`` hash and ``unacked_index``
    sorted set until the worker acks it: one more round trip (MULTI, ZREM, HDEL, EXEC) after every step, and
    the consumer takes no next message (prefetch 1) until that ack is done. The commit script removes the
    message from both keys in the same atomic call that stores the checkpoint; this request settles kombu's
    own bookkeeping as the commit is sent (:func:`commit_acks`), so the consumer can fetch the next step's
    message while the task waits for the commit's reply. Should the commit fail (lease lost, step committed
    by another attempt, Redis away), it acked nothing, and the request removes the message itself when Celery
    acks it (or requeues it on a reject), as kombu's ack would have. Anything that does not look like kombu's
    Redis transport gets Celery's ordinary ack.
    """

    acknowledged: bool  # Celery's (the base class is untyped)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settled_early = False  # kombu's bookkeeping was settled as the commit was sent
        self.commit_acked = False  # and that commit succeeded
        self.ahead: Any = None  # the claim sent on receipt, until the task takes it
        message = self.message
        # Only kombu's Redis transport keeps acks in the keys the commit removes; only Celery's own ack and
        # reject promises (run on the consumer's loop) are known to be safe to re-aim.
        # Celery 5.5-5.7: Request._on_ack / _on_reject (the promises Celery builds around message.ack_log_error)
        if (
            isinstance(getattr(getattr(message, "channel", None), "qos", None), kombu_redis.QoS)
            and isinstance(self._on_ack, promise)
            and self._on_ack.args == (message.ack_log_error,)
            and isinstance(self._on_reject, promise)
            and self._on_reject.args == (message.reject_log_error,)
        ):
            with _LOCK:
                _PENDING[message.delivery_tag] = self
            send = _CLAIM_AHEAD
            if send is not None:
                try:
                    self.ahead = send(self)
                except Exception as exc:  # the task claims the ordinary way
                    log.warning("step message %s: could not send its claim ahead: %s", message.delivery_tag, exc)

    def settle_early(self) -> None:
        if self.acknowledged or self.settled_early:
            return
        self.settled_early = True
        self._on_loop(self._on_ack, _settle)

    def acknowledge(self) -> None:
        _forget(self)
        if not self.settled_early:
            super().acknowledge()
        elif not self.acknowledged:
            self.acknowledged = True
            if not self.commit_acked:
                log.info("step message %s: its commit did not ack it; acking it now", self.message.delivery_tag)
                self._on_loop(self._on_reject, _remove)

    def reject(self, requeue: bool = False) -> None:
        _forget(self)
        if not self.settled_early:
            super().reject(requeue)
        elif not self.acknowledged:
            self.acknowledged = True
            if not self.commit_acked:
                self._on_loop(self._on_reject, _requeue if requeue else _remove)
            self.send_event("task-rejected", requeue=requeue)

    def _on_loop(self, callback: promise, fn: Any) -> None:
        """Run ``fn(message, logger, errors)`` where Celery runs the ack: the same promise (its callbacks
        kept), the same scheduling onto the consumer's loop; only the call at the end changes."""
        callback.args = (functools.partial(fn, self.message),)  # vine 5: promise.args
        callback(log, self.connection_errors)


def _forget(request: StepRequest) -> None:
    tag = request.message.delivery_tag
    with _LOCK:
        if _PENDING.get(tag) is request:
            del _PENDING[tag]
        ahead, request.ahead = request.ahead, None
    if ahead is not None:  # received but never run: read the claim's reply so its connection goes back clean
        ahead.close()

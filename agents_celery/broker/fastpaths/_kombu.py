"""kombu's side of the fast paths: a step message built as kombu's Redis transport stores it (``direct_publish``,
``commit_pushes_next``, the keys ``commit_acks`` removes), and kombu's ack split in its two halves (the prefetch
slot freed at once; the round trip to the unacked keys made only when the commit did not). See
:mod:`agents_celery.broker.fastpaths`."""

from __future__ import annotations

import base64
import json
import logging
import threading
from importlib.metadata import version
from typing import Any
from urllib.parse import urlparse

import redis
from celery import Celery, signals
from kombu.serialization import dumps
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from packaging.version import Version

from ...ids import pid, random_uuid
from ...storage.connections import from_url

#: Transport options that do not change where or how a priority-0 message is stored.
_HARMLESS_OPTIONS = frozenset(
    {
        "visibility_timeout",
        "global_keyprefix",
        "unacked_restore_limit",
        "fanout_prefix",
        "health_check_interval",  # connection health only (celery_app.BROKER_HEALTH): the message is the same
        "socket_timeout",
        "max_connections",  # the size of kombu's pool (a green worker's: celery_app._with_green_broker)
    }
)


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
                client = self._clients[url] = from_url(url)
            return client

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()


# -- kombu's ack in two halves (commit_acks) ------------------------------------------------------------


def settle(message: Any, logger: logging.Logger, errors: Any) -> None:
    """kombu's ack minus the round trip: free the prefetch slot and mark the message acked."""
    if message.acknowledged:
        return
    virtual.QoS.ack(message.channel.qos, message.delivery_tag)  # type: ignore[no-untyped-call]
    message._state = "ACK"  # kombu 5.5-5.7: Message._state, what Message.ack sets


def remove(message: Any, logger: logging.Logger, errors: Any) -> None:
    """The round trip kombu's ack would have made: the message leaves the unacked keys."""
    try:
        # kombu 5.5-5.7: QoS._remove_from_indices (ack's own removal, without touching the prefetch count)
        message.channel.qos._remove_from_indices(message.delivery_tag).execute()
    except errors as exc:
        logger.critical("Couldn't ack %r, reason:%r", message.delivery_tag, exc, exc_info=True)


def restore(message: Any, logger: logging.Logger, errors: Any) -> None:
    """What kombu's reject with requeue does: the message goes back into its queue (behind those waiting)."""
    try:
        message.channel.qos.restore_by_tag(message.delivery_tag, leftmost=True)
    except errors as exc:
        logger.critical("Couldn't requeue %r, reason:%r", message.delivery_tag, exc, exc_info=True)

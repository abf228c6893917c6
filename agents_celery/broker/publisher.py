"""Sends step tasks: the message Celery would send, in one Redis round trip when the broker allows it.

``app.send_task`` costs about five times the LPUSH it ends in: kombu builds a new redis-py client for every
message, and Celery routes, declares and copies entities each time. A durable run sends one task per step,
so on a plain Redis broker :class:`StepPublisher` builds the message with Celery's own
``amqp.create_task_message`` (same headers, ids and parent/root ids as ``send_task``), wraps it in the
envelope kombu's Redis transport stores (base64 body, ``delivery_info``, ``delivery_tag``) and LPUSHes it
to the queue's list with a client it keeps. Workers cannot tell the difference.

It falls back to ``send_task`` whenever that shortcut could change behaviour: another broker (RabbitMQ,
Sentinel, TLS, several URLs), transport options it does not know, a receiver of Celery's publish
signals (tracing propagates context through them), ``task_send_sent_event``, compression, a default
priority or task annotations.

When the broker is the very Redis that holds run state (the default: one URL for both), the engine goes one
step further and has the commit script push the next step's message (:meth:`StepPublisher.task_for`): the
checkpoint and the next task are written atomically, in the round trip the commit makes anyway.
"""

from __future__ import annotations

import base64
import json
import threading
from typing import Any
from urllib.parse import urlparse

import redis
from celery import Celery, signals
from kombu.serialization import dumps

from ..ids import pid, random_uuid

#: Transport options that do not change where or how a priority-0 message is stored.
_HARMLESS_OPTIONS = {"visibility_timeout", "global_keyprefix", "unacked_restore_limit", "fanout_prefix"}


class StepPublisher:
    """Sends ``task_name(run_id, step, agent=agent_id)`` to ``queue`` on ``app``'s broker."""

    def __init__(self, app: Celery, task_name: str, queue: str) -> None:
        self.app, self.task_name, self.queue = app, task_name, queue
        self._clients: dict[str, redis.Redis] = {}
        self._lock = threading.Lock()
        self._route: tuple[str, str] | None = None
        self._route_known = False
        self._ack_keys: tuple[str, str, str] | None = None  # the read URL and kombu's unacked keys
        self._headers: tuple[int, dict[str, Any], str] | None = None  # pid, the task's headers, serializer

    def send(self, run_id: str, step: int, agent_id: str) -> None:
        args, kwargs = [run_id, step], {"agent": agent_id}
        direct = self.direct_route()
        if direct is None:
            self.app.send_task(self.task_name, args=args, kwargs=kwargs, queue=self.queue)
            return
        client, key = direct
        client.lpush(key, self.envelope(args, kwargs))

    def task_for(self, run_id: str, step: int, agent_id: str, redis_url: str) -> tuple[str, str] | None:
        """The list key and message to push for this step, when the broker is the Redis at ``redis_url``
        (same URL: same server and database), so a script there can push it; None otherwise."""
        route = self._current_route()
        if route is None or route[0] != redis_url:
            return None
        return route[1], self.envelope([run_id, step], {"agent": agent_id})

    def ack_keys(self, redis_url: str) -> tuple[str, str] | None:
        """kombu's unacked index and hash keys when this app consumes from, and sends to, the Redis at
        ``redis_url`` with the transport's default ack emulation (so a script there can ack a step's message);
        None otherwise."""
        route = self._current_route()
        if route is None or route[0] != redis_url:
            return None
        if self._ack_keys is None:
            conf = self.app.conf
            prefix = str(dict(conf.broker_transport_options or {}).get("global_keyprefix") or "")
            self._ack_keys = (conf.broker_read_url or conf.broker_url, prefix + "unacked_index", prefix + "unacked")
        read_url, index_key, hash_key = self._ack_keys
        return (index_key, hash_key) if read_url == redis_url else None

    def direct_route(self) -> tuple[redis.Redis, str] | None:
        """The broker client and list key to LPUSH to, or None when ``send_task`` must be used."""
        route = self._current_route()
        return None if route is None else (self._client(route[0]), route[1])

    def _current_route(self) -> tuple[str, str] | None:
        """The broker URL and list key, or None when ``send_task`` must be used.

        The app's configuration is read at the first send; publish-signal receivers at every send.
        """
        publish_signals = (signals.before_task_publish, signals.after_task_publish)
        if any(signal.has_listeners(sender=self.task_name) for signal in publish_signals):
            return None
        if not self._route_known:
            self._route, self._route_known = self._configured_route(), True
        return self._route

    def _configured_route(self) -> tuple[str, str] | None:
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
        return url, str(options.get("global_keyprefix") or "") + self.queue

    def envelope(self, args: list[Any], kwargs: dict[str, Any]) -> str:
        """The JSON kombu's Redis transport stores for this task (what ``send_task`` would LPUSH).

        Celery's ``create_task_message`` builds the headers once per process (they hold the process's
        name); each message then fills in its ids, arguments and their reprs.
        """
        app = self.app
        task_id = random_uuid()
        root_id = parent_id = None
        parent = app.current_worker_task
        if parent is not None:
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
                    "delivery_info": {"exchange": "", "routing_key": self.queue},
                    "priority": 0,
                    "body_encoding": "base64",
                    "delivery_tag": random_uuid(),
                },
            }
        )

    def _template(self) -> tuple[dict[str, Any], str]:
        """The headers ``create_task_message`` gives this task in this process (ids and arguments aside), and
        the serializer; read once per process (the headers hold the process's name)."""
        current = pid()
        if self._headers is None or self._headers[0] != current:
            message = self.app.amqp.create_task_message(
                "", self.task_name, [], {}, reply_to=self.app.thread_oid, ignore_result=None
            )
            if set(message.properties) != {"correlation_id", "reply_to"}:
                raise RuntimeError(f"unexpected task message properties: {sorted(message.properties)}")
            self._headers = (current, dict(message.headers), str(self.app.conf.task_serializer))
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

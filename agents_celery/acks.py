"""Acks that ride the commit: a step's message leaves kombu's unacked keys in the commit script.

With the Redis transport, a late-acked message waits in kombu's ``unacked`` hash and ``unacked_index``
sorted set until the worker acks it, which is one more round trip (MULTI, ZREM, HDEL, EXEC) after every
step. When the broker is the Redis that holds run state, the step task hands the commit its message's
delivery tag (:meth:`~agents_celery.publisher.StepPublisher.ack_keys` says when that is), the commit script
removes the message from both keys in the same atomic call that stores the checkpoint and pushes the next
step's task, and :class:`StepRequest` then tells kombu the message is acked without going back to Redis.

A refused commit removes nothing: the message stays unacked and Celery acks it (or the broker redelivers
it) as for any other task. Should anything here not look like kombu's Redis transport, the ordinary ack
runs; acking an already removed message again is harmless.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

from celery.worker.request import Request
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from vine import promise

log = logging.getLogger(__name__)

_ACKED: set[str] = set()
_LOCK = threading.Lock()


def acked_by_commit(tag: str) -> None:
    """Record that a commit removed the message with this delivery tag from kombu's unacked keys."""
    with _LOCK:
        _ACKED.add(tag)


def _take(tag: str) -> bool:
    with _LOCK:
        if tag in _ACKED:
            _ACKED.discard(tag)
            return True
        return False


def _settle(message: Any, logger: logging.Logger, errors: Any) -> None:
    """What kombu's ack does once Redis is done: free the prefetch slot and mark the message acked."""
    if message.acknowledged:
        return
    virtual.QoS.ack(message.channel.qos, message.delivery_tag)  # type: ignore[no-untyped-call]
    message._state = "ACK"


class StepRequest(Request):  # type: ignore[misc]
    """The step task's request: its ack skips the round trip when the commit already acked the message."""

    def acknowledge(self) -> None:
        message = self._message
        if not self.acknowledged and _take(message.delivery_tag) and self._settle_acked(message):
            return
        super().acknowledge()

    def reject(self, requeue: bool = False) -> None:
        _take(self._message.delivery_tag)
        super().reject(requeue)

    def _settle_acked(self, message: Any) -> bool:
        """Settle the ack on the consumer's own path (its event loop when it has one), minus the round trip."""
        on_ack = self._on_ack
        channel = getattr(message, "channel", None)
        if not isinstance(getattr(channel, "qos", None), kombu_redis.QoS):
            return False
        if not isinstance(on_ack, promise) or on_ack.args != (message.ack_log_error,):
            return False
        # Same promise (its callbacks kept), same scheduling; only the call at the end changes.
        on_ack.args = (functools.partial(_settle, message),)
        on_ack(log, self._connection_errors)
        self.acknowledged = True
        return True

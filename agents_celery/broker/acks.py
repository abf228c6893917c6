"""Acks that ride the commit: a step's message leaves kombu's unacked keys in the commit script.

With the Redis transport, a late-acked message waits in kombu's ``unacked`` hash and ``unacked_index``
sorted set until the worker acks it, which is one more round trip (MULTI, ZREM, HDEL, EXEC) after every
step, and the consumer takes no next message (prefetch 1) until that ack is done. When the broker is the
Redis that holds run state, the step task hands the commit its message's delivery tag
(:meth:`~agents_celery.broker.publisher.StepPublisher.ack_keys` says when that is), and the commit script removes
the message from both keys in the same atomic call that stores the checkpoint and pushes the next step's
task. :class:`StepRequest` settles kombu's own bookkeeping without a round trip.

It settles it as the commit is sent (:func:`commit_acks`), not when the task returns: the consumer can then
fetch the next step's message, which that commit pushes, while this task waits for the commit's reply and
finishes. For that short while the worker holds one message more than its prefetch limit. Should the commit
fail (lease lost, step committed by another attempt, Redis away), it acked nothing, and the request removes
the message itself when Celery acks it (or requeues it on a reject), as kombu's ack would have.
Should anything here not look like kombu's Redis transport, Celery's ordinary ack runs.

On the threads and solo pools (the consumer and the tasks in one process) the consumer also sends each
received step's claim at once (:func:`claim_on_receipt`), and the task reads the reply
(:func:`claimed_ahead`): the claim's round trip overlaps Celery handing the message to a thread instead of
being the first thing the step waits for. A message received but never run leaves its lease to expire; the
sweeper then gives the step to a new attempt, as after a crash.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

from celery.worker.request import Request
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from vine import promise

log = logging.getLogger(__name__)

#: Delivered step messages whose ack may ride the commit, by delivery tag (until acked or rejected).
_PENDING: dict[str, StepRequest] = {}
_LOCK = threading.Lock()
#: Sends a received step's claim (see :func:`claim_on_receipt`); None: the task claims when it starts.
_CLAIM_AHEAD: Callable[[StepRequest], Any] | None = None


def claim_on_receipt(send: Callable[[StepRequest], Any] | None) -> None:
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
    message._state = "ACK"


def _remove(message: Any, logger: logging.Logger, errors: Any) -> None:
    """The round trip kombu's ack would have made: the message leaves the unacked keys."""
    try:
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
    """The step task's request: when the commit acks its message, its ack costs no round trip."""

    acknowledged: bool  # Celery's (the base class is untyped)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settled_early = False  # kombu's bookkeeping was settled as the commit was sent
        self.commit_acked = False  # and that commit succeeded
        self.ahead: Any = None  # the claim sent on receipt, until the task takes it
        message = self._message
        # Only kombu's Redis transport keeps acks in the keys the commit removes; only Celery's own ack and
        # reject promises (run on the consumer's loop) are known to be safe to re-aim.
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
                log.info("step message %s: its commit did not ack it; acking it now", self._message.delivery_tag)
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
        callback.args = (functools.partial(fn, self._message),)
        callback(log, self._connection_errors)


def _forget(request: StepRequest) -> None:
    with _LOCK:
        if _PENDING.get(request._message.delivery_tag) is request:
            del _PENDING[request._message.delivery_tag]
        ahead, request.ahead = request.ahead, None
    if ahead is not None:  # received but never run: read the claim's reply so its connection goes back clean
        ahead.close()

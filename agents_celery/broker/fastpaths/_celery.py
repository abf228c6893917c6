"""Celery's side of the fast paths: the step task's request class, whose ack rides the commit (``commit_acks``)
and whose claim rides the receipt (``claim_on_receipt``). See :mod:`agents_celery.broker.fastpaths`.

The state these share between the consumer and the step's thread (the messages received and not yet settled,
the claim sender) is a :class:`StepMessages`, one per Celery app: :class:`~agents_celery.broker.extension.
AgentsCelery` owns it (``ext.step_messages``) and the request class it gives the step task
(:attr:`StepMessages.request_class`) holds it, so nothing here is a module-level global.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any, ClassVar

from celery.worker.request import Request
from kombu.transport import redis as kombu_redis
from vine import promise

from ._kombu import remove, restore, settle

log = logging.getLogger("agents_celery.broker.fastpaths")  # the name it logged under before the split


class StepMessages:
    """The step messages one app's consumer received whose ack may ride the commit, by delivery tag (until
    acked or rejected), and what sends a received step's claim (None: the task claims when it starts).

    The consumer's thread adds and removes them; the step's thread looks them up, under one lock.
    """

    def __init__(self) -> None:
        self._pending: dict[str, StepRequest] = {}
        self._lock = threading.Lock()
        self._claim_ahead: Any = None
        #: The step task's request class, bound to these messages.
        self.request_class: type[StepRequest] = type("StepRequest", (StepRequest,), {"messages": self})

    def claim_on_receipt(self, send: Any) -> None:
        """Have the consumer send each received step's claim at once (``send(request)`` returns an object with
        ``close()``); the task then reads the reply (:meth:`claimed_ahead`) instead of making the round trip
        itself. Only for pools that run tasks in the consumer's process (threads, solo)."""
        self._claim_ahead = send

    def claimed_ahead(self, tag: str | None) -> Any:
        """The claim sent when the message with this delivery tag was received, once (None when there is none)."""
        with self._lock:
            request = self._pending.get(tag) if tag else None
            if request is None:
                return None
            ahead, request.ahead = request.ahead, None
        return ahead

    def commit_acks(self, tag: str, committed: bool) -> None:
        """Called by the step's thread with ``committed=False`` just before it sends a commit that acks the
        message with this delivery tag (the prefetch slot is freed now), and with ``True`` once it succeeded."""
        with self._lock:
            request = self._pending.get(tag)
        if request is not None:
            if committed:
                request.commit_acked = True
            else:
                request.settle_early()

    def received(self, request: StepRequest) -> None:
        """Keep a received message's request (and send its claim, when claims ride the receipt)."""
        tag = request.message.delivery_tag
        with self._lock:
            self._pending[tag] = request
        send = self._claim_ahead
        if send is not None:
            try:
                request.ahead = send(request)
            except Exception as exc:  # the task claims the ordinary way
                log.warning("step message %s: could not send its claim ahead: %s", tag, exc)

    def forget(self, request: StepRequest) -> None:
        """The request was acked or rejected: drop it (and read the reply of a claim its task never took)."""
        tag = request.message.delivery_tag
        with self._lock:
            if self._pending.get(tag) is request:
                del self._pending[tag]
            ahead, request.ahead = request.ahead, None
        if ahead is not None:  # received but never run: read the claim's reply so its connection goes back clean
            ahead.close()


class StepRequest(Request):  # type: ignore[misc]
    """The step task's request when ``commit_acks`` is on: its ack costs no round trip.

    With the Redis transport, a late-acked message waits in kombu's ``unacked`` hash and ``unacked_index``
    sorted set until the worker acks it: one more round trip (MULTI, ZREM, HDEL, EXEC) after every step, and
    the consumer takes no next message (prefetch 1) until that ack is done. The commit script removes the
    message from both keys in the same atomic call that stores the checkpoint; this request settles kombu's
    own bookkeeping as the commit is sent (:meth:`StepMessages.commit_acks`), so the consumer can fetch the next
    step's message while the task waits for the commit's reply. Should the commit fail (lease lost, step committed
    by another attempt, Redis away), it acked nothing, and the request removes the message itself when Celery
    acks it (or requeues it on a reject), as kombu's ack would have. Anything that does not look like kombu's
    Redis transport gets Celery's ordinary ack.

    Use the subclass bound to an app's :class:`StepMessages` (:attr:`StepMessages.request_class`); this one,
    bound to none, is Celery's plain request.
    """

    acknowledged: bool  # Celery's (the base class is untyped)
    #: The messages this request is kept in (set on the bound subclass).
    messages: ClassVar[StepMessages | None] = None

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
            self.messages is not None
            and isinstance(getattr(getattr(message, "channel", None), "qos", None), kombu_redis.QoS)
            and isinstance(self._on_ack, promise)
            and self._on_ack.args == (message.ack_log_error,)
            and isinstance(self._on_reject, promise)
            and self._on_reject.args == (message.reject_log_error,)
        ):
            self.messages.received(self)

    def settle_early(self) -> None:
        if self.acknowledged or self.settled_early:
            return
        self.settled_early = True
        self._on_loop(self._on_ack, settle)

    def acknowledge(self) -> None:
        if self.messages is not None:
            self.messages.forget(self)
        if not self.settled_early:
            super().acknowledge()
        elif not self.acknowledged:
            self.acknowledged = True
            if not self.commit_acked:
                log.info("step message %s: its commit did not ack it; acking it now", self.message.delivery_tag)
                self._on_loop(self._on_reject, remove)

    def reject(self, requeue: bool = False) -> None:
        if self.messages is not None:
            self.messages.forget(self)
        if not self.settled_early:
            super().reject(requeue)
        elif not self.acknowledged:
            self.acknowledged = True
            if not self.commit_acked:
                self._on_loop(self._on_reject, restore if requeue else remove)
            self.send_event("task-rejected", requeue=requeue)

    def _on_loop(self, callback: promise, fn: Any) -> None:
        """Run ``fn(message, logger, errors)`` where Celery runs the ack: the same promise (its callbacks
        kept), the same scheduling onto the consumer's loop; only the call at the end changes."""
        callback.args = (functools.partial(fn, self.message),)  # vine 5: promise.args
        callback(log, self.connection_errors)

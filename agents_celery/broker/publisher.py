"""Sends step tasks by name, so a sender (an API process, the Runtime) needs no agent code.

The plain path is Celery's ``app.send_task``. With the ``direct_publish`` fast path on
(:class:`~agents_celery.broker.fastpaths.DirectPublisher`), a plain Redis broker gets the very message
``send_task`` would send in one LPUSH. :func:`sender_app` is the Celery app a caller sends with when it has none
of its own: a bare app with the broker settings, no task registered, no worker signals connected.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery

from ..runs import RunState
from ..settings import Settings
from ..webhook import NOTIFIED, event_key, summary
from .fastpaths import DirectPublisher, FastPaths

log = logging.getLogger(__name__)

#: The step task's stable name (Flower shows it with the run id and step as arguments).
STEP_TASK = "agents_celery.step"
#: The task that delivers a run's webhook (:mod:`agents_celery.broker.webhooks`).
WEBHOOK_TASK = "agents_celery.webhook"
#: What ends a run a user's Celery canvas waits for (:mod:`.signatures`).
ENDED_TASK = "agents_celery.run_ended"
#: The task that delivers an A2A task's push notifications (:mod:`agents_celery.broker.a2apush`).
A2A_PUSH_TASK = "agents_celery.a2a_push"
#: Options our tasks carry themselves, so the host app's settings neither change them nor are changed.
OWN_TASK_OPTIONS: dict[str, Any] = {
    "shared": False,
    "bind": True,
    "serializer": "json",
    "acks_late": True,
    "reject_on_worker_lost": True,
    "ignore_result": True,
}


def sender_app(settings: Settings) -> Celery:
    """A Celery app that only sends step tasks: the broker of ``settings``, JSON only."""
    app = Celery("agents_celery", broker=settings.celery_broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        broker_transport_options=settings.broker_transport_options,
        broker_connection_retry_on_startup=True,
    )
    return app


class StepPublisher:
    """Sends ``agents_celery.step(run_id, step, agent=agent_id)`` to a queue of ``app``'s broker."""

    def __init__(self, app: Celery, queue: str, fast: FastPaths) -> None:
        self.app, self.queue = app, queue
        self.direct = DirectPublisher(app, STEP_TASK) if fast.on("direct_publish") else None

    def send(
        self,
        run_id: str,
        step: int,
        agent_id: str,
        queue: str | None = None,
        *,
        task_id: str | None = None,
        root_id: str | None = None,
        parent_id: str | None = None,
    ) -> None:
        """Send step ``step`` of the run to ``queue`` (default: the configured one). ``root_id`` and
        ``parent_id`` link it to the run's earlier steps when it is not sent from inside the step before (where
        Celery links it by itself)."""
        args: list[Any] = [run_id, step]
        kwargs = {"agent": agent_id}
        target = queue or self.queue
        ids = {"task_id": task_id, "root_id": root_id, "parent_id": parent_id}
        if self.direct is not None and self.direct.send(target, args, kwargs, **ids):
            return
        self.app.send_task(STEP_TASK, args=args, kwargs=kwargs, queue=target, **ids)

    def notify(self, state: RunState, step: int, queue: str | None = None) -> None:
        """Send the webhook task of the run's new status, when the run has a ``webhook_url`` (and the status is
        one webhooks are sent for), and the run's end to the Celery canvas waiting for it (``run_signature``).
        ``step``: the run's committed steps (part of the idempotency key)."""
        if state.canvas is not None and state.status.is_final:
            send_end(self.app, state, queue or self.queue)
        if not state.webhook_url or state.status.value not in NOTIFIED:
            return
        key = event_key(state.run_id, step, state.status.value)
        args = [state.webhook_url, key, summary(state)]
        self.app.send_task(WEBHOOK_TASK, args=args, queue=queue or self.queue, task_id=f"webhook-{key}")

    def push(self, run_id: str, config_id: str) -> None:
        """Start the deliveries of an A2A push config (:mod:`agents_celery.broker.a2apush`)."""
        self.app.send_task(A2A_PUSH_TASK, args=[run_id, config_id], queue=self.queue)

    def close(self) -> None:
        if self.direct is not None:
            self.direct.close()


def send_end(app: Celery, state: RunState, queue: str) -> None:
    """Send the run's end to the Celery canvas that waits for it (:mod:`.signatures`): the run's output, with the
    rest of the chain, the links, the errbacks and the chord of the task that started it as the task's options."""
    canvas = state.canvas or {}
    options: dict[str, Any] = {
        "chain": canvas.get("chain") or None,
        "link": canvas.get("callbacks") or None,
        "link_error": canvas.get("errbacks") or None,
        "chord": canvas.get("chord") or None,
        "group_id": canvas.get("group") or None,
        "group_index": canvas.get("group_index"),
        "root_id": canvas.get("root_id") or None,
        "parent_id": canvas.get("id") or None,
    }
    args = [state.output, state.run_id, state.status.value, state.error.message if state.error else None]
    app.send_task(ENDED_TASK, args=args, queue=queue, task_id=f"{state.run_id}-ended", **options)
    log.info("run=%s: its end (%s) sent to the canvas waiting for it", state.run_id, state.status.value)

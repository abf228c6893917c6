"""Delivers A2A push notifications: the ``agents_celery.a2a_push(run_id, config_id)`` task, registered by
``configure(app)``.

One chain of tasks per config follows its task's log: each folds the log into the task
(:class:`~agents_celery.a2a.task.TaskFold`), POSTs the status updates its receiver has not taken yet, in order, and
records each one taken (:mod:`agents_celery.storage.pushes`), then sends the next task of the chain (every
:data:`LIVE_POLL_SECONDS` while the run works, :data:`PAUSED_POLL_SECONDS` while it waits for input) until the run
ended and everything was taken. A POST is the ``StreamResponse`` JSON (``{"statusUpdate": ...}``) with
``X-A2A-Notification-Token`` (the config's token) and the config's ``authentication`` as ``Authorization``; a
receiver that does not answer 2xx is tried again with the webhooks' backoff and number of retries, through the
same SSRF guard (:func:`agents_celery.broker.webhooks.post`: resolved, checked, pinned; the allow-list applies).
Delivery is at least once: a worker dying after the POST and before the record sends that update again.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..a2a.task import TaskFold
from ..errors import RunExpiredError, RunNotFoundError
from ..events import Event
from ..settings import Settings
from ..storage.pushes import PushConfigs
from ..webhook import WebhookAllow
from .publisher import A2A_PUSH_TASK, OWN_TASK_OPTIONS
from .webhooks import DestinationRefused, WebhookRefused, backoff, post

log = logging.getLogger(__name__)

#: How soon the chain looks at the log again while the run works, and while it waits for input.
LIVE_POLL_SECONDS = 0.5
PAUSED_POLL_SECONDS = 5.0
TOKEN = "X-A2A-Notification-Token"


def updates_after(events: list[Event], run_id: str, session_id: str, after: int) -> list[tuple[int, dict[str, Any]]]:
    """The status updates of the events after offset ``after``: (offset, ``StreamResponse``), in order."""
    fold = TaskFold(run_id, session_id)
    out = []
    for ev in events:
        for result in fold.feed(ev):
            if ev.offset > after and "statusUpdate" in result:
                out.append((ev.offset, result))
    return out


def headers_of(config: dict[str, Any]) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "User-Agent": "agents-celery-a2a-push"}
    if config.get("token"):
        headers[TOKEN] = str(config["token"])
    auth = config.get("authentication") or {}
    if auth.get("scheme") and auth.get("credentials"):
        headers["Authorization"] = f"{auth['scheme']} {auth['credentials']}"
    return headers


def register(app: Any, settings: Settings, store_of: Any) -> None:
    """The push task of ``app``; ``store_of()`` gives the worker's run store (its Redis, keys and log)."""

    @app.task(  # type: ignore[untyped-decorator]
        name=A2A_PUSH_TASK, queue=settings.queue, max_retries=settings.webhook_retries, **OWN_TASK_OPTIONS
    )
    def a2a_push(self: Any, run_id: str, config_id: str) -> str:
        """Deliver a task's status updates to one push config's receiver, in order; then follow the log."""
        store = store_of()
        pushes = PushConfigs(store.redis, store.keys, settings.retention_ms)
        config = pushes.get(run_id, config_id)
        if config is None:
            return "gone"  # deleted, or the run with it
        try:
            info = store.log.info(run_id)  # before the read: an end it says is in what the read returns
            events = store.log.read(run_id, -1)
        except (RunNotFoundError, RunExpiredError):
            return "gone"
        allow = WebhookAllow.parse(settings.webhook_allow)
        for offset, update in updates_after(events, run_id, info.session_id, pushes.delivered(run_id, config_id)):
            data = json.dumps(update, separators=(",", ":")).encode()
            try:
                status = post(config["url"], data, headers_of(config), settings.webhook_timeout_seconds, allow)
                if not 200 <= status < 300:
                    raise WebhookRefused(f"the receiver answered {status}")
            except DestinationRefused as exc:
                log.warning("A2A push %s of %s refused, not sent: %s", config_id, run_id, exc)
                return "refused"
            except WebhookRefused as exc:
                if self.request.retries >= settings.webhook_retries:
                    log.error("A2A push %s of %s given up at offset %d: %s", config_id, run_id, offset, exc)
                    return "given up"
                raise self.retry(exc=exc, countdown=backoff(settings, self.request.retries)) from None
            pushes.mark(run_id, config_id, offset)
        if info.status == "ended":
            return "delivered"
        pushes.renew(run_id)
        wait = LIVE_POLL_SECONDS if info.status == "live" else PAUSED_POLL_SECONDS
        a2a_push.apply_async((run_id, config_id), countdown=wait, queue=settings.queue)
        return "following"

"""Delivers webhooks: the ``agents_celery.webhook(url, key, summary)`` task, registered by ``configure(app)``.

A webhook is sent (by the engine, the sweeper or the Runtime, :meth:`StepPublisher.notify`) when a run with a
``webhook_url`` completes, fails, is cancelled or pauses; the summary is built then, so every attempt sends
the same body. A 2xx answer delivers it; anything else (an error status, a refused connection, a timeout) is
retried ``webhook_retries`` times, ``webhook_backoff_seconds`` * 2^n apart (at most 10 minutes), then given up
with an error in the worker's log. The task is acked late and re-delivered if its worker dies, so delivery is
at least once: receivers drop duplicates by ``Idempotency-Key`` (:mod:`agents_celery.webhook`).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import httpx

from ..settings import Settings
from ..webhook import SIGNATURE, TIMESTAMP, sign

log = logging.getLogger(__name__)

#: Longest wait between two attempts.
MAX_BACKOFF_SECONDS = 600.0


class WebhookRefused(Exception):
    """The receiver did not take the webhook (this attempt)."""


def deliver(settings: Settings, url: str, key: str, body: dict[str, Any]) -> None:
    """One attempt; WebhookRefused unless the receiver answered 2xx."""
    if not settings.webhook_secret:
        raise WebhookRefused("AGENTS_CELERY_WEBHOOK_SECRET is not set on this worker: webhooks are not signed")
    data = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "agents-celery-webhook",
        "Idempotency-Key": key,
        TIMESTAMP: timestamp,
        SIGNATURE: sign(settings.webhook_secret, timestamp, data),
    }
    try:
        response = httpx.post(url, content=data, headers=headers, timeout=settings.webhook_timeout_seconds)
    except httpx.HTTPError as exc:
        raise WebhookRefused(f"{type(exc).__name__}: {exc}") from exc
    if not 200 <= response.status_code < 300:
        raise WebhookRefused(f"the receiver answered {response.status_code}")


def backoff(settings: Settings, retries: int) -> float:
    """Seconds before attempt ``retries + 2``."""
    return float(min(settings.webhook_backoff_seconds * 2**retries, MAX_BACKOFF_SECONDS))


def register(app: Any, settings: Settings) -> None:
    """The webhook task of ``app``, with its own options (like the step task: nothing of the host's changes)."""
    from .publisher import OWN_TASK_OPTIONS, WEBHOOK_TASK

    @app.task(  # type: ignore[untyped-decorator]
        name=WEBHOOK_TASK, queue=settings.queue, max_retries=settings.webhook_retries, **OWN_TASK_OPTIONS
    )
    def webhook(self: Any, url: str, key: str, body: dict[str, Any]) -> str:
        """Deliver one run's webhook (retried with backoff until the receiver takes it)."""
        try:
            deliver(settings, url, key, body)
        except WebhookRefused as exc:
            if self.request.retries >= settings.webhook_retries:
                log.error("webhook %s to %s given up after %d attempts: %s", key, url, self.request.retries + 1, exc)
                return "given up"
            log.warning("webhook %s to %s: %s; trying again", key, url, exc)
            raise self.retry(exc=exc, countdown=backoff(settings, self.request.retries)) from None
        return "delivered"

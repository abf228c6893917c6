"""Webhooks of runs, without I/O: what is sent when a run completes, fails, is cancelled or pauses, and how it
is signed. The worker's ``agents_celery.webhook`` task delivers it (:mod:`agents_celery.broker.webhooks`).

A delivery is a POST of the summary as JSON with these headers:

- ``Idempotency-Key``: the same for every attempt at one event of one run (``<run_id>:<step>:<status>``), so a
  receiver drops duplicates (delivery is at least once);
- ``X-Agents-Celery-Timestamp``: Unix seconds of this attempt;
- ``X-Agents-Celery-Signature``: ``sha256=`` and the hex HMAC-SHA256, keyed with
  ``AGENTS_CELERY_WEBHOOK_SECRET``, of ``<timestamp>.<body>`` (check it, and the timestamp's age, before
  trusting the body: :func:`verify`).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Any
from urllib.parse import urlparse

from .errors import ValidationError
from .runs import RunState

SIGNATURE = "X-Agents-Celery-Signature"
TIMESTAMP = "X-Agents-Celery-Timestamp"
#: Statuses a webhook is sent for.
NOTIFIED = ("completed", "failed", "cancelled", "paused")


def check_url(url: str) -> str:
    """``url`` if it is an absolute http(s) URL (ValidationError otherwise)."""
    parsed = urlparse(url) if isinstance(url, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc or len(url) > 2000:
        raise ValidationError(f"webhook_url must be an http:// or https:// URL, got {url!r}")
    return url


def event_key(run_id: str, step: int, status: str) -> str:
    """The idempotency key of one event of one run (stable across attempts and re-sends)."""
    return f"{run_id}:{step}:{status}"


def summary(state: RunState) -> dict[str, Any]:
    """What a webhook says about the run."""
    return {
        "run_id": state.run_id,
        "agent_id": state.agent_id,
        "session_id": state.session_id,
        "user_id": state.user_id,
        "status": state.status.value,
        "output": state.output,
        "error": state.error.model_dump() if state.error else None,
        "pending": [
            {"tool_call_id": c.id, "tool_name": c.name, "tool_args": c.args, "reason": c.pause_reason}
            for c in state.pending
        ],
        "schedule_id": state.schedule_id,
    }


def sign(secret: str, timestamp: str, body: bytes) -> str:
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify(secret: str, headers: Any, body: bytes, tolerance_seconds: float = 300.0) -> bool:
    """Whether a received webhook is ours and fresh (``headers``: any mapping with ``get``)."""
    timestamp = headers.get(TIMESTAMP) or ""
    given = headers.get(SIGNATURE) or ""
    try:
        age = abs(time.time() - float(timestamp))
    except ValueError:
        return False
    return age <= tolerance_seconds and hmac.compare_digest(given, sign(secret, timestamp, body))

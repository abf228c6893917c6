"""The Celery app a worker runs: ``celery -A agents_celery.broker.worker worker`` (``agents-celery worker`` wraps it).

It serves the agents modules named by ``AGENTS_CELERY_AGENTS``.
"""

from __future__ import annotations

import os

from .celery_app import create_celery_app
from .observability import instrument, setup_logging

app = create_celery_app()
if os.environ.get("AGENTS_CELERY_TRACING", "").lower() in ("1", "true", "yes", "on"):
    instrument(app)  # log context, and OpenTelemetry spans for each step, continuing the caller's trace
else:
    setup_logging(app)  # log lines inside a step carry run=... step=... attempt=...

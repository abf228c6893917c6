"""The Celery app a worker runs: ``celery -A agents_celery.worker worker`` (``agents-celery worker`` wraps it).

It serves the agents modules named by ``AGENTS_CELERY_AGENTS``.
"""

from __future__ import annotations

from .celery_app import create_celery_app
from .observability import setup_logging

app = create_celery_app()
setup_logging(app)  # log lines inside a step carry run=... step=... attempt=...

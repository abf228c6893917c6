"""The Celery app a bench worker runs: ``agents_celery.broker.worker:app`` with the broker keys under the bench prefix.

Same as ``agents-celery worker`` (``create_celery_app()`` from the environment, which serves
``AGENTS_CELERY_AGENTS``); the only change is kombu's ``global_keyprefix``, so a bench's queues and unacked
messages live under its own key prefix and are deleted with it.
"""

from __future__ import annotations

import os

from agents_celery.broker.celery_app import create_celery_app

from .common import mark_ready, prefix_broker_keys

app = create_celery_app()
prefix_broker_keys(app, os.environ["BENCH_PREFIX"])
mark_ready(app, os.environ["BENCH_PREFIX"])

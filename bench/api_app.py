"""The API app gunicorn serves in the SSE bench: ``create_app()`` with a Runtime that sends to the bench's
prefixed broker keys (otherwise the same as ``agents_celery.contrib.flask:create_app()``)."""

from __future__ import annotations

import os

from flask import Flask

from agents_celery.contrib.flask import create_app

from .common import runtime_for


def create() -> Flask:
    return create_app(runtime=runtime_for(os.environ["BENCH_PREFIX"], os.environ["AGENTS_CELERY_QUEUE"]))

"""A user's own Celery app with tasks of its own, joined by agents-celery
(``celery -A tests.support.canvas_app worker``): tests/test_run_signature.py puts durable runs into its chains and
chords with ``run_signature``."""

from __future__ import annotations

import os

from celery import Celery

import agents_celery

CANVAS_QUEUE = os.environ.get("CANVAS_QUEUE", "canvas-tasks")

app = Celery(
    "canvas",
    broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/9"),
    backend=os.environ.get("CANVAS_RESULT_BACKEND", "redis://127.0.0.1:6379/9"),
)
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    result_serializer="json",
    result_expires=600,
    task_routes={"tests.support.canvas_app.*": {"queue": CANVAS_QUEUE}},
)


@app.task
def fetch(topic: str) -> str:
    return f"notes on {topic}"


@app.task
def shout(text: object) -> str:
    return str(text).upper()


@app.task
def join(results: list[object]) -> str:
    return " | ".join(map(str, results))


agents = agents_celery.configure(app)  # settings and agents modules from the environment

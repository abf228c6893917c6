"""A host's own Celery app, as a shop already runs it, joined by agents-celery (``celery -A tests.support.host_app``).

It pickles, keeps results in a backend, routes its task to its own queue and acks early. The tests read the
host's settings before and after ``configure`` from :data:`BEFORE`.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

import agents_celery

HOST_QUEUE = os.environ.get("HOST_QUEUE", "host-tasks")
BROKER = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/9")

app = Celery("host", broker=BROKER, backend=os.environ.get("HOST_RESULT_BACKEND", "redis://127.0.0.1:6379/12"))
app.conf.update(
    task_serializer="pickle",
    accept_content=["pickle"],
    result_serializer="pickle",
    result_accept_content=["pickle"],
    task_acks_late=False,
    task_ignore_result=False,
    worker_prefetch_multiplier=4,
    task_routes={"tests.support.host_app.multiply": {"queue": HOST_QUEUE}},
)


class Point:
    """Only pickle carries this: the host's task result is an object of its own."""

    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y


@app.task
def multiply(point: Any, factor: int) -> Point:
    return Point(point.x * factor, point.y * factor)


SETTINGS = ("task_serializer", "accept_content", "result_serializer", "task_acks_late", "task_ignore_result")
BEFORE = {name: app.conf[name] for name in (*SETTINGS, "worker_prefetch_multiplier")}
ROUTES_BEFORE = app.conf.task_routes

agents = agents_celery.configure(app)  # settings and agents module from the environment

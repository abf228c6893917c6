"""The project's Celery app, as Django and Celery document it, joined by agents-celery with one call.

``configure(app)`` reads ``AGENTS_CELERY`` from the Django settings (then the environment); it changes nothing
the project's own tasks see.
"""

from __future__ import annotations

import os

from celery import Celery

import agents_celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_app.settings")

app = Celery("django_app")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

agents = agents_celery.configure(app)

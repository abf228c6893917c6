"""The project's Celery app (Django's usual ``proj/celery.py``), plus ``configure(app)`` for agents-celery."""

from __future__ import annotations

import os

from celery import Celery

from agents_celery import configure

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_app.settings")

app = Celery("django_app")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

#: The agents-celery extension: settings from the environment, agents from AGENTS_CELERY_AGENTS.
agents = configure(app)

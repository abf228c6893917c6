"""Django settings: just enough for the example (no database, no sessions)."""

from __future__ import annotations

import os

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "examples.django_app.urls"
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True

# Celery reads CELERY_* from here; agents-celery reads AGENTS_CELERY_* from the environment.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or os.environ.get(
    "AGENTS_CELERY_REDIS_URL", "redis://localhost:6379/0"
)
CELERY_TASK_IGNORE_RESULT = True

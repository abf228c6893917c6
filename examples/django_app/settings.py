"""Django settings of the example project: the usual apps, a SQLite database, agents-celery installed."""

from __future__ import annotations

import os
from pathlib import Path

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "0") == "1"
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "examples.django_app.urls"
ASGI_APPLICATION = "examples.django_app.asgi.application"
WSGI_APPLICATION = "examples.django_app.wsgi.application"
USE_TZ = True

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "agents_celery.contrib.django",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DJANGO_DB", str(Path(__file__).resolve().parent / "db.sqlite3")),
    }
}

# agents-celery: these keys over the environment (AGENTS_CELERY_*) over the defaults.
AGENTS_CELERY = {
    "ALLOW_ANONYMOUS": os.environ.get("AGENTS_CELERY_ALLOW_ANONYMOUS", "") in ("1", "true"),
    "AGENTS": os.environ.get("AGENTS_CELERY_AGENTS", "examples.agents"),
}

# Celery reads CELERY_* from here (app.config_from_object(..., namespace="CELERY")).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or os.environ.get(
    "AGENTS_CELERY_REDIS_URL", "redis://localhost:6379/0"
)

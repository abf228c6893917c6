"""A minimal Django project with Celery that starts agent runs from a view and streams them as SSE.

The Celery app (``celery.py``) is the usual Django one, configured for agents-celery with one call. Run it::

    export DJANGO_SETTINGS_MODULE=examples.django_app.settings AGENTS_CELERY_AGENTS=examples.agents
    celery -A examples.django_app worker -Q agents,celery --pool threads
    python -m django runserver --noreload

then ``curl -N -X POST localhost:8000/runs/assistant -d message='What time is it?'``.
"""

from __future__ import annotations

from .celery import app as celery_app

__all__ = ["celery_app"]

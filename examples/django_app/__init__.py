"""A small Django project using the reusable app ``agents_celery.contrib.django`` (Django's usual layout).

::

    export DJANGO_SETTINGS_MODULE=examples.django_app.settings
    python -m django migrate
    celery -A examples.django_app worker -Q agents,celery -P threads       # or: agents-celery worker ...
    uvicorn examples.django_app.asgi:application --port 8000               # ASGI: streams hold no thread

then ``curl -N -X POST localhost:8000/ai/agents/assistant/runs -H 'Authorization: Bearer <key>' -d
message='What time is it?'`` (set ``AGENTS_CELERY_API_KEY``), or log in at ``/admin/`` and call the API from
the browser (with the CSRF token), or set ``AGENTS_CELERY_ALLOW_ANONYMOUS=1``.

The AI SDK chat page of ``examples/aisdk_chat`` (``useChat``, bundled by ``scripts/ensure-aisdk-page``) is served
at ``/chat/?agent=assistant`` by two views of the project's own (``views.py``): it talks to ``/ai/aisdk/<agent>``
as an anonymous caller (``AGENTS_CELERY_ALLOW_ANONYMOUS=1``): it sends no CSRF token, so a browser logged in at
``/admin/`` (whose session cookie makes each POST need one) gets 403 from it.
"""

from __future__ import annotations

from .celery import app as celery_app

__all__ = ["celery_app"]

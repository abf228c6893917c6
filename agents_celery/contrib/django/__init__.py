"""agents-celery as a reusable Django app: the HTTP API of the Flask blueprint, in your Django project.

::

    # settings.py
    INSTALLED_APPS = [..., "agents_celery.contrib.django"]
    AGENTS_CELERY = {"REDIS_URL": "redis://localhost:6379/0", "API_KEY": None, "ALLOW_ANONYMOUS": False}

    # urls.py
    urlpatterns = [..., path("ai/", include("agents_celery.contrib.django.urls"))]

The routes and their answers are those of :mod:`agents_celery.http.protocol` (the same as the Flask API's):
``/agents``, ``/agents/<id>/runs`` (AgentOS dialect), ``.../continue``, ``.../resume``, ``.../cancel``,
``/runs/<id>``, ``/runs/<id>/events`` (SSE), ``/health``, ``/openapi.json``, plus ``admin/runs/`` (a read-only
page of recent runs for staff). Views are async: under ASGI (uvicorn, daphne) a stream holds no thread while it
waits, reading the log with the asyncio Redis client; under WSGI the same views stream synchronously.

**Who may do what.** A request with ``Authorization: Bearer <API_KEY>`` is a machine client and may do
anything. Otherwise the Django user decides: a run belongs to the user who started it (``user_id`` is their
primary key), a session to the user of its first run, a schedule to its maker; they and staff may read,
continue, stop and delete them; others get 404. Anonymous requests are refused (401) unless ``ALLOW_ANONYMOUS``
is true, and then own what they start together (user id ``(anonymous)``), never what API-key clients started.
Requests authenticated by Django's session cookie need the CSRF token (``X-CSRFToken``) on POST, as any Django
view; API-key and anonymous clients need none. ``AUTHORIZE`` (a dotted path to
``authorize(action, user, resource, agent_id) -> bool``, with the Django user and the run, session or schedule)
replaces the default rule.

**Settings**: ``AGENTS_CELERY`` in settings.py (keys in any case: ``REDIS_URL``, ``API_KEY``, ``QUEUE`` ...;
front-end keys ``ALLOW_ANONYMOUS``, ``AUTHORIZE``, ``KEEPALIVE_SECONDS``, ``BLOCK_SECONDS``,
``API_REDIS_MAX_CONNECTIONS``, ``IDLE_CLOSE_SECONDS``) over the environment (``AGENTS_CELERY_*``) over the
defaults. ``agents_celery.configure(app)`` in your ``proj/celery.py`` reads the same dict.
"""

"""Serving the API.

Development: ``agents-celery api --host 127.0.0.1 --port 7777`` runs Flask's threaded server.

Production: gunicorn with threads, one thread per open event stream (streams mostly wait in Redis)::

    gunicorn "agents_celery.api:create_app()" --worker-class gthread --workers 2 --threads 100 \\
        --bind 0.0.0.0:7777 --timeout 0

``--timeout 0`` (or a large value) because a gthread worker is only considered stuck when *all* threads
block; streams send a keep-alive comment every 15 s, so a proxy in front needs a read timeout above that
(and ``X-Accel-Buffering: no`` is already sent for nginx). We chose gthread over ``-k gevent``: redis-py
and Celery's producer are blocking clients, which gevent only serves well after monkey-patching the whole
process; threads need nothing. Size ``--threads`` to the number of concurrent streams per worker.
"""

from __future__ import annotations

from . import create_app


def serve(host: str = "127.0.0.1", port: int = 7777) -> int:
    """Run the development server (threaded) until interrupted; returns the exit status."""
    app = create_app()
    app.run(host=host, port=port, threaded=True, use_reloader=False)
    return 0

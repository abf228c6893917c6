"""Serving the API.

Development: ``agents-celery api --host 127.0.0.1 --port 7777`` runs Flask's threaded server.

Production: gunicorn's gevent worker, one greenlet per connection::

    gunicorn "agents_celery.contrib.flask:create_app()" --worker-class gevent --workers 2 \\
        --worker-connections 2000 --bind 127.0.0.1:7777

(``--bind 0.0.0.0:7777`` only behind a proxy or inside a container, and with an API key or a login.)

An open event stream mostly waits in Redis (XREAD BLOCK), so a stream costs a greenlet and one Redis
connection, not a thread: one worker process holds 1,000+ concurrent streams (measured: 1,000 subscribers of
one run, all receiving, in ``bench/sse.py``). ``--worker-connections`` caps the connections a worker serves;
``AGENTS_CELERY_API_REDIS_MAX_CONNECTIONS`` (default 2000) sizes the API's Redis pool to match (see
:mod:`agents_celery.http.streams`). Capacity planning: each stream uses a client socket plus a Redis
connection, so the process needs ``ulimit -n`` above ``2 x --worker-connections`` and Redis ``maxclients``
(default 10,000) above ``workers x worker-connections`` plus the Celery workers.

The gevent worker monkey-patches the process before it imports the app, which is what makes redis-py,
Celery's producer (``send_task``) and Flask's streaming responses cooperative; do **not** add ``--preload``
(the app would be imported before patching). Streams send a keep-alive comment every 15 s
(``AGENTS_CELERY_KEEPALIVE_SECONDS``), so a proxy in front needs a read timeout above that
(``X-Accel-Buffering: no`` is already sent for nginx). On a restart, open streams are cut after
``--graceful-timeout`` (30 s); clients reconnect with ``Last-Event-ID`` and lose nothing.

Without gevent, ``--worker-class gthread --threads N --worker-connections N`` also works, but a stream then
holds a thread, and N threads serve at most N streams (and Python threads cost more memory than greenlets).
"""

from __future__ import annotations

from . import create_app


def serve(host: str = "127.0.0.1", port: int = 7777) -> int:
    """Run the development server (threaded) until interrupted; returns the exit status."""
    app = create_app()
    app.run(host=host, port=port, threaded=True, use_reloader=False)
    return 0

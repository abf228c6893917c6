"""Production settings for the API under gunicorn: ``gunicorn -c api/gunicorn.conf.py api.wsgi:app``.

An open event stream mostly waits in Redis (XREAD BLOCK), so gevent's one greenlet per connection holds
thousands of streams per process where a thread per stream would hold dozens. Every value can be overridden
from the environment (``AGENTS_CELERY_API_HOST``, ``AGENTS_CELERY_API_PORT``, ``WEB_CONCURRENCY``,
``GUNICORN_WORKER_CONNECTIONS``) or on the command line. It listens on 127.0.0.1 unless told otherwise
(``AGENTS_CELERY_API_HOST=0.0.0.0``, as docker-compose.yml sets inside its container, or ``--bind``): an API with
no key lets whoever reaches it approve tool calls, so exposing it is a decision, not a default. The port is not
read from ``PORT``: honcho sets that to 5000 for the first process of a Procfile (on a platform that assigns
``PORT``, set ``AGENTS_CELERY_API_PORT=$PORT``).
Do not add ``preload_app``: the gevent worker must patch the process before the app (and redis-py) is imported.
"""

import os

bind = f"{os.environ.get('AGENTS_CELERY_API_HOST') or '127.0.0.1'}:{os.environ.get('AGENTS_CELERY_API_PORT') or '7777'}"
worker_class = "gevent"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
#: Open connections (streams included) one worker serves; size AGENTS_CELERY_API_REDIS_MAX_CONNECTIONS to match.
worker_connections = int(os.environ.get("GUNICORN_WORKER_CONNECTIONS", "2000"))
#: SSE streams send a keep-alive comment every 15 s; a worker is only "silent" when it really hangs.
timeout = 60
#: On a restart, open streams get this long, then clients reconnect with Last-Event-ID and lose nothing.
graceful_timeout = 30
keepalive = 5
accesslog = "-"

"""The WSGI app gunicorn serves: ``gunicorn -c api/gunicorn.conf.py api.wsgi:app``.

Settings come from the environment (``AGENTS_CELERY_*``; see the README). The app is the standalone Flask
app of :func:`agents_celery.contrib.flask.create_app`; to serve the API inside your own Flask app, mount its
blueprint instead (``init_app`` + ``make_blueprint``).
"""

from __future__ import annotations

from agents_celery.contrib.flask import create_app

app = create_app()

"""``celery -A examples.flask_app.make_celery worker``: the Flask app's Celery app, agents included."""

from __future__ import annotations

from celery import Celery

from . import create_app

flask_app = create_app()
celery_app: Celery = flask_app.extensions["celery"]

"""An existing Flask app that already uses Celery, the way Flask's own ``examples/celery`` does, plus agents.

Three additions wire agents-celery in: ``configure(celery_app)`` registers the step task on the app's own
Celery app, ``init_app`` gives the Flask app a Runtime that sends through that Celery app, and the API
blueprint is mounted under ``/ai``. Run it::

    AGENTS_CELERY_AGENTS=examples.agents celery -A examples.flask_app.make_celery worker -Q agents,celery
    flask --app examples.flask_app run

then ``curl -N -X POST localhost:5000/ai/agents/assistant/runs -F message='What time is it?'``.

The AI SDK chat page of ``examples/aisdk_chat`` (``useChat``, bundled by ``scripts/ensure-aisdk-page``) is served
at ``/chat/?agent=assistant``, from the app's own routes like any static page: it talks to ``/ai/aisdk/<agent>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery import Celery, Task, shared_task
from flask import Flask, abort, jsonify, send_from_directory

from agents_celery import Runtime, Settings, configure, load_settings
from agents_celery.contrib.flask import init_app, make_blueprint
from agents_celery.contrib.flask.tracing import instrument

#: The useChat example page: its index.html, and the bundle ``scripts/ensure-aisdk-page`` builds into ``dist/``.
CHAT_PAGE = Path(__file__).resolve().parent.parent / "aisdk_chat"


def celery_init_app(app: Flask) -> Celery:
    """Flask's pattern: tasks run inside the app context; the Celery app lives in ``app.extensions``."""

    class FlaskTask(Task):  # type: ignore[misc]
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            with app.app_context():
                return self.run(*args, **kwargs)

    celery_app = Celery(app.name, task_cls=FlaskTask)
    celery_app.config_from_object(app.config["CELERY"])
    celery_app.set_default()
    app.extensions["celery"] = celery_app
    return celery_app


@shared_task(ignore_result=False)
def add_together(a: int, b: int) -> int:
    """One of the app's own tasks: agents-celery leaves them alone."""
    return a + b


def create_app(settings: Settings | None = None) -> Flask:
    """The app: its own Celery app and routes, plus the agents API under ``/ai``."""
    settings = settings or load_settings()
    app = Flask(__name__)
    app.config.from_mapping(
        CELERY={"broker_url": settings.celery_broker_url, "task_ignore_result": True},
    )
    app.config.from_prefixed_env()
    celery_app = celery_init_app(app)

    configure(celery_app, settings)  # the step task, JSON only, acks_late ... on the app's Celery app
    instrument(celery_app, app)  # run id / step / attempt in logs; traces when OpenTelemetry is installed
    init_app(app, Runtime(settings=settings, celery_app=celery_app))
    app.register_blueprint(make_blueprint(), url_prefix="/ai")

    @app.get("/")
    def index() -> Any:
        return jsonify(app="flask example", agents_api="/ai/agents", chat_page="/chat/")

    add_chat_page(app)
    return app


def add_chat_page(app: Flask) -> None:
    """The useChat page at ``/chat/``: two static files of the app's own, beside the API it calls."""

    @app.get("/chat/")
    def chat_page() -> Any:
        return send_from_directory(CHAT_PAGE, "index.html")

    @app.get("/chat/chat.js")
    def chat_bundle() -> Any:
        if not (CHAT_PAGE / "dist" / "chat.js").is_file():
            abort(404, description="the chat page is not bundled: run scripts/ensure-aisdk-page")
        return send_from_directory(CHAT_PAGE / "dist", "chat.js")

"""A host whose Celery broker is RabbitMQ, with no broker of agents-celery's own: the Django app and Flask's
``init_app`` send each start and continue through the host's Celery app, so they reach the worker at once (not
when the sweeper rescues them from a Redis queue nobody consumes), and nothing is pushed to Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from celery import Celery

import agents_celery
from agents_celery import ScriptedToolCall, ScriptedTurn
from agents_celery.settings import load_settings

from .conftest import TEST_REDIS_URL, wait_for
from .support.apis import ApiServer, django_env
from .support.workers import FAST, ROOT, Worker, worker_env

pytestmark = pytest.mark.timeout(120)

AMQP = os.environ.get("AGENTS_CELERY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
#: The sweeper's rescue of a step sent where no worker listens comes this late: far beyond what a send takes.
GRACE = "60"
#: What a start (to its pause) and a continue (to the run's end) may take on a loaded machine: a third of the rescue.
PROMPT = 20.0


@pytest.fixture
def deployment(fake_openai: Any, script: Any, versions_seam: None) -> Iterator[dict[str, str]]:
    """A key prefix and queue of this test's own; no CELERY_BROKER_URL anywhere (the host's config names it)."""
    prefix, queue = f"achb-{uuid.uuid4().hex[:8]}", f"hostbroker-{uuid.uuid4().hex[:8]}"
    env = worker_env(TEST_REDIS_URL, "unused", prefix, queue, {"FAKE_OPENAI_URL": fake_openai.url})
    del env["CELERY_BROKER_URL"]
    env["AGENTS_CELERY_ENQUEUE_GRACE_SECONDS"] = GRACE
    env["AGENTS_CELERY_API_KEY"] = "machine-key"
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/hb-a"})]), "Deleted.")
    r = redis.Redis.from_url(TEST_REDIS_URL)
    try:
        yield env
        assert r.llen(queue) == 0, "a step was pushed to the Redis broker, where no worker listens"
    finally:
        for key in [*r.scan_iter(match=f"{prefix}:*", count=1000), queue]:
            r.delete(key)
        r.close()


def pause_then_continue(post: Any, base: str) -> tuple[float, float]:
    """Start a run that pauses for an approval, then approve it; how long each took (``stream=false`` blocks
    until the run pauses or ends)."""
    t0 = time.monotonic()
    started = post(f"{base}/agents/fake/runs", {"message": "delete a", "stream": "false"})
    start_took = time.monotonic() - t0
    assert started["status"] == "PAUSED", started
    call = started["tools"][0]
    tools = json.dumps([{"tool_call_id": call["tool_call_id"], "confirmed": True}])
    t1 = time.monotonic()
    done = post(f"{base}/agents/fake/runs/{started['run_id']}/continue", {"tools": tools, "stream": "false"})
    continue_took = time.monotonic() - t1
    assert done["status"] == "COMPLETED" and done["content"] == "Deleted.", done
    return start_took, continue_took


def test_the_django_app_sends_through_the_projects_broker(deployment: dict[str, str], tmp_path: Path) -> None:
    """A project whose settings.py says ``CELERY_BROKER_URL = "amqp://..."`` (read by Celery's documented
    ``config_from_object("django.conf:settings", namespace="CELERY")``) and runs ``configure(app)``."""
    (tmp_path / "rabbit_settings.py").write_text(
        f"from examples.django_app.settings import *  # noqa: F403\n\nCELERY_BROKER_URL = {AMQP!r}\n"
    )
    env = django_env(deployment, str(tmp_path / "db.sqlite3"))
    env["DJANGO_SETTINGS_MODULE"] = "rabbit_settings"
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{ROOT}"
    queue = env["AGENTS_CELERY_QUEUE"]
    celery = os.path.join(os.path.dirname(sys.executable), "celery")
    cmd = [celery, "-A", "examples.django_app", "worker", "-Q", queue, "-P", "threads", "-c", "4"]
    cmd += ["--without-gossip", "--without-mingle", "--loglevel", "INFO"]
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=out)
    server = ApiServer(env, django=True)
    try:
        wait_for(lambda: b" ready." in log.read_bytes(), timeout=30, what="the project's worker")
        assert b"amqp://guest:**@127.0.0.1:5672//" in log.read_bytes()  # the project's broker, not Redis
        server.wait_ready()

        def post(url: str, data: dict[str, str]) -> Any:
            answer = httpx.post(url, data=data, headers={"Authorization": "Bearer machine-key"}, timeout=60)
            assert answer.status_code == 200, answer.text
            return answer.json()

        start_took, continue_took = pause_then_continue(post, server.url)
        assert start_took < PROMPT and continue_took < PROMPT, (start_took, continue_took)
    finally:
        server.stop()
        proc.terminate()
        proc.wait(timeout=30)


def test_flask_init_app_sends_through_the_hosts_celery_app(
    deployment: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flask's documented layout: the host's Celery app in ``app.extensions["celery"]``, joined by ``configure``;
    ``init_app`` without a Runtime sends through it."""
    from flask import Flask

    from agents_celery.contrib.flask import close_app, init_app, make_blueprint

    env = {**deployment, "CELERY_BROKER_URL": AMQP}  # the worker: the same RabbitMQ as the host app's
    worker = Worker(env, concurrency=4)
    for name in ("CELERY_BROKER_URL", "AGENTS_CELERY_BROKER_URL", "AGENTS_CELERY_QUEUE", "AGENTS_CELERY_KEY_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    overrides = {k.removeprefix("AGENTS_CELERY_").lower(): v for k, v in FAST.items()}
    overrides["enqueue_grace_seconds"] = GRACE
    settings = load_settings(
        redis_url=TEST_REDIS_URL,
        key_prefix=deployment["AGENTS_CELERY_KEY_PREFIX"],
        queue=deployment["AGENTS_CELERY_QUEUE"],
        api_key="machine-key",
        **overrides,
    )
    assert settings.broker_url is None
    celery_app = Celery("flask_host", broker=AMQP, set_as_current=False)
    agents_celery.configure(celery_app, settings, agents={})
    app = Flask("flask_host")
    app.extensions["celery"] = celery_app
    try:
        runtime = init_app(app, settings=settings)
        app.register_blueprint(make_blueprint(), url_prefix="/ai")
        assert runtime.celery_app is celery_app
        worker.wait_ready()
        client = app.test_client()

        def post(url: str, data: dict[str, str]) -> Any:
            answer = client.post(url, data=data, headers={"Authorization": "Bearer machine-key"})
            assert answer.status_code == 200, answer.get_data(as_text=True)
            return answer.get_json()

        start_took, continue_took = pause_then_continue(post, "/ai")
        assert start_took < PROMPT and continue_took < PROMPT, (start_took, continue_took)
    finally:
        close_app(app)
        celery_app.close()
        worker.stop()


def test_a_plain_runtime_sends_through_the_app_configure_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Runtime() made in the host's own code (a view, a task) finds the joined app as the front ends do; one
    for another prefix, or with agents-celery's own broker, keeps its own sender."""
    from agents_celery import Runtime

    for name in ("CELERY_BROKER_URL", "AGENTS_CELERY_BROKER_URL"):
        monkeypatch.delenv(name, raising=False)
    prefix = f"achb-{uuid.uuid4().hex[:8]}"
    settings = load_settings(redis_url=TEST_REDIS_URL, key_prefix=prefix)
    celery_app = Celery("plain_host", broker=AMQP, set_as_current=False)
    agents_celery.configure(celery_app, settings, agents={})
    runtimes = [
        Runtime(settings=settings),
        Runtime(settings=load_settings(redis_url=TEST_REDIS_URL, key_prefix=prefix + "-other")),
        Runtime(settings=load_settings(redis_url=TEST_REDIS_URL, key_prefix=prefix, broker_url=TEST_REDIS_URL)),
    ]
    try:
        assert runtimes[0].celery_app is celery_app
        assert runtimes[1].celery_app is not celery_app and runtimes[2].celery_app is not celery_app
    finally:
        for rt in runtimes:
            rt.close()
        celery_app.close()

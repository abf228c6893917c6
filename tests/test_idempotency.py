"""Retries with one Idempotency-Key, racing each other, all get the one run they ask for (never 409)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from flask import Flask

from agents_celery import Runtime
from agents_celery.contrib.flask import close_app, init_app, make_blueprint
from agents_celery.runtime.admission import idempotent_run_id

pytestmark = pytest.mark.timeout(120)


def test_a_retry_that_loses_the_session_to_its_own_run_gets_that_run(runtime: Runtime, monkeypatch: Any) -> None:
    """Both racing retries read the session free; the first took it for the run id both derive. The second's
    check-and-set fails, and it must see that the holder is its own run, not another one."""
    key, session = uuid.uuid4().hex, f"s-{uuid.uuid4().hex[:8]}"
    run_id = idempotent_run_id(key, None)
    assert runtime.store.sessions.take(session, run_id, None)  # the racing first call, not yet created the run
    reads = iter([None])
    real = runtime.store.sessions.active
    monkeypatch.setattr(runtime.store.sessions, "active", lambda sid: next(reads, real(sid)))  # the stale read
    stream = runtime.stream("offline", "hi", session_id=session, idempotency_key=key)
    assert stream.run_id == run_id
    assert real(session) == run_id  # (the admission script reads the session once, inside Redis)


@pytest.fixture
def app(fast_settings: Any, worker: Any) -> Iterator[Flask]:
    app = Flask("host")
    init_app(app, Runtime(settings=fast_settings))
    app.register_blueprint(make_blueprint())
    yield app
    close_app(app)


def test_concurrent_retries_over_http_all_get_the_same_run(app: Flask) -> None:
    form = {"message": "once", "stream": "false", "background": "true"}

    def post(key: str) -> tuple[int, str]:
        answer = app.test_client().post("/agents/offline/runs", data=form, headers={"Idempotency-Key": key})
        return answer.status_code, (answer.json or {}).get("run_id", answer.text)

    keys = [uuid.uuid4().hex for _ in range(12)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(post, [k for k in keys for _ in range(8)]))
    assert [s for s, _ in answers if s != 202] == [], answers
    for i, key in enumerate(keys):
        assert {r for _, r in answers[i * 8 : (i + 1) * 8]} == {idempotent_run_id(key, None)}

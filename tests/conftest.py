"""Shared fixtures: a real Redis under a private key prefix (never flushed), helpers that wait on conditions."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from agents_celery.settings import Settings, load_settings
from agents_celery.storage.eventlog import EventLog
from agents_celery.storage.keys import Keys

TEST_REDIS_URL = os.environ.get("AGENTS_CELERY_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def kill_connections(r: redis.Redis, *last_commands: str) -> int:
    """CLIENT KILL every connection (but ``r``'s own) whose last command was one of ``last_commands``, as a
    Redis restart or an idle timeout would drop them; returns how many were killed."""
    mine = r.client_id()
    ids = [c["id"] for c in r.client_list() if c["cmd"] in last_commands and int(c["id"]) != mine]
    for client_id in ids:
        r.client_kill_filter(_id=client_id)
    return len(ids)


@pytest.fixture(scope="session")
def key_prefix() -> Iterator[str]:
    """A prefix private to this test session; its keys are deleted at the end (the database is not flushed)."""
    prefix = f"actest-{uuid.uuid4().hex[:8]}"
    yield prefix
    client = redis.Redis.from_url(TEST_REDIS_URL)
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.delete(key)
    client.close()


@pytest.fixture
def settings(key_prefix: str) -> Settings:
    return load_settings(redis_url=TEST_REDIS_URL, key_prefix=key_prefix)


@pytest.fixture
def r(settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.redis_url)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.fail(f"Redis is not reachable at {settings.redis_url}; start it (see .ci/run)")
    yield client
    client.close()


@pytest.fixture
def keys(settings: Settings) -> Keys:
    return Keys(settings.key_prefix)


@pytest.fixture
def eventlog(r: redis.Redis, keys: Keys, settings: Settings) -> EventLog:
    return EventLog(r, keys, retention_ms=settings.retention_ms, tombstone_ms=settings.tombstone_ms)


def new_id() -> str:
    return uuid.uuid4().hex


# -- real workers and a fake OpenAI server --------------------------------------------------------------

# The default deployment: one Redis (and database) for run state and the Celery broker, so the commit script
# pushes the next step's task itself. SEPARATE_BROKER_URL serves the tests of a broker elsewhere.
TEST_BROKER_URL = os.environ.get("AGENTS_CELERY_TEST_BROKER_URL", TEST_REDIS_URL)
SEPARATE_BROKER_URL = os.environ.get("AGENTS_CELERY_TEST_SEPARATE_BROKER_URL", "redis://127.0.0.1:6379/10")


@pytest.fixture(scope="session")
def fake_openai() -> Iterator[Any]:
    from agents_celery.testing.openai_server import FakeOpenAIServer

    server = FakeOpenAIServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def queue_name() -> str:
    return f"agents-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def worker_env(key_prefix: str, queue_name: str, fake_openai: Any) -> dict[str, str]:
    from .cluster import worker_env as make_env

    return make_env(TEST_REDIS_URL, TEST_BROKER_URL, key_prefix, queue_name, {"FAKE_OPENAI_URL": fake_openai.url})


@pytest.fixture(scope="session")
def worker(worker_env: dict[str, str]) -> Iterator[Any]:
    """One real worker process shared by the tests that do not kill workers."""
    from .cluster import Worker

    w = Worker(worker_env).wait_ready()
    yield w
    w.stop()


@pytest.fixture
def fast_settings(worker_env: dict[str, str]) -> Settings:
    from .cluster import FAST

    overrides = {k.removeprefix("AGENTS_CELERY_").lower(): v for k, v in FAST.items()}
    return load_settings(
        redis_url=TEST_REDIS_URL,
        broker_url=TEST_BROKER_URL,
        key_prefix=worker_env["AGENTS_CELERY_KEY_PREFIX"],
        queue=worker_env["AGENTS_CELERY_QUEUE"],
        **overrides,
    )


@pytest.fixture
def runtime(fast_settings: Settings, worker: Any) -> Iterator[Any]:
    from agents_celery import Runtime

    rt = Runtime(settings=fast_settings)
    yield rt
    rt.close()


@pytest.fixture
def script(fake_openai: Any) -> Any:
    """Sets what the fake OpenAI server answers: ``script(turn, ..., token_delay=0.0)``."""
    from agents_celery.testing import ScriptResponder

    def set_script(*turns: Any, token_delay: float = 0.0) -> None:
        fake_openai.responder = ScriptResponder(list(turns), token_delay=token_delay)

    return set_script

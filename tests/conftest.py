"""Shared fixtures: a real Redis under a private key prefix (never flushed), helpers that wait on conditions."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
import redis

from agents_celery.settings import Settings, load_settings
from agents_celery.storage.eventlog import EventLog
from agents_celery.storage.keys import Keys

# A skipped or xfailed test fails the run (tests/support/skipguard.py); the hooks are registered by being named here.
from .support.skipguard import (  # noqa: F401
    pytest_collectreport,
    pytest_runtest_logreport,
    pytest_sessionfinish,
    pytest_terminal_summary,
)

if TYPE_CHECKING:
    from agents_celery import Runtime
    from agents_celery.events import Event
    from agents_celery.testing.openai_server import FakeReply

# `make test` runs the suite on several pytest-xdist processes (gw0, gw1, ...): each gets Redis databases of its
# own for run state and for the separate broker, so one process's CLIENT KILL, key scans or broker queues never
# touch another's. A single process (no xdist) keeps databases 9 and 10.
_DATABASES = {
    "gw0": (9, 10),
    "gw1": (13, 14),
    "gw2": (7, 8),
    "gw3": (5, 6),
    "gw4": (3, 4),
    "gw5": (1, 2),
    "gw6": (12, 15),
}
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
if _XDIST_WORKER not in _DATABASES:
    raise RuntimeError(f"no Redis databases assigned to pytest-xdist worker {_XDIST_WORKER} (tests/conftest.py)")
TEST_DB, _BROKER_DB = _DATABASES[_XDIST_WORKER]
TEST_REDIS_URL = os.environ.get("AGENTS_CELERY_TEST_REDIS_URL", f"redis://127.0.0.1:6379/{TEST_DB}")


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    interval: float = 0.02,
    what: str = "",
    seen: Callable[[], str] | None = None,
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout`` seconds, saying what
    ``seen()`` (when given) finds then."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            found = f"; found {seen()}" if seen is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}{found}")
        time.sleep(interval)


def status_is(stream: Any, status: str, timeout: float = 60, what: str = "") -> None:
    """Wait until the run of ``stream`` (a RunStream) has ``status``; a timeout says where the run stood (its status,
    error, pending calls and its log's last events)."""

    def seen() -> str:
        view = stream.get()
        pending = [(c.name, c.pause_reason) for c in view.pending]
        last = [
            e.type.value if e.type.value != "CUSTOM" else f"CUSTOM:{e.data.get('name')}"
            for e in stream.runtime.store.log.read(view.run_id, max(-1, view.last_offset - 12))
        ]
        return f"{view.status.value}, error {view.error}, pending {pending}, last events {last}"

    wait_for(lambda: stream.get().status == status, timeout=timeout, what=what or f"the run to be {status}", seen=seen)


def _events(rt: Runtime, run_id: str, timeout: float, what: str) -> Iterator[Event]:
    """The run's events from the start, then live ones, until it ends or pauses. The log is read with short
    blocking reads, so the deadline fires even when nothing arrives."""
    deadline = time.monotonic() + timeout
    log = rt.store.log
    info = log.info(run_id)
    with contextlib.closing(log.tail(run_id, until_pause=True, block_ms=100, info=info, idle_seconds=0)) as pages:
        for page in pages:
            if isinstance(page, list):
                for entry in page:
                    yield info.event(entry)
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what} (run {run_id!r})")


def all_events(rt: Runtime, run_id: str, timeout: float = 60) -> list[Event]:
    """Every event of the run until it ends or pauses; fails after ``timeout`` seconds, events or not."""
    return list(_events(rt, run_id, timeout, "the run to end or pause"))


def wait_event(rt: Runtime, run_id: str, pred: Callable[[Event], bool], timeout: float = 60) -> float:
    """Reads the run's events until one satisfies ``pred``; returns when (``time.monotonic()``). Fails when the
    run ends or pauses first, or after ``timeout`` seconds, events or not."""
    for event in _events(rt, run_id, timeout, "the expected event"):
        if pred(event):
            return time.monotonic()
    raise AssertionError("the run ended before the expected event")


def kill_connections(r: redis.Redis, *last_commands: str) -> int:
    """CLIENT KILL every connection (but ``r``'s own) whose last command was one of ``last_commands``, as a
    Redis restart or an idle timeout would drop them; returns how many were killed."""
    mine, db = r.client_id(), str(r.connection_pool.connection_kwargs.get("db", 0))
    # Only this database's: a bench or another suite on the same Redis keeps its connections.
    clients = [c for c in r.client_list() if str(c.get("db")) == db]
    ids = [c["id"] for c in clients if c["cmd"] in last_commands and int(c["id"]) != mine]
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
def r(settings: Settings, versions_seam: None) -> Iterator[redis.Redis]:
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
SEPARATE_BROKER_URL = os.environ.get("AGENTS_CELERY_TEST_SEPARATE_BROKER_URL", f"redis://127.0.0.1:6379/{_BROKER_DB}")


@pytest.fixture(scope="session")
def fake_openai() -> Iterator[Any]:
    from agents_celery.testing.openai_server import FakeOpenAIServer

    server = FakeOpenAIServer().start()
    yield server
    server.stop()


class Unscripted:
    """What the fake model answers a test that did not script it: an error naming that test (a 400, so the run
    fails at once with it), never a script another test left behind."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.calls = 0

    def __call__(self, request: dict[str, Any]) -> FakeReply:
        from agents_celery.testing.openai_server import FakeReply

        self.calls += 1
        error = f"no fake model reply scripted for {self.nodeid}: call script(...) or set fake_openai.responder"
        return FakeReply(status=400, error=error)


@pytest.fixture(autouse=True)
def _unscripted_fake_model(request: pytest.FixtureRequest) -> None:
    """Each test that uses the session's fake OpenAI server starts with :class:`Unscripted` as its responder;
    ``script(...)`` or ``fake_openai.responder = ...`` in the test replaces it."""
    if "fake_openai" in request.fixturenames:
        request.getfixturevalue("fake_openai").responder = Unscripted(request.node.nodeid)


@pytest.fixture(scope="session")
def queue_name() -> str:
    return f"agents-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def worker_env(key_prefix: str, queue_name: str, fake_openai: Any) -> dict[str, str]:
    from .support.workers import worker_env as make_env

    return make_env(TEST_REDIS_URL, TEST_BROKER_URL, key_prefix, queue_name, {"FAKE_OPENAI_URL": fake_openai.url})


@pytest.fixture(scope="session")
def worker(worker_env: dict[str, str]) -> Iterator[Any]:
    """One real worker process shared by the tests that do not kill workers."""
    from .support.workers import Worker

    w = Worker(worker_env).wait_ready()
    yield w
    w.stop()


@pytest.fixture(scope="session")
def apis(worker: Any, worker_env: dict[str, str]) -> Iterator[Any]:
    """The API processes this session shares (tests/support/apis.py:SharedApis): ``apis.get("django")``."""
    from .support.apis import SharedApis

    shared = SharedApis(worker_env)
    yield shared
    shared.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory, versions_seam: None) -> Iterator[Any]:
    """A real local Redis Cluster (3 masters, 3 replicas on private ports, tests/rediscluster.py), made on first
    use and torn down when the session ends. Tests that break it (a killed master) make their own instead."""
    import shutil

    from agents_celery.testing.rediscluster import LocalCluster

    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.fail("redis-server or redis-cli is not on PATH (.ci/run runs scripts/ensure-redis-tools)")
    made = LocalCluster(tmp_path_factory.mktemp("redis-cluster"))
    try:
        yield made.start()
    finally:
        made.stop()


@pytest.fixture
def deploy(fake_openai: Any, versions_seam: None) -> Iterator[Callable[..., Any]]:
    """Makes deployments of the test's own, ``deploy(name, extra=None, **options)``
    (tests/support/workers.py:Deployment: key prefix, queue, settings, workers); each is closed when the test ends,
    its workers stopped."""
    from .support.workers import Deployment

    made: list[Deployment] = []

    def make(name: str, extra: dict[str, str] | None = None, **options: Any) -> Deployment:
        made.append(Deployment(name, fake_openai.url, extra, **options))
        return made[-1]

    yield make
    for deployment in reversed(made):
        deployment.close()


@pytest.fixture(scope="session")
def sdk_deployment(fake_openai: Any) -> Iterator[Any]:
    """One worker serving tests/agents/openai_sdk.py (OpenAI Agents SDK agents) beside tests/agents/fixture.py's (a
    session handed from one kind to the other), shared by the SDK tests that kill nothing
    (tests/test_openai_agents*.py; tool counts are read as deltas)."""
    from .support.workers import Deployment

    agents = "tests.agents.fixture,tests.agents.openai_sdk"
    dep = Deployment("sdk", fake_openai.url, {"AGENTS_CELERY_AGENTS": agents})
    try:
        dep.start(1)
        yield dep
    finally:
        dep.close()


@pytest.fixture(scope="session")
def sdk_api(sdk_deployment: Any) -> Iterator[Any]:
    """An API server (Flask's) in front of :func:`sdk_deployment`, started on first use."""
    from .support.apis import ApiServer

    api = ApiServer({**sdk_deployment.env, "AGENTS_CELERY_KEEPALIVE_SECONDS": "0.3"}).wait_ready()
    yield api
    api.stop()


@pytest.fixture
def fast_settings(worker_env: dict[str, str]) -> Settings:
    from .support.workers import FAST

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


# -- which tests the version suites run ----------------------------------------------------------------------
# The oldest/newest suites (scripts/versions-suite) exist to catch a celery, kombu or redis-py API we call that
# changed. A test exercises those APIs when it uses a real Redis client, a real worker or broker, or a Redis
# Cluster: the fixtures that give it one request ``versions_seam`` (or ``crash_versions_seam`` for a crash test
# whose subject is those APIs under failure), and the hook below marks what follows from that, so the choice
# follows what a test touches instead of a hand-kept list.


@pytest.fixture(scope="session")
def versions_seam() -> None:
    """Requested by every fixture that hands a test a real Redis client, Celery worker or broker connection."""


@pytest.fixture(scope="session")
def crash_versions_seam() -> None:
    """Like ``versions_seam``, for the slow crash tests the version suites still run (recovery through Celery's
    redelivery and redis-py's reconnects is what an upgrade breaks first)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    versions = pytest.mark.versions
    for item in items:
        names = getattr(item, "fixturenames", ())
        fast = not any(item.get_closest_marker(tier) for tier in ("slow", "browser"))
        if "crash_versions_seam" in names or ("versions_seam" in names and fast):
            item.add_marker(versions)

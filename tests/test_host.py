"""agents-celery as a guest in the host's own Celery app: nothing of the host's changes, one worker serves both,
settings come from the host's config, agents run on queues of their own."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from agents_celery import Agent, ConfigurationError, Runtime, ScriptedModel, configure
from agents_celery.broker.celery_app import StepRouter, settings_for
from agents_celery.broker.publisher import STEP_TASK
from agents_celery.settings import Settings

from .conftest import TEST_BROKER_URL, TEST_REDIS_URL, wait_for
from .support.workers import FAST, ROOT, Worker, worker_env

pytestmark = pytest.mark.timeout(90)


def host(**conf: Any) -> Celery:
    app = Celery("host", broker=TEST_BROKER_URL, set_as_current=False)
    app.conf.update(conf)
    return app


def my_router(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any) -> dict[str, str] | None:
    return {"queue": "routed-by-function"} if name == "host.report" else None


@pytest.mark.parametrize(
    "routes",
    [
        None,
        {"host.report": {"queue": "reports"}},
        [{"host.report": {"queue": "reports"}}, {"host.*": {"queue": "host-default"}}],
        my_router,
        "tests.test_host.my_router",
    ],
    ids=["none", "dict", "list", "function", "import path"],
)
def test_the_step_route_is_added_in_front_of_the_hosts_routes(routes: Any, settings: Settings) -> None:
    app = host(task_routes=routes)
    before = [r for r in routes] if isinstance(routes, list) else routes
    configure(app, settings, agents={})
    router = app.amqp.Router()
    assert router.route({}, STEP_TASK)["queue"].name == settings.queue
    if routes is not None:
        expected = "routed-by-function" if callable(routes) or isinstance(routes, str) else "reports"
        assert router.route({}, "host.report")["queue"].name == expected
        kept = app.conf.task_routes[1:]
        assert kept == (tuple(before) if isinstance(before, list) else (before,))  # the host's objects, as given
    assert isinstance(app.conf.task_routes[0], StepRouter)
    configure(app, settings, agents={})  # twice: still one step router in front
    assert sum(isinstance(r, StepRouter) for r in app.conf.task_routes) == 1


def test_configure_leaves_the_hosts_settings_alone(settings: Settings) -> None:
    conf = {
        "task_serializer": "pickle",
        "accept_content": ["pickle"],
        "result_serializer": "pickle",
        "task_acks_late": False,
        "task_ignore_result": False,
        "worker_prefetch_multiplier": 4,
        "broker_transport_options": {"visibility_timeout": 7200},
    }
    app = host(**conf)
    configure(app, settings, agents={})
    for name, value in conf.items():
        expected = ["pickle", "json"] if name == "accept_content" else value  # json is only added
        assert app.conf[name] == expected, name
    step = app.tasks[STEP_TASK]
    assert (step.serializer, step.acks_late, step.reject_on_worker_lost, step.ignore_result) == (
        "json",
        True,
        True,
        True,
    )


def test_settings_come_from_the_hosts_config_before_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTS_CELERY_QUEUE", "from-env")
    monkeypatch.setenv("AGENTS_CELERY_LEASE_TTL_SECONDS", "9")
    app = host(agents_celery={"queue": "from-host", "REDIS_URL": TEST_REDIS_URL})
    settings = settings_for(app)
    assert settings.queue == "from-host" and settings.redis_url == TEST_REDIS_URL  # the host's, any case
    assert settings.lease_ttl_seconds == 9  # not in the host's config: the environment's
    app = host(agents_celery={"lease_ttl_seconds": -1})
    with pytest.raises(ConfigurationError, match=r"app\.conf\.agents_celery\['lease_ttl_seconds'\]"):
        settings_for(app)
    with pytest.raises(ConfigurationError, match=r"unknown keys \['lease_tll'\]"):
        settings_for(host(agents_celery={"lease_tll": 3}))


@pytest.fixture
def host_worker(key_prefix: str, fake_openai: Any, versions_seam: None) -> Iterator[dict[str, str]]:
    """``celery -A tests.support.host_app worker``: the host's own worker, serving its queue and the agents' queue."""
    host_queue, agents_queue = f"host-{uuid.uuid4().hex[:6]}", f"agents-{uuid.uuid4().hex[:6]}"
    env = worker_env(TEST_REDIS_URL, TEST_BROKER_URL, key_prefix, agents_queue, {"FAKE_OPENAI_URL": fake_openai.url})
    env.update(HOST_QUEUE=host_queue, C_FORCE_ROOT="1")  # the host pickles: Celery wants this to run as root
    celery = os.path.join(os.path.dirname(sys.executable), "celery")
    cmd = [
        celery,
        "-A",
        "tests.support.host_app",
        "worker",
        "-Q",
        f"{host_queue},{agents_queue}",
        "-P",
        "threads",
        "-c",
        "4",
    ]
    path = Path(tempfile.mkstemp(prefix="host-worker-", suffix=".log")[1])
    with path.open("wb") as log:
        cmd += ["--without-gossip", "--without-mingle", "--loglevel", "INFO"]
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=log)
        try:
            wait_for(lambda: b" ready." in path.read_bytes(), timeout=30, what="the host's worker")
            yield env
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_one_worker_serves_the_hosts_pickled_tasks_and_the_agents(
    host_worker: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in host_worker.items():
        if name.startswith(("AGENTS_CELERY_", "HOST_", "FAKE_")):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("CELERY_BROKER_URL", TEST_BROKER_URL)
    sys.modules.pop("tests.support.host_app", None)
    from .support import host_app

    for name, value in host_app.BEFORE.items():
        expected = ["pickle", "json"] if name == "accept_content" else value
        assert host_app.app.conf[name] == expected, name
    assert host_app.app.conf.task_routes[1] is host_app.ROUTES_BEFORE
    result = host_app.multiply.delay(host_app.Point(2, 3), 10)  # pickled, routed to the host's queue
    point = result.get(timeout=30)
    assert (type(point).__name__, point.x, point.y) == ("Point", 20, 30)
    settings = Settings(**{k.removeprefix("AGENTS_CELERY_").lower(): v for k, v in FAST.items()}).model_copy(
        update={"redis_url": TEST_REDIS_URL, "key_prefix": host_worker["AGENTS_CELERY_KEY_PREFIX"]}
    )
    runtime = Runtime(settings=settings.model_copy(update={"queue": host_worker["AGENTS_CELERY_QUEUE"]}))
    try:
        view = runtime.run("offline", "What time is it?", timeout=30)
        assert view.status == "completed" and view.output == "It is 12:00 UTC."
    finally:
        runtime.close()


def test_a_run_on_a_queue_nobody_consumes_waits_there_until_a_worker_comes(
    worker_env: dict[str, str], fast_settings: Settings, r: redis.Redis
) -> None:
    queue = f"isolated-{uuid.uuid4().hex[:6]}"
    agent = Agent(name="isolated", model=ScriptedModel(["Served from my own queue."]), queue=queue)
    runtime = Runtime(settings=fast_settings, agents=[agent])
    worker = None
    try:
        view = runtime.stream("isolated", "hello").get()
        assert view.queue == queue and view.status == "queued"
        # The session's worker serves other queues; its sweeper looks at the run many times meanwhile.
        sweeps = 3 * (fast_settings.enqueue_grace_seconds + fast_settings.sweep_interval_seconds)
        with pytest.raises(AssertionError):
            wait_for(lambda: runtime.get(view.run_id).status != "queued", timeout=sweeps, what="nothing")
        assert r.llen(queue) == 1  # its first step waits there, once: not re-sent, not sent elsewhere
        assert runtime.get(view.run_id).status == "queued"
        env = {**worker_env, "AGENTS_CELERY_AGENTS": "tests.agents.isolated", "ISOLATED_QUEUE": queue}
        worker = Worker(env).wait_ready()  # consumes its agents' queues: this one
        assert f"queues ['{queue}']" in worker.output()
        done = wait_for(lambda: runtime.get(view.run_id).status == "completed", timeout=30, what="the run")
        assert done and runtime.get(view.run_id).output == "Served from my own queue."
    finally:
        runtime.close()
        if worker is not None:
            worker.stop()


def test_a_continue_from_the_api_is_linked_to_the_run_s_steps(
    worker_env: dict[str, str], fast_settings: Settings, r: redis.Redis
) -> None:
    """A step sent from outside a worker (a continue, the sweeper) names the run's first task as its root and
    the task that last committed as its parent: what Celery would set had the step before sent it."""
    import base64
    import json

    from agents_celery import ScriptedToolCall, ScriptedTurn, tool
    from agents_celery.runs import RunStatus, ToolCall

    @tool(requires_confirmation=True)
    def wipe(path: str) -> str:
        """Wipe a path."""
        return "wiped"

    queue = f"linked-{uuid.uuid4().hex[:6]}"
    model = ScriptedModel([ScriptedTurn("", [ScriptedToolCall("wipe", {"path": "/tmp/x"})]), "Wiped."])
    agent = Agent(name="wiper", model=model, tools=[wipe], queue=queue)
    runtime = Runtime(settings=fast_settings, agents=[agent])
    try:
        view = runtime.stream("wiper", "wipe it").get()
        first = json.loads(r.rpop(queue))["headers"]  # the first step, as the Runtime sent it
        assert first["root_id"] == first["id"] and first["parent_id"] is None
        # A model turn that paused the run, committed by a task of id "task-1" (what a worker would do):
        key = runtime.store.keys.run(view.run_id).run
        r.hset(key, "last_task", "task-1")
        state, step = runtime.store.load(view.run_id)
        paused = state.model_copy(update={"status": RunStatus.PAUSED, "tool_calls": []})
        token = runtime.leases.acquire(view.run_id, 5000)
        assert token is not None
        call = ToolCall(id="c1", name="wipe", arguments='{"path": "/tmp/x"}', requires_confirmation=True)
        paused = paused.model_copy(update={"tool_calls": [call.model_copy(update={"decision": "pending"})]})
        runtime.store.commit(paused.model_copy(update={"next": "tools"}), token, step, step + 1, [], "paused")
        runtime.continue_run(view.run_id)
        message = json.loads(r.rpop(queue))
        body = json.loads(base64.b64decode(message["body"]))
        assert body[0] == [view.run_id, step + 1]
        assert message["headers"]["root_id"] == first["id"] and message["headers"]["parent_id"] == "task-1"
    finally:
        r.delete(queue)
        runtime.close()

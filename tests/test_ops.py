"""Operations: Procfile and docker-compose agree, Flower shows each run's steps, /health with Redis down."""

from __future__ import annotations

import json
import logging
import os
import re
import runpy
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from agents_celery import Runtime, load_settings

from .conftest import TEST_BROKER_URL, TEST_REDIS_URL, wait_for
from .support.workers import FAST, ROOT
from .test_examples import uninstrument_celery

# -- helpers --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    """A subprocess with its output in a temp file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, cmd: list[str], env: dict[str, str], name: str, cwd: Path = ROOT) -> None:
        self.log = Path(tempfile.mkstemp(prefix=f"{name}-", suffix=".log")[1])
        self._out = self.log.open("wb")
        self.proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"process exited early ({self.proc.returncode}):\n{self.output()}")
        return True

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: honcho/gunicorn children go too
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._out.close()


def http_get(url: str, timeout: float = 2.0) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=timeout)
    except httpx.HTTPError:
        return None


def env_for(queue: str, prefix: str, **extra: str) -> dict[str, str]:
    """A worker-style environment on the test Redis and broker, with its own queue."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTS_CELERY_")}
    env.update(FAST)
    env.update(
        {
            "AGENTS_CELERY_REDIS_URL": TEST_REDIS_URL,
            "CELERY_BROKER_URL": TEST_BROKER_URL,
            "AGENTS_CELERY_KEY_PREFIX": prefix,
            "AGENTS_CELERY_QUEUE": queue,
            "AGENTS_CELERY_AGENTS": "tests.agents.fixture",
            "PYTHONPATH": str(ROOT),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    )
    env.update(extra)
    return env


def runtime_for(env: dict[str, str]) -> Runtime:
    overrides = {k.removeprefix("AGENTS_CELERY_").lower(): v for k, v in FAST.items()}
    settings = load_settings(
        redis_url=TEST_REDIS_URL,
        broker_url=TEST_BROKER_URL,
        key_prefix=env["AGENTS_CELERY_KEY_PREFIX"],
        queue=env["AGENTS_CELERY_QUEUE"],
        **overrides,
    )
    return Runtime(settings=settings)


# -- Procfile and docker-compose ------------------------------------------------------------------------


def procfile() -> dict[str, str]:
    out = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, command = line.partition(":")
            out[name.strip()] = command.strip()
    return out


def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def normalized(command: str | list[str]) -> list[str]:
    """Shell words with ``${VAR:-default}`` replaced by its default: the Procfile's variables are the ports."""
    text = command if isinstance(command, str) else shlex.join(command)
    return shlex.split(re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", text))


def gunicorn_conf() -> dict[str, Any]:
    """The settings api/gunicorn.conf.py gives gunicorn (in an environment without PORT and the like)."""
    return runpy.run_path(str(ROOT / "api" / "gunicorn.conf.py"))


def port_of(words: list[str]) -> int:
    if words[:3] == ["gunicorn", "-c", "api/gunicorn.conf.py"] and "--bind" not in words:
        return int(gunicorn_conf()["bind"].rsplit(":", 1)[1])
    for i, word in enumerate(words):
        if word.startswith("--port="):
            return int(word.split("=", 1)[1])
        if word == "--bind":
            return int(words[i + 1].rsplit(":", 1)[1])
    raise AssertionError(f"no port in {words}")


def test_procfile_runs_web_worker_beat_and_flower() -> None:
    procs = procfile()
    assert set(procs) == {"web", "worker", "beat", "flower"}  # beat fires the schedules
    assert normalized(procs["web"]) == ["gunicorn", "-c", "api/gunicorn.conf.py", "api.wsgi:app"]
    conf = gunicorn_conf()
    assert conf["worker_class"] in {"gevent", "gthread", "eventlet"}, "SSE streams need a worker class that holds many"
    assert conf["bind"] == "127.0.0.1:7777" and not conf.get("preload_app")  # exposing it is the operator's call
    assert normalized(procs["worker"])[:4] == ["agents-celery", "worker", "--agents", "examples.agents"]
    assert normalized(procs["flower"])[:4] == ["celery", "-A", "agents_celery.broker.worker", "flower"]
    assert normalized(procs["beat"])[:2] == ["agents-celery", "beat"]


def test_honcho_accepts_the_procfile() -> None:
    honcho = Path(sys.executable).parent / "honcho"
    proc = subprocess.run([str(honcho), "check"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "web, worker, beat, flower" in proc.stderr + proc.stdout


def test_compose_services_match_the_procfile() -> None:
    services = compose()["services"]
    assert set(services) >= {"redis", "api", "worker", "beat", "flower"}
    procs = procfile()
    for service, process in [("api", "web"), ("worker", "worker"), ("beat", "beat"), ("flower", "flower")]:
        # The same commands, but inside a container they listen on every interface (the Procfile: 127.0.0.1).
        local = [w.replace("--address=127.0.0.1", "--address=0.0.0.0") for w in normalized(procs[process])]
        assert normalized(services[service]["command"]) == local, service
        assert services[service]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_compose_redis_is_durable_and_checked() -> None:
    service = compose()["services"]["redis"]
    words = normalized(service["command"])
    assert words[0] == "redis-server"
    pairs = dict(zip(words[1::2], words[2::2], strict=False))
    assert pairs == {"--appendonly": "yes", "--appendfsync": "everysec", "--maxmemory-policy": "noeviction"}
    assert service["healthcheck"]["test"][-2:] == ["redis-cli", "ping"]
    assert "ports" not in service  # reachable by the services, not published on the host


def test_compose_ports_match_the_commands_and_workers_scale() -> None:
    services = compose()["services"]
    for service in ("api", "flower"):
        port = port_of(normalized(services[service]["command"]))
        assert services[service]["ports"] == [f"{port}:{port}"]
    assert "/health" in " ".join(services["api"]["healthcheck"]["test"])
    assert services["api"]["environment"]["AGENTS_CELERY_API_HOST"] == "0.0.0.0"  # published port: all interfaces
    assert "--address=0.0.0.0" in normalized(services["flower"]["command"])
    assert "--address=127.0.0.1" in normalized(procfile()["flower"])
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker  # `--scale worker=N` must work
    for service in ("api", "worker", "flower"):
        env = services[service]["environment"]
        assert env["AGENTS_CELERY_REDIS_URL"] == env["CELERY_BROKER_URL"] == "redis://redis:6379/0"


def test_dockerfile_installs_the_server_extra() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.M)
    assert "pip install '.[server]'" in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


# -- Flower ---------------------------------------------------------------------------------------------


@pytest.fixture
def events_env(key_prefix: str) -> dict[str, str]:
    return env_for(f"agents-flower-{uuid.uuid4().hex[:8]}", key_prefix, FLOWER_UNAUTHENTICATED_API="true")


@pytest.fixture
def events_worker(events_env: dict[str, str]) -> Iterator[Proc]:
    """A worker started like tests/support/workers.py's, plus ``-E`` (task events) and heartbeats for Flower."""
    cmd = [
        sys.executable, "-m", "agents_celery.cli", "worker", "-E",
        "--pool", "threads", "--concurrency", "4", "-n", f"flower{uuid.uuid4().hex[:6]}@%h",
        "--without-gossip", "--without-mingle", "--loglevel", "INFO",
    ]  # fmt: skip
    proc = Proc(cmd, events_env, "events-worker")
    try:
        wait_for(lambda: proc.alive() and " ready." in proc.output(), timeout=30, what="events worker ready")
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def flower(events_env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    celery = Path(sys.executable).parent / "celery"
    cmd = [str(celery), "-A", "agents_celery.broker.worker", "flower", f"--port={port}", "--address=127.0.0.1"]
    proc = Proc([*cmd, f"--broker={TEST_BROKER_URL}"], events_env, "flower")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: proc.alive() and http_get(f"{url}/api/tasks"), timeout=30, what="flower answering")
        yield url
    finally:
        proc.stop()


def flower_steps(url: str, run_id: str) -> list[dict[str, Any]]:
    response = http_get(f"{url}/api/tasks?taskname=agents_celery.step&limit=1000")
    if response is None or response.status_code != 200:
        return []
    return [t for t in response.json().values() if run_id in str(t.get("args"))]


def all_succeeded(tasks: list[dict[str, Any]]) -> bool:
    """Three steps (model turn, tool step, model turn), each reported SUCCESS (events arrive one by one)."""
    return len(tasks) >= 3 and all(t["state"] == "SUCCESS" for t in tasks)


def test_flower_shows_each_runs_steps(events_env: dict[str, str], events_worker: Proc, flower: str) -> None:
    runtime = runtime_for(events_env)
    try:
        # Flower only sees events sent after it subscribed; start runs until one is seen (bounded).
        deadline = time.monotonic() + 30
        while True:
            view = runtime.run("offline", "What time is it?", timeout=30)
            assert view.status.value == "completed"
            try:
                steps = wait_for(lambda v=view: all_succeeded(flower_steps(flower, v.run_id)), timeout=5, what="steps")
            except AssertionError:
                steps = None
            if steps or time.monotonic() > deadline:
                break
        tasks = flower_steps(flower, view.run_id)
    finally:
        runtime.close()
    # offline: model turn (tool call), tool step, model turn (answer)
    # (a step delivered while the previous one still held the lease answers "busy" and is delivered again)
    assert {str(t["args"]) for t in tasks} == {f"['{view.run_id}', {n}]" for n in range(3)}, tasks
    for task in tasks:
        assert task["name"] == "agents_celery.step"
        assert task["state"] == "SUCCESS"
        assert task["kwargs"] == "{'agent': 'offline'}"
    # Linked like a chain: Flower's task page leads from each step to the one before and to the first.
    steps = sorted(tasks, key=lambda t: str(t["args"]))
    first = steps[0]["uuid"]
    assert all(t["root_id"] == first for t in steps), [(t["uuid"], t["root_id"]) for t in steps]
    assert [t["parent_id"] for t in steps[1:]] == [t["uuid"] for t in steps[:-1]]


# -- health with Redis down, and the whole Procfile under honcho ------------------------------------------


def test_health_is_503_quickly_when_redis_is_down() -> None:
    closed = free_port()  # nothing listens there
    port = free_port()
    env = env_for("agents-health", "ac-health", AGENTS_CELERY_REDIS_URL=f"redis://127.0.0.1:{closed}/0")
    env["CELERY_BROKER_URL"] = f"redis://127.0.0.1:{closed}/0"
    cmd = [sys.executable, "-m", "agents_celery.cli", "api", "--host", "127.0.0.1", "--port", str(port)]
    proc = Proc(cmd, env, "api-no-redis")
    try:
        response = wait_for(
            lambda: proc.alive() and http_get(f"http://127.0.0.1:{port}/health", timeout=10), timeout=30, what="api"
        )
        started = time.monotonic()
        response = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
        took = time.monotonic() - started
    finally:
        proc.stop()
    assert response.status_code == 503, response.text
    assert took < 5, f"/health took {took:.1f}s with Redis down"


def test_a_fresh_clone_runs_the_procfile_as_the_readme_says(key_prefix: str, tmp_path: Path) -> None:
    """``make serve`` in a fresh clone (no PYTHONPATH): honcho starts gunicorn, a worker serving
    examples.agents and Flower from the Procfile; a run goes through the web process on :7777, as the README
    says."""
    if http_get("http://127.0.0.1:7777/health", timeout=0.5) is not None:
        pytest.fail("something already listens on :7777, the README's port; stop it first")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=60)
    flower_port = free_port()
    prefix = f"{key_prefix}-honcho"  # its worker publishes the demo module's manifests, which others must not see
    env = env_for(f"agents-honcho-{uuid.uuid4().hex[:8]}", prefix, FLOWER_PORT=str(flower_port))
    for name in ("AGENTS_CELERY_AGENTS", "PYTHONPATH"):
        del env[name]
    # What `make serve` runs, minus the install: honcho with the venv's scripts on PATH.
    venv_bin = Path(sys.executable).parent
    env["PATH"] = f"{venv_bin}{os.pathsep}{env['PATH']}"
    proc = Proc([str(venv_bin / "honcho"), "start", "--no-colour"], env, "honcho", cwd=clone)
    try:
        for what, check in [
            ("api /health on :7777", lambda: (r := http_get("http://127.0.0.1:7777/health")) and r.status_code == 200),
            ("worker ready", lambda: " ready." in proc.output()),
            ("flower", lambda: http_get(f"http://127.0.0.1:{flower_port}/healthcheck")),
        ]:
            wait_for(lambda c=check: proc.alive() and c(), timeout=60, what=f"{what}:\n{proc.output()}")
        answer = httpx.post(
            "http://127.0.0.1:7777/agents/assistant/runs",
            data={"message": "What time is it?", "stream": "false"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "COMPLETED" and answer.json()["agent_id"] == "assistant"
    finally:
        proc.stop()
        client = redis.Redis.from_url(TEST_REDIS_URL)
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)
        client.close()


# -- observability: log context and OpenTelemetry ---------------------------------------------------------


def test_log_records_carry_run_step_and_attempt() -> None:
    from agents_celery.broker import observability

    observability.install_log_record_factory()
    logger = logging.getLogger("agents_celery.test")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        logger.warning("outside")
        with observability.bind("run-1", 2, attempt=3):
            logger.warning("inside")
    finally:
        logger.removeHandler(handler)
    outside, inside = records
    assert (outside.run_id, outside.run_context) == (None, "")  # type: ignore[attr-defined]
    assert (inside.run_id, inside.step, inside.attempt) == ("run-1", 2, 3)  # type: ignore[attr-defined]
    formatted = logging.Formatter(observability.WORKER_LOG_FORMAT).format(inside)
    assert formatted.endswith("run=run-1 step=2 attempt=3: inside")


def test_setup_logging_puts_the_context_hook_first(settings: Any) -> None:
    from agents_celery import create_celery_app
    from agents_celery.broker import observability

    app = create_celery_app(settings, agents={})
    observability.setup_logging(app)
    observability.setup_logging(app)  # idempotent
    hooks = app.agents_celery.hooks  # type: ignore[attr-defined]
    assert isinstance(hooks[0], observability.LogContextHooks)
    assert sum(isinstance(h, observability.LogContextHooks) for h in hooks) == 1
    assert "%(run_context)s" in app.conf.worker_log_format
    app.close()


TRACED_WORKER = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

out = open(sys.argv[1], "a")
provider = TracerProvider()
exporter = ConsoleSpanExporter(out=out, formatter=lambda s: s.to_json(indent=None) + "\\n")
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

from agents_celery.cli.main import main
from agents_celery.broker.worker import app  # instruments itself: AGENTS_CELERY_TRACING=1 is in its environment

sys.exit(main(["worker", *sys.argv[2:]]))
"""


@pytest.fixture
def traced_worker(key_prefix: str, tmp_path: Path) -> Iterator[tuple[Proc, Path, dict[str, str]]]:
    """A real worker process with OpenTelemetry on, writing its spans as JSON lines to a file."""
    import opentelemetry.instrumentation.celery
    import opentelemetry.sdk  # noqa: F401

    env = {**env_for(f"agents-otel-{uuid.uuid4().hex[:8]}", key_prefix), "AGENTS_CELERY_TRACING": "1"}
    spans = tmp_path / "spans.jsonl"
    cmd = [
        sys.executable, "-c", TRACED_WORKER, str(spans),
        "--pool", "threads", "--concurrency", "2", "-n", f"otel{uuid.uuid4().hex[:6]}@%h",
        "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "INFO",
    ]  # fmt: skip
    proc = Proc(cmd, env, "traced-worker")
    try:
        wait_for(lambda: proc.alive() and " ready." in proc.output(), timeout=30, what="traced worker ready")
        yield proc, spans, env
    finally:
        proc.stop()


def read_spans(path: Path) -> list[dict[str, Any]]:
    """The spans the worker has written whole (a line it is still writing is read on the next call)."""
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]


def test_api_request_and_steps_share_a_trace(
    traced_worker: tuple[Proc, Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agents_celery.contrib.flask import close_app, create_app

    worker, spans_file, env = traced_worker
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    runtime = runtime_for(env)
    monkeypatch.setenv("AGENTS_CELERY_TRACING", "1")
    web = create_app(runtime=runtime)  # the real API, traced because AGENTS_CELERY_TRACING is set

    trace_id = uuid.uuid4().hex
    parent = f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"
    try:
        started = web.test_client().post(
            "/agents/offline/runs",
            json={"message": "What time is it?", "stream": False, "background": True},
            headers={"traceparent": parent},
        )
        run_id = started.get_json()["run_id"]
        wait_for(lambda: runtime.get(run_id).status.value == "completed", timeout=30, what="run completed")
    finally:
        close_app(web)  # its Runtime and its stream client
        uninstrument_celery()  # process-wide: later tests must not trace

    def step_spans() -> list[dict[str, Any]]:
        return [s for s in read_spans(spans_file) if s["name"] == "run/agents_celery.step"]

    request = next(s for s in exporter.get_finished_spans() if s.name.startswith("POST /agents/"))
    assert f"{request.context.trace_id:032x}" == trace_id  # the caller's traceparent is continued
    (publish,) = [s for s in exporter.get_finished_spans() if s.name == "apply_async/agents_celery.step"]
    assert publish.context.trace_id == request.context.trace_id and publish.parent.span_id == request.context.span_id

    def first_step() -> list[dict[str, Any]]:  # the worker span of the task this request sent
        return [s for s in step_spans() if s["parent_id"] == f"0x{publish.context.span_id:016x}"]

    (step0,) = wait_for(first_step, timeout=10, what=f"the step span under {publish}")
    assert step0["context"]["trace_id"] == f"0x{trace_id}"
    # and the worker's log lines carry run id, step and attempt
    for step in range(3):
        assert f"run={run_id} step={step} attempt=1" in worker.log.read_text(), worker.output()

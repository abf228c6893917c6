"""Real worker processes for tests: ``celery worker`` on our app, killed for real in crash tests.

The one way to start a private worker is a :class:`Deployment` (the ``deploy`` fixture makes and closes them); a
bare :class:`Worker` serves only the session's shared one (tests/conftest.py) and deployments of another shape (a
Sentinel, a host app's own broker, no queue named: test_connections, test_host*, test_prefixes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from agents_celery.cli.processes import stop_process

from . import zygote
from .zygote import Forked

ROOT = Path(__file__).resolve().parents[2]

#: Fast timings so crash recovery takes about two seconds in tests.
FAST = {
    "AGENTS_CELERY_LEASE_TTL_SECONDS": "2",
    "AGENTS_CELERY_HEARTBEAT_SECONDS": "0.4",
    "AGENTS_CELERY_SWEEP_INTERVAL_SECONDS": "0.3",
    "AGENTS_CELERY_ENQUEUE_GRACE_SECONDS": "2",
    "AGENTS_CELERY_STOP_POLL_SECONDS": "0.05",
    "AGENTS_CELERY_MODEL_BACKOFF_SECONDS": "0.05",
    "AGENTS_CELERY_SOFT_SHUTDOWN_SECONDS": "10",
}


def worker_env(
    redis_url: str, broker_url: str, prefix: str, queue: str, extra: dict[str, str] | None = None
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(FAST)
    env.update(
        {
            "AGENTS_CELERY_REDIS_URL": redis_url,
            "CELERY_BROKER_URL": broker_url,
            "AGENTS_CELERY_KEY_PREFIX": prefix,
            "AGENTS_CELERY_QUEUE": queue,
            "AGENTS_CELERY_AGENTS": "tests.agents.fixture,tests.agents.workflows",
            "PYTHONPATH": str(ROOT),
        }
    )
    env.update(extra or {})
    return env


class Worker:
    """One ``agents-celery worker`` process (a single process: threads pool), its log in a temp file."""

    def __init__(self, env: dict[str, str], concurrency: int = 4, name: str | None = None, pool: str = "threads"):
        self.env = env
        self.name = name or f"w{uuid.uuid4().hex[:6]}"
        self.log = Path(tempfile.mkstemp(prefix=f"{self.name}-", suffix=".log")[1])
        args = [
            "worker", "--pool", pool, "--concurrency", str(concurrency), "-n", f"{self.name}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "INFO",
        ]  # fmt: skip
        self._out = self.log.open("wb")
        self.proc: subprocess.Popen[bytes] | Forked
        if zygote.enabled() and pool not in ("gevent", "eventlet"):  # those patch before anything imports
            self.proc = zygote.ZYGOTE.spawn("agents_celery.cli", args, env, ROOT, self.log)
        else:
            cmd = [sys.executable, "-m", "agents_celery.cli", *args]
            self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=self._out, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 60) -> Worker:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b" ready." in self.log.read_bytes():
                return self
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited early:\n{self.output()}")
            time.sleep(0.05)
        raise AssertionError(f"worker not ready after {timeout}s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-5000:]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        stop_process(self.proc)  # type: ignore[arg-type]  # a Forked quacks as stop_process needs
        self._out.close()


class Deployment:
    """A deployment of a test's own: a key prefix and a queue nobody else uses (so its workers can be killed, and
    its beats fire, without touching the session's), the workers' environment (``extra`` added), the matching
    Runtime settings (the ``AGENTS_CELERY_*`` entries of ``extra`` included), the worker processes it started,
    and their cleanup. Tests get one from the ``deploy`` fixture (tests/conftest.py), which closes it.

    ``prefix`` shares an existing key prefix instead (the session's: its keys are the session's to delete);
    ``broker_url`` puts workers and Runtime on another broker (RabbitMQ); ``redis_url`` their run state on another
    Redis (a Redis Cluster: tests/rediscluster.py), the broker staying the session's Redis unless ``broker_url``
    says otherwise. What only the workers see (a fault proxy in front of Redis, a worker-side limit) goes to
    :meth:`start`'s ``env``.
    """

    def __init__(
        self,
        name: str,
        fake_openai_url: str,
        extra: dict[str, str] | None = None,
        *,
        prefix: str | None = None,
        broker_url: str | None = None,
        redis_url: str | None = None,
    ) -> None:
        from agents_celery.settings import load_settings

        from ..conftest import TEST_BROKER_URL, TEST_REDIS_URL

        self.prefix = prefix or f"ac{name}-{uuid.uuid4().hex[:8]}"
        self._owns_prefix = prefix is None
        self.queue = f"{name}-{uuid.uuid4().hex[:8]}"
        self.broker_url = broker_url or TEST_BROKER_URL
        self.redis_url = redis_url or TEST_REDIS_URL
        extra = {"FAKE_OPENAI_URL": fake_openai_url, **(extra or {})}
        self.env = worker_env(self.redis_url, self.broker_url, self.prefix, self.queue, extra)
        variables = {**FAST, **{k: v for k, v in extra.items() if k.startswith("AGENTS_CELERY_")}}
        overrides = {k.removeprefix("AGENTS_CELERY_").lower(): v for k, v in variables.items()}
        for given in ("redis_url", "broker_url", "key_prefix", "queue"):
            overrides.pop(given, None)
        self.settings = load_settings(
            redis_url=self.redis_url, broker_url=self.broker_url, key_prefix=self.prefix, queue=self.queue, **overrides
        )
        self.workers: list[Worker] = []
        self._runtime: Any = None

    @property
    def runtime(self) -> Any:
        """A Runtime on this deployment's settings (made on first use, closed by :meth:`close`)."""
        if self._runtime is None:
            from agents_celery import Runtime

            self._runtime = Runtime(settings=self.settings)
        return self._runtime

    def start(self, n: int = 1, env: dict[str, str] | None = None, **options: Any) -> list[Worker]:
        """Starts ``n`` workers (``env`` added to the deployment's; ``options`` as :class:`Worker` takes them) and
        waits until each is ready."""
        new = [Worker({**self.env, **(env or {})}, **options) for _ in range(n)]
        self.workers += new  # before waiting, so close() cleans up even a worker that failed to start
        for w in new:
            w.wait_ready()
        return new

    def worker(self, env: dict[str, str] | None = None, **options: Any) -> Worker:
        """One more worker, ready."""
        return self.start(1, env, **options)[0]

    def by_pid(self, pid: int) -> Worker:
        return next(w for w in self.workers if w.proc.pid == pid)

    def close(self) -> None:
        """Stops every worker it started, closes its Runtime, deletes its keys (when the prefix is its own) and
        what its queue left in a Redis broker."""
        for w in self.workers:
            w.stop()
        if self._runtime is not None:
            self._runtime.close()
        import redis

        from agents_celery.storage.connections import connect

        from ..conftest import TEST_REDIS_URL

        if self.redis_url != TEST_REDIS_URL and self._owns_prefix:
            try:
                state = connect(self.redis_url)
                for key in state.scan_iter(match=f"{self.prefix}:*", count=1000):
                    state.delete(key)
                state.close()
            except Exception:  # a test that stopped its own cluster: nothing left to delete
                pass
        with redis.Redis.from_url(TEST_REDIS_URL) as client:
            patterns = [f"{self.prefix}:*"] if self._owns_prefix and self.redis_url == TEST_REDIS_URL else []
            if self.broker_url == TEST_REDIS_URL:
                patterns.append(f"{self.queue}*")  # the queue and its priority lists
            for pattern in patterns:
                for key in client.scan_iter(match=pattern, count=1000):
                    client.delete(key)

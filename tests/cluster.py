"""Real worker processes for tests: ``celery worker`` on our app, killed for real in crash tests."""

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

ROOT = Path(__file__).resolve().parent.parent

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
            "AGENTS_CELERY_AGENTS": "tests.agents_fixture",
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
        cmd = [
            sys.executable, "-m", "agents_celery.cli", "worker",
            "--pool", pool, "--concurrency", str(concurrency), "-n", f"{self.name}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "INFO",
        ]  # fmt: skip
        self._out = self.log.open("wb")
        self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=self._out, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 30) -> Worker:
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
        stop_process(self.proc)
        self._out.close()


def own_deployment(name: str, fake_openai_url: str, extra: dict[str, str] | None = None) -> tuple[dict[str, str], Any]:
    """A key prefix and queue of a test's own, so its workers can be killed (and its beats fire) without touching
    the shared ones: the workers' environment (``extra`` added) and the matching Runtime settings (the
    ``AGENTS_CELERY_*`` entries of ``extra`` included)."""
    from agents_celery.settings import load_settings

    from .conftest import TEST_BROKER_URL, TEST_REDIS_URL

    prefix, queue = f"ac{name}-{uuid.uuid4().hex[:8]}", f"{name}-{uuid.uuid4().hex[:8]}"
    env = worker_env(
        TEST_REDIS_URL, TEST_BROKER_URL, prefix, queue, {"FAKE_OPENAI_URL": fake_openai_url, **(extra or {})}
    )
    variables = {**FAST, **{k: v for k, v in (extra or {}).items() if k.startswith("AGENTS_CELERY_")}}
    overrides = {k.removeprefix("AGENTS_CELERY_").lower(): v for k, v in variables.items()}
    settings = load_settings(
        redis_url=TEST_REDIS_URL, broker_url=TEST_BROKER_URL, key_prefix=prefix, queue=queue, **overrides
    )
    return env, settings

"""Faults a run must survive: a connection reset under a streaming step is not the run's failure."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agents_celery import Runtime
from agents_celery.events import EventType

from .cluster import Worker
from .conftest import TEST_REDIS_URL, wait_for
from .faults import ResettingProxy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TEXT = " ".join(f"word{i}" for i in range(80))


@pytest.mark.parametrize("fast", ["1", "0"], ids=["fast paths", "public APIs only"])
def test_a_connection_reset_while_a_turn_streams_does_not_fail_the_run(
    worker_env: dict[str, str], fast_settings: Any, script: Any, fast: str
) -> None:
    """The worker reaches run state through a proxy that resets every connection mid-stream (Redis stays up):
    the step is given back and retried, and the run completes with every offset once and a valid stream."""
    proxy = ResettingProxy(("127.0.0.1", 6379))
    queue = f"faults-{uuid.uuid4().hex[:6]}"
    db = TEST_REDIS_URL.rsplit("/", 1)[1]
    env = {
        **worker_env,
        "AGENTS_CELERY_QUEUE": queue,
        "AGENTS_CELERY_REDIS_URL": f"redis://127.0.0.1:{proxy.port}/{db}",
        "AGENTS_CELERY_FAST_PATHS": fast,
    }
    worker = Worker(env).wait_ready()
    runtime = Runtime(settings=fast_settings.model_copy(update={"queue": queue}))
    try:
        script(TEXT, token_delay=0.03)
        stream = runtime.stream("fake", "talk for a while")
        log = runtime.store.log
        wait_for(lambda: len(log.read(stream.run_id)) > 20, timeout=30, what="the turn to stream")
        assert proxy.reset() > 0
        done = wait_for(lambda: runtime.get(stream.run_id).status.is_final, timeout=60, what="the run to end")
        assert done
        view = runtime.get(stream.run_id)
        assert view.status == "completed", (view.status, view.error, worker.output())
        assert view.output == TEXT
        events = log.read(stream.run_id)
        assert [e.offset for e in events] == list(range(len(events)))
        assert events[-1].type is EventType.RUN_FINISHED and events[-1].data["outcome"]["type"] == "success"
    finally:
        runtime.close()
        worker.stop()
        proxy.close()

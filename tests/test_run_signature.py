"""``run_signature`` in a user's own canvas: a durable run (a workflow) inside a ``chain`` and as the header of a
``chord`` of the user's tasks, on a worker of the user's app (tests/support/canvas_app.py) with one slot: the canvas
goes on only because no task waits for the runs (the run's end sends its output on)."""

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
from celery import chain, chord

from agents_celery import RunDidNotComplete, run_signature

from .conftest import TEST_BROKER_URL, TEST_REDIS_URL, wait_for
from .support.workers import ROOT, worker_env

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def canvas(key_prefix: str, fake_openai: Any) -> Iterator[Any]:
    """The user's app (tests.support.canvas_app, imported with this worker's environment) and its worker: one slot,
    consuming the user's queue and the agents' queue."""
    user_queue, agents_queue = f"canvas-{uuid.uuid4().hex[:6]}", f"agents-{uuid.uuid4().hex[:6]}"
    env = worker_env(TEST_REDIS_URL, TEST_BROKER_URL, key_prefix, agents_queue, {"FAKE_OPENAI_URL": fake_openai.url})
    env.update(CANVAS_QUEUE=user_queue, CANVAS_RESULT_BACKEND=TEST_REDIS_URL)
    celery = os.path.join(os.path.dirname(sys.executable), "celery")
    cmd = [
        celery,
        "-A",
        "tests.support.canvas_app",
        "worker",
        "-Q",
        f"{user_queue},{agents_queue}",
        "-P",
        "threads",
        "-c",
        "1",
    ]
    cmd += ["--without-gossip", "--without-mingle", "--loglevel", "INFO"]
    path = Path(tempfile.mkstemp(prefix="canvas-worker-", suffix=".log")[1])
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update({k: v for k, v in env.items() if k.startswith(("AGENTS_CELERY_", "CANVAS_", "CELERY_"))})
    sys.modules.pop("tests.support.canvas_app", None)
    from .support import canvas_app

    with path.open("wb") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=log)
        try:
            wait_for(lambda: b" ready." in path.read_bytes(), timeout=30, what="the user's worker")
            yield canvas_app
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def test_a_workflow_in_a_chain_of_the_users_tasks(canvas: Any) -> None:
    flow = chain(canvas.fetch.s("reefs"), run_signature("routing"), canvas.shout.s())
    assert flow.apply_async().get(timeout=60) == "SUPPORT HANDLED IT"  # "notes on reefs" went to support


def test_workflows_as_the_header_of_a_chord(canvas: Any) -> None:
    header = [run_signature("routing", "my invoice"), run_signature("routing", "it broke"), canvas.fetch.s("x")]
    result = chord(header, canvas.join.s()).apply_async()
    assert result.get(timeout=60) == "billing handled it | support handled it | notes on x"


def test_a_run_that_fails_fails_the_chain(canvas: Any) -> None:
    flow = chain(run_signature("exploding", "x"), canvas.shout.s())
    with pytest.raises(Exception, match="ended failed: step 'explode' failed: ValueError: cannot handle 'x'") as raised:
        flow.apply_async().get(timeout=60)
    assert type(raised.value).__name__ == RunDidNotComplete.__name__

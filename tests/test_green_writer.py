"""The event writer on greenlets (a gevent worker): the process's flusher appends what every run emitted in one
pipelined round trip, and while runs stream side by side (the last pass carried several) it makes at most one
pass per ``green_batch_ms``, so that they share it. Run in a subprocess under gevent's ``patch_all``, against
the real Redis."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from .conftest import TEST_REDIS_URL

_SCRIPT = """
from gevent import monkey
monkey.patch_all()
import sys, time
import redis
from agents_celery.engine.writer import EventWriter
from agents_celery.events import EventType, make_event
from agents_celery.settings import load_settings
from agents_celery.storage.leases import Leases
from agents_celery.storage.store import RunStore

url, prefix, window = sys.argv[1], sys.argv[2], float(sys.argv[3])
store = RunStore(redis.Redis.from_url(url), load_settings(redis_url=url, key_prefix=prefix))
passes = []
real = store.log.append_many

def spy(batches):
    passes.append((time.monotonic(), sorted(run_id for run_id, _, _ in batches)))
    return real(batches)

store.log.append_many = spy
writers, runs = [], [c * 32 for c in "gh"]
for run_id in runs:
    store.log.create(run_id, "s", "a", [make_event(EventType.RUN_STARTED, thread_id="s", run_id=run_id)])
    writers.append(EventWriter(store.log, run_id, Leases(store.redis, store.keys).acquire(run_id, 10_000), window))

def tokens(streaming):
    \"\"\"One token from each writer in ``streaming``, in a row; when they were emitted, once all are written.\"\"\"
    emitted, count = time.monotonic(), len(passes)
    for writer in streaming:
        writer.emit(make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="m", delta="hi"))
    while len(passes) == count or sum(map(len, (p[1] for p in passes[count:]))) < len(streaming):
        assert time.monotonic() < emitted + 10, "the flusher never appended the tokens"
        time.sleep(0.01)
    return emitted

tokens(writers)  # the first pass goes at once: nothing says yet that runs stream side by side
tokens(writers)  # the last pass carried two runs: this one waits the window from it
assert [seen for _, seen in passes] == [runs, runs], passes  # both runs in each round trip
tokens(writers[:1])
lone = tokens(writers[:1])  # the pass before carried one run: no window
print(f"{passes[1][0] - passes[0][0]:.3f} {passes[3][0] - lone:.3f}")
for writer in writers:
    writer.close()
for run_id in runs:
    store.redis.delete(*vars(store.keys.run(run_id)).values())
"""


def _passes(window: float) -> tuple[float, float]:
    """Seconds between two passes that each carried two runs' tokens, and from a lone run's token to its pass."""
    prefix = f"gw{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, TEST_REDIS_URL, prefix, str(window)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    shared, lone = map(float, done.stdout.split())
    return shared, lone


@pytest.mark.timeout(120)
def test_on_greenlets_runs_streaming_side_by_side_share_one_pass_per_window() -> None:
    shared, lone = _passes(2.0)
    assert shared >= 2.0  # held for the window after a pass that carried several runs
    assert lone < 1.0  # a run streaming alone is not held
    shared, _ = _passes(0.0)
    assert shared < 1.0  # no window: appended as soon as the flusher gets to it

"""A warm shutdown (SIGTERM, a deploy) of a gevent worker whose tool hangs: the worker gives the step back within
its soft-shutdown window and exits, and the shutdown itself raises nothing.

The soft-shutdown timer used to be a ``threading.Timer`` started inside Celery's ``worker_shutting_down`` signal,
which on a gevent worker runs in the hub: starting a (green) thread there blocks, gevent raised
``BlockingSwitchOutError``, the timer never started and a hung call held the shutdown until Celery's own limit.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from .conftest import wait_for
from .test_gevent import tools_then_text

pytestmark = pytest.mark.timeout(90)

#: The worker's soft-shutdown window: steps waiting on a call walk away from it a second before it ends.
SOFT = 3.0


def test_sigterm_ends_a_gevent_worker_whose_tool_hangs_within_its_soft_shutdown(
    deploy: Any, fake_openai: Any, r: Any
) -> None:
    from .support.invariants import counter_of

    own = deploy("gevent-term", {"AGENTS_CELERY_SOFT_SHUTDOWN_SECONDS": str(SOFT)})
    fake_openai.responder = tools_then_text
    worker = own.worker(pool="gevent", concurrency=50)
    rt = own.runtime
    run_id = rt.stream("fake", "hang:t1").id
    count = counter_of(r, own.prefix)
    wait_for(lambda: count("hang:hang:t1"), timeout=20, what="the tool to start")
    t0 = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: worker.proc.poll() is not None, timeout=SOFT + 20, what=f"the worker to exit: {worker.output()}")
    took = time.monotonic() - t0
    log = worker.output()
    assert "BlockingSwitchOutError" not in log and "Traceback" not in log, log
    assert took < SOFT + 5, f"the worker took {took:.1f}s to exit (soft shutdown {SOFT}s):\n{log}"
    # The hung call was walked away from and its step given back; since the call may have run (it is not
    # idempotent), the run then pauses to ask rather than call it again.
    assert "step given back" in log, log
    view = wait_for(lambda: (v := rt.get(run_id)).status.value != "running" and v, timeout=20, what="the run to pause")
    assert view.status.value == "paused", view
    assert count("hang:hang:t1") == 1
    print(f"\nexited {took:.1f}s after SIGTERM (soft shutdown {SOFT}s); the run {view.status.value}")

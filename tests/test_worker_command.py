"""``agents-celery worker``: loads an agents module, refuses a bad one with a clear message."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from .support.invariants import assert_run_sound
from .support.workers import ROOT


def test_worker_with_a_missing_agents_module_exits_with_a_clear_error(worker_env: dict[str, str]) -> None:
    env = {**worker_env, "AGENTS_CELERY_AGENTS": "no_such_pkg.agents"}
    proc = subprocess.run(
        [sys.executable, "-m", "agents_celery.cli", "worker", "--pool", "solo"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "ConfigurationError" in proc.stderr and "no_such_pkg.agents" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_worker_loaded_the_agents_module_and_published_it(worker: Any, runtime: Any) -> None:
    names = [m["name"] for m in runtime.agents()]
    assert names.index("fake") < names.index("offline")  # module order (other modules may publish too)
    banner = worker.log.read_text(errors="replace")  # the whole log: the banner is at its start
    assert "tests.agents.fixture" in banner or "fake" in banner


def test_the_worker_says_which_fast_paths_are_on(worker: Any) -> None:
    log = worker.log.read_text(errors="replace")
    line = next(x for x in log.splitlines() if "agents-celery fast paths:" in x)
    for name in ("send_ahead", "idle_poll", "direct_publish", "commit_pushes_next", "commit_acks", "claim_on_receipt"):
        assert f"{name} on" in line, line  # the test worker: threads pool, broker = the state Redis


def test_with_fast_paths_off_a_run_completes_on_public_apis_only(
    worker_env: dict[str, str], deploy: Any, r: Any
) -> None:
    """AGENTS_CELERY_FAST_PATHS=0: the worker says so, runs a run with tools, and Celery acks each step's
    message itself (nothing is left in kombu's unacked keys)."""
    from .conftest import wait_for

    own = deploy("plain", {"AGENTS_CELERY_FAST_PATHS": "0"}, prefix=worker_env["AGENTS_CELERY_KEY_PREFIX"])
    w, rt = own.worker(), own.runtime
    assert rt.settings.fast_paths is False
    try:
        line = next(x for x in w.output().splitlines() if "agents-celery fast paths:" in x)
        assert "all off (AGENTS_CELERY_FAST_PATHS=0)" in line
        view = rt.run("offline", "What is 2 + 3?", timeout=30)
        assert view.status == "completed", view
        events = list(rt.get_stream(view.run_id).events())
        assert_run_sound(events)
        assert len(events) == view.last_offset + 1
        wait_for(lambda: not any(view.run_id in v.decode() for v in r.hvals("unacked")), what="Celery's acks")
    finally:
        w.stop()

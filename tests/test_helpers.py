"""The test helpers themselves: deadlines that fire when nothing arrives, a fake model no test inherits a script
from, and the guard that fails a run with a skipped test."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from agents_celery import Runtime

from .conftest import Unscripted, all_events, wait_event
from .support.workers import ROOT

pytestmark = pytest.mark.timeout(60)


def test_event_waits_time_out_when_nothing_arrives(fast_settings: Any, worker: Any) -> None:
    """A run queued where no worker listens writes nothing after RUN_STARTED: both waits give up on time."""
    rt = Runtime(settings=fast_settings.model_copy(update={"queue": f"nobody-{uuid.uuid4().hex[:6]}"}))
    run_id = rt.stream("offline", "hi").id
    try:
        never = lambda e: False  # noqa: E731
        for wait in (lambda: all_events(rt, run_id, timeout=0.5), lambda: wait_event(rt, run_id, never, timeout=0.5)):
            started = time.monotonic()
            with pytest.raises(AssertionError, match=r"timed out after 0\.5s"):
                wait()
            assert time.monotonic() - started < 5
    finally:
        rt.stop(run_id)
        rt.close()


def test_a_test_that_does_not_script_the_fake_model_gets_an_error_naming_it(
    runtime: Runtime, fake_openai: Any, request: pytest.FixtureRequest
) -> None:
    assert isinstance(fake_openai.responder, Unscripted)  # whatever the test before this one scripted is gone
    view = runtime.run("fake", "hi", timeout=30)
    assert view.status == "failed" and view.error is not None
    assert request.node.nodeid in view.error["message"] and "HTTP 400" in view.error["message"]


def test_a_scripted_fake_model_answers(runtime: Runtime, script: Any) -> None:
    script("Scripted here.")
    assert runtime.run("fake", "hi", timeout=30).output == "Scripted here."


def _pytest(tmp_path: Path, body: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(
        "from tests.support.skipguard import pytest_collectreport, pytest_runtest_logreport, pytest_sessionfinish,"
        " pytest_terminal_summary\n"
    )
    (tmp_path / "test_case.py").write_text("import pytest\n\n\ndef test_passes():\n    pass\n\n" + body)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(tmp_path / "pytest.ini")]
    cmd += ["--rootdir", str(tmp_path), str(tmp_path / "test_case.py")]
    clean = {k: v for k, v in os.environ.items() if k != "AGENTS_CELERY_ALLOW_SKIPS"}
    # No plugin autoload: the case needs only the hooks its conftest names, and loading every installed plugin
    # (playwright, schemathesis, hypothesis...) took 2 of the 2.3 s each run costs.
    full_env = {**clean, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **env}
    return subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120)


SKIPS = """
@pytest.mark.skipif(True, reason="no RabbitMQ here")
def test_skipped_by_a_mark():
    pass


def test_skipped_inside():
    pytest.skip("redis-server is not on PATH")


@pytest.mark.xfail(reason="known bug")
def test_expected_to_fail():
    assert False
"""


def test_a_skipped_or_xfailed_test_fails_the_run(tmp_path: Path) -> None:
    assert _pytest(tmp_path, "").returncode == 0
    failed = _pytest(tmp_path, SKIPS)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    for words in ("no RabbitMQ here", "redis-server is not on PATH", "known bug", "the run fails"):
        assert words in failed.stdout, failed.stdout
    allowed = _pytest(tmp_path, SKIPS, AGENTS_CELERY_ALLOW_SKIPS="1")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "allowed by AGENTS_CELERY_ALLOW_SKIPS" in allowed.stdout
    broken = _pytest(tmp_path, "def test_fails():\n    assert False\n")
    assert broken.returncode == 1  # a real failure keeps its own status

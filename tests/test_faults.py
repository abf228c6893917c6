"""Faults a run must survive: a connection reset under a streaming step is not the run's failure."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlparse

import pytest

from agents_celery import Runtime
from agents_celery.events import EventType

from .conftest import TEST_REDIS_URL, wait_for
from .support.apis import recv_until
from .support.faults import ResettingProxy
from .support.invariants import assert_run_sound

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TEXT = " ".join(f"word{i}" for i in range(80))


@pytest.mark.parametrize("fast", ["1", "0"], ids=["fast paths", "public APIs only"])
def test_a_connection_reset_while_a_turn_streams_does_not_fail_the_run(
    worker_env: dict[str, str], deploy: Any, script: Any, fast: str
) -> None:
    """The worker reaches run state through a proxy that resets every connection mid-stream (Redis stays up):
    the step is given back and retried, and the run completes with every offset once and a valid stream."""
    upstream = urlparse(TEST_REDIS_URL)
    proxy = ResettingProxy((upstream.hostname or "127.0.0.1", upstream.port or 6379))
    own = deploy("faults", prefix=worker_env["AGENTS_CELERY_KEY_PREFIX"])
    worker = own.worker(
        {"AGENTS_CELERY_REDIS_URL": proxy.url(path=upstream.path or "/0"), "AGENTS_CELERY_FAST_PATHS": fast}
    )
    runtime = own.runtime
    try:
        script(TEXT, token_delay=0.03)
        stream = runtime.stream("fake", "talk for a while")
        log = runtime.store.log
        wait_for(lambda: len(log.read(stream.run_id)) > 20, timeout=30, what="the turn to stream")
        connected = proxy.accepted
        assert proxy.reset() > 0
        wait_for(lambda: runtime.get(stream.run_id).status.is_final, timeout=60, what="the run to end")
        assert proxy.accepted > connected  # the reset reached the worker: it had to connect again
        view = runtime.get(stream.run_id)
        assert view.status == "completed", (view.status, view.error, worker.output())
        assert view.output == TEXT
        events = log.read(stream.run_id)
        assert_run_sound(events)
        assert events[-1].type is EventType.RUN_FINISHED and events[-1].data["outcome"]["type"] == "success"
    finally:
        worker.stop()
        proxy.close()


# -- calls that never return ------------------------------------------------------------------------------

HANGING = {"AGENTS_CELERY_STOP_GRACE_SECONDS": "1", "AGENTS_CELERY_SOFT_SHUTDOWN_SECONDS": "3"}


@pytest.fixture
def hanging_worker(worker_env: dict[str, str], deploy: Any) -> Any:
    own = deploy("hang", prefix=worker_env["AGENTS_CELERY_KEY_PREFIX"])
    return own.worker(HANGING), own.runtime


def _stop_and_time(runtime: Runtime, run_id: str) -> float:
    import time

    t0 = time.monotonic()
    runtime.stop(run_id)
    wait_for(lambda: runtime.get(run_id).status.is_final, timeout=15, what="the stopped run to end")
    return time.monotonic() - t0


def test_stop_ends_a_run_whose_tool_never_returns(hanging_worker: Any, script: Any, r: Any, key_prefix: str) -> None:
    """A tool blocks forever: stop ends the run cancelled within the grace, the call is abandoned (and says so),
    the worker completes another run, and exits on SIGTERM."""
    from agents_celery import ScriptedToolCall, ScriptedTurn

    worker, runtime = hanging_worker
    key = uuid.uuid4().hex[:6]
    script(ScriptedTurn("", [ScriptedToolCall("hang", {"key": key})]), "never")
    stream = runtime.stream("fake", "hang")
    wait_for(lambda: r.get(f"{key_prefix}:test:count:hang:{key}"), timeout=20, what="the tool to start")
    took = _stop_and_time(runtime, stream.run_id)
    assert took < 1 + 3, took  # the grace (1 s) and a couple of polls, not forever
    view = runtime.get(stream.run_id)
    assert view.status == "cancelled"
    events = runtime.store.log.read(stream.run_id)
    abandoned = [e for e in events if e.type is EventType.CUSTOM and e.data.get("name") == "call_abandoned"]
    assert abandoned and abandoned[0].data["value"]["reason"] == "stopped"
    assert events[-1].type is EventType.RUN_FINISHED and events[-1].data["outcome"]["type"] == "cancelled"
    assert "abandoned after" in worker.output()
    script("Still here.")
    assert runtime.run("fake", "hello?", timeout=30).output == "Still here."  # its slot is free
    worker.proc.terminate()
    worker.proc.wait(timeout=15)  # the abandoned call does not hold the shutdown


def test_stop_ends_a_run_whose_model_only_sends_keep_alives(hanging_worker: Any, fake_openai: Any) -> None:
    from agents_celery.testing import FakeReply

    _worker, runtime = hanging_worker
    fake_openai.responder = lambda request: FakeReply(hang=True, token_delay=0.05)
    stream = runtime.stream("fake", "say something")
    wait_for(lambda: runtime.get(stream.run_id).status == "running", timeout=20, what="the turn to start")
    assert _stop_and_time(runtime, stream.run_id) < 1 + 3
    assert runtime.get(stream.run_id).status == "cancelled"


def test_a_turn_past_its_deadline_fails_the_run_and_a_slow_tool_gets_an_error(
    worker_env: dict[str, str], deploy: Any, fake_openai: Any, script: Any
) -> None:
    from agents_celery import ScriptedToolCall, ScriptedTurn
    from agents_celery.testing import FakeReply

    own = deploy("deadline", prefix=worker_env["AGENTS_CELERY_KEY_PREFIX"])
    worker = own.worker({"AGENTS_CELERY_TURN_TIMEOUT_SECONDS": "3", "AGENTS_CELERY_MODEL_RETRIES": "0"})
    runtime = own.runtime
    try:
        fake_openai.responder = lambda request: FakeReply(hang=True, token_delay=0.05)
        view = runtime.run("fake", "say something", timeout=30)
        assert view.status == "failed" and "no complete answer within 3s" in (view.error or {}).get("message", "")
        script(ScriptedTurn("", [ScriptedToolCall("slow_lookup", {"word": "x"})]), "The lookup timed out.")
        view = runtime.run("fake", "look it up", timeout=30)
        assert view.status == "completed" and view.output == "The lookup timed out."
        results = [e for e in runtime.store.log.read(view.run_id) if e.type is EventType.TOOL_CALL_RESULT]
        assert "did not finish within 0.5s" in results[0].data["content"]
    finally:
        worker.stop()


def test_sigterm_is_not_held_by_a_tool_that_never_returns(
    hanging_worker: Any, script: Any, r: Any, key_prefix: str
) -> None:
    """No stop, a deploy: after the soft-shutdown window the step walks away from its call and is given back
    (the run stays live for another worker), and the worker exits."""
    import time

    from agents_celery import ScriptedToolCall, ScriptedTurn

    worker, runtime = hanging_worker
    key = uuid.uuid4().hex[:6]
    script(ScriptedTurn("", [ScriptedToolCall("hang", {"key": key})]), "never")
    stream = runtime.stream("fake", "hang")
    wait_for(lambda: r.get(f"{key_prefix}:test:count:hang:{key}"), timeout=20, what="the tool to start")
    t0 = time.monotonic()
    worker.proc.terminate()
    worker.proc.wait(timeout=20)
    assert time.monotonic() - t0 < 3 + 5  # the soft-shutdown window (3 s) and some
    assert "step given back" in worker.output()
    assert runtime.get(stream.run_id).status == "running"  # not failed: another worker takes it


# -- connections come back --------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    import os

    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except OSError:
                continue
    return out


def test_streams_dropped_abruptly_give_their_redis_connections_back(
    worker_env: dict[str, str], runtime: Runtime, r: Any
) -> None:
    """100 SSE clients reset their connections mid-stream: the API process closes their Redis connections and
    their file descriptors, instead of keeping them idle for good."""
    import os
    import socket
    import struct

    from agents_celery.events import make_event
    from agents_celery.http.streams import CLIENT_NAME

    from .support.apis import ApiServer

    def streams_open() -> int:
        return sum(1 for c in r.client_list() if c.get("name") == CLIENT_NAME)

    run_id = uuid.uuid4().hex
    log = runtime.store.log
    log.create(run_id, "s", "fake", [make_event(EventType.RUN_STARTED, thread_id="s", run_id=run_id)])
    env = {**worker_env, "AGENTS_CELERY_KEEPALIVE_SECONDS": "0.3", "AGENTS_CELERY_IDLE_CLOSE_SECONDS": "1"}
    server = ApiServer(env, gunicorn=True).wait_ready()
    try:
        (worker_pid,) = wait_for(lambda: _children(server.proc.pid), what="gunicorn's worker")
        fds_before = len(os.listdir(f"/proc/{worker_pid}/fd"))
        before = streams_open()
        conns = []
        for _ in range(100):
            conn = socket.create_connection(("127.0.0.1", server.port), timeout=20)
            conn.sendall(f"GET /runs/{run_id}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            conns.append(conn)
        for conn in conns:
            recv_until(conn, b"RUN_STARTED")
        assert streams_open() >= before + 100  # one connection per open stream
        assert len(os.listdir(f"/proc/{worker_pid}/fd")) >= fds_before + 100  # what is counted below does count
        for conn in conns:  # gone without a word, as a closed laptop lid
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
        wait_for(lambda: streams_open() <= before, timeout=20, what="the streams' Redis connections to close")
        wait_for(
            lambda: len(os.listdir(f"/proc/{worker_pid}/fd")) <= fds_before + 5,
            timeout=20,
            what="the worker's file descriptors to come back",
        )
    finally:
        server.stop()

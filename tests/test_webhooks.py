"""Webhooks of runs: a real worker delivers them to a local receiver that fails twice before it accepts; every
attempt is signed and carries the same idempotency key. Real Redis, real worker, real HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agents_celery import Runtime, ValidationError
from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.webhook import SIGNATURE, TIMESTAMP, sign, verify

from .cluster import Worker, own_deployment
from .conftest import wait_for

SECRET = "webhook-test-secret"
pytestmark = pytest.mark.timeout(90)


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def data(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.body)
        return value


class Receiver:
    """A local webhook receiver: answers 500 to the first ``fail_first`` attempts of each key, then 200."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.deliveries: list[Delivery] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                key = self.headers.get("Idempotency-Key", "")
                seen = sum(1 for d in receiver.deliveries if d.headers.get("Idempotency-Key") == key)
                status = 500 if seen < receiver.fail_first else 200
                receiver.deliveries.append(Delivery(dict(self.headers.items()), body, status))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def accepted(self, status: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.status == 200 and d.data["status"] == status]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def own(fake_openai: Any) -> Iterator[tuple[Runtime, Worker]]:
    extra = {"AGENTS_CELERY_WEBHOOK_SECRET": SECRET, "AGENTS_CELERY_WEBHOOK_BACKOFF_SECONDS": "0.2"}
    env, settings = own_deployment("hook", fake_openai.url, extra)
    worker = Worker(env).wait_ready()
    runtime = Runtime(settings=settings)
    yield runtime, worker
    runtime.close()
    worker.stop()


def test_a_webhook_is_retried_until_taken_signed_and_keyed_the_same(own: tuple[Runtime, Worker]) -> None:
    runtime, _ = own
    receiver = Receiver(fail_first=2)
    try:
        stream = runtime.stream("offline", "what time is it?", webhook_url=receiver.url)
        (taken,) = wait_for(lambda: receiver.accepted("completed"), timeout=30, what="the webhook to be taken")
        attempts = [d for d in receiver.deliveries if d.data["run_id"] == stream.id]
        assert [d.status for d in attempts] == [500, 500, 200]  # failed twice, then delivered, then no more
        assert len({d.headers["Idempotency-Key"] for d in attempts}) == 1
        assert all(verify(SECRET, d.headers, d.body) for d in attempts)
        assert len({d.body for d in attempts}) == 1  # the summary was built once, at the run's end
        data = taken.data
        assert data["run_id"] == stream.id and data["status"] == "completed" and data["output"] == "It is 12:00 UTC."
        assert data["agent_id"] == "offline" and data["pending"] == [] and data["error"] is None
    finally:
        receiver.close()


def test_a_pause_and_a_stop_each_send_one(own: tuple[Runtime, Worker], script: Any) -> None:
    runtime, _ = own
    receiver = Receiver()
    try:
        script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/hooked"})]), "done")
        stream = runtime.stream("fake", "delete it", webhook_url=receiver.url)
        (paused,) = wait_for(lambda: receiver.accepted("paused"), timeout=30, what="the pause's webhook")
        assert paused.data["pending"][0]["tool_name"] == "delete_file"
        assert paused.data["pending"][0]["tool_args"] == {"path": "/tmp/hooked"}
        runtime.stop(stream.id)
        (cancelled,) = wait_for(lambda: receiver.accepted("cancelled"), timeout=30, what="the stop's webhook")
        assert cancelled.headers["Idempotency-Key"] != paused.headers["Idempotency-Key"]
        assert verify(SECRET, cancelled.headers, cancelled.body)
    finally:
        receiver.close()


def test_webhook_urls_are_checked(own: tuple[Runtime, Worker]) -> None:
    runtime, _ = own
    for bad in ("ftp://example.com/x", "file:///etc/passwd", "example.com/hook", "http://"):
        with pytest.raises(ValidationError, match="http:// or https://"):
            runtime.stream("offline", "hi", webhook_url=bad)
    unsigned = Runtime(settings=runtime.settings.model_copy(update={"webhook_secret": None}))
    try:
        with pytest.raises(ValidationError, match="WEBHOOK_SECRET"):
            unsigned.stream("offline", "hi", webhook_url="https://example.com/hook")
    finally:
        unsigned.close()


def test_verify_refuses_tampered_or_stale() -> None:
    body, now = b'{"status":"completed"}', str(int(time.time()))
    headers = {TIMESTAMP: now, SIGNATURE: sign(SECRET, now, body)}
    assert verify(SECRET, headers, body)
    assert not verify(SECRET, headers, body.replace(b"completed", b"failed"))
    assert not verify("another-secret", headers, body)
    old = str(int(time.time()) - 3600)
    assert not verify(SECRET, {TIMESTAMP: old, SIGNATURE: sign(SECRET, old, body)}, body)

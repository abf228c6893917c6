"""``schedules``: list, add, pause, resume or delete the schedules of runs (Celery beat fires them)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from .driver import EXIT_OK, usage
from .runs import when

if TYPE_CHECKING:
    from ..schedule import Schedule
    from .driver import Driver
    from .render import Printer


def schedule_line(s: Schedule) -> str:
    every = f"cron {s.cron!r}" if s.cron else f"every {s.every_seconds:g}s"
    state = "paused" if s.paused else f"next {when(s.next_at or 0)}"
    name = f" ({s.name})" if s.name else ""
    return f"{s.schedule_id}{name}  {s.agent_id}  {every}  {state}  {s.message!r}"


def schedules(args: argparse.Namespace, rt: Driver, out: Printer) -> int:
    if args.action == "add":
        return _add(args, rt)
    if args.action in ("pause", "resume", "delete"):
        return _change(args, rt, out)
    for s in rt.schedules():
        print(json.dumps(s.to_dict())) if args.json else out.line(schedule_line(s))
    return EXIT_OK


def _add(args: argparse.Namespace, rt: Driver) -> int:
    if len(args.args) != 2 or (args.cron is None) == (args.every is None):
        raise usage("schedules add AGENT MESSAGE (--cron 'M H DOM MON DOW' | --every SECONDS)")
    agent, message = args.args
    made = rt.schedule(agent, message, cron=args.cron, every=args.every, session_id=args.session, name=args.name)
    print(json.dumps(made.to_dict()) if args.json else made.schedule_id)
    return EXIT_OK


def _change(args: argparse.Namespace, rt: Driver, out: Printer) -> int:
    if len(args.args) != 1:
        raise usage(f"schedules {args.action} SCHEDULE_ID")
    if args.action == "delete":
        rt.delete_schedule(args.args[0])
    else:
        out.line(schedule_line(rt.pause_schedule(args.args[0], args.action == "pause")))
    return EXIT_OK

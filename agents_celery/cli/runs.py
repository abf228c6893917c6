"""The operator commands on runs and sessions: ``show``, ``runs``, ``sessions``, ``stop`` and ``approve``.

Each takes the parsed arguments, the :data:`~.driver.Driver` and the printer, and returns the exit status; with
``--json`` it prints the library's own ``to_dict()`` of what it read.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from .driver import EXIT_OK, continue_run, usage

if TYPE_CHECKING:
    from ..runs import RunView
    from .driver import Driver
    from .render import Printer


def when(ms: int) -> str:
    """A millisecond timestamp as local time (``-`` for none)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms else "-"


def show(args: argparse.Namespace, rt: Driver, out: Printer) -> int:
    view = rt.get(args.run_id)
    if args.json:
        print(json.dumps(view.to_dict(), indent=2))
        return EXIT_OK
    for key, value in _rows(view):
        out.line(f"{key + ':':<9} {value}")
    if view.pending and view.status.value == "paused":
        out.line(f"answer with: agents-celery approve {view.run_id} (or --reject), or interactively with:")
        out.line(f"  agents-celery tail {view.run_id} --after {view.last_offset}")
    return EXIT_OK


def _rows(view: RunView) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = [
        ("run", view.run_id),
        ("agent", view.agent_id),
        ("session", view.session_id),
        ("status", view.status.value + (" (stop requested)" if view.stop_requested else "")),
        ("offsets", f"0..{view.last_offset} ({view.last_offset + 1} events)"),
    ]
    rows += [("output", view.output)] if view.output else []
    rows += [("error", f"{view.error.get('type')}: {view.error.get('message')}")] if view.error else []
    rows += [("pending", f"{c.id} {c.name}({c.arguments}) [{c.pause_reason}]") for c in view.pending]
    rows += [("parent", view.parent_run_id)] if view.parent_run_id else []
    rows += [("child", f"{c['run_id']} {c['agent_id']} {c['status']}") for c in view.children]
    return rows


def runs(args: argparse.Namespace, rt: Driver, out: Printer) -> int:
    page = rt.runs(
        status=args.status, agent_id=args.agent, session_id=args.session, user_id=args.user, limit=args.limit,
        cursor=args.cursor,
    )  # fmt: skip
    if args.json:
        for run in page.runs:
            print(json.dumps(run.to_dict()))
        return EXIT_OK
    for run in page.runs:
        waiting = f"  waits for: {', '.join(c.name for c in run.pending)}" if run.status.value == "paused" else ""
        out.line(
            f"{run.run_id}  {when(run.created_at)}  {run.status.value:<9}  {run.agent_id:<12}"
            f"  {run.user_id or '-':<10}  {run.last_offset + 1:>5} events{waiting}"
        )
    _page_end(out, "runs", bool(page.runs), page.next_cursor)
    return EXIT_OK


def sessions(args: argparse.Namespace, rt: Driver, out: Printer) -> int:
    page = rt.sessions(user_id=args.user, limit=args.limit, cursor=args.cursor)
    if args.json:
        for session in page.sessions:
            print(json.dumps(session.to_dict()))
        return EXIT_OK
    for session in page.sessions:
        active = f"  active run {session.active_run_id}" if session.active_run_id else ""
        out.line(f"{session.session_id}  {when(session.updated_at)}{active}")
    _page_end(out, "sessions", bool(page.sessions), page.next_cursor)
    return EXIT_OK


def _page_end(out: Printer, noun: str, any_listed: bool, next_cursor: str | None) -> None:
    if not any_listed:
        out.line(f"no {noun}")
    if next_cursor:
        out.line(f"more: --cursor {next_cursor}")


def stop(args: argparse.Namespace, rt: Driver, out: Printer) -> int:
    view = rt.stop(args.run_id, "stopped from the command line")
    out.line(f"stop requested for run {view.run_id}; it is {view.status.value} now", "bold")
    return EXIT_OK


def approve(args: argparse.Namespace, rt: Driver, out: Printer) -> int:
    """Answer every pending call of a paused run: approve (with edited arguments) or reject (with a note)."""
    edited = _edited_args(args.args or [])
    view = rt.get(args.run_id)
    unknown = sorted(set(edited) - {c.id for c in view.pending})
    if unknown:
        raise usage(f"--args names calls that are not pending: {unknown}")
    decisions = [
        {
            "tool_call_id": call.id,
            "confirmed": not args.reject,
            "confirmation_note": args.note,
            "tool_args": edited.get(call.id),
        }
        for call in view.pending
    ]
    continue_run(rt, args.run_id, decisions)
    view = rt.get(args.run_id)
    if args.json:
        print(json.dumps(view.to_dict()))
    else:
        verb = "rejected" if args.reject else "approved"
        out.line(f"{verb} {len(decisions)} call(s) of run {view.run_id}; it is {view.status.value} now")
    return EXIT_OK


def _edited_args(items: list[str]) -> dict[str, dict[str, Any]]:
    """``--args CALL_ID={...}`` given, by call id."""
    edited: dict[str, dict[str, Any]] = {}
    for item in items:
        call_id, sep, raw = item.partition("=")
        try:
            value = json.loads(raw) if sep else None
        except ValueError as exc:
            raise usage(f"--args {item!r}: not JSON after '=' ({exc})") from None
        if not call_id or not isinstance(value, dict):
            raise usage(f"--args {item!r}: give CALL_ID={{...}} with a JSON object")
        edited[call_id] = value
    return edited

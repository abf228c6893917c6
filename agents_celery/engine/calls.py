"""Calls a step can walk away from: a tool, or a model turn, that may never return.

The call runs on a thread of the process's call pool while the step's thread waits for what could end the wait:
a stop request (the call then gets ``stop_grace_seconds`` to return, and is abandoned), the attempt's lease being
lost, the worker shutting down (abandoned at once), or the call's own deadline (a tool's ``timeout``, a turn's
``turn_timeout_seconds``). An abandoned call keeps its thread until it returns, if ever; the step does not: it
ends (cancelled, given back, or with an error the model or the run sees), so the worker's slot, the run's lease
and the worker's shutdown are never held by it.
The waiting thread is woken, not polled: by the call's return, the lease keeper's signal of a stop or a lost lease
(:attr:`Watch.listen`), :func:`shut_down`, the deadline, or a :data:`BACKSTOP`; a wait that cannot be woken looks
every ``poll`` seconds (a gevent worker's thousand waiting steps polling every 0.2 s cost 6-7% of its CPU).
Each abandoned call is counted (:data:`ABANDONED`) and logged; the step also writes a CUSTOM
``call_abandoned`` event, so the run's stream shows it. Threads are not free, so their number is capped: while
``max_abandoned_threads`` abandoned calls still run, the worker refuses new steps (:meth:`Abandoned.refuse`;
the broker layer hands each back before claiming it) rather than grow without end.

The pool's threads are daemon threads, reused from call to call (a thread per call would cost a spawn per
step), so a call that never returns does not keep the process alive either.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .writer import BRIEF

if TYPE_CHECKING:
    from .writer import EventWriter

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Set when the worker begins to shut down (:func:`shut_down`): waiting steps abandon their calls and give their
#: step back.
SHUTTING_DOWN = threading.Event()
#: With nothing under way (no stop, no lost lease, no shutdown), a step waiting on a call that can be woken
#: (:attr:`Watch.listen`) still looks this often (seconds), besides at the call's deadline.
BACKSTOP = 5.0


class CallAbandoned(Exception):
    """The step walked away from a call: ``reason`` is ``stopped``, ``lost``, ``shutdown`` or ``deadline``."""

    def __init__(self, what: str, reason: str, seconds: float) -> None:
        super().__init__(f"{what}: abandoned after {seconds:.1f}s ({reason})")
        self.what, self.reason, self.seconds = what, reason, seconds


@dataclass
class Abandoned:
    """Calls this process walked away from (they may still be running on their threads), and the steps it
    refused because too many of them were."""

    count: int = 0
    running: int = 0
    refused: int = 0

    def add(self) -> None:
        with _LOCK:
            self.count += 1
            self.running += 1

    def finished(self) -> None:
        with _LOCK:
            self.running -= 1

    def refuse(self, cap: int) -> bool:
        """Whether a new step must be refused: ``cap`` abandoned calls or more still hold their threads (the
        refusal is counted)."""
        with _LOCK:
            if self.running < cap:
                return False
            self.refused += 1
            return True

    def snapshot(self) -> dict[str, int]:
        """The counters, for logs and metrics (``abandoned_calls``, ``abandoned_running``, ``refused_steps``)."""
        with _LOCK:
            return {"abandoned_calls": self.count, "abandoned_running": self.running, "refused_steps": self.refused}


ABANDONED = Abandoned()
_LOCK = threading.Lock()
#: The wake events of the steps waiting on calls in this process (:func:`shut_down` sets them).
_WAITING: set[threading.Event] = set()


def shut_down() -> None:
    """The worker begins to shut down: set :data:`SHUTTING_DOWN` and wake every step waiting on a call (on a
    gevent worker: from the hub, as ``gevent.spawn_later`` calls it)."""
    SHUTTING_DOWN.set()
    with _LOCK:
        waiting = list(_WAITING)
    for wake in waiting:
        wake.set()


#: The name of the call pool's threads.
THREAD_NAME = "agents-celery-call"


class _Job:
    __slots__ = ("abandoned", "done", "error", "fn", "lock", "result", "wake")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.done = threading.Event()
        #: What the waiting step sleeps on: set when the call returns, and by whatever else may end the wait.
        self.wake = threading.Event()
        self.lock = threading.Lock()  # between "it returned" and "the step walked away"
        self.result: Any = None
        self.error: BaseException | None = None
        self.abandoned = False

    def finish(self) -> bool:
        """Mark it returned; whether the step had walked away from it already."""
        with self.lock:
            self.done.set()
            self.wake.set()
            return self.abandoned

    def abandon(self) -> bool:
        """Walk away from it; False when it returned just now after all (its result stands)."""
        with self.lock:
            if self.done.is_set():
                return False
            self.abandoned = True
            return True


class _Pool:
    """Daemon threads that run calls; one is added whenever none is idle."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, job: _Job) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        if spawn:
            threading.Thread(target=self._work, args=(job,), name=THREAD_NAME, daemon=True).start()
        else:
            self._jobs.put(job)

    def _work(self, job: _Job) -> None:
        while True:
            try:
                job.result = job.fn()
            except BaseException as exc:  # handed to the waiting step
                job.error = exc
            with self._lock:  # idle before the step wakes, so the step's next call reuses this thread
                self._idle += 1
            if job.finish():
                ABANDONED.finished()
                log.warning("an abandoned call returned at last; its result was dropped")
            job = self._jobs.get()


_POOL = _Pool()


@dataclass
class Watch:
    """What ends a wait: the attempt's stop and lost events, its grace after a stop, and its poll interval."""

    stop: threading.Event
    lost: threading.Event
    stop_grace: float
    poll: float
    #: The step's event writer: waited on by the step's own thread, a call past ``BRIEF`` has it stand by
    #: (:meth:`agents_celery.engine.writer.EventWriter.stand_by`).
    writer: EventWriter | None = None
    #: Calls a function whenever ``stop`` or ``lost`` is set, returning what stops it: the wait then wakes on them
    #: and on the call's end, the worker's shutdown, its deadline and its grace, not every ``poll``.
    listen: Callable[[Callable[[], None]], Callable[[], None]] | None = None


def walk_away(
    now: float, lost: bool, shutting_down: bool, deadline: float | None, stopped_at: float | None, grace: float
) -> str | None:
    """Why a step waiting on a call walks away from it now (None: it waits on); no I/O. In this order: the
    lease was lost, the worker shuts down, the call's ``deadline`` passed, a stop seen at ``stopped_at`` has
    had its ``grace``."""
    if lost:
        return "lost"
    if shutting_down:
        return "shutdown"
    if deadline is not None and now >= deadline:
        return "deadline"
    if stopped_at is not None and now - stopped_at >= grace:
        return "stopped"
    return None


def run_call(fn: Callable[[], T], watch: Watch, *, what: str, deadline: float | None = None) -> T:
    """``fn()`` on the call pool, waited for as the module docs say; its result, or its exception raised here.

    Raises:
        CallAbandoned: the step walked away from it (the caller decides what that means for the step).
    """
    writer = watch.writer if watch.writer is not None and watch.writer.owned() else None
    result: T
    if writer is None:
        result = _wait(_Job(fn), watch, what, deadline)
        return result
    writer.waiting_briefly(True)
    try:
        result = _wait(_Job(fn), watch, what, deadline, writer)
    finally:
        writer.resume()
    return result


def _wait(job: _Job, watch: Watch, what: str, deadline: float | None, writer: EventWriter | None = None) -> Any:
    """Submit ``job`` and wait for it (:func:`run_call`); ``writer``: the waiting step's, which stands by once the
    call has taken ``BRIEF`` (a call that returns sooner leaves what it emitted to the step's commit)."""
    started = time.monotonic()
    _POOL.submit(job)
    if writer is not None and not job.done.wait(BRIEF):
        writer.stand_by()
    if watch.listen is None:
        return _watch(job, watch, what, deadline, started)
    stop_listening = watch.listen(job.wake.set)
    with _LOCK:
        _WAITING.add(job.wake)
    try:
        return _watch(job, watch, what, deadline, started)
    finally:
        stop_listening()
        with _LOCK:
            _WAITING.discard(job.wake)


def _timeout(watch: Watch, deadline: float | None, stopped_at: float | None) -> float:
    """How long a waiting step sleeps before it looks again (unless woken): ``poll`` while something is under
    way or nothing can wake it, else :data:`BACKSTOP`; never past the call's deadline or a stop's grace."""
    under_way = watch.stop.is_set() or watch.lost.is_set() or SHUTTING_DOWN.is_set()
    wait = watch.poll if watch.listen is None or under_way else BACKSTOP
    now = time.monotonic()
    for due in (deadline, None if stopped_at is None else stopped_at + watch.stop_grace):
        if due is not None:
            wait = min(wait, max(0.0, due - now) + 0.001)
    return wait


def _watch(job: _Job, watch: Watch, what: str, deadline: float | None, started: float) -> Any:
    """Wait for a submitted ``job`` as :func:`run_call` says; its result."""
    stopped_at: float | None = None
    while not job.done.is_set():
        job.wake.wait(_timeout(watch, deadline, stopped_at))
        job.wake.clear()
        if job.done.is_set():
            break
        now = time.monotonic()
        if watch.stop.is_set():
            stopped_at = stopped_at or now
        reason = walk_away(now, watch.lost.is_set(), SHUTTING_DOWN.is_set(), deadline, stopped_at, watch.stop_grace)
        if reason is not None:
            if not job.abandon():
                break  # it returned just now after all
            ABANDONED.add()
            took = now - started
            log.warning(
                "%s: abandoned after %.1fs (%s); %d abandoned so far, %d still holding a thread",
                what,
                took,
                reason,
                ABANDONED.count,
                ABANDONED.running,
            )
            raise CallAbandoned(what, reason, took)
    if job.error is not None:
        raise job.error
    return job.result

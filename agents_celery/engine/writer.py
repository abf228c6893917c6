"""EventWriter: streams a step's events to the log, at once when they trickle, batched when they pour.

An event that arrives while nothing is pending, and not right on the heels of the previous write (or of the
step's start), is appended at once by the step's own thread: a model streaming tokens some milliseconds
apart pays one round trip and no thread hand-off. An event that arrives in a burst (within ``BURST`` of the
previous write, so more are probably coming) is kept pending instead, and the process's one flusher thread
appends whatever piled up in one round trip as soon as it gets to run (typically while the step waits on the
model's socket). When the step ends, :meth:`EventWriter.take` hands the events still pending to the commit,
which writes them with the new checkpoint: a fast turn's deltas cost no round trip of their own.

While the step's own thread works, a burst it emits is kept for it, with no flusher: the thread writes it with
its commit, or as it next waits (:meth:`EventWriter.standing_by`; a call it waits on for more than ``BRIEF``,
:func:`agents_celery.engine.calls.run_call`); a call thread's burst in that call's first ``BRIEF`` is kept too.
The flusher thread woke once or twice a step for a burst the commit then took: without those wake-ups a durable
step went from 1.00-1.03x a bare Celery hop to 0.96-1.00x (#44; three interleaved runs each, bench/steps.py).
While the step's thread waits, the flusher writes what other threads emit, as above.

Order is kept: the emitting thread writes directly only when nothing is pending or being flushed, and
``take`` waits for a flush in flight. One thread at a time emits into a writer (the step's, or the call thread
reading its model while the step's thread waits).

On greenlets (a gevent worker, :mod:`agents_celery.greenlets`) a process streams hundreds of turns at once, each
token a round trip of its own on the direct path: there every event is kept pending, and the flusher (a
greenlet) appends what every writer has pending in one pipelined round trip per pass (the same script calls,
one per run: Redis sees as many commands per step, the process makes a fraction of the system calls and
greenlet switches). While runs stream side by side (the last pass carried several), the flusher makes at most
one pass per ``window`` (the ``green_batch_ms`` setting): 100 runs streaming a token every 0.1 s each took 4,200
round trips for their 5,000 tokens and 2.2-2.5 s of worker CPU, against 1,000 round trips and 1.9-2.1 s with
a 5 ms window (#44). A run streaming alone is not held: a window after each of its passes would lock onto its
tokens' pace and delay every one of them.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator

from ..events import NewEvent
from ..greenlets import green
from ..ids import pid
from ..storage.eventlog import EventLog

#: An event this soon (seconds) after the previous direct write counts as part of a burst.
BURST = 0.0005
#: A call the step's thread waits on that returns this soon (seconds) leaves what it emitted to the step's commit.
BRIEF = 0.002
#: The most events one flush appends (the rest go in the next round trip).
BATCH = 500


class EventWriter:
    """Appends a step's events in order, fenced by the attempt's lease token."""

    def __init__(self, log: EventLog, run_id: str, token: str, window: float = 0.0) -> None:
        self._log, self._run_id, self._token = log, run_id, token
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending: list[NewEvent] = []
        self._writing = False  # the flusher is appending a batch
        self._scheduled = False  # the flusher has this writer in its queue
        self._closed = False
        self._error: BaseException | None = None
        # The step's start counts as a write: what a fast step emits at once rides its commit, while a
        # model's first token (tens of ms in) is written at once.
        self._last_direct = time.monotonic()
        #: Until then a burst's flush waits: a model read on a call thread (whose step thread waits, leaving
        #: the flusher free to run) that finishes by then has its events ride the commit, as on the step's.
        self._hold_until = 0.0
        #: On greenlets nothing is written directly: the flusher batches across runs (module docs).
        self._batched = green()
        #: On greenlets, how long (seconds) a pending event may wait for other runs' to share its round trip.
        self._window = window if self._batched else 0.0
        #: The step's thread (the writer is made there): a burst it emits waits for it (module docs).
        self._owner = threading.get_ident()
        #: The step's thread waits (:meth:`standing_by`): the flusher writes every burst meanwhile.
        self._standing_by = False
        #: The step's thread is in the first ``BRIEF`` of a wait on a call: the call's burst waits for it too.
        self._brief = False

    def emit(self, event: NewEvent) -> None:
        """Write or keep an event; raises an earlier write's error (e.g. FencedError)."""
        if self._error is not None:
            raise self._error
        schedule = False
        with self._lock:
            if self._closed:
                raise RuntimeError("this step's events were already handed to its commit")
            now = time.monotonic()
            direct = not self._batched and not self._pending and not self._writing and now - self._last_direct >= BURST
            if not direct:
                self._pending.append(event)
                if not self._kept():
                    schedule, self._scheduled = not self._scheduled, True
        if direct:
            self._log.append(self._run_id, [event], self._token)
            self._last_direct = time.monotonic()
        elif schedule:
            _flusher().submit(self, self._hold_until if now < self._hold_until else 0.0)

    def _kept(self) -> bool:
        """Whether a burst emitted now waits for the step's thread (under the lock; module docs)."""
        if self._batched or self._standing_by:
            return False
        return self._brief or threading.get_ident() == self._owner

    def owned(self) -> bool:
        """Whether the calling thread is the step's (the one the writer was made on) and its bursts wait for it (not
        on greenlets, where the flusher batches them across runs)."""
        return not self._batched and threading.get_ident() == self._owner

    def waiting_briefly(self, brief: bool) -> None:
        """The step's thread starts (True) or ends (False) the first ``BRIEF`` of a wait on a call: the call's
        burst meanwhile is kept for the step's thread, which writes it with its commit if the call returns by then."""
        with self._lock:
            self._brief = brief

    def stand_by(self) -> None:
        """The step's thread is about to wait: write what it kept, now, on this thread; until :meth:`resume`, the
        flusher writes every burst."""
        with self._lock:
            self._brief = False
            self._standing_by = True
            flush = bool(self._pending) and not self._writing and not self._scheduled and not self._closed
            if flush:
                self._scheduled = True  # as the flusher's queue has it: _take_batch clears it
        if flush:
            self._flush_pending()

    def resume(self) -> None:
        """The step's thread works again: its bursts wait for it again."""
        with self._lock:
            self._brief = self._standing_by = False

    @contextlib.contextmanager
    def standing_by(self) -> Iterator[None]:
        """:meth:`stand_by` around a wait of the step's thread (another thread's work, a backoff); nothing on
        another thread."""
        if not self.owned():
            yield
            return
        self.stand_by()
        try:
            yield
        finally:
            self.resume()

    def starting(self) -> None:
        """Another thread is about to emit on this step's behalf (a model read on a call thread): count the
        hand-off as the step's start, so what a fast model emits at once still rides the commit."""
        with self._lock:
            self._last_direct = time.monotonic()
            self._hold_until = self._last_direct + BURST

    def take(self) -> list[NewEvent]:
        """End the writer: wait for a flush in flight and return the events not written yet, in order.

        Raises the error of a failed flush (e.g. FencedError).
        """
        with self._lock:
            while self._writing:
                self._idle.wait()
            self._closed = True
            pending, self._pending = self._pending, []
        if self._error is not None:
            raise self._error
        return pending

    def drain(self) -> list[NewEvent]:
        """The events pending now, leaving the writer open (for a commit in the middle of the step, which writes
        them in front of its own); waits for a flush in flight."""
        with self._lock:
            while self._writing:
                self._idle.wait()
            pending, self._pending = self._pending, []
        if self._error is not None:
            raise self._error
        return pending

    def close(self) -> None:
        """Drop what is pending (an attempt that did not commit leaves it to the next attempt to close)."""
        with self._lock:
            while self._writing:
                self._idle.wait()
            self._closed = True
            self._pending = []

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _flush_pending(self) -> None:
        """Called by the flusher thread: append what is pending, in one round trip."""
        batch = self._take_batch()
        if batch is None:
            return
        error: BaseException | None = None
        try:
            if self._error is None:
                self._log.append(self._run_id, batch, self._token)
        except BaseException as exc:  # re-raised in the step's thread
            error = exc
        self._batch_done(error)

    def _take_batch(self) -> list[NewEvent] | None:
        """The events the flusher appends now (None: nothing to do); the writer counts as writing until
        :meth:`_batch_done`."""
        with self._lock:
            self._scheduled = False
            if self._closed or self._writing or not self._pending:
                return None
            batch, self._pending = self._pending[:BATCH], self._pending[BATCH:]
            self._writing = True
            return batch

    def _batch_done(self, error: BaseException | None) -> None:
        with self._lock:
            if error is not None and self._error is None:
                self._error = error
            self._writing = False
            self._idle.notify_all()
            again = bool(self._pending) and not self._closed and not self._scheduled
            self._scheduled = self._scheduled or again
        if again:
            _flusher().submit(self)


class _Flusher:
    """The process's one thread that appends the pending events of bursting writers."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[EventWriter, float]] = queue.SimpleQueue()
        self.pid = pid()
        self._thread = threading.Thread(target=self._run, name="agents-celery-events", daemon=True)
        self._thread.start()

    def submit(self, writer: EventWriter, due: float = 0.0) -> None:
        """Flush ``writer`` as soon as the thread gets to it, not before ``due`` (``time.monotonic``)."""
        self._queue.put((writer, due))

    def _run(self) -> None:
        batched = green()
        last, shared = 0.0, False  # when the last pass started (greenlets), and whether it carried several runs
        while True:
            writer, due = self._queue.get()
            if shared:  # runs stream side by side: one pass per window, what comes meanwhile shares the next
                due = max(due, last + writer._window)
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # at most BURST, or the window on greenlets
            if batched:
                last = time.monotonic()
                shared = self._flush_all(writer) > 1
            else:
                writer._flush_pending()

    def _flush_all(self, first: EventWriter) -> int:
        """On greenlets: every writer queued now, in one pipelined round trip (module docs); how many there were."""
        writers = [first]
        while len(writers) < BATCH:
            try:
                writers.append(self._queue.get_nowait()[0])
            except queue.Empty:
                break
        taken = [(w, w._take_batch()) for w in writers]
        work = [(w, batch) for w, batch in taken if batch is not None and w._error is None]
        for w, batch in taken:
            if batch is not None and w._error is not None:
                w._batch_done(None)
        by_log: dict[int, list[tuple[EventWriter, list[NewEvent]]]] = {}
        for w, batch in work:
            by_log.setdefault(id(w._log), []).append((w, batch))
        for group in by_log.values():
            try:
                results = group[0][0]._log.append_many([(w._run_id, batch, w._token) for w, batch in group])
            except BaseException as exc:  # re-raised in each step's thread
                results = [exc] * len(group)
            for (w, _), result in zip(group, results, strict=True):
                w._batch_done(result if isinstance(result, BaseException) else None)
        return len(writers)


_FLUSHER: _Flusher | None = None
_FLUSHER_LOCK = threading.Lock()


def _flusher() -> _Flusher:
    """The flusher of this process (a forked child starts its own)."""
    global _FLUSHER
    with _FLUSHER_LOCK:
        if _FLUSHER is None or _FLUSHER.pid != pid():
            _FLUSHER = _Flusher()
        return _FLUSHER

"""EventWriter: streams a step's events to the log, at once when they trickle, batched when they pour.

An event that arrives while nothing is queued, and not right on the heels of the previous write, is
appended at once by the step's own thread: a model streaming tokens some milliseconds apart pays one
round trip and no thread hand-off. An event that arrives in a burst (within ``BURST`` of the previous
write, so more are probably waiting) goes on a queue instead; a writer thread appends whatever piled up
while its previous write was in flight, in one round trip. Order is kept: the direct path is only taken
when the queue is empty and nothing queued is still being written.
"""

from __future__ import annotations

import queue
import threading
import time

from .eventlog import EventLog
from .events import NewEvent

_BATCH = 500
#: An event this soon (seconds) after the previous direct write counts as part of a burst.
BURST = 0.0005


class EventWriter:
    """Appends a step's events in order, fenced by the attempt's lease token."""

    def __init__(self, log: EventLog, run_id: str, token: str) -> None:
        self._log, self._run_id, self._token = log, run_id, token
        self._queue: queue.Queue[NewEvent | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None  # started by the first burst
        self._last_direct = 0.0

    def emit(self, event: NewEvent) -> None:
        """Write or queue an event; raises the writer's error (e.g. FencedError) if a write failed."""
        if self._error is not None:
            raise self._error
        idle = self._queue.unfinished_tasks == 0
        if idle and time.monotonic() - self._last_direct >= BURST:
            self._log.append(self._run_id, [event], self._token)
            self._last_direct = time.monotonic()
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"events-{self._run_id}", daemon=True)
            self._thread.start()
        self._queue.put(event)

    def flush(self) -> None:
        """Wait until every queued event is written; raise the writer's error if a write failed."""
        self._queue.join()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Stop the thread after what is queued (flush first to see errors)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                self._queue.task_done()
                return
            batch = [first]
            while len(batch) < _BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # handled on the next loop, after this batch
                    self._queue.task_done()
                    break
                batch.append(item)
            try:
                if self._error is None:
                    self._log.append(self._run_id, batch, self._token)
            except BaseException as exc:  # kept and re-raised in the step's thread
                self._error = exc
            finally:
                for _ in batch:
                    self._queue.task_done()

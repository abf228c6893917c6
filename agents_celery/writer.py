"""EventWriter: streams a step's events to the log from a background thread.

The step puts events on a queue and goes on; the writer thread appends whatever piled up while its
previous write was in flight, in one round trip. Tokens reach readers with one Redis round trip of delay
at low rates and are batched automatically at high ones.
"""

from __future__ import annotations

import queue
import threading

from .eventlog import EventLog
from .events import NewEvent

_BATCH = 500


class EventWriter:
    """Appends a step's events in order, fenced by the attempt's lease token."""

    def __init__(self, log: EventLog, run_id: str, token: str) -> None:
        self._log, self._run_id, self._token = log, run_id, token
        self._queue: queue.Queue[NewEvent | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None  # started by the first emit: tool steps need none

    def emit(self, event: NewEvent) -> None:
        """Queue an event; raises the writer's error (e.g. FencedError) if an earlier write failed."""
        if self._error is not None:
            raise self._error
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"events-{self._run_id}", daemon=True)
            self._thread.start()
        self._queue.put(event)

    def write_now(self, events: list[NewEvent]) -> None:
        """Write ``events`` before returning (after anything queued), in one round trip when nothing is queued."""
        if self._thread is None:
            self._log.append(self._run_id, events, self._token)
            return
        for event in events:
            self.emit(event)
        self.flush()

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

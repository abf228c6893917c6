"""A response's stream: the fold's Responses events after ``starting_after`` (:class:`Presenter`, what the SSE
stream of :mod:`agents_celery.http.sse` renders its pages with), saving checkpoints of the fold as it goes so a
later resume deep in the response starts near its point (:mod:`agents_celery.storage.renders`), not at the
response's start."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...events import Event
from ...storage.eventlog import Entry
from ..sse import frame
from .render import ResponseFold

#: Every so many sequence numbers a stream saves its fold's state (:mod:`agents_celery.storage.renders`), and how
#: many of a response's latest checkpoints are kept: a resume within the last ``CHECKPOINT_EVERY * CHECKPOINTS_KEPT``
#: sequence numbers any reader rendered starts at one (flat in the response's length); further back it folds the
#: response from its start, as it always did.
CHECKPOINT_EVERY, CHECKPOINTS_KEPT = 64, 4
#: The most Responses events one log event renders to, about (``needs_thread``'s guess of a checkpoint coming).
_MOST_PER_EVENT = 8

#: Saves a stream's checkpoint: ``save(fold, event)``, the fold having just rendered ``event``.
SaveCheckpoint = Callable[[ResponseFold, Event], None]


class Presenter:
    """A response's stream for :class:`~.sse.LogStream`: the fold's events after ``starting_after``, until the
    segment's end, saving a checkpoint of the fold every :data:`CHECKPOINT_EVERY` sequence numbers (``save``)."""

    def __init__(self, fold: ResponseFold, starting_after: int = -1, save: SaveCheckpoint | None = None) -> None:
        self.fold = fold
        self.starting_after = starting_after
        self.finished = False
        self._save = save
        self._next_save = (max(fold.seq, 0) // CHECKPOINT_EVERY + 1) * CHECKPOINT_EVERY

    def frames(self, events: list[Event]) -> str:
        out = []
        for ev in events:
            for rendered in self.fold.feed(ev):
                seq = rendered["sequence_number"]
                if seq > self.starting_after:
                    out.append(frame(rendered, rendered["type"], seq))
            if self.fold.ended:
                self.finished = True
                break
            if self._save is not None and self.fold.seq >= self._next_save:
                self._save(self.fold, ev)
                self._next_save = (self.fold.seq // CHECKPOINT_EVERY + 1) * CHECKPOINT_EVERY
        return "".join(out)

    def needs_thread(self, page: Sequence[Entry]) -> bool:
        """Whether rendering ``page`` may save a checkpoint (a Redis write: under asyncio, on a thread)."""
        return self._save is not None and self.fold.seq + _MOST_PER_EVENT * len(page) >= self._next_save

    def error(self, exc: BaseException) -> str:
        """The ``error`` event a broken stream ends with (the SDK raises it as ``APIError``, from its ``error``
        object); resume with ``starting_after`` the last sequence number received before it. Its own number is the
        next of the stream, and it has no ``id:`` line: it is not part of the response, a replay has another event
        there."""
        code = str(getattr(exc, "code", "stream_error"))
        seq = max(self.fold.seq, self.starting_after) + 1
        error = {"message": str(exc), "type": "server_error", "param": None, "code": code}
        event = {"type": "error", "code": code, "message": str(exc), "param": None, "sequence_number": seq}
        return frame({**event, "error": error}, "error")

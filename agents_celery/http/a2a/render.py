"""An A2A stream: the pages of a run's log through a :class:`~agents_celery.a2a.task.TaskFold`, each result one
SSE frame holding a JSON-RPC response (the mapping is :mod:`agents_celery.a2a.task`'s). No I/O here."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ...a2a.task import TaskFold
from ...events import Event, EventType
from ...storage.eventlog import Entry
from . import wire

#: How a stream's results are spelled on the wire (A2A 0.3's, :func:`.compat.stream_result`); None: as 1.0's.
Shape = Callable[[dict[str, Any]], dict[str, Any]] | None


def frame(rpc_id: Any, result: dict[str, Any], shape: Shape = None) -> str:
    """One SSE frame: a JSON-RPC response whose result is one ``StreamResponse`` (``shape``d)."""
    body = wire.response(rpc_id, result if shape is None else shape(result))
    return f"data: {json.dumps(body, separators=(',', ':'), ensure_ascii=False)}\n\n"


class TaskPresenter:
    """The :class:`~agents_celery.http.sse.Presenter` of an A2A stream: each page through a :class:`TaskFold`, each
    result a JSON-RPC response frame; ``finished`` once the task reached a state a stream ends at (past
    ``ends_after``: an earlier pause of a run followed whole does not end it)."""

    def __init__(self, fold: TaskFold, rpc_id: Any, ends_after: int = -1, shape: Shape = None) -> None:
        self.fold = fold
        self.shape = shape
        self.rpc_id = rpc_id
        self.ends_after = ends_after
        self.finished = False

    def needs_thread(self, page: Sequence[Entry]) -> bool:
        """Rendering reads and writes no Redis."""
        return False

    def frames(self, events: list[Event]) -> str:
        out = []
        for ev in events:
            out += [frame(self.rpc_id, r, self.shape) for r in self.fold.feed(ev)]
            if ev.offset > self.ends_after and self.fold.state in wire.STREAM_ENDS and _ends(ev):
                self.finished = True
                break
        return "".join(out)

    def error(self, exc: BaseException) -> str:
        """The stream broke off (Redis went away): a JSON-RPC error (the client may subscribe again)."""
        self.finished = True
        err = wire.A2AError(wire.INTERNAL_ERROR, f"the stream broke off: {exc}; subscribe to the task again")
        body = json.dumps(wire.error_response(self.rpc_id, err), separators=(",", ":"))
        return f"data: {body}\n\n"


def _ends(ev: Event) -> bool:
    return ev.type in (EventType.RUN_FINISHED, EventType.RUN_ERROR)

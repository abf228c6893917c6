"""The state cache: the last few run states this process committed, so its next claim of a run skips the load.

Keys: none of its own. It holds versions of the run record's ``state`` field, named by the record's
``state_id`` (see :mod:`agents_celery.storage.keys`); ``lua/claim.lua`` sends the state back empty when the
caller names the version Redis holds.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from ..runs import RunState


@dataclass
class CachedState:
    """A run state this process committed (or is committing), and the id of that version."""

    state_id: str
    state: RunState
    #: Set once the commit that writes this version has returned; ``committed`` says whether it succeeded.
    ready: threading.Event = field(default_factory=threading.Event)
    committed: bool = False

    def wait(self, timeout: float) -> bool:
        """Whether the version is usable: its commit returned successfully (waiting up to ``timeout``)."""
        return self.ready.wait(timeout) and self.committed

    def confirm(self) -> None:
        """Its commit returned successfully: the state may be used."""
        self.committed = True
        self.ready.set()


class StateCache:
    """The last few run states this process committed, by run id, with the id of that version.

    Only a claim that finds the same version in Redis (no one committed since) uses an entry; an attempt
    that ends without committing forgets its run, so nothing it changed in memory is reused. A commit enters
    its version before it is sent (:meth:`expect`), so the next step's claim may be sent while the commit's
    reply is on its way; the state is used only once that commit has returned (:meth:`CachedState.wait`).
    """

    def __init__(self, size: int = 128) -> None:
        self._size = size
        self._entries: OrderedDict[str, CachedState] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_id: str) -> CachedState | None:
        with self._lock:
            return self._entries.get(run_id)

    def expect(self, run_id: str, state_id: str, state: RunState) -> CachedState | None:
        """Enter the version a commit is about to write (None when this cache keeps nothing)."""
        if self._size <= 0:
            return None
        entry = CachedState(state_id, state)
        with self._lock:
            self._entries[run_id] = entry
            self._entries.move_to_end(run_id)
            while self._entries and len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return entry

    def keep(self, run_id: str, state_id: str, state: RunState) -> None:
        entry = self.expect(run_id, state_id, state)
        if entry is not None:
            entry.confirm()

    def forget(self, run_id: str, entry: CachedState | None = None) -> None:
        """Drop the run's entry (only ``entry``, when given: a newer one stays)."""
        with self._lock:
            if entry is None or self._entries.get(run_id) is entry:
                self._entries.pop(run_id, None)
        if entry is not None:
            entry.ready.set()  # not committed: whoever waits for it loads the state instead

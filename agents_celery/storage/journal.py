"""The replay journal of a pydantic-ai run (:mod:`agents_celery.contrib.pydantic_ai`).

A segment of such a run (one step: one ``agent.run(...)``) runs its model requests, tool calls, MCP calls and
event handling as *units*; each unit's result is recorded here so that the next attempt of the segment (after a
crash) replays it instead of running it again. Keys (see :mod:`agents_celery.storage.keys`): fields
``j:<segment>:<seq>`` of the run's ``effects`` hash (so the journal expires and is deleted with the effect
ledger), each a JSON ``{name, ordinal, digest, result}``: ``seq`` counts the segment's units in the order the run
meets them, ``name`` is the unit's persisted name (pydantic-ai's ``JournalOperationNamer``), ``ordinal`` how many
units of that name came before it in the segment, ``digest`` a hash of the unit's identity
(:func:`agents_celery.contrib.pydantic_ai.segment.identity`). Script:
``lua/journal_write.lua``, fenced by the lease token, appending the unit's events in the same step.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from ..events import NewEvent
from .keys import Keys
from .replies import as_text
from .scripts import refusal, register

#: Called after every journal write with ``(run_id, unit name, seq)``: observability, and what crash tests use
#: to kill a worker right after its Nth write.
AFTER_WRITE: list[Callable[[str, str, int], None]] = []


@dataclass(frozen=True)
class JournalEntry:
    """One recorded unit."""

    name: str
    ordinal: int
    digest: str
    result: Any


class Journal:
    """The replay journals of every run."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys
        self._write = register(client, "journal_write")
        #: Called with the run id after each write (the failover fence of the run store: ``RunStore.fence``).
        self.fence: Callable[[str], Any] | None = None

    def entries(self, run_id: str, segment: int) -> dict[int, JournalEntry]:
        """The units recorded for ``segment`` of the run, by ``seq``."""
        prefix = f"j:{segment}:"
        found: dict[int, JournalEntry] = {}
        for field, raw in self.redis.hscan_iter(self.keys.run(run_id).effects, match=f"{prefix}*", count=500):
            entry = json.loads(as_text(raw))
            seq = int(as_text(field)[len(prefix) :])
            found[seq] = JournalEntry(entry["name"], entry["ordinal"], entry["digest"], entry["result"])
        return found

    def write(
        self,
        run_id: str,
        token: str,
        segment: int,
        seq: int,
        entry: JournalEntry,
        events: Sequence[NewEvent] = (),
        effect: tuple[str, str] | None = None,
    ) -> int:
        """Record ``entry`` as unit ``seq`` of ``segment`` and append ``events``, in one fenced step; ``effect``
        (tool call id, ledger entry JSON) marks a tool call done in the effect ledger in the same step. Returns the
        first offset written.

        Raises:
            FencedError: ``token`` is not the run's current lease token. Nothing was written.
        """
        k = self.keys.run(run_id)
        value = json.dumps(
            {"name": entry.name, "ordinal": entry.ordinal, "digest": entry.digest, "result": entry.result},
            separators=(",", ":"),
        )
        effect_id, effect_entry = effect or ("", "")
        args = [token, f"j:{segment}:{seq}", value, effect_id, effect_entry, *(e.json for e in events)]
        try:
            first = int(self._write(keys=[k.run, k.events, k.lease, k.effects], args=args))
        except redis.ResponseError as exc:
            mapped = refusal(exc, run_id)
            raise (mapped or exc) from None
        if self.fence:
            self.fence(run_id)
        for observe in AFTER_WRITE:
            observe(run_id, entry.name, seq)
        return first

"""Checkpoints of a renderer's fold over a run's log, so a resume deep in a long response starts near its point.

A dialect that numbers what it renders (the Responses API's ``sequence_number``, :mod:`..http.responses`) folds the
log from a segment's start, and a resume ``starting_after=N`` must re-render everything up to N to know the state
there. A checkpoint is that fold's state after the event at some offset, saved as a reader renders (every so many
sequence numbers), with the event's ``offset.tag`` (:attr:`~agents_celery.events.Event.position`): a resume starts
from the latest checkpoint at or before N and reads the log after its offset, once the log shows the same event
there (after lost writes the log can hold another; the checkpoint is then ignored). Finding it and reading that
event is one round trip. The state itself is the
renderer's (JSON); this module only keeps it.

Key (:mod:`.keys`): ``<p>:run:{<rid>}:renders`` *hash*, ``<renderer>:<base>:<seq>`` -> JSON ``{position, state}``,
the last ``keep`` checkpoints of each segment. It expires with the run (at the record's TTL once the run ended, the
retention before), and is deleted with it. Scripts: ``lua/render_save.lua``, ``lua/render_find.lua``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from ..events import tag_of
from .keys import Keys
from .replies import as_text
from .scripts import register


@dataclass(frozen=True)
class Checkpoint:
    """A renderer's state after the event at ``offset``, which had tag ``tag``."""

    offset: int
    tag: str
    state: dict[str, Any]


class Renders:
    """The renderers' checkpoints of every run (see the module docs)."""

    def __init__(self, client: redis.Redis, keys: Keys, retention_ms: int) -> None:
        self.redis = client
        self.keys = keys
        self.retention_ms = retention_ms
        self._save = register(client, "render_save")
        self._find = register(client, "render_find")

    def save(
        self, run_id: str, renderer: str, base: int, seq: int, position: str, state: dict[str, Any], keep: int
    ) -> bool:
        """Keep ``state`` as the checkpoint of ``renderer`` for the segment at ``base`` after sequence number ``seq``
        (rendered from the event at ``position``, ``offset.tag``); the segment's oldest past ``keep`` go. False
        when the run is gone."""
        k = self.keys.run(run_id)
        value = json.dumps({"position": position, "state": state}, separators=(",", ":"))
        args: list[str | int] = [f"{renderer}:{base}:", seq, value, keep, self.retention_ms]
        return bool(self._save(keys=[k.run, k.renders], args=args))

    def find(self, run_id: str, renderer: str, base: int, at_most: int) -> Checkpoint | None:
        """The latest checkpoint of ``renderer`` for the segment at ``base`` whose last sequence number is at most
        ``at_most``; None when there is none, or when the log holds another event at its offset now."""
        k = self.keys.run(run_id)
        reply = self._find(keys=[k.renders, k.events], args=[f"{renderer}:{base}:", at_most])
        if not reply:
            return None
        found = json.loads(as_text(reply[0]))
        offset, _, tag = str(found["position"]).partition(".")
        if not reply[1] or tag_of(reply[1]) != tag:  # Redis lost writes and the run went on from an earlier point
            return None
        return Checkpoint(int(offset), tag, found["state"])

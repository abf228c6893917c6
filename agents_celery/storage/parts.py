"""The images and files of user messages, stored once (:mod:`agents_celery.content` says what a part is).

A run's parts live in its record (``<p>:run:{<rid>}``, fields ``part:<n>``: written with the run by
``lua/create.lua``, so a refused run leaves none, and kept, expired and deleted with the record). The run's
conversation holds only reference parts (``"ref": "<rid>/<n>"``), so no checkpoint, claim reply or session
history copies the data. When a completed run's messages enter its session's history, the parts they name are
copied to the session (``<p>:session:{<sid>}:parts``, field ``<rid>/<n>``), which lives as long as the history.
A model turn fetches the parts its messages name (:meth:`Parts.fetch`): the run's own from its record, earlier
runs' from the session; a worker keeps the ones it fetched in a bounded cache (a part never changes).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from ..content import refs_in, run_of
from ..errors import InputTooLargeError
from ..runs import RunState
from .connections import atomic
from .keys import Keys

#: Bytes of parts a process keeps in memory (the parts of the runs it works on, across their turns).
CACHE_BYTES = 64 * 1_048_576


def field_of(ref: str) -> str:
    """The run record's field holding the part of ``ref`` (``<rid>/<n>`` -> ``part:<n>``)."""
    return "part:" + ref.rpartition("/")[2]


def record_fields(stored: Mapping[str, str], size: int) -> dict[str, str]:
    """The run record's fields for a new run's parts (``ref`` -> part JSON) and their ``size`` in bytes."""
    if not stored and not size:
        return {}
    return {**{field_of(ref): data for ref, data in stored.items()}, COUNT: str(len(stored)), BYTES: str(size)}


#: Fields of the run record: how many parts it holds (the next part's number), and their bytes.
COUNT, BYTES = "parts", "part_bytes"


class Parts:
    """Reads and copies stored parts (``RunStore.parts``)."""

    def __init__(self, client: redis.Redis, keys: Keys, cache_bytes: int = CACHE_BYTES) -> None:
        self.redis = client
        self.keys = keys
        self._cache: OrderedDict[str, tuple[dict[str, Any], int]] = OrderedDict()
        self._cached = 0
        self._most = cache_bytes
        self._lock = threading.Lock()

    def fetch(self, state: RunState, refs: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        """The parts the run's messages name (``refs``: only these), by reference; absent: no longer kept."""
        wanted = refs_in(state.messages) if refs is None else list(refs)
        found: dict[str, dict[str, Any]] = {}
        missing = []
        with self._lock:
            for ref in wanted:
                hit = self._cache.get(ref)
                if hit is not None:
                    self._cache.move_to_end(ref)
                    found[ref] = hit[0]
                else:
                    missing.append(ref)
        if not missing:
            return found
        own = [r for r in missing if run_of(r) == state.run_id]
        earlier = [r for r in missing if run_of(r) != state.run_id]
        with self.redis.pipeline(transaction=False) as pipe:
            if own:
                pipe.hmget(self.keys.run(state.run_id).run, [field_of(r) for r in own])
            if earlier:
                pipe.hmget(self.keys.session(state.session_id).parts, earlier)
            replies = pipe.execute()
        values = [*(replies.pop(0) if own else []), *(replies.pop(0) if earlier else [])]
        for ref, raw in zip([*own, *earlier], values, strict=True):
            if raw is not None:
                found[ref] = json.loads(raw)
                self._keep(ref, found[ref], len(raw))
        return found

    def _keep(self, ref: str, part: dict[str, Any], size: int) -> None:
        if size > self._most // 4:
            return
        with self._lock:
            if ref in self._cache:
                return
            self._cache[ref] = (part, size)
            self._cached += size
            while self._cached > self._most:
                _, (_, gone) = self._cache.popitem(last=False)
                self._cached -= gone

    def reserve(self, run_id: str, count: int, size: int, most: int) -> int:
        """Make room for a later message's ``count`` parts of ``size`` bytes in a run's record: the number of its
        first part. InputTooLargeError (and nothing kept) when the run's parts would be over ``most`` bytes."""
        key = self.keys.run(run_id).run
        with atomic(self.redis) as pipe:  # (a Redis Cluster too: one key)
            pipe.hincrby(key, BYTES, size)
            pipe.hincrby(key, COUNT, count)
            total, after = pipe.execute()
        if int(total) > most:
            self.redis.hincrby(key, BYTES, -size)  # (the numbers stay taken: a gap is harmless)
            raise InputTooLargeError(
                f"the run's parts would hold {total} bytes; at most {most} are accepted per run "
                "(AGENTS_CELERY_MAX_INPUT_BYTES)"
            )
        return int(after) - count

    def add(self, run_id: str, stored: Mapping[str, str]) -> None:
        """Store a later message's parts (``ref`` -> part JSON) in the run's record."""
        if stored:
            self.redis.hset(self.keys.run(run_id).run, mapping={field_of(r): v for r, v in stored.items()})

    def own(self, run_id: str, n: int) -> dict[str, Any] | None:
        """Part ``n`` of the run's own message (None: the run holds no such part)."""
        raw = self.redis.hget(self.keys.run(run_id).run, f"part:{n}")
        return None if raw is None else dict(json.loads(raw))

    def to_session(self, state: RunState, ttl_ms: int) -> list[tuple[Any, ...]]:
        """Before a run's messages enter its session's history: the commands that copy the parts they name into
        the session's parts, which then live as long as the history (refreshed whenever the history grows). The
        caller sends them in the round trip of the history's sync, in front of it (the session's keys share a
        slot)."""
        key = self.keys.session(state.session_id).parts
        completed = state.status == "completed"  # (only a completed run's messages enter the history)
        own = [r for r in refs_in(state.new_messages) if run_of(r) == state.run_id] if completed else []
        values = self.redis.hmget(self.keys.run(state.run_id).run, [field_of(r) for r in own]) if own else []
        commands: list[tuple[Any, ...]] = [
            ("HSET", key, ref, raw) for ref, raw in zip(own, values, strict=True) if raw is not None
        ]
        # a little longer than the history, whose expiry the sync script sets just after this
        return [*commands, ("PEXPIRE", key, ttl_ms + 60_000)]

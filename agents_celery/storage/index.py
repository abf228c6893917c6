"""Indexes of runs and sessions: what lists them, newest first, filtered, a page at a time.

Every run is in ``<p>:runs`` and in one index per agent, session and user (scored by its creation time), and
in the index of its status class: ``live`` (queued or running), ``paused``, ``completed``, ``failed`` or
``cancelled``. Sessions are in ``<p>:sessions`` and per user (scored by their last activity).

The indexes are global keys: they live in other slots than a run's keys, so they are not written inside the
run's scripts (one slot per script, for Redis Cluster) but in the same round trip as the writes that already
follow a change of status (the sweeper's index, the session's release): a run's creation, pause, continue
and end. A plain step changes no status and writes no index. A crash between a commit and its index write
leaves an index behind the run for a moment; a listing therefore checks each run's real status and fields,
and the sweeper puts a run it finds ended back in order.

An ended run leaves every index when its retention is over: its end schedules that in ``<p>:runs:expiring``
(member: the run's index entry as JSON, score: when it expires), which the sweeper works off. Sessions leave
theirs ``session_ttl`` after their last activity, or when a listing finds the session gone.

On a Redis Cluster each index is split into buckets (:meth:`~.keys.Keys.bucket`: a run's entries all go to the
bucket of its id, a session's to that of the session id), so no node holds all of them; a listing reads every
bucket of the index it walks and merges them in order (:meth:`RunIndex.walk`). With one bucket (plain Redis)
each index is the one key it always was.
"""

from __future__ import annotations

import heapq
import itertools
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from ..errors import ValidationError
from ..runs import RunPage, RunStatus, RunView, load_state
from ..settings import Settings
from .keys import Keys
from .replies import as_text

#: The index of each status (queued and running share ``live``: a run's first claim writes no index).
STATUS_CLASS = {
    RunStatus.SCHEDULED: "scheduled",
    RunStatus.QUEUED: "live",
    RunStatus.RUNNING: "live",
    RunStatus.PAUSED: "paused",
    RunStatus.COMPLETED: "completed",
    RunStatus.FAILED: "failed",
    RunStatus.CANCELLED: "cancelled",
}
CLASSES = ("scheduled", "live", "paused", "completed", "failed", "cancelled")
#: Most runs a page holds.
MAX_LIMIT = 200
#: Index entries read per round trip while filling a page.
CHUNK = 200
#: Entries of each bucket of a split index read in the first round trip of a listing (a page of 100 over 16
#: buckets takes about 7 of each).
BUCKET_CHUNK = 25
#: Most index entries one page looks at; a sparse filter returns a short page and a cursor to go on from.
SCAN_CAP = 5000


@dataclass(frozen=True)
class IndexEntry:
    """What the indexes know of a run."""

    run_id: str
    created_ms: int
    agent_id: str
    session_id: str
    user_id: str | None = None

    def to_json(self) -> str:
        return json.dumps([self.run_id, self.created_ms, self.agent_id, self.session_id, self.user_id])

    @classmethod
    def from_json(cls, raw: str | bytes) -> IndexEntry:
        run_id, created, agent, session, user = json.loads(raw)
        return cls(run_id, int(created), agent, session, user)


@dataclass(frozen=True)
class Filters:
    """What a listing asks for (None: any)."""

    status: RunStatus | None = None
    agent_id: str | None = None
    session_id: str | None = None
    user_id: str | None = None


def encode_cursor(score: int, member: str) -> str:
    return f"{score}.{member}"


def decode_cursor(cursor: str | None) -> tuple[int, str] | None:
    """(score, member) of a cursor; ValidationError for one this module did not write."""
    if not cursor:
        return None
    score, _, member = cursor.partition(".")
    # ASCII digits only: str.isdigit() also takes "²" and other scripts' digits, which int() then refuses.
    if not (score.isascii() and score.isdigit()) or len(score) > 20 or not member or len(cursor) > 300:
        raise ValidationError(f"cursor {cursor[:40]!r} is not one this API returned")
    return int(score), member


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValidationError(f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}")
    return limit


class RunIndex:
    """The run and session indexes of one key prefix."""

    def __init__(self, client: redis.Redis, keys: Keys, settings: Settings) -> None:
        self.redis, self.keys, self.settings = client, keys, settings

    # -- writes (added to a pipeline the caller sends anyway) --------------------------------------------

    def _run_keys(self, entry: IndexEntry) -> list[str]:
        """The (unsplit) names of the indexes of the run's fields."""
        k = self.keys
        found = [k.runs, k.runs_of("agent", entry.agent_id), k.runs_of("session", entry.session_id)]
        if entry.user_id:
            found.append(k.runs_of("user", entry.user_id))
        return found

    def _at(self, name: str, run_id: str) -> str:
        """The bucket of index ``name`` that holds the run's entry."""
        return self.keys.bucket(name, run_id)

    def add(self, pipe: Any, entry: IndexEntry, status: RunStatus = RunStatus.QUEUED) -> None:
        """A new run: every index of its fields, its status class (``live``, or ``scheduled`` for a delayed
        run), its session's activity."""
        for key in self._run_keys(entry):
            pipe.zadd(self._at(key, entry.run_id), {entry.run_id: entry.created_ms})
        pipe.zadd(self._at(self.keys.runs_status(STATUS_CLASS[status]), entry.run_id), {entry.run_id: entry.created_ms})
        self._touch_session(pipe, entry.session_id, entry.user_id, entry.created_ms)

    def move(self, pipe: Any, entry: IndexEntry, status: RunStatus, now_ms: int | None = None) -> None:
        """The run's status changed to ``status``: it leaves the other status classes; an end schedules its
        leaving every index when its retention is over."""
        target = STATUS_CLASS[status]
        for name in CLASSES:
            if name != target:
                pipe.zrem(self._at(self.keys.runs_status(name), entry.run_id), entry.run_id)
        pipe.zadd(self._at(self.keys.runs_status(target), entry.run_id), {entry.run_id: entry.created_ms})
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        if status.is_final:
            self.retain(pipe, entry, now_ms)
        else:
            self._touch_session(pipe, entry.session_id, entry.user_id, now_ms)

    def retain(self, pipe: Any, entry: IndexEntry, now_ms: int | None = None) -> None:
        """An ended run's retention starts over now: it leaves every index when that is over (its status class
        unchanged: an ended child kept as long as its parent)."""
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        expires = now_ms + self.settings.retention_ms + self.settings.tombstone_ms
        pipe.zadd(self._at(self.keys.runs_expiring, entry.run_id), {entry.to_json(): expires})
        self._touch_session(pipe, entry.session_id, entry.user_id, now_ms)

    def forget(self, pipe: Any, entry: IndexEntry) -> None:
        """The run is gone (deleted or expired): out of every index."""
        for key in [*self._run_keys(entry), *(self.keys.runs_status(n) for n in CLASSES)]:
            pipe.zrem(self._at(key, entry.run_id), entry.run_id)
        pipe.zrem(self._at(self.keys.runs_expiring, entry.run_id), entry.to_json())

    def _touch_session(self, pipe: Any, session_id: str, user_id: str | None, now_ms: int) -> None:
        horizon = now_ms - int(self.settings.session_ttl_seconds * 1000)
        for name in (self.keys.sessions, *((self.keys.sessions_of(user_id),) if user_id else ())):
            key = self.keys.bucket(name, session_id)
            pipe.zadd(key, {session_id: now_ms})
            pipe.zremrangebyscore(key, 0, horizon)

    def forget_session(self, pipe: Any, session_id: str, user_id: str | None) -> None:
        pipe.zrem(self.keys.bucket(self.keys.sessions, session_id), session_id)
        if user_id:
            pipe.zrem(self.keys.bucket(self.keys.sessions_of(user_id), session_id), session_id)
        for key in self.keys.buckets_of(self.keys.runs_of("session", session_id)):
            pipe.delete(key)

    def expire_due(self, now_ms: int | None = None, batch: int = 500) -> int:
        """Take ended runs whose retention is over out of every index (the sweeper calls it); how many."""
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        with self.redis.pipeline(transaction=False) as pipe:
            for key in self.keys.buckets_of(self.keys.runs_expiring):
                pipe.zrangebyscore(key, 0, now_ms, start=0, num=batch)
            due = [raw for found in pipe.execute() for raw in found]
        if not due:
            return 0
        with self.redis.pipeline(transaction=False) as pipe:
            for raw in due:
                self.forget(pipe, IndexEntry.from_json(raw))
            pipe.execute()
        return len(due)

    # -- reads -------------------------------------------------------------------------------------------

    def source(self, filters: Filters) -> str:
        """The index a listing walks: the one of its most selective filter."""
        candidates = [self.keys.runs]
        if filters.session_id:
            candidates.append(self.keys.runs_of("session", filters.session_id))
        if filters.user_id:
            candidates.append(self.keys.runs_of("user", filters.user_id))
        if filters.agent_id:
            candidates.append(self.keys.runs_of("agent", filters.agent_id))
        if filters.status:
            candidates.append(self.keys.runs_status(STATUS_CLASS[filters.status]))
        if len(candidates) == 1:
            return candidates[0]
        candidates = candidates[1:]
        n = self.keys.buckets
        with self.redis.pipeline(transaction=False) as pipe:
            for key in candidates:
                for bucket in self.keys.buckets_of(key):
                    pipe.zcard(bucket)
            counts = pipe.execute()
        sizes = [sum(counts[i * n : (i + 1) * n]) for i in range(len(candidates))]
        return min(zip(sizes, candidates, strict=True))[1]

    def walk(self, key: str, cursor: tuple[int, str] | None) -> Iterable[tuple[str, int]]:
        """(member, score) of index ``key``, newest first (score, then member, both descending, as Redis orders
        them), strictly after ``cursor``: a cursor stays valid while members come and go. A split index is read
        bucket by bucket and merged in that order: the first :data:`BUCKET_CHUNK` entries of every bucket in one
        pipeline (a round trip per node), more of a bucket only when the merge runs through them."""
        buckets = self.keys.buckets_of(key)
        if len(buckets) == 1:
            return self._walk_one(buckets[0], cursor, CHUNK)
        with self.redis.pipeline(transaction=False) as pipe:
            for bucket in buckets:
                self._fetch(pipe, bucket, cursor, BUCKET_CHUNK)
            replies = pipe.execute()
        per = 1 if cursor is None else 2
        walkers = [
            self._walk_one(b, cursor, BUCKET_CHUNK, replies[i * per : (i + 1) * per]) for i, b in enumerate(buckets)
        ]
        return heapq.merge(*walkers, key=lambda row: (row[1], row[0]), reverse=True)

    def _drop(self, key: str, members: Sequence[str]) -> None:
        """Take ``members`` out of index ``key`` (each from its bucket)."""
        if self.keys.buckets == 1:
            self.redis.zrem(key, *members)
            return
        with self.redis.pipeline(transaction=False) as pipe:
            for member in members:
                pipe.zrem(self.keys.bucket(key, member), member)
            pipe.execute()

    @staticmethod
    def _fetch(client: Any, key: str, cursor: tuple[int, str] | None, chunk: int) -> Any:
        """The reads of one chunk of ``key`` after ``cursor``: the newest ``chunk`` entries (no cursor), or the
        rest of the cursor's own score and the ``chunk`` entries below it."""
        if cursor is None:
            return [client.zrevrangebyscore(key, "+inf", "-inf", start=0, num=chunk, withscores=True)]
        score, _ = cursor
        same = client.zrangebyscore(key, score, score)
        return [same, client.zrevrangebyscore(key, f"({score}", "-inf", start=0, num=chunk, withscores=True)]

    def _walk_one(
        self, key: str, cursor: tuple[int, str] | None, chunk: int, first: list[Any] | None = None
    ) -> Iterable[tuple[str, int]]:
        """One key's entries after ``cursor``, ``chunk`` a round trip; ``first``: the replies of the first
        chunk's reads (:meth:`_fetch`), made already."""
        while True:
            replies = first if first is not None else self._fetch(self.redis, key, cursor, chunk)
            first = None
            if cursor is not None:
                score, member = cursor
                same = replies[0]  # the rest of the cursor's own score
                yield from ((m, score) for m in sorted((as_text(m) for m in same), reverse=True) if m < member)
            rows = [(as_text(m), int(s)) for m, s in replies[-1]]
            yield from rows
            if len(rows) < chunk:
                return
            cursor = (rows[-1][1], rows[-1][0])

    def sessions_page(
        self, user_id: str | None, limit: int, cursor: str | None, keep: Callable[[str], bool] | None = None
    ) -> tuple[list[tuple[str, int]], str | None]:
        """(session id, last activity ms) of kept sessions, newest first, and the next page's cursor."""
        check_limit(limit)
        key = self.keys.sessions_of(user_id) if user_id else self.keys.sessions
        out: list[tuple[str, int]] = []
        stale: list[str] = []
        after = decode_cursor(cursor)
        for session_id, score in self.walk(key, after):
            if len(out) == limit:
                break
            if not self.session_exists(session_id):
                stale.append(session_id)
                continue
            if keep is None or keep(session_id):
                out.append((session_id, score))
        if stale:
            self._drop(key, stale)
        more = len(out) == limit and self._has_more(key, out[-1])
        return out, encode_cursor(out[-1][1], out[-1][0]) if more else None

    def _has_more(self, key: str, last: tuple[str, int]) -> bool:
        return next(iter(self.walk(key, (last[1], last[0]))), None) is not None

    def session_exists(self, session_id: str) -> bool:
        k = self.keys.session(session_id)
        if self.redis.exists(k.history, k.active):
            return True
        buckets = self.keys.buckets_of(self.keys.runs_of("session", session_id))
        with self.redis.pipeline(transaction=False) as pipe:
            for key in buckets:
                pipe.exists(key)
            return any(pipe.execute())

    def page(
        self, filters: Filters, limit: int, cursor: str | None, keep: Callable[[RunView], bool] | None = None
    ) -> RunPage:
        """Runs matching ``filters`` (and ``keep``), newest first, after ``cursor``. The index walked is the
        most selective one; every run's real fields are checked (an index may trail a crash by a moment), and
        entries of runs that are gone leave that index."""
        check_limit(limit)
        key = self.source(filters)
        walker = iter(self.walk(key, decode_cursor(cursor)))
        out: list[RunView] = []
        stale: list[str] = []
        last: tuple[int, str] | None = None
        examined, more = 0, False
        while len(out) < limit and examined < SCAN_CAP:
            batch = list(itertools.islice(walker, min(CHUNK, limit - len(out) + 8)))
            if not batch:
                break
            for (member, score), view in zip(batch, self.views([m for m, _ in batch]), strict=True):
                if len(out) == limit:
                    more = True  # entries of this batch are left
                    break
                examined += 1
                last = (score, member)
                if view is None:
                    stale.append(member)
                elif _matches(view, filters) and (keep is None or keep(view)):
                    out.append(view)
        if stale:
            self._drop(key, stale)
        more = more or (last is not None and next(walker, None) is not None)
        return RunPage(out, encode_cursor(*last) if more and last is not None else None)

    def views(self, run_ids: Sequence[str]) -> list[RunView | None]:
        """The runs as listings show them (no messages), in one round trip; None for a run that is gone."""
        with self.redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                k = self.keys.run(run_id)
                pipe.hmget(k.run, "state", "next", "queue")
                pipe.exists(k.stop)
            replies = pipe.execute()
        out: list[RunView | None] = []
        for run_id, (raw, next_offset, queue), stop in zip(run_ids, replies[::2], replies[1::2], strict=True):
            if raw is None:
                out.append(None)
                continue
            state = load_state(raw, [])
            out.append(
                RunView(
                    run_id=run_id,
                    agent_id=state.agent_id,
                    session_id=state.session_id,
                    user_id=state.user_id,
                    queue=as_text(queue) if queue else self.settings.queue,
                    status=state.status,
                    last_offset=int(next_offset or 0) - 1,
                    output=state.output,
                    error=state.error.model_dump() if state.error else None,
                    pending=state.pending,
                    stop_requested=bool(stop),
                    usage=state.usage,
                    created_at=state.created_at,
                    schedule_id=state.schedule_id,
                    active_agent=state.active_agent,
                )
            )
        return out


def _matches(view: RunView, filters: Filters) -> bool:
    return (
        (filters.status is None or view.status == filters.status)
        and (filters.agent_id is None or view.agent_id == filters.agent_id)
        and (filters.session_id is None or view.session_id == filters.session_id)
        and (filters.user_id is None or view.user_id == filters.user_id)
    )

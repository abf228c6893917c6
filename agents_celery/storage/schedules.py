"""Schedules in Redis (``<p>:schedules`` hash: id -> schedule JSON; ``<p>:schedules:due`` sorted set: id -> when
its next tick is due, ms). Beat reads the due set; the API and the Runtime write both.

On a Redis Cluster both are split into buckets by schedule id (:meth:`~.keys.Keys.bucket`); a schedule's hash
and due entry share their bucket's hash tag, so they are written in one MULTI/EXEC. Reading all of them, or the
due ones, reads every bucket."""

from __future__ import annotations

import json
from typing import Any

import redis

from ..schedule import Schedule
from .connections import atomic
from .keys import Keys
from .replies import as_text


class ScheduleStore:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys
        self.key = f"{keys.prefix}:schedules"
        self.due_key = f"{keys.prefix}:schedules:due"

    def _keys(self, schedule_id: str) -> tuple[str, str]:
        """The schedule's hash and due set (the bucket of its id: one hash tag)."""
        return self.keys.bucket(self.key, schedule_id), self.keys.bucket(self.due_key, schedule_id)

    def save(self, schedule: Schedule, next_at: int | None) -> None:
        """Write the schedule; ``next_at`` (ms) puts it in the due set (None: leave its due time alone)."""
        data = {**schedule.to_dict(), "next_at": None}
        key, due_key = self._keys(schedule.schedule_id)
        with atomic(self.redis) as pipe:
            pipe.hset(key, schedule.schedule_id, json.dumps(data))
            if next_at is not None:
                pipe.zadd(due_key, {schedule.schedule_id: next_at})
            pipe.execute()

    def get(self, schedule_id: str) -> Schedule | None:
        key, due_key = self._keys(schedule_id)
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(key, schedule_id)
            pipe.zscore(due_key, schedule_id)
            raw, due = pipe.execute()
        return None if raw is None else self._load(raw, due)

    def all(self) -> list[Schedule]:
        with self.redis.pipeline(transaction=False) as pipe:
            for key, due_key in zip(self.keys.buckets_of(self.key), self.keys.buckets_of(self.due_key), strict=True):
                pipe.hgetall(key)
                pipe.zrange(due_key, 0, -1, withscores=True)
            replies = pipe.execute()
        raw = {k: v for part in replies[::2] for k, v in part.items()}
        dues = {as_text(k): v for part in replies[1::2] for k, v in part}
        found = [self._load(v, dues.get(as_text(k))) for k, v in raw.items()]
        return sorted(found, key=lambda s: (s.created_at, s.schedule_id))

    def delete(self, schedule_id: str) -> bool:
        key, due_key = self._keys(schedule_id)
        with atomic(self.redis) as pipe:
            pipe.zrem(due_key, schedule_id)  # first: without the transaction, a crash leaves it never due
            pipe.hdel(key, schedule_id)
            _, deleted = pipe.execute()
        return bool(deleted)

    def due(self, now_ms: int, limit: int = 100) -> list[tuple[str, int]]:
        """Schedules whose tick is due at ``now_ms``: (id, when it was due)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for due_key in self.keys.buckets_of(self.due_key):
                pipe.zrangebyscore(due_key, 0, now_ms, start=0, num=limit, withscores=True)
            found: list[Any] = pipe.execute()
        rows = sorted((int(score), as_text(member)) for part in found for member, score in part)
        return [(member, score) for score, member in rows[:limit]]

    def next_due(self) -> int | None:
        with self.redis.pipeline(transaction=False) as pipe:
            for due_key in self.keys.buckets_of(self.due_key):
                pipe.zrange(due_key, 0, 0, withscores=True)
            firsts = [int(part[0][1]) for part in pipe.execute() if part]
        return min(firsts) if firsts else None

    def advance(self, schedule_id: str, next_at: int) -> None:
        """Move the schedule's next tick to ``next_at``, unless another beat moved it further already or it was
        deleted (XX: only an existing member; GT: only forward)."""
        self.redis.zadd(self._keys(schedule_id)[1], {schedule_id: next_at}, xx=True, gt=True)

    @staticmethod
    def _load(raw: Any, due: Any) -> Schedule:
        schedule = Schedule.from_dict(json.loads(raw))
        schedule.next_at = int(due) if due is not None else None
        return schedule

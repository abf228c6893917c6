"""Schedules in Redis (``<p>:schedules`` hash: id -> schedule JSON; ``<p>:schedules:due`` sorted set: id -> when
its next tick is due, ms). Beat reads the due set; the API and the Runtime write both."""

from __future__ import annotations

import json
from typing import Any

import redis

from ..schedule import Schedule
from .keys import Keys


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ScheduleStore:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.key = f"{keys.prefix}:schedules"
        self.due_key = f"{keys.prefix}:schedules:due"

    def save(self, schedule: Schedule, next_at: int | None) -> None:
        """Write the schedule; ``next_at`` (ms) puts it in the due set (None: leave its due time alone)."""
        data = {**schedule.to_dict(), "next_at": None}
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.key, schedule.schedule_id, json.dumps(data))
            if next_at is not None:
                pipe.zadd(self.due_key, {schedule.schedule_id: next_at})
            pipe.execute()

    def get(self, schedule_id: str) -> Schedule | None:
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(self.key, schedule_id)
            pipe.zscore(self.due_key, schedule_id)
            raw, due = pipe.execute()
        return None if raw is None else self._load(raw, due)

    def all(self) -> list[Schedule]:
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.key)
            pipe.zrange(self.due_key, 0, -1, withscores=True)
            raw, due = pipe.execute()
        dues = {_text(k): v for k, v in due}
        found = [self._load(v, dues.get(_text(k))) for k, v in raw.items()]
        return sorted(found, key=lambda s: (s.created_at, s.schedule_id))

    def delete(self, schedule_id: str) -> bool:
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(self.key, schedule_id)
            pipe.zrem(self.due_key, schedule_id)
            deleted, _ = pipe.execute()
        return bool(deleted)

    def due(self, now_ms: int, limit: int = 100) -> list[tuple[str, int]]:
        """Schedules whose tick is due at ``now_ms``: (id, when it was due)."""
        found: Any = self.redis.zrangebyscore(self.due_key, 0, now_ms, start=0, num=limit, withscores=True)
        return [(_text(member), int(score)) for member, score in found]

    def next_due(self) -> int | None:
        first = self.redis.zrange(self.due_key, 0, 0, withscores=True)
        return int(first[0][1]) if first else None

    def advance(self, schedule_id: str, next_at: int) -> None:
        """Move the schedule's next tick to ``next_at``, unless another beat moved it further already or it was
        deleted (XX: only an existing member; GT: only forward)."""
        self.redis.zadd(self.due_key, {schedule_id: next_at}, xx=True, gt=True)

    @staticmethod
    def _load(raw: Any, due: Any) -> Schedule:
        schedule = Schedule.from_dict(json.loads(raw))
        schedule.next_at = int(due) if due is not None else None
        return schedule

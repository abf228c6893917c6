"""A2A push notification configs of a task (a run), and how far each one's deliveries got.

Key (:mod:`.keys`): ``<p>:run:{<rid>}:a2apush`` *hash* — field ``cfg:<id>`` the config's JSON (``{id, url,
token}``), field ``at:<id>`` the offset of the last event whose status update that config's receiver took (absent:
none yet). ``PX`` the run's retention after each write (renewed while the deliveries go on, so a config lives as
long as its task plus the retention), deleted with the run.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from .keys import Keys
from .replies import as_text


class PushConfigs:
    """The push configs of runs, over one Redis client."""

    def __init__(self, client: redis.Redis, keys: Keys, ttl_ms: int) -> None:
        self.redis, self.keys, self.ttl_ms = client, keys, ttl_ms

    def key(self, run_id: str) -> str:
        return self.keys.run(run_id).a2apush

    def put(self, run_id: str, config: dict[str, Any]) -> None:
        key = self.key(run_id)
        with self.redis.pipeline(transaction=False) as pipe:  # one key: no MULTI (a cluster client refuses it)
            pipe.hset(key, f"cfg:{config['id']}", json.dumps(config, separators=(",", ":")))
            pipe.pexpire(key, self.ttl_ms)
            pipe.execute()

    def get(self, run_id: str, config_id: str) -> dict[str, Any] | None:
        raw = self.redis.hget(self.key(run_id), f"cfg:{config_id}")
        return json.loads(raw) if raw is not None else None

    def all(self, run_id: str) -> list[dict[str, Any]]:
        found = self.redis.hgetall(self.key(run_id))
        named = {as_text(k): v for k, v in found.items()}
        return [json.loads(v) for k, v in sorted(named.items()) if k.startswith("cfg:")]

    def delete(self, run_id: str, config_id: str) -> bool:
        return bool(self.redis.hdel(self.key(run_id), f"cfg:{config_id}", f"at:{config_id}"))

    def delivered(self, run_id: str, config_id: str) -> int:
        """The offset of the last event delivered to the config's receiver (-1: none)."""
        raw = self.redis.hget(self.key(run_id), f"at:{config_id}")
        return int(raw) if raw is not None else -1

    def mark(self, run_id: str, config_id: str, offset: int) -> None:
        """The receiver took the update of the event at ``offset`` (only if the config still exists)."""
        key = self.key(run_id)
        if self.redis.hexists(key, f"cfg:{config_id}"):
            with self.redis.pipeline(transaction=False) as pipe:  # one key: no MULTI (a cluster client refuses it)
                pipe.hset(key, f"at:{config_id}", offset)
                pipe.pexpire(key, self.ttl_ms)
                pipe.execute()

    def renew(self, run_id: str) -> None:
        self.redis.pexpire(self.key(run_id), self.ttl_ms)

    def forget(self, run_id: str) -> None:
        self.redis.delete(self.key(run_id))

"""Agent manifests: what the workers serve, published at start-up so an API process lists agents without their code.

Keys (see :mod:`agents_celery.storage.keys`): ``<p>:agents``, a hash of agent name -> manifest JSON (with its
``position`` in the agents module), no TTL. On a Redis Cluster it is split into buckets by agent name
(:meth:`~.keys.Keys.bucket`), read all together.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis

from .connections import answering
from .keys import Keys


class Manifests:
    """The published manifests (``RunStore.agents``)."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def publish(self, manifests: Sequence[dict[str, Any]]) -> None:
        """Publish agent manifests (workers do this at start-up), keeping their module order."""
        if not manifests:
            return
        with self.redis.pipeline(transaction=False) as pipe:
            for i, m in enumerate(manifests):
                pipe.hset(self.keys.bucket(self.keys.agents, m["name"]), m["name"], json.dumps({**m, "position": i}))
            pipe.execute()

    def refresh(self, manifest: dict[str, Any]) -> None:
        """Publish one agent's manifest again (what its MCP toolsets served changed), keeping its position."""
        key = self.keys.bucket(self.keys.agents, manifest["name"])
        raw = self.redis.hget(key, manifest["name"])
        position = json.loads(raw).get("position", 0) if raw else 0
        self.redis.hset(key, manifest["name"], json.dumps({**manifest, "position": position}))

    def all(self) -> list[dict[str, Any]]:
        """Published manifests, in the order their module defines them."""
        with answering(), self.redis.pipeline(transaction=False) as pipe:
            for key in self.keys.buckets_of(self.keys.agents):
                pipe.hvals(key)
            raw = [v for part in pipe.execute() for v in part]
        found = [json.loads(v) for v in raw]
        return sorted(found, key=lambda m: (m.get("position", 0), m["name"]))

    def get(self, name: str) -> dict[str, Any] | None:
        """One agent's manifest (None: no worker published it)."""
        with answering():
            raw = self.redis.hget(self.keys.bucket(self.keys.agents, name), name)
        return json.loads(raw) if raw else None

"""Identical retries of a ``POST /v1/responses`` join the first request's response (docs/responses.md, "Retries").

The openai SDK retries a request that timed out or lost its connection, twice by default, and sends no
``Idempotency-Key``: without this, a foreground create cut by a proxy starts the same work again, tools included.
So each create is known by a fingerprint of its caller and its body, kept in Redis for the retry window: the first
request claims it (``SET NX``, ``-`` while it works) and records the response it made; a request with the same
fingerprint within the window answers that response (it waits, briefly, while the first is still being made).

A request the openai SDK marks as a first attempt (``x-stainless-retry-count: 0``) is never a retry: it does its
own work and takes the fingerprint over, so asking the same question twice on purpose gets two answers. Other
clients say nothing of the kind, and an identical body within the window is taken for a retry.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import redis

from ...errors import RunBusyError
from ...storage.keys import Keys

#: How long a create's fingerprint is kept: the SDK's retries come within seconds, a client's own within minutes.
WINDOW_MS = 600_000
#: How long a retry waits for the first request to record its response before it answers 409 (transient).
WAIT_SECONDS = 10.0
#: What the key holds while the first request is being made.
PENDING = "-"


def fingerprint(user_id: str | None, body: dict[str, Any]) -> str:
    """What identifies a create: its caller and its body (keys in any order)."""
    text = json.dumps([user_id, body], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Retries:
    """The fingerprints of recent creates (see the module docs)."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def join(self, fingerprint: str, *, first: bool) -> str | None:
        """The response an identical earlier create made (join it), or None: this request claimed the fingerprint
        and must :meth:`made` or :meth:`forget` it. ``first``: the client says this is no retry."""
        key = self.keys.responses_retry(fingerprint)
        if first:
            self.redis.set(key, PENDING, px=WINDOW_MS)
            return None
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            if self.redis.set(key, PENDING, px=WINDOW_MS, nx=True):
                return None
            got = self.redis.get(key)
            found = got.decode() if isinstance(got, bytes) else got
            if found is not None and found != PENDING:
                return str(found)
            if time.monotonic() > deadline:
                raise RunBusyError("an identical request is still being answered: retry in a moment")
            if found is not None:
                time.sleep(0.05)

    def made(self, fingerprint: str, response_id: str) -> None:
        self.redis.set(self.keys.responses_retry(fingerprint), response_id, px=WINDOW_MS)

    def forget(self, fingerprint: str) -> None:
        """The claiming request failed: a retry does the work again (and meets the same refusal, if it was one)."""
        self.redis.delete(self.keys.responses_retry(fingerprint))

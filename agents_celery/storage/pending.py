"""Script calls whose reply is read later: :meth:`Pending.wait` gives the reply.

The worker's fast path (:class:`agents_celery.broker.fastpaths.Sent`) writes the call to Redis at once and
reads the reply when it is wanted, so the round trip overlaps other work. :func:`call_now` is the plain path,
on public redis-py API only: it makes the call at once and keeps the reply (or the error) for ``wait``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import redis


class Pending(Protocol):
    """A script call whose reply is read later."""

    def wait(self) -> Any:
        """The script's reply (or its error, raised)."""
        ...

    def close(self) -> None:
        """Nobody will use the reply: read and drop it."""
        ...


#: Makes a :class:`Pending` for ``script(keys, args)`` on ``client``. ``rerun``: the script is idempotent, so a
#: call whose connection failed may simply be made again.
SendAhead = Callable[[redis.Redis, Any, list[str], list[str], bool], Pending]


class _Made:
    """A call that was made at once (the plain path)."""

    def __init__(self, reply: Any = None, error: BaseException | None = None) -> None:
        self._reply, self._error = reply, error

    def wait(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._reply

    def close(self) -> None:
        pass


def call_now(client: redis.Redis, script: Any, keys: list[str], args: list[str], rerun: bool = True) -> Pending:
    """The plain :data:`SendAhead`: the call is made now, its reply kept for ``wait``."""
    try:
        return _Made(script(keys=keys, args=args, client=client))
    except redis.RedisError as exc:
        return _Made(error=exc)

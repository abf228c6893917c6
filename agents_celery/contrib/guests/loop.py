"""Guest frameworks are async (pydantic-ai, the Agents SDK), our steps are not: a segment runs on the process's one
asyncio loop.

That loop (:func:`agents_celery.greenlets.process_loop`) is the one our async tools and MCP connections use: on a
gevent worker a second loop in the thread would never run, and whichever started second would hang. A step
submits its segment's coroutine to the loop and waits for it on its own thread (greenlet), watching the run's stop
request and its lease: on a stop (after the grace) or a lost lease it cancels the coroutine and walks away.
Segments of several runs share the loop (each is a task of its own).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ...greenlets import submit

T = TypeVar("T")


class WalkedAway(Exception):
    """The step stopped waiting for its segment: ``reason`` is ``stopped`` or ``lost``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def run_segment(
    coro: Coroutine[Any, Any, T], stop: threading.Event, lost: threading.Event, grace: float, poll: float
) -> T:
    """Run ``coro`` on the process loop and wait for it. A stop request or a lost lease cancels it (the guest's
    code is async: a cancellation lands at its next ``await``, so a model that streams stops at once) and raises
    WalkedAway once the coroutine finished unwinding, or after ``grace`` seconds if it does not."""
    settled = threading.Event()

    async def guarded() -> T:
        try:
            return await coro
        finally:
            settled.set()

    future = submit(guarded())
    while True:
        try:
            return future.result(timeout=poll)
        except concurrent.futures.TimeoutError:
            pass
        reason = "lost" if lost.is_set() else "stopped" if stop.is_set() else None
        if reason is not None:
            future.cancel()
            settled.wait(grace)
            raise WalkedAway(reason)

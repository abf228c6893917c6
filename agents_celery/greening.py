"""Whether this process runs on greenlets (a gevent worker: ``agents-celery worker --pool gevent``), and how
async tools run there.

Under gevent's monkey-patching a ``threading.Thread`` is a greenlet, a lock or an event parks the greenlet, and
a socket waits in the hub, so most of agents-celery needs nothing special. What is per OS thread still is
asyncio's running loop (its C accelerator keeps it on the thread state, which every greenlet of the thread
shares): an ``asyncio.run`` in each of two greenlets sees the other's loop and refuses. So on greenlets every
async tool of the process runs on one event loop of its own, driven by one greenlet (its selector is gevent's,
so while it waits the other greenlets run); the calling greenlet is parked until its coroutine is done. Async
tools still run side by side, on that loop, and sockets made by the worker's other greenlets work in them. The
MCP client's connections (:mod:`agents_celery.mcpclient`) live on the same loop there (:func:`shared_loop`): a loop
of their own would be a second running loop in the thread, and whichever started second would never run.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_LOOP: asyncio.AbstractEventLoop | None = None
_LOCK = threading.Lock()


def green() -> bool:
    """Whether ``threading`` is monkey-patched by gevent in this process (threads are greenlets)."""
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey is not None and monkey.is_module_patched("threading"))


def shared_loop() -> asyncio.AbstractEventLoop:
    """The process's one asyncio loop on greenlets, running in a greenlet of its own (started on first use)."""
    global _LOOP
    with _LOCK:
        if _LOOP is None or _LOOP.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agents-celery-asyncio", daemon=True).start()
            _LOOP = loop
        return _LOOP


def run_on_greenlets(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the process's asyncio loop (module docs) and wait for it, parking only this greenlet;
    its exception is raised here. Only under :func:`green`."""
    return asyncio.run_coroutine_threadsafe(coro, shared_loop()).result()

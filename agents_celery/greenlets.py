"""Whether this process runs on greenlets (a gevent worker: ``agents-celery worker --pool gevent``), how async
code runs there, and the process's one asyncio loop.

Under gevent's monkey-patching a ``threading.Thread`` is a greenlet, a lock or an event parks the greenlet, and
a socket waits in the hub, so most of agents-celery needs nothing special. What is per OS thread still is
asyncio's running loop (its C accelerator keeps it on the thread state, which every greenlet of the thread
shares): an ``asyncio.run`` in each of two greenlets sees the other's loop and refuses, and of two loops run by
two greenlets whichever started second never runs ("Cannot run the event loop while another loop is running").

So the process has one asyncio loop (:func:`process_loop`), on every pool, and everything async of agents-celery
runs on it: async tools (:func:`run_coroutine`), the MCP client's connections (:mod:`agents_celery.mcp.connections`)
and the guest frameworks' segments (:mod:`agents_celery.contrib.guests.loop`). It runs on a thread of its own: an
OS thread on prefork and threads pools, a greenlet on gevent (its selector is gevent's, so while it waits the
other greenlets run). The caller's thread or greenlet is parked until its coroutine is done; coroutines of
several steps run side by side on the loop. A forked child starts a loop of its own on first use.

Some work must not wait for the hub: the lease keeper renews every lease of the process, and a greenlet that
computes (a sync tool in pure Python, a thousand streams on one core) would keep it from its beat until the leases
expire. :func:`os_thread` runs such work on an OS thread of its own (the GIL's switch interval hands it the
interpreter every few milliseconds, however busy the hub), with :func:`native_lock` and :class:`NativeFlag` to
share state with the greenlets and :func:`setter_for` to wake them: gevent's ``Event`` is for greenlets of one
thread only (its docs), so another thread sets it through the greenlets' hub (``loop.run_callback_threadsafe``).
"""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures
import os
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

#: The process's loop and the pid that started it (a forked child does not inherit a running one).
_LOOP: tuple[int, asyncio.AbstractEventLoop] | None = None
_LOCK = threading.Lock()


def green() -> bool:
    """Whether ``threading`` is monkey-patched by gevent in this process (threads are greenlets)."""
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey is not None and monkey.is_module_patched("threading"))


def process_loop() -> asyncio.AbstractEventLoop:
    """The process's one asyncio loop (module docs), running on a thread of its own, started on first use."""
    global _LOOP
    with _LOCK:
        if _LOOP is None or _LOOP[0] != os.getpid() or _LOOP[1].is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agents-celery-asyncio", daemon=True).start()
            _LOOP = (os.getpid(), loop)
        return _LOOP[1]


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Start ``coro`` on the process's loop; the future's ``cancel()`` cancels it. The task runs in a copy of the
    caller's context (its context variables: the run's logging fields), as under ``asyncio.run``:
    ``call_soon_threadsafe`` captures the calling thread's context, and the task is made inside it."""
    return asyncio.run_coroutine_threadsafe(coro, process_loop())


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the process's loop (module docs) and wait for it, parking only the calling thread (greenlet);
    its exception is raised here. Not from a coroutine on that loop (it would wait for itself)."""
    return submit(coro).result()


def _original(module: str, name: str) -> Any:
    """The standard library's own ``module.name``, as it was before gevent patched it (only under :func:`green`)."""
    from gevent.monkey import get_original

    return get_original(module, name)


def native_lock() -> _thread.LockType:
    """A lock of the OS thread, also under gevent (whose patched ``threading.Lock`` would park a greenlet, not
    wait for another thread). Hold it only for a moment: a greenlet waiting on it holds up its whole hub."""
    if green():
        return _original("_thread", "allocate_lock")()  # type: ignore[no-any-return]
    return threading.Lock()


class NativeFlag:
    """A flag an OS thread waits on with a timeout, set from any thread or greenlet without the hub (a
    ``threading.Event`` is gevent's under :func:`green`)."""

    def __init__(self) -> None:
        self._guard = native_lock()
        self._flag = False
        self._unset = native_lock()
        self._unset.acquire()  # released once, by set(): a wait() then takes it and gives it back at once

    def set(self) -> None:
        with self._guard:
            if not self._flag:
                self._flag = True
                self._unset.release()

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float) -> bool:
        """Whether the flag was set within ``timeout`` seconds."""
        if self._unset.acquire(timeout=timeout):
            self._unset.release()
        return self._flag


class Thread(Protocol):
    """What :func:`os_thread` gives: ``threading.Thread``'s start, is_alive and join."""

    def start(self) -> None: ...
    def is_alive(self) -> bool: ...
    def join(self, timeout: float | None = None) -> None: ...


class _OSThread:
    """``target`` on an OS thread started with the standard ``_thread.start_new_thread`` gevent keeps aside."""

    def __init__(self, target: Callable[[], None]) -> None:
        self._target = target
        self._running = native_lock()

    def start(self) -> None:
        self._running.acquire()
        try:
            _original("_thread", "start_new_thread")(self._main, ())
        except BaseException:
            self._running.release()
            raise

    def _main(self) -> None:
        try:
            self._target()
        finally:
            self._running.release()

    def is_alive(self) -> bool:
        return self._running.locked()

    def join(self, timeout: float | None = None) -> None:
        if self._running.acquire(timeout=-1 if timeout is None else timeout):
            self._running.release()


def os_thread(target: Callable[[], None], name: str) -> Thread:
    """A daemon thread running ``target`` that is an OS thread also under :func:`green` (a ``threading.Thread`` is
    a greenlet there, which runs only when the hub gets to it). Under gevent it is started with the standard
    library's ``_thread.start_new_thread`` (``gevent.monkey.get_original``) rather than on a
    ``gevent.threadpool``: a pool is for bounded calls whose results come back through the hub, and this is a
    loop as long as the process that must not depend on the hub. What it does with sockets still goes through
    gevent, on a hub of that thread's own (gevent gives each OS thread its own); share no client with the
    greenlets (redis-py's pool locks are gevent's there)."""
    if green():
        return _OSThread(target)
    return threading.Thread(target=target, name=name, daemon=True)


def setter_for(event: threading.Event) -> Callable[[], None]:
    """A function that sets ``event``, made by the thread (greenlet) that waits on it, callable from any OS
    thread. Under :func:`green` the set is handed to the hub of the thread that made it
    (``loop.run_callback_threadsafe``), which runs it at its next pass, since gevent's ``Event`` may be set only
    from its own thread (a greenlet that computes without yielding sees it once it yields, as it would any
    wake-up); otherwise it is ``event.set``."""
    return caller_for(event.set)


def caller_for(action: Callable[[], None]) -> Callable[[], None]:
    """A function that calls ``action`` as :func:`setter_for` sets its event: on the hub of the thread (greenlet)
    that made it under :func:`green`, else at once."""
    if not green():
        return action
    from gevent import get_hub

    loop = get_hub().loop

    def deliver() -> None:
        loop.run_callback_threadsafe(action)

    return deliver

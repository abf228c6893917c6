"""MCP connections of a worker process: one asyncio loop on a thread of its own, and one open session per server.

The step's code is synchronous (a Celery task); the ``mcp`` client is async. Its coroutines run on the process's
one asyncio loop, which async tools and pydantic-ai agents share (:func:`agents_celery.greenlets.process_loop`:
on greenlets a second loop would never run): :func:`submit` hands it a coroutine and waits for the result. The
process keeps one :class:`Connection` per server, opened on first use and reused by every later call of every
run the process serves: a call costs one request on an open session, not a connect and an ``initialize``. A
forked child (Celery's prefork pool) notices the connections are its parent's and makes its own, on its own loop.

A connection lives in a task of its own that holds the transport and the session open. When the transport dies
(the server was killed, a reset, a stdio server exited), that task ends; calls waiting on the session are told
at once (:class:`ConnectionLost`) rather than hang, and the next call opens a new session. A server restarted
behind the same URL answers the old session with 404: the request is sent again, once, on a new session (the
server never acted on it); a listing is also sent again when the connection died under it. A connection that
cannot be opened raises :class:`ServerUnreachable`: nothing reached the server.

Imported only by :mod:`agents_celery.mcp` when a toolset is used: agents modules without MCP tools load no
``mcp`` package.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import httpx2
import mcp_types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from ..greenlets import process_loop

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long opening a session (connect and ``initialize``) may take.
OPEN_TIMEOUT = 10.0


class ServerUnreachable(Exception):
    """The session could not be opened: the request never reached the server."""


class ConnectionLost(Exception):
    """The connection died while a request was under way: the server may have acted on it."""


class _SessionGone(Exception):
    """The server answered that it does not know the session (it restarted): it did not act on the request."""


#: What the mcp client reports when the server answers 404 for a session it does not know (a server restarted
#: behind the same URL): the server's own message, or the client's stand-in for a 404 without one. Not "Session
#: terminated before the request completed": that request was under way.
SESSION_GONE = frozenset({"Session not found", "Session terminated"})


@dataclass(frozen=True)
class Target:
    """Where a toolset's server is: a streamable HTTP ``url`` (with ``headers``), or a stdio ``command`` (with
    ``env``)."""

    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] | None = None

    def label(self) -> str:
        return self.url or " ".join(self.command)


@dataclass
class Connection:
    """One open session to one server, held by a task of the process's loop."""

    target: Target
    #: Called (on the loop) when the server says its tool list changed: one per toolset using this server (two
    #: toolsets with the same URL and headers share the connection, and each must hear the change).
    listeners: list[Callable[[], None]] = field(default_factory=list)
    session: ClientSession | None = None
    holder: asyncio.Task[None] | None = None
    closing: asyncio.Event | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    opened: int = 0
    #: The requests the server refused for not knowing the open session (:meth:`_on_response`): a call's
    #: idempotency key, else the method; a new session clears them.
    refused: set[str] = field(default_factory=set)

    async def ready(self) -> tuple[ClientSession, asyncio.Task[None]]:
        """The open session (opened now when there is none, or the last one died)."""
        async with self.lock:
            dead = self.closing is None or self.closing.is_set()  # its transport ended (or it was dropped)
            if self.session is None or self.holder is None or self.holder.done() or dead:
                await self._open()
            assert self.session is not None and self.holder is not None
            return self.session, self.holder

    async def _open(self) -> None:
        started: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        self.closing = asyncio.Event()
        self.refused = set()
        self.holder = asyncio.create_task(self._hold(started, self.closing))
        try:
            self.session = await asyncio.wait_for(asyncio.shield(started), OPEN_TIMEOUT)
        except BaseException as exc:
            self.closing.set()
            self.holder.cancel()
            self.session = None
            if isinstance(exc, asyncio.CancelledError) and not started.done():
                raise
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise ServerUnreachable(f"cannot open a session with {self.target.label()} ({reason})") from None
        self.opened += 1

    async def _hold(self, started: asyncio.Future[ClientSession], closing: asyncio.Event) -> None:
        target = self.target
        session: ClientSession | None = None
        try:
            async with AsyncExitStack() as stack:
                if target.url is not None:
                    # The mcp package's own defaults: 30 s to connect and write, 300 s to read (a server may
                    # hold a response stream open); redirects are the transport's to follow.
                    http = httpx2.AsyncClient(
                        headers=dict(target.headers),
                        timeout=httpx2.Timeout(30.0, read=300.0),
                        event_hooks={"response": [self._on_response]},
                    )
                    await stack.enter_async_context(http)
                    streams = await stack.enter_async_context(streamable_http_client(target.url, http_client=http))
                else:
                    env = {**get_default_environment(), **dict(target.env or ())}
                    params = StdioServerParameters(command=target.command[0], args=list(target.command[1:]), env=env)
                    streams = await stack.enter_async_context(stdio_client(params, errlog=_errlog()))
                session = await stack.enter_async_context(
                    ClientSession(_Watched(streams[0], closing), streams[1], message_handler=self._on_message)
                )
                await session.initialize()
                started.set_result(session)
                await closing.wait()
        except BaseException as exc:  # the transport died (or was closed): the next call opens a new session
            if not started.done():
                started.set_exception(exc if isinstance(exc, Exception) else ServerUnreachable(repr(exc)))
            else:
                log.info("MCP session with %s ended (%s: %s)", target.label(), type(exc).__name__, exc)
        finally:
            if self.session is session:  # (not a newer session opened since this one's transport ended)
                self.session = None

    async def _on_response(self, response: httpx2.Response) -> None:
        """An HTTP answer of the server: a 404, or a 400 that names the session, to a POST that carried a session
        id says the server does not know that session (it restarted): that request was refused, not acted on.
        The TypeScript SDK's servers (the reference ``server-everything`` among them) answer 400 "No valid session
        ID provided" with a body the mcp client cannot read, so it reports only "Server returned an error
        response". Only the refused POST itself counts: a refused GET (the client resuming the stream of a call
        the old server took) says nothing about whether the call ran."""
        request = response.request
        if response.status_code not in (400, 404) or request.method != "POST":
            return
        if not request.headers.get("mcp-session-id"):
            return
        body = (await response.aread()).decode(errors="replace").lower()
        if response.status_code != 404 and "session" not in body:
            return
        try:
            sent = json.loads(request.content)
        except ValueError:
            return
        params = sent.get("params") if isinstance(sent, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        self.refused.add(str(meta.get("idempotency_key")) if isinstance(meta, dict) else str(sent.get("method")))

    async def _on_message(self, message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, mcp_types.ToolListChangedNotification):
            for listener in list(self.listeners):
                listener()

    async def request(
        self,
        make: Callable[[ClientSession], Coroutine[Any, Any, T]],
        timeout: float,
        resend: bool = False,
        key: str = "",
    ) -> T:
        """``make(session)`` on the open session, bounded by ``timeout``. A server that no longer knows the session
        (restarted behind the same URL: 404, "Session not found") did not act on the request: the session is
        dropped and the request sent once more on a new one. With ``resend`` (a request safe to repeat), so is a
        request whose connection died (a stdio server that exited since the last request). ``key`` names the
        request as :meth:`_on_response` records a refusal (a call's idempotency key, else its method).

        Raises:
            ServerUnreachable: no session could be opened.
            ConnectionLost: the connection died before the answer came (or the new session was unknown too).
            TimeoutError: no answer within ``timeout`` (the request is cancelled).
        """
        try:
            return await self._once(make, timeout, key)
        except _SessionGone as exc:
            log.info("MCP server %s no longer knows its session (%s): opening a new one", self.target.label(), exc)
        except ConnectionLost as exc:
            if not resend:
                raise
            log.info("MCP connection with %s lost (%s): sending again on a new session", self.target.label(), exc)
        try:
            return await self._once(make, timeout, key)
        except _SessionGone as exc:
            raise ConnectionLost(f"{self.target.label()} refused a new session too ({exc})") from None

    async def _once(self, make: Callable[[ClientSession], Coroutine[Any, Any, T]], timeout: float, key: str) -> T:
        session, holder = await self.ready()
        task = asyncio.ensure_future(make(session))
        done, _ = await asyncio.wait({task, holder}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            try:
                return task.result()
            except MCPError as exc:
                if exc.error.message in SESSION_GONE or key in self.refused:
                    self.drop()
                    raise _SessionGone(exc.error.message) from None
                if exc.code == mcp_types.CONNECTION_CLOSED:
                    self.drop()
                    raise ConnectionLost(exc.error.message) from None
                raise
            except (OSError, EOFError) as exc:
                self.drop()
                raise ConnectionLost(f"{type(exc).__name__}: {exc}") from None
            except Exception as exc:  # a transport error surfacing in the request (anyio, httpx)
                if type(exc).__module__.split(".")[0] in ("httpx2", "httpcore2", "anyio"):
                    self.drop()
                    raise ConnectionLost(f"{type(exc).__name__}: {exc}") from None
                raise
        task.cancel()
        if holder in done:
            raise ConnectionLost(f"the connection to {self.target.label()} closed during the request")
        raise TimeoutError(f"no answer from {self.target.label()} within {timeout:g}s")

    def drop(self) -> None:
        """Close the session (the next request opens a new one)."""
        if self.closing is not None:
            self.closing.set()
        self.session = None


class _Watched:
    """A transport's receive stream that sets ``ended`` when it ends (EOF: a stdio server exited, a transport
    closed): the connection is then known dead before the next request, which goes out on a new session instead
    of failing as "lost during the call" (it was never sent). Everything else is the stream's own."""

    def __init__(self, inner: Any, ended: asyncio.Event) -> None:
        self._inner = inner
        self._ended = ended

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> _Watched:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        self._ended.set()
        return await self._inner.__aexit__(*exc)

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except BaseException:
            self._ended.set()
            raise

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except BaseException:
            self._ended.set()
            raise


def _errlog() -> Any:
    """Where a stdio server's stderr goes: the process's stderr, or the original one when it was replaced by
    something without a file descriptor (Celery's LoggingProxy in a worker)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__
    return sys.stderr


class _Loop:
    """The connections of this process, on its one asyncio loop (:func:`agents_celery.greenlets.process_loop`)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.connections: dict[Target, Connection] = {}
        self.loop = process_loop()


_LOOP: _Loop | None = None
_LOCK = threading.Lock()


def _process_loop() -> _Loop:
    global _LOOP
    with _LOCK:
        if _LOOP is None or _LOOP.pid != os.getpid():  # first use, or a forked child of the process that made it
            _LOOP = _Loop()
        return _LOOP


def submit(coro_fn: Callable[[], Coroutine[Any, Any, T]], timeout: float) -> T:
    """Run ``coro_fn()`` on the process's loop and wait for it (at most ``timeout`` seconds, then cancel it)."""
    loop = _process_loop().loop
    future = asyncio.run_coroutine_threadsafe(coro_fn(), loop)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        if future.done():
            raise  # the coroutine's own TimeoutError (an alias of this one since Python 3.11)
        future.cancel()
        raise TimeoutError(f"no answer within {timeout:g}s") from None


def connection(target: Target, on_list_changed: Callable[[], None]) -> Connection:
    """The process's connection to ``target`` (made on first use; opened by its first request)."""
    pool = _process_loop()
    with _LOCK:
        conn = pool.connections.get(target)
        if conn is None:
            conn = pool.connections[target] = Connection(target)
        if on_list_changed not in conn.listeners:
            conn.listeners.append(on_list_changed)
        return conn


def list_tools(target: Target, on_list_changed: Callable[[], None], timeout: float) -> list[dict[str, Any]]:
    """The server's tools (every page): ``name``, ``description``, ``input_schema`` each."""
    conn = connection(target, on_list_changed)

    async def listing() -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = await conn.request(_lister(cursor), timeout, resend=True, key="tools/list")
            for t in page.tools:
                schema = dict(t.input_schema or {"type": "object", "properties": {}})
                tools.append({"name": t.name, "description": t.description or "", "input_schema": schema})
            cursor = page.next_cursor
            if not cursor:
                return tools

    return submit(listing, 2 * (timeout + OPEN_TIMEOUT) + 1)


def _lister(cursor: str | None) -> Callable[[ClientSession], Coroutine[Any, Any, mcp_types.ListToolsResult]]:
    params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
    return lambda session: session.list_tools(params=params)


def call_tool(
    target: Target, on_list_changed: Callable[[], None], name: str, arguments: dict[str, Any], meta: dict[str, Any],
    timeout: float,
) -> tuple[str, bool]:  # fmt: skip
    """Call ``name`` with ``arguments`` (``meta`` as the request's ``_meta``): the result as text, and whether the
    server said it is an error."""
    conn = connection(target, on_list_changed)

    async def call() -> mcp_types.CallToolResult:
        return await conn.request(
            lambda s: s.call_tool(name, arguments, read_timeout_seconds=timeout, meta=cast(Any, meta)),
            timeout,
            key=str(meta.get("idempotency_key")),
        )

    result = submit(call, 2 * (timeout + OPEN_TIMEOUT) + 1)
    return result_text(result), bool(result.is_error)


def result_text(result: mcp_types.CallToolResult) -> str:
    """A ``tools/call`` result as the text the model gets: its text parts, other parts as JSON, or its structured
    content when it has no content."""
    parts: list[str] = []
    for block in result.content:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            parts.append(json.dumps(block.model_dump(mode="json", exclude_none=True), ensure_ascii=False))
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)


def opened(target: Target) -> int:
    """How many sessions this process opened with ``target`` (for tests and the bench)."""
    pool = _process_loop()
    conn = pool.connections.get(target)
    return conn.opened if conn is not None else 0


def now_ms() -> int:
    return int(time.time() * 1000)

"""The asyncio twin of :class:`agents_celery.client.Client`: same methods, awaited; streams are async iterators.

::

    async with AsyncClient("http://localhost:7777") as client:
        stream = await client.stream("assistant", "hi")
        async for event in stream:
            save(stream.run_id, event.offset)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any

import httpx

from ..errors import RunBusyError, RunFinishedError, RunTimeoutError
from ..events import Event
from ..runs import RunPage, RunView, SessionPage, SessionView
from ..schedule import Schedule
from .protocol import (
    BUSY_RETRIES,
    RETRY_STATUSES,
    Backoff,
    Cursor,
    Retry,
    SSEParser,
    StreamBroken,
    auth_headers,
    base_url_of,
    continue_body,
    error_from_response,
    event_from_frame,
    query,
    schedule_body,
    start_body,
)
from .sync import StreamHandle

__all__ = ["AsyncClient", "AsyncRunStream"]


class AsyncRunStream(StreamHandle):
    """One run's events after ``last_offset``, as an async iterator. Persist ``run_id`` and ``last_offset``."""

    client: AsyncClient

    def __aiter__(self) -> AsyncIterator[Event]:
        self.cursor.done = False
        return self.client._events(self)

    def events(self, offset: int | str | None = None, *, until_pause: bool = True) -> AsyncIterator[Event]:
        """See :meth:`agents_celery.client.RunStream.events`."""
        self._from(offset, until_pause)
        return self.client._events(self)

    async def get(self) -> RunView:
        return await self.client.get(self.run_id)


class AsyncClient:
    """Asynchronous client of the agents-celery HTTP API; see :class:`agents_celery.client.Client`."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        backoff: Backoff | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.backoff = backoff or Backoff()
        self._http = httpx.AsyncClient(
            base_url=base_url_of(base_url), headers=auth_headers(api_key), timeout=timeout, transport=transport
        )

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise error_from_response(response.status_code, response.content)
        return response.json() if response.content else None

    async def agents(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._request("GET", "/agents")
        return result

    async def runs(
        self,
        *,
        status: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> RunPage:
        """Runs the caller may see, newest first (``GET /runs``); see :meth:`agents_celery.Runtime.runs`."""
        params = query(
            status=status, agent_id=agent_id, session_id=session_id, user_id=user_id, limit=limit, cursor=cursor
        )
        return RunPage.from_dict(await self._request("GET", "/runs", params=params))

    async def sessions(self, *, user_id: str | None = None, limit: int = 20, cursor: str | None = None) -> SessionPage:
        """Sessions, most recently active first (``GET /sessions``)."""
        params = query(user_id=user_id, limit=limit, cursor=cursor)
        return SessionPage.from_dict(await self._request("GET", "/sessions", params=params))

    async def session(self, session_id: str) -> SessionView:
        """A session's conversation and runs (``GET /sessions/<id>``)."""
        return SessionView.from_dict(await self._request("GET", f"/sessions/{session_id}"))

    async def schedule(
        self,
        agent: str,
        message: str,
        *,
        cron: str | None = None,
        every: float | None = None,
        session_id: str | None = None,
        name: str | None = None,
    ) -> Schedule:
        body = schedule_body(agent, message, cron, every, session_id, name)
        return Schedule.from_dict(await self._request("POST", "/schedules", json=body))

    async def schedules(self) -> list[Schedule]:
        return [Schedule.from_dict(s) for s in (await self._request("GET", "/schedules"))["schedules"]]

    async def pause_schedule(self, schedule_id: str, paused: bool = True) -> Schedule:
        action = "pause" if paused else "resume"
        return Schedule.from_dict(await self._request("POST", f"/schedules/{schedule_id}/{action}"))

    async def delete_schedule(self, schedule_id: str) -> None:
        await self._request("DELETE", f"/schedules/{schedule_id}")

    async def delete_run(self, run_id: str) -> None:
        """Delete an ended run (``DELETE /runs/<id>``); RunLiveError while it has not ended."""
        await self._request("DELETE", f"/runs/{run_id}")

    async def delete_session(self, session_id: str) -> None:
        """Delete a session and its runs (``DELETE /sessions/<id>``); SessionBusyError while a run of it is live."""
        await self._request("DELETE", f"/sessions/{session_id}")

    async def get(self, run_id: str) -> RunView:
        return RunView.from_dict(await self._request("GET", f"/runs/{run_id}"))

    async def stream(
        self,
        agent: str,
        message: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        idempotency_key: str | None = None,
        until_pause: bool = True,
        start_after: float | None = None,
    ) -> AsyncRunStream:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = start_body(message, session_id, user_id, start_after)
        out = await self._request("POST", f"/agents/{agent}/runs", json=body, headers=headers)
        return AsyncRunStream(self, out["run_id"], agent, out.get("session_id"), -1, until_pause)

    async def get_stream(self, run_id: str) -> AsyncRunStream:
        view = await self.get(run_id)
        return AsyncRunStream(self, run_id, view.agent_id, view.session_id, -1, True)

    async def continue_run(self, run_id: str, decisions: Sequence[dict[str, Any]] | None = None) -> AsyncRunStream:
        run = await self.get(run_id)
        path, body = f"/agents/{run.agent_id}/runs/{run_id}/continue", continue_body(decisions)
        for delay in BUSY_RETRIES:  # the worker that paused the run may hold its lease for a moment
            try:
                await self._request("POST", path, json=body)
                break
            except RunBusyError:
                if delay is None:
                    raise
                await asyncio.sleep(delay)
        return AsyncRunStream(self, run_id, run.agent_id, run.session_id, run.last_offset, True)

    async def stop(self, run_id: str, reason: str = "stopped by request") -> RunView:
        agent = (await self.get(run_id)).agent_id
        await self._request("POST", f"/agents/{agent}/runs/{run_id}/cancel", data={"reason": reason})
        return await self.get(run_id)

    async def run(self, agent: str, message: str, *, timeout: float | None = None, **kwargs: Any) -> RunView:
        stream = await self.stream(agent, message, **kwargs)
        try:
            async with asyncio.timeout(timeout):
                async for _event in stream:
                    pass
        except TimeoutError:
            with contextlib.suppress(RunFinishedError):
                await self.stop(stream.run_id, "caller gave up")
            raise RunTimeoutError(
                f"run {stream.run_id!r} did not finish within {timeout}s; stopped", stream.run_id
            ) from None
        return await self.get(stream.run_id)

    async def _events(self, stream: AsyncRunStream) -> AsyncIterator[Event]:
        cursor, failures = stream.cursor, 0
        while not cursor.done:
            try:
                async for event in self._connect(cursor):
                    failures = 0
                    yield event
                cursor.closed()
            except (httpx.TransportError, StreamBroken, Retry) as exc:
                failures += 1
                delay = cursor.failed(failures, self.backoff, exc)
                stream.reconnects += 1
                await asyncio.sleep(delay)

    async def _connect(self, cursor: Cursor) -> AsyncIterator[Event]:
        params, headers = cursor.request()
        async with self._http.stream("GET", f"/runs/{cursor.run_id}/events", params=params, headers=headers) as resp:
            if resp.status_code == 204:
                cursor.done = True
                return
            if resp.status_code >= 400:
                error = error_from_response(resp.status_code, await resp.aread())
                raise Retry(str(error)) if resp.status_code in RETRY_STATUSES else error
            parser = SSEParser()
            async for line in resp.aiter_lines():
                frame = parser.feed(line)
                event = event_from_frame(frame) if frame is not None else None
                if event is not None and cursor.accept(event):
                    yield event
                    if cursor.done:
                        return

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

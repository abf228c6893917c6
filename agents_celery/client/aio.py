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
from typing import Any, TypeVar

import httpx

from ..errors import AgentsCeleryError, RunFinishedError
from ..events import Event
from ..runs import RunPage, RunView, SessionPage, SessionView
from ..schedule import Schedule
from . import plans
from .plans import Backoff, Call, Cursor, Driving, Plan, Retry, Sleep, StreamBroken, StreamHandle

T = TypeVar("T")

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
        self._http = httpx.AsyncClient(**plans.http_options(base_url, api_key, timeout), transport=transport)

    async def _do(self, plan: Plan[T]) -> T:
        """Carry out a plan of :mod:`.protocol`: its calls over HTTP, its waits in asyncio."""
        driving = Driving(plan)
        while (step := driving.next()) is not None:
            try:
                driving.sent = await self._perform(step)
            except AgentsCeleryError as exc:
                driving.error = exc
        return driving.result

    async def _perform(self, step: Call | Sleep) -> Any:
        if isinstance(step, Sleep):
            return await asyncio.sleep(step.seconds)
        return plans.answer(await self._http.request(step.method, step.path, **step.options))

    async def agents(self) -> list[dict[str, Any]]:
        return await self._do(plans.agents())

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
        return await self._do(plans.runs(status, agent_id, session_id, user_id, limit, cursor))

    async def sessions(self, *, user_id: str | None = None, limit: int = 20, cursor: str | None = None) -> SessionPage:
        """Sessions, most recently active first (``GET /sessions``)."""
        return await self._do(plans.sessions(user_id, limit, cursor))

    async def session(self, session_id: str) -> SessionView:
        """A session's conversation and runs (``GET /sessions/<id>``)."""
        return await self._do(plans.session(session_id))

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
        return await self._do(plans.schedule(agent, message, cron, every, session_id, name))

    async def schedules(self) -> list[Schedule]:
        return await self._do(plans.schedules())

    async def pause_schedule(self, schedule_id: str, paused: bool = True) -> Schedule:
        return await self._do(plans.pause_schedule(schedule_id, paused))

    async def delete_schedule(self, schedule_id: str) -> None:
        await self._do(plans.delete(f"/schedules/{schedule_id}"))

    async def delete_run(self, run_id: str) -> None:
        """Delete an ended run (``DELETE /runs/<id>``); RunLiveError while it has not ended."""
        await self._do(plans.delete(f"/runs/{run_id}"))

    async def delete_session(self, session_id: str) -> None:
        """Delete a session and its runs (``DELETE /sessions/<id>``); SessionBusyError while a run of it is live."""
        await self._do(plans.delete(f"/sessions/{session_id}"))

    async def get(self, run_id: str) -> RunView:
        return await self._do(plans.get(run_id))

    async def stream(
        self,
        agent: str,
        message: str | list[dict[str, Any]],
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        idempotency_key: str | None = None,
        until_pause: bool = True,
        start_after: float | None = None,
        output_schema: dict[str, Any] | None = None,
    ) -> AsyncRunStream:
        asked = (session_id, user_id, idempotency_key, until_pause, start_after, output_schema)
        plan = plans.start(agent, message, *asked)
        return AsyncRunStream(self, *await self._do(plan))

    async def get_stream(self, run_id: str) -> AsyncRunStream:
        return AsyncRunStream(self, *await self._do(plans.get_stream(run_id)))

    async def continue_run(self, run_id: str, decisions: Sequence[dict[str, Any]] | None = None) -> AsyncRunStream:
        return AsyncRunStream(self, *await self._do(plans.continue_run(run_id, decisions)))

    async def stop(self, run_id: str, reason: str = "stopped by request") -> RunView:
        return await self._do(plans.stop(run_id, reason))

    async def run(
        self, agent: str, message: str | list[dict[str, Any]], *, timeout: float | None = None, **kwargs: Any
    ) -> RunView:
        stream = await self.stream(agent, message, **kwargs)
        try:
            async with asyncio.timeout(timeout):
                async for _event in stream:
                    pass
        except TimeoutError:
            with contextlib.suppress(RunFinishedError):
                await self.stop(stream.run_id, "caller gave up")
            raise plans.gave_up(stream.run_id, timeout) from None
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
        path, options = cursor.request()
        async with self._http.stream("GET", path, **options) as response:
            if cursor.ended(response.status_code):
                return
            if response.status_code >= 400:
                raise plans.refusal(response.status_code, await response.aread())
            reader = cursor.reader()
            async for line in response.aiter_lines():
                if (event := reader.feed(line)) is not None:
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

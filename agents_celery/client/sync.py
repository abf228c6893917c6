"""The synchronous HTTP client (httpx): the Runtime's names and return types, over the HTTP API.

Each method carries out a plan of :mod:`.protocol` (which builds the requests and reads the replies); what is
here is the I/O: the requests, the waits, and reading the event streams.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
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


class RunStream(StreamHandle):
    """One run's events. Persist ``run_id`` and ``last_offset``; iterate it, or call :meth:`events`.

    It reconnects by itself when the connection drops (``GET /runs/<id>/events`` with ``Last-Event-ID``,
    exponential backoff), skips any offset it already delivered and raises StreamGapError if one were ever
    missing, so every event is delivered exactly once. Iteration stops after the run ends (or pauses); iterating
    again later goes on from ``last_offset``, so after a ``continue_run`` the same stream can be read on.
    """

    client: Client

    def __iter__(self) -> Iterator[Event]:
        self.cursor.done = False
        return self.client._events(self)

    def events(self, offset: int | str | None = None, *, until_pause: bool = True) -> Iterator[Event]:
        """The events after ``offset`` (after ``last_offset`` when None), then live ones, until the run ends or
        pauses: what :meth:`agents_celery.runtime.RunStream.events` gives."""
        self._from(offset, until_pause)
        return self.client._events(self)

    def get(self) -> RunView:
        """The run as it stands."""
        return self.client.get(self.run_id)


class Client:
    """Synchronous client of the agents-celery HTTP API, with the :class:`~agents_celery.Runtime`'s names.

    Args:
        base_url: The API root (default ``AGENTS_CELERY_API_URL``, else ``http://127.0.0.1:7777``).
        api_key: Bearer key (default ``AGENTS_CELERY_API_KEY``).
        timeout: Seconds for connect and for each read; an idle stream gets keep-alives well within it.
        backoff: Reconnect policy while following a stream.
        transport: An httpx transport (e.g. ``httpx.MockTransport`` in tests).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        backoff: Backoff | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.backoff = backoff or Backoff()
        self._http = httpx.Client(**plans.http_options(base_url, api_key, timeout), transport=transport)

    def _do(self, plan: Plan[T]) -> T:
        """Carry out a plan of :mod:`.protocol`: its calls over HTTP, its waits asleep."""
        driving = Driving(plan)
        while (step := driving.next()) is not None:
            try:
                driving.sent = self._perform(step)
            except AgentsCeleryError as exc:
                driving.error = exc
        return driving.result

    def _perform(self, step: Call | Sleep) -> Any:
        if isinstance(step, Sleep):
            return time.sleep(step.seconds)
        return plans.answer(self._http.request(step.method, step.path, **step.options))

    def agents(self) -> list[dict[str, Any]]:
        """The manifests of the agents the workers serve."""
        return self._do(plans.agents())

    def runs(
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
        return self._do(plans.runs(status, agent_id, session_id, user_id, limit, cursor))

    def sessions(self, *, user_id: str | None = None, limit: int = 20, cursor: str | None = None) -> SessionPage:
        """Sessions, most recently active first (``GET /sessions``)."""
        return self._do(plans.sessions(user_id, limit, cursor))

    def session(self, session_id: str) -> SessionView:
        """A session's conversation and runs (``GET /sessions/<id>``)."""
        return self._do(plans.session(session_id))

    def schedule(
        self,
        agent: str,
        message: str,
        *,
        cron: str | None = None,
        every: float | None = None,
        session_id: str | None = None,
        name: str | None = None,
    ) -> Schedule:
        """Schedule runs (``POST /schedules``), as :meth:`agents_celery.Runtime.schedule`."""
        return self._do(plans.schedule(agent, message, cron, every, session_id, name))

    def schedules(self) -> list[Schedule]:
        return self._do(plans.schedules())

    def pause_schedule(self, schedule_id: str, paused: bool = True) -> Schedule:
        return self._do(plans.pause_schedule(schedule_id, paused))

    def delete_schedule(self, schedule_id: str) -> None:
        self._do(plans.delete(f"/schedules/{schedule_id}"))

    def delete_run(self, run_id: str) -> None:
        """Delete an ended run (``DELETE /runs/<id>``); RunLiveError while it has not ended."""
        self._do(plans.delete(f"/runs/{run_id}"))

    def delete_session(self, session_id: str) -> None:
        """Delete a session and its runs (``DELETE /sessions/<id>``); SessionBusyError while a run of it is live."""
        self._do(plans.delete(f"/sessions/{session_id}"))

    def get(self, run_id: str) -> RunView:
        """The run's committed state and where its log stands."""
        return self._do(plans.get(run_id))

    def stream(
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
    ) -> RunStream:
        """Start a run (it executes on the workers) and return its stream, from the first event; ``start_after``
        (seconds) delays it (``scheduled`` until then); ``output_schema`` asks for structured output
        (docs/output.md). ``message``: text, or Chat Completions content parts (images and files: docs/input.md)."""
        asked = (session_id, user_id, idempotency_key, until_pause, start_after, output_schema)
        plan = plans.start(agent, message, *asked)
        return RunStream(self, *self._do(plan))

    def get_stream(self, run_id: str) -> RunStream:
        """A stream handle for an existing run, from its first event (RunNotFoundError otherwise)."""
        return RunStream(self, *self._do(plans.get_stream(run_id)))

    def continue_run(self, run_id: str, decisions: Sequence[dict[str, Any]] | None = None) -> RunStream:
        """Answer a paused run (``{"tool_call_id", "confirmed", "confirmation_note", "tool_args"}`` each; None
        approves all) and return its stream from the pause on."""
        return RunStream(self, *self._do(plans.continue_run(run_id, decisions)))

    def stop(self, run_id: str, reason: str = "stopped by request") -> RunView:
        """Stop a run whatever state it is in; RunFinishedError if it already ended."""
        return self._do(plans.stop(run_id, reason))

    def run(
        self, agent: str, message: str | list[dict[str, Any]], *, timeout: float | None = None, **kwargs: Any
    ) -> RunView:
        """Start a run and block until it ends or pauses; on a timeout (RunTimeoutError) the run is stopped."""
        stream = self.stream(agent, message, **kwargs)
        deadline = None if timeout is None else time.monotonic() + timeout
        for _event in stream:
            if deadline is not None and time.monotonic() > deadline:
                with contextlib.suppress(RunFinishedError):
                    self.stop(stream.run_id, "caller gave up")
                raise plans.gave_up(stream.run_id, timeout)
        return self.get(stream.run_id)

    # -- following ----------------------------------------------------------------------------------------

    def _events(self, stream: RunStream) -> Iterator[Event]:
        cursor, failures = stream.cursor, 0
        while not cursor.done:
            try:
                for event in self._connect(cursor):
                    failures = 0
                    yield event
                cursor.closed()
            except (httpx.TransportError, StreamBroken, Retry) as exc:
                failures += 1
                delay = cursor.failed(failures, self.backoff, exc)
                stream.reconnects += 1
                time.sleep(delay)

    def _connect(self, cursor: Cursor) -> Iterator[Event]:
        path, options = cursor.request()
        with self._http.stream("GET", path, **options) as response:
            if cursor.ended(response.status_code):
                return
            if response.status_code >= 400:
                raise plans.refusal(response.status_code, response.read())
            reader = cursor.reader()
            for line in response.iter_lines():
                if (event := reader.feed(line)) is not None:
                    yield event
                    if cursor.done:
                        return

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

"""The synchronous HTTP client (httpx): the Runtime's names and return types, over the HTTP API."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

import httpx

from ..errors import RunBusyError, RunFinishedError, RunTimeoutError, ValidationError
from ..events import Event, parse_position
from ..runs import RunPage, RunView, SessionPage, SessionView
from ..schedule import Schedule
from .protocol import (
    BUSY_RETRIES,
    RETRY_STATUSES,
    Backoff,
    Cursor,
    Retry,
    StreamBroken,
    accepted,
    auth_headers,
    base_url_of,
    continue_body,
    error_from_response,
    query,
    schedule_body,
    start_body,
)


class StreamHandle:
    """What the sync and async stream handles share: the run, and the cursor of what was delivered."""

    def __init__(
        self, client: Any, run_id: str, agent_id: str | None, session_id: str | None, after: int, until_pause: bool
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.agent_id = agent_id
        self.session_id = session_id
        self.cursor = Cursor(run_id, after, until_pause)
        #: How many times the stream reconnected.
        self.reconnects = 0

    @property
    def id(self) -> str:
        """The run id (``run_id``)."""
        return self.run_id

    @property
    def last_offset(self) -> int:
        """Offset of the last event delivered (-1: none yet)."""
        return self.cursor.last_offset

    def _from(self, offset: int | str | None, until_pause: bool) -> None:
        if offset is not None:
            tag = None
            if isinstance(offset, str):  # a position: "140.1a2b3c4d"
                try:
                    offset, tag = parse_position(offset)
                except ValueError as exc:
                    raise ValidationError(str(exc)) from None
            if type(offset) is not int or offset < -1:
                raise ValidationError(f"offset must be -1 (from the start) or an offset >= 0, got {offset!r}")
            self.cursor.last_offset = offset
            self.cursor.last_tag = tag or ""
        self.cursor.until_pause = until_pause
        self.cursor.done = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(run_id={self.run_id!r}, last_offset={self.last_offset})"


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
        self._http = httpx.Client(
            base_url=base_url_of(base_url), headers=auth_headers(api_key), timeout=timeout, transport=transport
        )

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise error_from_response(response.status_code, response.content)
        return response.json() if response.content else None

    def agents(self) -> list[dict[str, Any]]:
        """The manifests of the agents the workers serve."""
        result: list[dict[str, Any]] = self._request("GET", "/agents")
        return result

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
        params = query(
            status=status, agent_id=agent_id, session_id=session_id, user_id=user_id, limit=limit, cursor=cursor
        )
        return RunPage.from_dict(self._request("GET", "/runs", params=params))

    def sessions(self, *, user_id: str | None = None, limit: int = 20, cursor: str | None = None) -> SessionPage:
        """Sessions, most recently active first (``GET /sessions``)."""
        params = query(user_id=user_id, limit=limit, cursor=cursor)
        return SessionPage.from_dict(self._request("GET", "/sessions", params=params))

    def session(self, session_id: str) -> SessionView:
        """A session's conversation and runs (``GET /sessions/<id>``)."""
        return SessionView.from_dict(self._request("GET", f"/sessions/{session_id}"))

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
        body = schedule_body(agent, message, cron, every, session_id, name)
        return Schedule.from_dict(self._request("POST", "/schedules", json=body))

    def schedules(self) -> list[Schedule]:
        return [Schedule.from_dict(s) for s in self._request("GET", "/schedules")["schedules"]]

    def pause_schedule(self, schedule_id: str, paused: bool = True) -> Schedule:
        action = "pause" if paused else "resume"
        return Schedule.from_dict(self._request("POST", f"/schedules/{schedule_id}/{action}"))

    def delete_schedule(self, schedule_id: str) -> None:
        self._request("DELETE", f"/schedules/{schedule_id}")

    def delete_run(self, run_id: str) -> None:
        """Delete an ended run (``DELETE /runs/<id>``); RunLiveError while it has not ended."""
        self._request("DELETE", f"/runs/{run_id}")

    def delete_session(self, session_id: str) -> None:
        """Delete a session and its runs (``DELETE /sessions/<id>``); SessionBusyError while a run of it is live."""
        self._request("DELETE", f"/sessions/{session_id}")

    def get(self, run_id: str) -> RunView:
        """The run's committed state and where its log stands."""
        return RunView.from_dict(self._request("GET", f"/runs/{run_id}"))

    def stream(
        self,
        agent: str,
        message: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        idempotency_key: str | None = None,
        until_pause: bool = True,
        start_after: float | None = None,
    ) -> RunStream:
        """Start a run (it executes on the workers) and return its stream, from the first event; ``start_after``
        (seconds) delays it (``scheduled`` until then)."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = start_body(message, session_id, user_id, start_after)
        out = self._request("POST", f"/agents/{agent}/runs", json=body, headers=headers)
        return RunStream(self, out["run_id"], agent, out.get("session_id"), -1, until_pause)

    def get_stream(self, run_id: str) -> RunStream:
        """A stream handle for an existing run, from its first event (RunNotFoundError otherwise)."""
        view = self.get(run_id)
        return RunStream(self, run_id, view.agent_id, view.session_id, -1, True)

    def continue_run(self, run_id: str, decisions: Sequence[dict[str, Any]] | None = None) -> RunStream:
        """Answer a paused run (``{"tool_call_id", "confirmed", "confirmation_note", "tool_args"}`` each; None
        approves all) and return its stream from the pause on."""
        run = self.get(run_id)
        path, body = f"/agents/{run.agent_id}/runs/{run_id}/continue", continue_body(decisions)
        for delay in BUSY_RETRIES:  # the worker that paused the run may hold its lease for a moment
            try:
                self._request("POST", path, json=body)
                break
            except RunBusyError:
                if delay is None:
                    raise
                time.sleep(delay)
        return RunStream(self, run_id, run.agent_id, run.session_id, run.last_offset, True)

    def stop(self, run_id: str, reason: str = "stopped by request") -> RunView:
        """Stop a run whatever state it is in; RunFinishedError if it already ended."""
        agent = self.get(run_id).agent_id
        self._request("POST", f"/agents/{agent}/runs/{run_id}/cancel", data={"reason": reason})
        return self.get(run_id)

    def run(self, agent: str, message: str, *, timeout: float | None = None, **kwargs: Any) -> RunView:
        """Start a run and block until it ends or pauses; on a timeout (RunTimeoutError) the run is stopped."""
        stream = self.stream(agent, message, **kwargs)
        deadline = None if timeout is None else time.monotonic() + timeout
        for _event in stream:
            if deadline is not None and time.monotonic() > deadline:
                with contextlib.suppress(RunFinishedError):
                    self.stop(stream.run_id, "caller gave up")
                raise RunTimeoutError(f"run {stream.run_id!r} did not finish within {timeout}s; stopped", stream.run_id)
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
        params, headers = cursor.request()
        with self._http.stream("GET", f"/runs/{cursor.run_id}/events", params=params, headers=headers) as response:
            if response.status_code == 204:
                cursor.done = True
                return
            if response.status_code >= 400:
                error = error_from_response(response.status_code, response.read())
                raise Retry(str(error)) if response.status_code in RETRY_STATUSES else error
            yield from accepted(cursor, response.iter_lines())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

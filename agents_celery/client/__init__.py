"""HTTP client for the agents-celery API: start, follow, continue, stop and inspect runs (httpx).

Caller-side protocol: persist the run id and the offset of the last event you handled; to pick up again,
``client.follow(run_id, after=offset)``. A :class:`RunStream` reconnects by itself when the connection drops
(``GET /runs/<id>/events`` with ``Last-Event-ID``, exponential backoff), skips any offset it already delivered
and raises :class:`StreamGapError` if an offset were ever missing, so every event is delivered exactly once::

    with Client("http://localhost:7777", api_key=...) as client:
        stream = client.start("assistant", "What time is it?")
        for event in stream:                     # Event: .offset, .type, .data
            save(stream.run_id, event.offset)    # what to persist
        if client.get(stream.run_id)["status"] == "paused":
            stream = client.continue_run(stream.run_id)   # None approves every pending call

:class:`~agents_celery.client.aio.AsyncClient` is the asyncio twin. HTTP errors become the library's
exceptions: the JSON body's ``code`` picks the class (``run_not_found`` -> RunNotFoundError ...), else the
status does (404 NotFoundError, 409 StateError, 410 RunExpiredError, 400/422 ValidationError, 503
RedisUnavailableError, 401 AuthenticationError).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

from .. import errors
from ..errors import AgentsCeleryError
from ..events import Event, EventType

__all__ = [
    "APIError",
    "AuthenticationError",
    "Client",
    "ConnectionLostError",
    "RunStream",
    "StreamGapError",
]


class APIError(AgentsCeleryError):
    """An HTTP error the library has no class for. ``status`` is the HTTP status."""

    code = "api_error"

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class AuthenticationError(APIError):
    """Missing or wrong API key (HTTP 401)."""

    code = "unauthorized"


class ConnectionLostError(AgentsCeleryError):
    """The stream could not be re-established within the retry budget; resume later from ``last_offset``."""

    code = "connection_lost"

    def __init__(self, message: str, run_id: str, last_offset: int) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.last_offset = last_offset


class StreamGapError(AgentsCeleryError):
    """The server skipped an offset. Offsets are contiguous by construction, so this is a bug: report it."""

    code = "stream_gap"


#: The modules whose exceptions a client raises. The API's own (``agents_celery.contrib.flask``: AuthError and the like)
#: share codes with them, and a process that imports both must still raise the client's.
_PUBLIC = frozenset({"agents_celery.errors", __name__})


def _codes() -> dict[str, type[AgentsCeleryError]]:
    found: dict[str, type[AgentsCeleryError]] = {}
    pending: list[type[AgentsCeleryError]] = [AgentsCeleryError]
    while pending:
        cls = pending.pop()
        if cls.__module__ in _PUBLIC:
            found.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    return found


_BY_STATUS: dict[int, type[AgentsCeleryError]] = {
    400: errors.ValidationError,
    401: AuthenticationError,
    404: errors.NotFoundError,
    409: errors.StateError,
    410: errors.RunExpiredError,
    422: errors.ValidationError,
    503: errors.RedisUnavailableError,
}
#: Statuses worth retrying while following a stream (a proxy hiccup, Redis restarting).
RETRY_STATUSES = frozenset({502, 503, 504})
#: Waits between retries of a continue answered 409 ``run_busy``; None: give up.
BUSY_RETRIES: tuple[float | None, ...] = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, None)


def error_from_response(status: int, body: bytes) -> AgentsCeleryError:
    """The exception for an HTTP error response with a JSON ``{"detail", "code"}`` body (or any body)."""
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    detail = payload.get("detail") if isinstance(payload, dict) else None
    code = payload.get("code") if isinstance(payload, dict) else None
    message = str(detail or body[:300].decode(errors="replace") or f"HTTP {status}")
    cls = _codes().get(str(code)) if code else None
    if cls is None or cls is AgentsCeleryError:
        cls = _BY_STATUS.get(status)
    if cls is None or issubclass(cls, APIError):
        return (cls or APIError)(message, status)
    if cls is errors.ModelError:
        return errors.ModelError(message)
    return cls(message)


@dataclass
class Frame:
    """One server-sent event: ``id`` (the offset; None for meta frames), ``event`` name, raw ``data``."""

    id: str | None
    event: str | None
    data: str


class SSEParser:
    """Turns SSE lines into frames (a blank line ends a frame; comments are skipped)."""

    def __init__(self) -> None:
        self._id: str | None = None
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, line: str) -> Frame | None:
        line = line.rstrip("\r\n")
        if not line:
            if not self._data:
                self._id = self._event = None
                return None
            frame = Frame(self._id, self._event, "\n".join(self._data))
            self._id, self._event, self._data = None, None, []
            return frame
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            self._id = value
        elif name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


class _StreamBroken(Exception):
    """The server ended the stream with an error frame, or the connection ended before the run did."""


#: Event types whose AG-UI fields include ``run_id`` (it stays in ``Event.data`` for them, as stored).
_WITH_RUN_ID = frozenset({EventType.RUN_STARTED, EventType.RUN_FINISHED})


def event_from_frame(frame: Frame) -> Event | None:
    """The canonical event in ``frame``; None for a frame without an id (meta). An error frame raises."""
    if frame.id is None:
        if frame.event == "error":
            raise _StreamBroken(frame.data)
        return None
    data = json.loads(frame.data)
    kind = EventType(data["type"])
    envelope = {"offset", "type", "session_id", "agent_id"} | ({"run_id"} if kind not in _WITH_RUN_ID else set())
    fields = {k: v for k, v in data.items() if k not in envelope}
    timestamp = int(fields.pop("timestamp", 0) or 0)
    return Event(
        offset=int(data.get("offset", frame.id)),
        type=kind,
        run_id=str(data.get("run_id", "")),
        session_id=str(data.get("session_id", "")),
        agent_id=str(data.get("agent_id", "")),
        timestamp=timestamp,
        data=fields,
    )


class Cursor:
    """Where a follower stands: the offset of the last delivered event; dedupes and detects gaps."""

    def __init__(self, run_id: str, after: int, until_pause: bool) -> None:
        self.run_id = run_id
        self.last_offset = after
        self.until_pause = until_pause
        self.done = False
        #: The last event delivered was a pause. Whether the stream ends there is the server's call: a pause
        #: that a continue already followed is history; a stream closed right after one is asked again.
        self.at_pause = False

    def accept(self, event: Event) -> bool:
        """True when ``event`` is the next one to deliver; False for one already delivered."""
        if event.offset <= self.last_offset:
            return False
        if event.offset != self.last_offset + 1:
            raise StreamGapError(
                f"run {self.run_id!r}: got offset {event.offset} right after {self.last_offset}; offsets are "
                "contiguous, so this is a bug in the server or a proxy rewriting the stream"
            )
        self.last_offset = event.offset
        self.done = event.is_terminal
        self.at_pause = event.is_pause
        return True

    def closed(self) -> bool:
        """Called when a connection's stream ended: True to reconnect at once (it closed at a pause: 204
        answers if the run is still paused); raises _StreamBroken when it ended before the run did."""
        if self.done:
            return False
        if self.until_pause and self.at_pause:
            return True
        raise _StreamBroken("the stream ended before the run did")

    def failed(self, failures: int, backoff: Backoff, exc: Exception) -> float:
        """Seconds to wait before reconnecting after ``failures`` failures in a row; ConnectionLostError
        (carrying what to resume from) once they are more than the backoff allows."""
        if failures > backoff.attempts:
            raise ConnectionLostError(
                f"lost the stream of run {self.run_id!r} after {failures - 1} reconnects ({exc}); "
                f"resume with follow({self.run_id!r}, after={self.last_offset})",
                self.run_id,
                self.last_offset,
            ) from exc
        return backoff.delay(failures)

    def request(self) -> tuple[dict[str, Any], dict[str, str]]:
        """Query parameters and headers of the (re)connecting ``GET /runs/<id>/events``."""
        params: dict[str, Any] = {"after": self.last_offset, "until": "pause" if self.until_pause else "end"}
        headers = {"Last-Event-ID": str(self.last_offset)} if self.last_offset >= 0 else {}
        return params, headers


@dataclass
class Backoff:
    """Exponential backoff with jitter; ``attempts`` consecutive failures allowed."""

    attempts: int = 8
    initial: float = 0.1
    maximum: float = 3.0

    def delay(self, failure: int) -> float:
        base: float = min(self.maximum, self.initial * 2 ** (failure - 1))
        return base * (0.5 + random.random() / 2)


def _headers(api_key: str | None) -> dict[str, str]:
    key = api_key if api_key is not None else os.environ.get("AGENTS_CELERY_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def _base_url(base_url: str | None) -> str:
    return base_url or os.environ.get("AGENTS_CELERY_API_URL") or "http://127.0.0.1:7777"


def continue_body(decisions: Sequence[dict[str, Any]] | None) -> dict[str, Any]:
    return {"tools": list(decisions or []), "stream": False, "background": True}


def start_body(message: str, session_id: str | None, user_id: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message, "stream": False, "background": True}
    if session_id:
        body["session_id"] = session_id
    if user_id:
        body["user_id"] = user_id
    return body


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
        return self.run_id

    @property
    def last_offset(self) -> int:
        """Offset of the last event delivered (-1: none yet)."""
        return self.cursor.last_offset

    def __repr__(self) -> str:
        return f"{type(self).__name__}(run_id={self.run_id!r}, last_offset={self.last_offset})"


class RunStream(StreamHandle):
    """One run's events, from just after ``last_offset``; iterate it. Persist ``run_id`` and ``last_offset``.

    Iteration stops after the run ends (or pauses, with ``until_pause``). Iterating again later goes on from
    ``last_offset``, so after a ``continue_run`` the same stream can be read on.
    """

    client: Client

    def __iter__(self) -> Iterator[Event]:
        self.cursor.done = False
        return self.client._events(self)


class Client:
    """Synchronous client of the agents-celery HTTP API.

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
            base_url=_base_url(base_url), headers=_headers(api_key), timeout=timeout, transport=transport
        )

    # -- plain requests -----------------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise error_from_response(response.status_code, response.content)
        return response.json() if response.content else None

    def agents(self) -> list[dict[str, Any]]:
        """The manifests of the agents the workers serve."""
        result: list[dict[str, Any]] = self._request("GET", "/agents")
        return result

    def get(self, run_id: str) -> dict[str, Any]:
        """The run: ``status``, ``agent_id``, ``session_id``, ``last_offset``, ``output``, ``pending`` ..."""
        result: dict[str, Any] = self._request("GET", f"/runs/{run_id}")
        return result

    def start(
        self,
        agent: str,
        message: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        idempotency_key: str | None = None,
        until_pause: bool = True,
    ) -> RunStream:
        """Start a run (it executes on the workers) and return its stream, from the first event."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        out = self._request(
            "POST", f"/agents/{agent}/runs", json=start_body(message, session_id, user_id), headers=headers
        )
        return RunStream(self, out["run_id"], agent, out.get("session_id"), -1, until_pause)

    def follow(
        self, run_id: str, agent_id: str | None = None, *, after: int = -1, until_pause: bool = True
    ) -> RunStream:
        """The stream of an existing run, from just after offset ``after`` (e.g. the one you saved)."""
        return RunStream(self, run_id, agent_id, None, after, until_pause)

    def continue_run(
        self, run_id: str, decisions: Sequence[dict[str, Any]] | None = None, *, agent_id: str | None = None
    ) -> RunStream:
        """Answer a paused run (``{"tool_call_id", "confirmed", "confirmation_note", "tool_args"}`` each; None
        approves all) and return its stream from the pause on."""
        run = self.get(run_id)
        agent = agent_id or run["agent_id"]
        path, body = f"/agents/{agent}/runs/{run_id}/continue", continue_body(decisions)
        for delay in BUSY_RETRIES:  # the worker that paused the run may hold its lease for a moment
            try:
                self._request("POST", path, json=body)
                break
            except errors.RunBusyError:
                if delay is None:
                    raise
                time.sleep(delay)
        return RunStream(self, run_id, agent, run.get("session_id"), int(run["last_offset"]), True)

    def stop(self, run_id: str, *, agent_id: str | None = None) -> dict[str, Any]:
        """Stop a run; RunFinishedError if it already ended."""
        agent = agent_id or self.get(run_id)["agent_id"]
        result: dict[str, Any] = self._request("POST", f"/agents/{agent}/runs/{run_id}/cancel")
        return result

    # -- following ----------------------------------------------------------------------------------------

    def _events(self, stream: RunStream) -> Iterator[Event]:
        cursor, failures = stream.cursor, 0
        while not cursor.done:
            try:
                for event in self._connect(cursor):
                    failures = 0
                    yield event
                cursor.closed()
            except (httpx.TransportError, _StreamBroken, _Retry) as exc:
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
                raise _Retry(str(error)) if response.status_code in RETRY_STATUSES else error
            yield from _accepted(cursor, response.iter_lines())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class _Retry(Exception):
    """A retryable HTTP status while (re)connecting."""


def _accepted(cursor: Cursor, lines: Iterable[str]) -> Iterator[Event]:
    parser = SSEParser()
    for line in lines:
        frame = parser.feed(line)
        event = event_from_frame(frame) if frame is not None else None
        if event is not None and cursor.accept(event):
            yield event
            if cursor.done:
                return

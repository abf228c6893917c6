"""What the sync and async HTTP clients share: SSE parsing, the reconnect cursor, errors from responses.

No I/O here; :mod:`.sync` and :mod:`.aio` make the requests with httpx.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import AgentsCeleryError, APIError, ConnectionLostError, StreamGapError, reply_class
from ..events import Event, EventType, parse_position

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
    cls = reply_class(str(code) if code else None, status)
    if issubclass(cls, APIError):
        return cls(message, status)
    return cls(message)


class Retry(Exception):
    """A retryable HTTP status while (re)connecting."""


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


class StreamBroken(Exception):
    """The server ended the stream with an error frame, or the connection ended before the run did."""


#: Event types whose AG-UI fields include ``run_id`` (it stays in ``Event.data`` for them, as stored).
_WITH_RUN_ID = frozenset({EventType.RUN_STARTED, EventType.RUN_FINISHED})


def event_from_frame(frame: Frame) -> Event | None:
    """The canonical event in ``frame``; None for a frame without an id (meta). An error frame raises."""
    if frame.id is None:
        if frame.event == "error":
            raise StreamBroken(frame.data)
        return None
    data = json.loads(frame.data)
    kind = EventType(data["type"])
    envelope = {"offset", "type", "session_id", "agent_id"} | ({"run_id"} if kind not in _WITH_RUN_ID else set())
    fields = {k: v for k, v in data.items() if k not in envelope}
    timestamp = int(fields.pop("timestamp", 0) or 0)
    _, tag = parse_position(frame.id) if frame.id else (0, None)
    return Event(
        offset=int(data["offset"]),
        type=kind,
        run_id=str(data.get("run_id", "")),
        session_id=str(data.get("session_id", "")),
        agent_id=str(data.get("agent_id", "")),
        timestamp=timestamp,
        data=fields,
        tag=tag or "",
    )


class Cursor:
    """Where a follower stands: the offset of the last delivered event; dedupes and detects gaps."""

    def __init__(self, run_id: str, after: int, until_pause: bool) -> None:
        self.run_id = run_id
        self.last_offset = after
        #: The tag of the event at ``last_offset``: a reconnect names it, and the server says when its log no
        #: longer holds that event (LogRewoundError) instead of going on from a rewritten offset.
        self.last_tag = ""
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
        self.last_tag = event.tag
        self.done = event.is_terminal
        self.at_pause = event.is_pause
        return True

    def closed(self) -> bool:
        """Called when a connection's stream ended: True to reconnect at once (it closed at a pause: 204
        answers if the run is still paused); raises StreamBroken when it ended before the run did."""
        if self.done:
            return False
        if self.until_pause and self.at_pause:
            return True
        raise StreamBroken("the stream ended before the run did")

    def failed(self, failures: int, backoff: Backoff, exc: Exception) -> float:
        """Seconds to wait before reconnecting after ``failures`` failures in a row; ConnectionLostError
        (carrying what to resume from) once they are more than the backoff allows."""
        if failures > backoff.attempts:
            raise ConnectionLostError(
                f"lost the stream of run {self.run_id!r} after {failures - 1} reconnects ({exc}); "
                f"resume with get_stream({self.run_id!r}).events({self.last_offset})",
                self.run_id,
                self.last_offset,
            ) from exc
        return backoff.delay(failures)

    def request(self) -> tuple[dict[str, Any], dict[str, str]]:
        """Query parameters and headers of the (re)connecting ``GET /runs/<id>/events``."""
        position = f"{self.last_offset}.{self.last_tag}" if self.last_tag else str(self.last_offset)
        params: dict[str, Any] = {"after": position, "until": "pause" if self.until_pause else "end"}
        headers = {"Last-Event-ID": position} if self.last_offset >= 0 else {}
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


def auth_headers(api_key: str | None) -> dict[str, str]:
    key = api_key if api_key is not None else os.environ.get("AGENTS_CELERY_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def base_url_of(base_url: str | None) -> str:
    return base_url or os.environ.get("AGENTS_CELERY_API_URL") or "http://127.0.0.1:7777"


def continue_body(decisions: Sequence[dict[str, Any]] | None) -> dict[str, Any]:
    return {"tools": list(decisions or []), "stream": False, "background": True}


def schedule_body(
    agent: str,
    message: str,
    cron: str | None,
    every: float | None,
    session_id: str | None,
    name: str | None,
) -> dict[str, Any]:
    body = {"agent_id": agent, "message": message, "cron": cron, "every_seconds": every}
    body.update({"session_id": session_id, "name": name})
    return {k: v for k, v in body.items() if v is not None}


def start_body(
    message: str, session_id: str | None, user_id: str | None, start_after: float | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message, "stream": False, "background": True}
    if start_after is not None:
        body["start_after"] = start_after
    if session_id:
        body["session_id"] = session_id
    if user_id:
        body["user_id"] = user_id
    return body


def accepted(cursor: Cursor, lines: Iterable[str]) -> Iterator[Event]:
    parser = SSEParser()
    for line in lines:
        frame = parser.feed(line)
        event = event_from_frame(frame) if frame is not None else None
        if event is not None and cursor.accept(event):
            yield event
            if cursor.done:
                return


def query(**params: Any) -> dict[str, Any]:
    """Query parameters of a listing: the ones given (a RunStatus as its value)."""
    return {k: str(getattr(v, "value", v)) for k, v in params.items() if v is not None}

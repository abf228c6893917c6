"""Everything the sync and async HTTP clients share, as httpx's ``BaseClient`` is for its twins: the URLs, bodies
and headers of every request, reading replies into RunViews, pages and schedules, errors from replies, SSE frame
parsing and the reconnect cursor.

No I/O here. A method of the clients is a *plan* (:data:`Plan`): a generator that yields the :class:`Call` to
make (or a :class:`Sleep`), is sent the reply's JSON back (or has the reply's exception thrown in) and returns
the method's result. :mod:`.sync` and :mod:`.aio` only carry the plans out (:class:`Driving`) with httpx, and
read the event streams.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

import httpx

from ..errors import (
    AgentsCeleryError,
    APIError,
    ConnectionLostError,
    RunBusyError,
    RunTimeoutError,
    StreamGapError,
    ValidationError,
    reply_class,
)
from ..events import Event, EventType, parse_position
from ..runs import RunPage, RunView, SessionPage, SessionView
from ..schedule import Schedule

T = TypeVar("T")

#: Statuses worth retrying while following a stream (a proxy hiccup, Redis restarting).
RETRY_STATUSES = frozenset({502, 503, 504})


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

    def request(self) -> tuple[str, dict[str, Any]]:
        """The path and options (query parameters, headers) of the (re)connecting ``GET /runs/<id>/events``."""
        position = f"{self.last_offset}.{self.last_tag}" if self.last_tag else str(self.last_offset)
        params: dict[str, Any] = {"after": position, "until": "pause" if self.until_pause else "end"}
        headers = {"Last-Event-ID": position} if self.last_offset >= 0 else {}
        return f"/runs/{self.run_id}/events", {"params": params, "headers": headers}

    def ended(self, status: int) -> bool:
        """True when the events request answered 204: nothing more will come (the stream is done)."""
        if status == 204:
            self.done = True
        return self.done

    def reader(self) -> LineReader:
        """What turns the lines of one connection's stream into the events to deliver."""
        return LineReader(self)


def refusal(status: int, body: bytes) -> Exception:
    """What to raise when the events request answered an error: Retry for a retryable status, else its error."""
    error = error_from_response(status, body)
    return Retry(str(error)) if status in RETRY_STATUSES else error


class LineReader:
    """SSE lines of one connection in, the events to deliver out (deduped and gap-checked by the cursor)."""

    def __init__(self, cursor: Cursor) -> None:
        self.cursor = cursor
        self.parser = SSEParser()

    def feed(self, line: str) -> Event | None:
        """The event this line completes, if it is one to deliver (the stream is over once ``cursor.done``)."""
        frame = self.parser.feed(line)
        event = event_from_frame(frame) if frame is not None else None
        return event if event is not None and self.cursor.accept(event) else None


@dataclass
class Backoff:
    """Exponential backoff with jitter; ``attempts`` consecutive failures allowed."""

    attempts: int = 8
    initial: float = 0.1
    maximum: float = 3.0

    def delay(self, failure: int) -> float:
        base: float = min(self.maximum, self.initial * 2 ** (failure - 1))
        return base * (0.5 + random.random() / 2)


# -- the stream handles ------------------------------------------------------------------------------------


class Opened(NamedTuple):
    """Where a stream handle starts: its run, and the offset after which it reads."""

    run_id: str
    agent_id: str | None
    session_id: str | None
    after: int
    until_pause: bool


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


# -- plans: the requests of each client method, and what their replies become -------------------------------


@dataclass(frozen=True)
class Call:
    """One HTTP request to make: ``options`` are httpx's (``params``, ``json``, ``data``, ``headers``)."""

    method: str
    path: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sleep:
    """Wait this long before the plan goes on."""

    seconds: float


#: A client method without its I/O: yields Calls and Sleeps, is sent each Call's JSON reply (None for a Sleep or
#: an empty body), has a reply's error thrown in, and returns the method's result.
Plan = Generator[Call | Sleep, Any, T]


class Driving(Generic[T]):
    """Steps a plan: set ``sent`` (what the last step gave) or ``error`` (what it raised), then :meth:`next`."""

    def __init__(self, plan: Plan[T]) -> None:
        self.plan = plan
        self.sent: Any = None
        self.error: AgentsCeleryError | None = None
        self.result: T

    def next(self) -> Call | Sleep | None:
        """The next step to carry out; None once the plan returned (its value is ``result``)."""
        sent, error, self.sent, self.error = self.sent, self.error, None, None
        try:
            return self.plan.throw(error) if error is not None else self.plan.send(sent)
        except StopIteration as done:
            self.result = done.value
            return None


def answer(response: httpx.Response) -> Any:
    """A (read) reply's JSON; its error raised for a status of 400 or more."""
    if response.status_code >= 400:
        raise error_from_response(response.status_code, response.content)
    return response.json() if response.content else None


def http_options(base_url: str | None, api_key: str | None, timeout: float) -> dict[str, Any]:
    """The httpx client's options: the API root (default ``AGENTS_CELERY_API_URL``, else
    ``http://127.0.0.1:7777``), the bearer key (default ``AGENTS_CELERY_API_KEY``) and the timeout."""
    key = api_key if api_key is not None else os.environ.get("AGENTS_CELERY_API_KEY")
    base = base_url or os.environ.get("AGENTS_CELERY_API_URL") or "http://127.0.0.1:7777"
    return {"base_url": base, "headers": {"Authorization": f"Bearer {key}"} if key else {}, "timeout": timeout}


def _query(**params: Any) -> dict[str, Any]:
    """Query parameters of a listing: the ones given (a RunStatus as its value)."""
    return {k: str(getattr(v, "value", v)) for k, v in params.items() if v is not None}


def agents() -> Plan[list[dict[str, Any]]]:
    result: list[dict[str, Any]] = yield Call("GET", "/agents")
    return result


def runs(
    status: str | None,
    agent_id: str | None,
    session_id: str | None,
    user_id: str | None,
    limit: int,
    cursor: str | None,
) -> Plan[RunPage]:
    params = _query(
        status=status, agent_id=agent_id, session_id=session_id, user_id=user_id, limit=limit, cursor=cursor
    )
    return RunPage.from_dict((yield Call("GET", "/runs", {"params": params})))


def sessions(user_id: str | None, limit: int, cursor: str | None) -> Plan[SessionPage]:
    params = _query(user_id=user_id, limit=limit, cursor=cursor)
    return SessionPage.from_dict((yield Call("GET", "/sessions", {"params": params})))


def session(session_id: str) -> Plan[SessionView]:
    return SessionView.from_dict((yield Call("GET", f"/sessions/{session_id}")))


def schedule(
    agent: str, message: str, cron: str | None, every: float | None, session_id: str | None, name: str | None
) -> Plan[Schedule]:
    body = {"agent_id": agent, "message": message, "cron": cron, "every_seconds": every}
    body.update({"session_id": session_id, "name": name})
    body = {k: v for k, v in body.items() if v is not None}
    return Schedule.from_dict((yield Call("POST", "/schedules", {"json": body})))


def schedules() -> Plan[list[Schedule]]:
    return [Schedule.from_dict(s) for s in (yield Call("GET", "/schedules"))["schedules"]]


def pause_schedule(schedule_id: str, paused: bool) -> Plan[Schedule]:
    action = "pause" if paused else "resume"
    return Schedule.from_dict((yield Call("POST", f"/schedules/{schedule_id}/{action}")))


def delete(path: str) -> Plan[None]:
    """``DELETE`` a schedule, a run or a session."""
    yield Call("DELETE", path)


def get(run_id: str) -> Plan[RunView]:
    return RunView.from_dict((yield Call("GET", f"/runs/{run_id}")))


def start(
    agent: str,
    message: str | list[dict[str, Any]],
    session_id: str | None,
    user_id: str | None,
    idempotency_key: str | None,
    until_pause: bool,
    start_after: float | None,
    output_schema: dict[str, Any] | None = None,
) -> Plan[Opened]:
    """Start a run: its stream from the first event (``output_schema``: structured output, docs/output.md)."""
    body: dict[str, Any] = {"message": message, "stream": False, "background": True}
    if start_after is not None:
        body["start_after"] = start_after
    if output_schema is not None:
        body["output_schema"] = output_schema
    if session_id:
        body["session_id"] = session_id
    if user_id:
        body["user_id"] = user_id
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    out = yield Call("POST", f"/agents/{agent}/runs", {"json": body, "headers": headers})
    return Opened(out["run_id"], agent, out.get("session_id"), -1, until_pause)


def get_stream(run_id: str) -> Plan[Opened]:
    """An existing run's stream, from its first event (RunNotFoundError otherwise)."""
    view = yield from get(run_id)
    return Opened(run_id, view.agent_id, view.session_id, -1, True)


#: Waits between retries of a continue answered 409 ``run_busy``; None: give up.
BUSY_RETRIES: tuple[float | None, ...] = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, None)


def continue_run(run_id: str, decisions: Sequence[dict[str, Any]] | None) -> Plan[Opened]:
    """Answer a paused run: its stream from the pause on."""
    run = yield from get(run_id)
    path = f"/agents/{run.agent_id}/runs/{run_id}/continue"
    body = {"tools": list(decisions or []), "stream": False, "background": True}
    for delay in BUSY_RETRIES:  # the worker that paused the run may hold its lease for a moment
        try:
            yield Call("POST", path, {"json": body})
            break
        except RunBusyError:
            if delay is None:
                raise
            yield Sleep(delay)
    return Opened(run_id, run.agent_id, run.session_id, run.last_offset, True)


def stop(run_id: str, reason: str) -> Plan[RunView]:
    """Stop a run (by its agent's route) and read it back."""
    agent = (yield from get(run_id)).agent_id
    yield Call("POST", f"/agents/{agent}/runs/{run_id}/cancel", {"data": {"reason": reason}})
    return (yield from get(run_id))


def gave_up(run_id: str, timeout: float | None) -> RunTimeoutError:
    """What ``run`` raises once it stopped a run that outlived its timeout."""
    return RunTimeoutError(f"run {run_id!r} did not finish within {timeout}s; stopped", run_id)

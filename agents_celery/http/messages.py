"""What a route takes and answers, whatever the front end: a :class:`Request` in, a :class:`Reply` out (JSON, an
SSE stream, or a :class:`Wait` for the run), and the JSON error answer of a library error (:func:`error_reply`).

The front ends (Flask blueprint, Django app) build a ``Request`` from their framework's request and turn a
``Reply`` into their framework's response; :mod:`.protocol` (the routes) and :mod:`.agui.endpoint` (the AG-UI endpoint)
answer them. Who may do what is :mod:`.access`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import AgentsCeleryError, BadRequestError, ValidationError
from ..events import parse_position
from ..runs import RunView, SessionInfo, SessionView
from ..schedule import Schedule
from ..storage.eventlog import check_offset
from .sse import LogStream

Action = Literal["list", "start", "read", "continue", "stop", "delete"]
#: What an action touches: a run, a session or a schedule (each has ``user_id``, its owner).
Resource = RunView | SessionInfo | SessionView | Schedule
#: ``authorize(action, user_id, resource, agent_id)`` -> whether the caller may; ``resource`` is None only for a
#: listing or a start that names nothing existing.
Authorize = Callable[[Action, "str | None", "Resource | None", "str | None"], bool]


def status_of(exc: AgentsCeleryError) -> int:
    """The HTTP status of a library error: its class's ``status`` (500 for one with no status of its own)."""
    return type(exc).status


def position_param(value: str | None, name: str) -> tuple[int, str | None] | None:
    """An optional position from a query parameter or header: an offset (ASCII digits only: no ``1_0``, no other
    scripts' digits; -1 or more), optionally with the tag of the event read there (``140.1a2b3c4d``)."""
    if value is None or value == "":
        return None
    try:
        offset, tag = parse_position(value)
        return check_offset(offset, name), tag
    except (ValueError, ValidationError):
        raise BadRequestError(f"{name} must be an offset (-1 or more), or offset.tag, got {value!r}") from None


class Headers(dict[str, str]):
    """Request headers by lower-cased name; ``get`` takes any case."""

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        super().__init__((name.lower(), value) for name, value in pairs)

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)


@dataclass(frozen=True)
class Upload:
    """A file of a multipart request's ``files`` field."""

    filename: str
    content_type: str
    data: bytes


@dataclass
class Request:
    """What the protocol needs of an HTTP request; each front end builds one from its framework's."""

    method: str
    headers: Headers
    query: Mapping[str, str]
    #: The body as fields (JSON object, or form fields), parsed on first use (BadRequestError if malformed).
    body: Callable[[], dict[str, Any]]
    #: The caller's user id, from the front end's login (None: anonymous, or a machine client with the key).
    user_id: str | None = None
    #: The URL of ``GET /runs/<run_id>`` under the front end's prefix (for ``Location`` headers).
    run_url: Callable[[str], str] = lambda run_id: f"/runs/{run_id}"
    #: This request's own access rule, when the front end decides per request (Django: the user, staff, the
    #: API key); None: the API's.
    authorize: Authorize | None = None
    #: The files of a multipart body's ``files`` field (read with the body; none for JSON or urlencoded).
    files: Callable[[], list[Upload]] = list


@dataclass
class Wait:
    """Answer once the run ended or paused (or after ``seconds``): its AgentOS run output as JSON."""

    run_id: str
    after: int
    seconds: float
    #: What to answer then (None: the run's AgentOS run output, ``API.run_output``).
    answer: Callable[[], Reply] | None = None
    #: Send the status and headers at once, then a space every this many seconds until the JSON (JSON allows
    #: leading whitespace), so a client's read timeout or a proxy's idle timeout never fires while the run works.
    #: None: nothing is sent before the answer.
    keepalive: float | None = None


@dataclass
class Reply:
    """What to answer: ``status`` and ``body`` (JSON), or an SSE ``stream``, or a :class:`Wait`."""

    status: int = 200
    body: Any = None
    stream: LogStream | None = None
    wait: Wait | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: A body that is not JSON (the inspector's pages): ``body`` is its bytes.
    content_type: str | None = None


def error_reply(exc: AgentsCeleryError, *, openai: bool = False) -> Reply:
    """The JSON error answer for a library error, with its status (see :func:`error_answer`)."""
    status = status_of(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    return error_answer(
        status, str(exc), exc.code, openai=openai, headers=headers, param=exc.param, transient=exc.transient
    )


def error_answer(
    status: int,
    detail: str,
    code: str,
    *,
    openai: bool = False,
    headers: dict[str, str] | None = None,
    param: str | None = None,
    transient: bool = False,
) -> Reply:
    """A JSON error answer: ours, ``{"detail", "code"}``; or, on the OpenAI routes (``/v1``, ``openai``), OpenAI's
    ``{"error": {"message", "type", "param", "code"}}``, so the openai SDK's ``e.message`` and ``e.code`` read it.
    OpenAI answers 400 where we answer 422 (a body whose fields are invalid), so ``/v1`` does too.

    A 4xx that is not ``transient`` says ``x-should-retry: false``: the openai SDK retries 408, 409 and 429 by
    default (with backoff, twice), and the same request meets the same refusal."""
    sent = dict(headers or {})
    if 400 <= status < 500 and not transient:
        sent["x-should-retry"] = "false"
    if not openai:
        return Reply(status, {"detail": detail, "code": code}, headers=sent)
    status = 400 if status == 422 else status
    kind = "server_error" if status >= 500 else "invalid_request_error"
    error = {"message": detail, "type": kind, "param": param, "code": code}
    return Reply(status, {"error": error}, headers=sent)

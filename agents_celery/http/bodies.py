"""Request bodies: form fields (urlencoded or multipart, as AgentOS clients send) or JSON, into typed models.

Malformed input (a body that is not JSON, a ``tools`` form field that is not a JSON list) is a
:class:`BadRequestError` (HTTP 400); well-formed input that fails validation is a
:class:`BodyValidationError` (HTTP 422) whose message names every problem.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import BadRequestError, BodyValidationError, PayloadTooLargeError

M = TypeVar("M", bound=BaseModel)

#: The largest offset a request may name: offset + 1 must still be a signed 64-bit integer, as Redis takes the
#: ``COUNT`` of an XRANGE (a log never comes near it; a bigger one is a client's bug, answered 422).
MAX_OFFSET = 2**63 - 2
#: An integer as a query parameter or header spells it: ASCII digits, an optional minus (no ``1_0``, no ``²``).
_INTEGER = re.compile(r"-?[0-9]{1,19}")


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class MessageBody(_Body):
    """``POST /runs/<run_id>/messages``: a user message for a live run: text, or content parts (JSON); a multipart
    form may bring images and files in its ``files`` field."""

    message: str | list[dict[str, Any]] | None = None

    @field_validator("message")
    @classmethod
    def _not_blank(cls, value: str | list[dict[str, Any]] | None) -> str | list[dict[str, Any]] | None:
        if isinstance(value, str) and not value.strip():
            raise ValueError("message must not be blank")
        return value


class RunBody(_Body):
    """``POST /agents/<agent_id>/runs``. ``message``: text, or Chat Completions content parts (JSON); a multipart
    form may bring images and files in its ``files`` field instead of (or besides) the text."""

    message: str | list[dict[str, Any]] | None = None
    stream: bool = True
    session_id: str | None = Field(default=None, min_length=1, max_length=200)
    user_id: str | None = Field(default=None, max_length=200)
    background: bool = False
    #: Delay the run: seconds from now, or when (ISO 8601 with a time zone, or Unix seconds).
    start_after: float | None = Field(default=None, ge=0, le=366 * 86400)
    start_at: datetime | None = None
    #: POST a signed summary here when the run completes, fails, is cancelled or pauses.
    webhook_url: str | None = Field(default=None, max_length=2000)
    #: When another run of the session is live: refuse (409), wait for it, or stop it and start after it.
    multitask_strategy: Literal["reject", "enqueue", "interrupt"] = "reject"
    #: Structured output: a JSON Schema the final answer must match (a JSON object; in a form, its JSON text).
    #: Any JSON is taken here, so that what is not a valid schema is named by ``Runtime.stream`` (422).
    output_schema: Any = None

    @field_validator("start_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("start_at needs a time zone (e.g. 2026-12-01T09:00:00Z)")
        return value


class ScheduleBody(_Body):
    """``POST /schedules``: exactly one of ``cron`` (5 fields, UTC) and ``every_seconds``."""

    agent_id: str = Field(min_length=1, max_length=200)
    message: str = Field(min_length=1)
    cron: str | None = Field(default=None, min_length=1, max_length=200)
    every_seconds: float | None = Field(default=None, ge=1, le=366 * 86400)
    session_id: str | None = Field(default=None, min_length=1, max_length=200)
    name: str | None = Field(default=None, max_length=200)


class ToolDecisionBody(_Body):
    """One paused tool call as a client sends it back (AgentOS ``ToolExecution`` shape; other keys ignored)."""

    tool_call_id: str = Field(min_length=1)
    #: ``null`` (as AgentOS sends for an undecided call) or absent approves, like an empty ``tools`` list.
    confirmed: bool | None = None
    confirmation_note: str | None = None
    tool_args: dict[str, Any] | None = None

    def decision(self) -> dict[str, Any]:
        """The decision in the shape ``Runtime.continue_run`` takes."""
        return {**self.model_dump(), "confirmed": self.confirmed is not False}


class ContinueBody(_Body):
    """``POST /agents/<agent_id>/runs/<run_id>/continue``. No ``tools`` (or ``[]``) approves every pending call."""

    tools: list[ToolDecisionBody] | None = None
    session_id: str | None = None
    stream: bool = True
    background: bool = False


class WorkflowContinueBody(ContinueBody):
    """``POST /workflows/<id>/runs/<run_id>/continue``: our ``tools`` decisions, or Agno's ``step_requirements`` (a
    JSON list; in a form, its JSON text)."""

    step_requirements: list[dict[str, Any]] | None = None


class ResumeBody(_Body):
    """``POST /agents/<agent_id>/runs/<run_id>/resume``. No ``last_event_index``: from the start."""

    last_event_index: int | None = Field(default=None, ge=-1, le=MAX_OFFSET)
    session_id: str | None = None


class CreateBody(_Body):
    """``POST /v1/responses`` (the fields we read; others, such as ``temperature``, are accepted and ignored)."""

    model: str = Field(min_length=1, max_length=200)
    input: str | list[dict[str, Any]]
    instructions: str | None = Field(default=None, max_length=100_000)
    stream: bool = False
    background: bool = False
    store: bool = True
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=300)
    conversation: str | dict[str, Any] | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    text: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None


class ConversationBody(_Body):
    """``POST /v1/conversations``."""

    items: list[dict[str, Any]] | None = None
    metadata: dict[str, str] | None = None


class ConversationItemsBody(_Body):
    """``POST /v1/conversations/{id}/items`` (at most 20 items, as OpenAI's)."""

    items: list[dict[str, Any]] = Field(min_length=1, max_length=20)


@dataclass(frozen=True)
class Limits:
    """How big and how deep a request may be (``Settings.max_body_bytes`` and ``max_json_depth``)."""

    max_body_bytes: int = 1_048_576
    max_json_depth: int = 32

    def with_content(self, max_input_bytes: int) -> Limits:
        """The limits of a route whose body may carry a message's images and files (base64 or uploaded):
        ``max_input_bytes`` of parts more, as base64 (the parts' own limits are checked after)."""
        return Limits(self.max_body_bytes + max_input_bytes * 4 // 3 + 4096, self.max_json_depth)


def check_size(length: int | None, limits: Limits) -> None:
    """PayloadTooLargeError when a body of ``length`` bytes is over the limit (check before reading it)."""
    if length is not None and length > limits.max_body_bytes:
        raise PayloadTooLargeError(f"the body is {length} bytes; at most {limits.max_body_bytes} are accepted")


def read_capped(read: Callable[[int], bytes], limits: Limits, chunk: int = 65_536) -> bytes:
    """A body of unknown length (chunked, no Content-Length), read through ``read(n)`` in chunks up to one byte
    past the limit: PayloadTooLargeError as soon as it is over, and the rest is never read."""
    parts: list[bytes] = []
    size, most = 0, limits.max_body_bytes + 1
    while size < most:
        part = read(min(chunk, most - size))
        if not part:
            break
        parts.append(part)
        size += len(part)
    if size > limits.max_body_bytes:
        raise PayloadTooLargeError(f"the body is over {limits.max_body_bytes} bytes, the most accepted")
    return b"".join(parts)


def loads(text: str | bytes, limits: Limits, what: str) -> Any:
    """JSON, refused (BadRequestError) when malformed or nested deeper than the limit."""
    _check_depth(text.decode(errors="replace") if isinstance(text, bytes) else text, limits, what)
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequestError(f"{what} is not valid JSON ({exc})") from None


#: What the depth check looks at: brackets, quotes and backslashes (a string's content, base64 data, is skipped
#: at C speed: a body carrying 20 MB of images is checked in milliseconds).
_TOKENS = re.compile(r'[\[\]{}"\\]')


def _check_depth(text: str, limits: Limits, what: str) -> None:
    """BadRequestError when ``text`` nests brackets (outside strings) deeper than the limit."""
    depth = deepest = 0
    in_string, escaped_at = False, -1
    for match in _TOKENS.finditer(text):
        ch, at = match.group(), match.start()
        if in_string:
            if at == escaped_at:
                continue  # the character after a backslash
            if ch == "\\":
                escaped_at = at + 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limits.max_json_depth:
                raise BadRequestError(f"{what} nests deeper than {limits.max_json_depth} levels")
        elif ch in "]}":
            depth -= 1


def fields_of(mimetype: str, form: Mapping[str, str], data: bytes, limits: Limits = Limits()) -> dict[str, Any]:
    """A request body as a dict: JSON object, urlencoded or multipart form (``form`` holds the decoded fields;
    each front end decodes its own). An empty body is ``{}``. Refused when over ``limits``."""
    check_size(len(data), limits)
    if mimetype in ("application/x-www-form-urlencoded", "multipart/form-data"):
        return {k: v for k, v in form.items() if v != ""}  # an empty form field means "not given"
    if not data.strip():
        return {}
    value = loads(data, limits, "the body")
    if not isinstance(value, dict):
        raise BadRequestError(f"the body must be a JSON object, got {type(value).__name__}")
    return value


def _json_field(fields: dict[str, Any], name: str, limits: Limits) -> None:
    """Decode a field that form clients send as a JSON string (``tools``) in place."""
    value = fields.get(name)
    if not isinstance(value, str):
        return
    if not value.strip():
        fields[name] = None
        return
    fields[name] = loads(value, limits, f"field {name!r}")


def _problems(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def parse(
    fields: dict[str, Any],
    model: type[M],
    json_fields: tuple[str, ...] = (),
    limits: Limits = Limits(),
    max_items: dict[str, int] | None = None,
) -> M:
    """Parse a request body (:func:`fields_of`) into ``model``. Raises BadRequestError (400) /
    BodyValidationError (422)."""
    for name in json_fields:
        _json_field(fields, name, limits)
    for name, most in (max_items or {}).items():  # before validating them one by one
        items = fields.get(name)
        if isinstance(items, list) and len(items) > most:
            raise PayloadTooLargeError(f"{name!r} has {len(items)} entries; at most {most} are accepted")
    try:
        return model.model_validate(fields)
    except pydantic.ValidationError as exc:
        error = BodyValidationError(f"invalid request body: {_problems(exc)}")
        error.param = ".".join(str(p) for p in exc.errors()[0]["loc"]) or None
        raise error from None


def int_param(value: str | None, name: str) -> int | None:
    """An optional integer query parameter or header (400 when it is not an integer written in ASCII digits)."""
    if value is None or value == "":
        return None
    if _INTEGER.fullmatch(value) is None:  # int() alone would take " 5", "1_0" and other scripts' digits
        raise BadRequestError(f"{name} must be an integer (ASCII digits, at most 19), got {value[:40]!r}")
    return int(value)

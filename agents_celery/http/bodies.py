"""Request bodies: form fields (urlencoded or multipart, as AgentOS clients send) or JSON, into typed models.

Malformed input (a body that is not JSON, a ``tools`` form field that is not a JSON list) is a
:class:`BadRequestError` (HTTP 400); well-formed input that fails validation is a
:class:`BodyValidationError` (HTTP 422) whose message names every problem.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import BadRequestError, BodyValidationError

M = TypeVar("M", bound=BaseModel)


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class RunBody(_Body):
    """``POST /agents/<agent_id>/runs``."""

    message: str = Field(min_length=1)
    stream: bool = True
    session_id: str | None = Field(default=None, min_length=1, max_length=200)
    user_id: str | None = Field(default=None, max_length=200)
    background: bool = False

    @field_validator("message")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("message must not be blank")
        return value


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


class ResumeBody(_Body):
    """``POST /agents/<agent_id>/runs/<run_id>/resume``. No ``last_event_index``: from the start."""

    last_event_index: int | None = Field(default=None, ge=-1)
    session_id: str | None = None


def fields_of(mimetype: str, form: Mapping[str, str], data: bytes) -> dict[str, Any]:
    """A request body as a dict: JSON object, urlencoded or multipart form (``form`` holds the decoded fields;
    each front end decodes its own). An empty body is ``{}``."""
    if mimetype in ("application/x-www-form-urlencoded", "multipart/form-data"):
        return {k: v for k, v in form.items() if v != ""}  # an empty form field means "not given"
    if not data.strip():
        return {}
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequestError(f"the body is not valid JSON ({exc}); send JSON or form fields") from None
    if not isinstance(value, dict):
        raise BadRequestError(f"the body must be a JSON object, got {type(value).__name__}")
    return value


def _json_field(fields: dict[str, Any], name: str) -> None:
    """Decode a field that form clients send as a JSON string (``tools``) in place."""
    value = fields.get(name)
    if not isinstance(value, str):
        return
    if not value.strip():
        fields[name] = None
        return
    try:
        fields[name] = json.loads(value)
    except ValueError as exc:
        raise BadRequestError(f"field {name!r} is not valid JSON ({exc}); send a JSON list") from None


def _problems(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def parse(fields: dict[str, Any], model: type[M], json_fields: tuple[str, ...] = ()) -> M:
    """Parse a request body (:func:`fields_of`) into ``model``. Raises BadRequestError (400) /
    BodyValidationError (422)."""
    for name in json_fields:
        _json_field(fields, name)
    try:
        return model.model_validate(fields)
    except pydantic.ValidationError as exc:
        raise BodyValidationError(f"invalid request body: {_problems(exc)}") from None


def int_param(value: str | None, name: str) -> int | None:
    """An optional integer query parameter or header (400 when it is not an integer)."""
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise BadRequestError(f"{name} must be an integer, got {value!r}") from None

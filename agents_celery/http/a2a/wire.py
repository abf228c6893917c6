"""A2A 1.0's JSON-RPC binding, as data: the requests we read (pydantic models of our own) and the objects we write
(plain dicts in ProtoJSON's spelling: camelCase keys, enums as their names, ``TASK_STATE_WORKING``). No I/O here.

The official SDK (PyPI ``a2a-sdk``) holds these shapes as protobuf messages; we do not depend on it at run time.
``tests/test_a2a_wire.py`` parses what we write into the SDK's own types, strictly (an unknown key fails), and
the clients' requests through the models here.

Requests are read leniently as ProtoJSON readers are: camelCase or snake_case keys, unknown keys ignored; a
wrong type is ``InvalidParams``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticError
from pydantic.alias_generators import to_camel

from ...errors import (
    AgentsCeleryError,
    DecisionError,
    NotFoundError,
    RunExpiredError,
    RunFinishedError,
    RunNotPausedError,
    StateError,
    UnsupportedError,
    ValidationError,
)

JSONRPC = "2.0"
#: The protocol version this binding speaks (the ``A2A-Version`` header of 1.0 clients).
VERSION = "1.0"

# -- error codes (A2A 1.0, section 5.4; JSON-RPC 2.0) -------------------------------------------------------
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005

#: The reason an ``ErrorInfo`` names for each code (the SDK reads it back from ``data``).
REASONS = {
    PARSE_ERROR: "PARSE_ERROR",
    INVALID_REQUEST: "INVALID_REQUEST",
    METHOD_NOT_FOUND: "METHOD_NOT_FOUND",
    INVALID_PARAMS: "INVALID_PARAMS",
    INTERNAL_ERROR: "INTERNAL",
    TASK_NOT_FOUND: "TASK_NOT_FOUND",
    TASK_NOT_CANCELABLE: "TASK_NOT_CANCELABLE",
    PUSH_NOT_SUPPORTED: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    UNSUPPORTED_OPERATION: "UNSUPPORTED_OPERATION",
    CONTENT_TYPE_NOT_SUPPORTED: "CONTENT_TYPE_NOT_SUPPORTED",
}

TaskState = Literal[
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_FAILED",
    "TASK_STATE_REJECTED",
]
#: The states a task never leaves.
TERMINAL: frozenset[str] = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED"}
)
#: The states a stream ends at (a task waiting for input is interrupted: its stream closes, it goes on later).
STREAM_ENDS: frozenset[str] = TERMINAL | {"TASK_STATE_INPUT_REQUIRED"}
#: Our run statuses that a ``ListTasks`` status filter names.
RUN_STATUSES = {
    "TASK_STATE_SUBMITTED": "queued",
    "TASK_STATE_WORKING": "running",
    "TASK_STATE_INPUT_REQUIRED": "paused",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_CANCELED": "cancelled",
    "TASK_STATE_FAILED": "failed",
}


class A2AError(AgentsCeleryError):
    """A JSON-RPC error answer: ``code`` (an A2A or JSON-RPC code) and the message."""

    def __init__(self, rpc_code: int, message: str) -> None:
        super().__init__(message)
        self.rpc_code = rpc_code


def rpc_error_of(exc: AgentsCeleryError) -> A2AError:
    """The A2A error a library error answers as (a task that does not exist, or that the caller may not see, is
    ``TaskNotFound`` alike)."""
    if isinstance(exc, A2AError):
        return exc
    if isinstance(exc, NotFoundError | RunExpiredError):
        return A2AError(TASK_NOT_FOUND, str(exc))
    if isinstance(exc, RunNotPausedError | RunFinishedError):
        return A2AError(UNSUPPORTED_OPERATION, str(exc))
    if isinstance(exc, UnsupportedError):
        return A2AError(UNSUPPORTED_OPERATION, str(exc))
    if isinstance(exc, ValidationError | DecisionError):
        return A2AError(INVALID_PARAMS, str(exc))
    if isinstance(exc, StateError):
        return A2AError(UNSUPPORTED_OPERATION, str(exc))
    if type(exc).status < 500:
        return A2AError(INVALID_REQUEST, str(exc))
    return A2AError(INTERNAL_ERROR, str(exc))


def error_object(rpc_code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC error object, its ``data`` the ``google.rpc.ErrorInfo`` A2A 1.0 adds."""
    info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": REASONS.get(rpc_code, "UNKNOWN")}
    return {"code": rpc_code, "message": message, "data": [{**info, "domain": "a2a-protocol.org"}]}


def response(rpc_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": rpc_id, "result": result}


def error_response(rpc_id: Any, err: A2AError) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": rpc_id, "error": error_object(err.rpc_code, str(err))}


def timestamp(ms: int | None = None) -> str:
    """A ProtoJSON ``Timestamp``: RFC 3339 in UTC with a ``Z``."""
    when = datetime.fromtimestamp((time.time() * 1000 if ms is None else ms) / 1000, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


# -- requests ------------------------------------------------------------------------------------------------


class _In(BaseModel):
    """ProtoJSON in: camelCase or snake_case, unknown keys ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class RpcRequest(BaseModel):
    """A JSON-RPC 2.0 request object."""

    model_config = ConfigDict(extra="ignore")

    jsonrpc: Literal["2.0"]
    method: str = Field(min_length=1)
    params: dict[str, Any] | None = None
    id: str | int | None = None


class PartIn(_In):
    text: str | None = None
    data: Any = None
    url: str | None = None
    raw: str | None = None
    media_type: str | None = None
    filename: str | None = None
    metadata: dict[str, Any] | None = None


class MessageIn(_In):
    message_id: str = Field(min_length=1)
    role: str = "ROLE_USER"
    parts: list[PartIn] = Field(min_length=1)
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None


class SendConfiguration(_In):
    accepted_output_modes: list[str] | None = None
    history_length: int | None = Field(default=None, ge=0)
    return_immediately: bool = False
    task_push_notification_config: dict[str, Any] | None = None


class SendParams(_In):
    message: MessageIn
    configuration: SendConfiguration | None = None
    metadata: dict[str, Any] | None = None


class TaskParams(_In):
    """``GetTask``, ``CancelTask``, ``SubscribeToTask``."""

    id: str = Field(min_length=1)
    history_length: int | None = Field(default=None, ge=0)


class ListParams(_In):
    context_id: str | None = None
    status: str | None = None
    page_size: int | None = Field(default=None, ge=1, le=100)
    page_token: str | None = None
    history_length: int | None = Field(default=None, ge=0)
    include_artifacts: bool = False


M = TypeVar("M", bound=BaseModel)


def params_of(model: type[M], params: dict[str, Any] | None) -> M:
    """The method's params, validated (``InvalidParams`` naming the first bad field)."""
    try:
        return model.model_validate(params or {})
    except PydanticError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "params"
        raise A2AError(INVALID_PARAMS, f"params.{where}: {first['msg']}") from None


# -- objects we write ---------------------------------------------------------------------------------------


def text_part(text: str) -> dict[str, Any]:
    return {"text": text}


def data_part(value: Any) -> dict[str, Any]:
    return {"data": value}


def message(message_id: str, role: str, parts: list[dict[str, Any]], task_id: str, context_id: str) -> dict[str, Any]:
    return {"messageId": message_id, "contextId": context_id, "taskId": task_id, "role": role, "parts": parts}


def status(state: str, at_ms: int, msg: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"state": state, "timestamp": timestamp(at_ms)}
    if msg is not None:
        out["message"] = msg
    return out


def status_update(task_id: str, context_id: str, task_status: dict[str, Any]) -> dict[str, Any]:
    """A ``StreamResponse`` holding a ``TaskStatusUpdateEvent``."""
    return {"statusUpdate": {"taskId": task_id, "contextId": context_id, "status": task_status}}


def artifact_update(
    task_id: str, context_id: str, artifact: dict[str, Any], *, append: bool, last_chunk: bool
) -> dict[str, Any]:
    """A ``StreamResponse`` holding a ``TaskArtifactUpdateEvent``."""
    event = {"taskId": task_id, "contextId": context_id, "artifact": artifact, "append": append}
    return {"artifactUpdate": {**event, "lastChunk": last_chunk}}

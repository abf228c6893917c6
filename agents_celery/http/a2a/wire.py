"""A2A 1.0's JSON-RPC binding, as data: the requests we read (pydantic models of our own) and the objects we write
(plain dicts in ProtoJSON's spelling: camelCase keys, enums as their names, ``TASK_STATE_WORKING``). No I/O here.

The official SDK (PyPI ``a2a-sdk``) holds these shapes as protobuf messages; we do not depend on it at run time.
``tests/test_a2a_wire.py`` parses what we write into the SDK's own types, strictly (an unknown key fails), and
the clients' requests through the models here.

Requests are read leniently as ProtoJSON readers are: camelCase or snake_case keys, unknown keys ignored; a
wrong type is ``InvalidParams``.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from pydantic import ValidationError as PydanticError
from pydantic.alias_generators import to_camel

# The task objects are written in the core (the worker's push deliveries need them too): named here for the door.
from ...a2a.task import (
    RUN_STATUSES as RUN_STATUSES,
)
from ...a2a.task import (
    STREAM_ENDS as STREAM_ENDS,
)
from ...a2a.task import (
    TERMINAL as TERMINAL,
)
from ...a2a.task import (
    TaskState as TaskState,
)
from ...a2a.task import (
    artifact_update as artifact_update,
)
from ...a2a.task import (
    data_part as data_part,
)
from ...a2a.task import (
    message as message,
)
from ...a2a.task import (
    status as status,
)
from ...a2a.task import (
    status_update as status_update,
)
from ...a2a.task import (
    text_part as text_part,
)
from ...a2a.task import (
    timestamp as timestamp,
)
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


class A2AError(AgentsCeleryError):
    """A JSON-RPC error answer: ``code`` (an A2A or JSON-RPC code) and the message."""

    def __init__(self, rpc_code: int, text: str) -> None:
        super().__init__(text)
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


def error_object(rpc_code: int, text: str) -> dict[str, Any]:
    """A JSON-RPC error object, its ``data`` the ``google.rpc.ErrorInfo`` A2A 1.0 adds."""
    info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": REASONS.get(rpc_code, "UNKNOWN")}
    return {"code": rpc_code, "message": text, "data": [{**info, "domain": "a2a-protocol.org"}]}


def response(rpc_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": rpc_id, "result": result}


def error_response(rpc_id: Any, err: A2AError) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": rpc_id, "error": error_object(err.rpc_code, str(err))}


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
    #: Asked in A2A 0.3's terms (its method names), so answered in its shapes too; never read from the body.
    _legacy: bool = PrivateAttr(default=False)

    @property
    def legacy(self) -> bool:
        return self._legacy

    def in_1_0_terms(self, method: str, params: dict[str, Any] | None) -> RpcRequest:
        """This 0.3 request under its 1.0 method name and params, remembering it came in 0.3's terms."""
        call = self.model_copy(update={"method": method, "params": params})
        call._legacy = True
        return call


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


class PushAuth(_In):
    scheme: str = Field(min_length=1, max_length=100)
    credentials: str | None = Field(default=None, max_length=4000)


class PushConfigParams(_In):
    """``CreateTaskPushNotificationConfig`` (and a ``SendMessage``'s ``taskPushNotificationConfig``)."""

    task_id: str | None = None
    id: str | None = Field(default=None, max_length=200)
    url: str = Field(min_length=1, max_length=2000)
    token: str | None = Field(default=None, max_length=4000)
    authentication: PushAuth | None = None


class PushConfigRef(_In):
    """``Get``/``Delete``/``ListTaskPushNotificationConfig(s)``."""

    task_id: str = Field(min_length=1)
    id: str | None = None


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

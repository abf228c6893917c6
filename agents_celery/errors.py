"""The exceptions agents-celery raises. One root, so ``except AgentsCeleryError`` catches them all.

::

    AgentsCeleryError
    ├── ConfigurationError            bad settings, a bad Redis URL, an agents module that does not load
    ├── RedisUnavailableError         Redis does not answer (the API answers 503)
    ├── AuthenticationError           missing or wrong API key (HTTP 401)
    ├── ForbiddenError                the caller may not do this (HTTP 403)
    ├── ValidationError               bad input from a caller; nothing was written (HTTP 422)
    │   ├── PayloadTooLargeError      a body, message or list over the configured limits (HTTP 413)
    │   │   └── InputTooLargeError    a message's image or file part, or a run's parts, over the limits (413)
    │   ├── BadRequestError           a malformed request: not JSON, a bad offset, a bad parameter (HTTP 400)
    │   ├── BodyValidationError       a well-formed body whose fields are invalid (HTTP 422)
    │   ├── EventValidationError      an event that is not a valid AG-UI event
    │   ├── ToolArgumentsError        tool arguments that fail the tool's schema
    │   ├── IdempotencyKeyReusedError an Idempotency-Key sent again with another request
    │   ├── OutputSchemaError         an output_schema (or output_type) that is not a valid JSON Schema (HTTP 422)
    │   ├── DecisionError             a continue decision that names no pending call, or is malformed (HTTP 400)
    │   └── UnsupportedError          a well-formed request asking for what is not supported (yet) (HTTP 400)
    ├── NotFoundError                 (HTTP 404)
    │   ├── UnknownAgentError         no worker published that agent
    │   ├── RunNotFoundError          no run with that id ever existed (or it is addressed under another agent)
    │   ├── SessionNotFoundError      no session with that id is kept
    │   ├── ResponseNotFoundError     no Responses API response with that id (or it expired: 404, as OpenAI)
    │   └── ScheduleNotFoundError     no schedule with that id
    ├── RunExpiredError               the run existed, its retention passed (HTTP 410)
    ├── StateError                    the run is not in a state that allows this (HTTP 409)
    │   ├── RunNotPausedError         continue on a run that is not paused
    │   ├── RunFinishedError          stop/continue/append on a run that already ended
    │   ├── SessionBusyError          another run of the same session is still active
    │   ├── RunLiveError              delete of a run that has not ended
    │   ├── HistoryMismatchError      a client's earlier messages disagree with the session's stored history
    │   ├── RunBusyError              another caller holds the run right now (e.g. a concurrent continue)
    │   └── LogRewoundError           the log no longer holds the event a reader saw at an offset (lost writes)
    ├── FencedError                   a write carried a lease token that is no longer current
    ├── SchemaVersionError            stored state with an unknown schema version
    ├── ModelError                    the model call failed (``retryable`` says whether to try again)
    ├── OutputValidationError         the model's answer did not match the output schema (after the retries)
    ├── StopStep                      raised by a hook to stop the current step; the run fails with the reason
    ├── AbandonedRunError             a step failed more attempts than allowed; the run fails visibly
    ├── JournalMismatchError          a guest agent's replay met another unit than its journal recorded
    ├── RunTimeoutError               Runtime.run gave up waiting (also a TimeoutError); the run was stopped
    ├── RunFailedError                CeleryRunner's run ended failed on the workers (as Runner.run raises)
    ├── APIError                      an HTTP error the client has no class for (``status``)
    ├── ConnectionLostError           the client could not re-establish a stream; resume from ``last_offset``
    └── StreamGapError                the client saw an offset skipped (offsets are contiguous: a bug)

Every class has a ``code`` and an HTTP ``status`` (inherited: a subclass answers as its parent unless it says
otherwise; 500 for the ones a caller cannot cause). The HTTP front ends answer ``{"detail": ..., "code": ...}``
with the error's status (the ``/v1`` routes in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``,
and 400 for a 422); a 4xx that a retry cannot fix (all but the ``transient`` ones) says
``x-should-retry: false``. The HTTP client raises the class of the code it gets back, else the most general
class of the status (:func:`reply_class`); APIError when neither is known. The classes the caller's own side
raises (:data:`LOCAL`) are never answered by the API.
"""

from __future__ import annotations

import functools


class AgentsCeleryError(Exception):
    """Root of every exception raised by agents-celery."""

    #: Short machine-readable code, used as ``code`` in HTTP error bodies.
    code: str = "error"
    #: The HTTP status the front ends answer this error with. Not a ClassVar only because APIError keeps the
    #: status of the reply it stands for on the instance; :func:`~agents_celery.http.messages.status_of` reads
    #: the class's.
    status: int = 500
    #: The request field the error is about (a body field's dotted path), when one is: OpenAI's ``param``.
    param: str | None = None
    #: A retry of the same request may succeed (another caller holds the run or the session right now): the HTTP
    #: answer of a 4xx that is not transient says ``x-should-retry: false``, so the openai SDK does not retry it.
    transient: bool = False


class ConfigurationError(AgentsCeleryError):
    """Settings, URLs or an agents module are wrong; raised at start-up."""

    code = "configuration_error"


class RedisUnavailableError(AgentsCeleryError):
    """Redis did not answer."""

    code = "redis_unavailable"
    status = 503


class ValidationError(AgentsCeleryError):
    """Bad input from a caller. Nothing was written."""

    code = "validation_error"
    status = 422


class AuthenticationError(AgentsCeleryError):
    """Missing or wrong ``Authorization: Bearer`` key (HTTP 401)."""

    code = "unauthorized"
    status = 401


class ForbiddenError(AgentsCeleryError):
    """The caller is known but may not do this (HTTP 403); the authorization hook of the front end said no."""

    code = "forbidden"
    status = 403


class PayloadTooLargeError(ValidationError):
    """A request body, a message or a list is larger than the configured limit (HTTP 413)."""

    code = "payload_too_large"
    status = 413


class InputTooLargeError(PayloadTooLargeError):
    """A content part of a user message (an image, a file) is over ``max_part_bytes``, or the parts of one run
    are over ``max_input_bytes`` (HTTP 413). Nothing was created."""

    code = "input_too_large"


#: The name the contracts use (:class:`InputTooLargeError`).
InputTooLarge = InputTooLargeError


class BadRequestError(ValidationError):
    """The request is malformed (bad JSON, a form field that should hold JSON and does not, a bad offset)."""

    code = "bad_request"
    status = 400


class BodyValidationError(ValidationError):
    """The request is well-formed but its fields are invalid."""

    code = "invalid_body"


class EventValidationError(ValidationError):
    """An event failed validation before it was written."""

    code = "invalid_event"


class ToolArgumentsError(ValidationError):
    """Tool arguments do not match the tool's parameters."""

    code = "invalid_tool_arguments"


class IdempotencyKeyReusedError(ValidationError):
    """An Idempotency-Key already names a run started by a different request (agent, message, session, user)."""

    code = "idempotency_key_reused"


class OutputSchemaError(ValidationError):
    """An ``output_schema`` (or an agent's ``output_type``) that is not a valid JSON Schema; nothing was created."""

    code = "invalid_output_schema"


class DecisionError(ValidationError):
    """A continue request whose decisions do not match the pending tool calls."""

    code = "invalid_decision"
    status = 400


class UnsupportedError(BadRequestError):
    """A well-formed request for something not supported (yet): an input part, a tool type, an output format."""

    code = "unsupported"


class NotFoundError(AgentsCeleryError):
    """Something that was asked for does not exist."""

    code = "not_found"
    status = 404


class UnknownAgentError(NotFoundError):
    """No agent of that name is registered or published by a worker."""

    code = "unknown_agent"


class RunNotFoundError(NotFoundError):
    """No run with that id exists, and none ever did within the tombstone window."""

    code = "run_not_found"


class SessionNotFoundError(NotFoundError):
    """No session with this id is kept (never existed, or its history expired and it has no runs)."""

    code = "session_not_found"


class ResponseNotFoundError(NotFoundError):
    """No Responses API response with that id, or its run expired (404, as OpenAI answers)."""

    code = "response_not_found"


class ScheduleNotFoundError(NotFoundError):
    """No schedule with this id."""

    code = "schedule_not_found"


class RunExpiredError(AgentsCeleryError):
    """The run existed but its retention has passed; its events and state are gone."""

    code = "run_expired"
    status = 410


class StateError(AgentsCeleryError):
    """The run is not in a state that allows the operation."""

    code = "wrong_state"
    status = 409


class RunNotPausedError(StateError):
    """Continue was asked of a run that is not paused."""

    code = "run_not_paused"


class RunFinishedError(StateError):
    """The run already ended (completed, failed or cancelled)."""

    code = "run_finished"


class SessionBusyError(StateError):
    """Another run of the same session is still queued, running or paused."""

    code = "session_busy"
    transient = True


class RunLiveError(StateError):
    """The run has not ended (queued, running or paused): stop it first."""

    code = "run_live"


class HistoryMismatchError(StateError):
    """The conversation a client sent does not agree with the session's stored history."""

    code = "history_mismatch"


class RunBusyError(StateError):
    """Another caller or worker holds the run's lease right now."""

    code = "run_busy"
    transient = True


class LogRewoundError(StateError):
    """The event a reader saw at an offset is not the one the log holds there now: Redis lost writes (a crash
    between two fsyncs) and the run went on from an earlier point. Re-read the run from the start."""

    code = "log_rewound"

    def __init__(self, message: str, run_id: str = "", offset: int = -1) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.offset = offset


class FencedError(AgentsCeleryError):
    """A write carried a lease token that is no longer the run's current one; nothing was written."""

    code = "fenced"


class SchemaVersionError(AgentsCeleryError):
    """Stored run state has a schema version this code does not know."""

    code = "schema_version"


class ModelError(AgentsCeleryError):
    """The model call failed. ``retryable`` tells the engine whether backing off and retrying may help."""

    code = "model_error"

    def __init__(self, message: str, *, retryable: bool = False, status_code: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status_code = status_code


class OutputValidationError(AgentsCeleryError):
    """The model's final answer did not match the run's output schema. The engine sends the problem back to the
    model as a retried turn (``output_retries``); past them the run fails with this error, which ``Runtime.run``
    raises for an agent with a pydantic ``output_type``."""

    code = "invalid_output"


class StopStep(AgentsCeleryError):
    """Raised by a hook to stop the current step on purpose; the run fails with this message."""

    code = "stopped_by_hook"


class AbandonedRunError(AgentsCeleryError):
    """A step was attempted more times than ``max_step_attempts`` allows; the run is failed, not retried."""

    code = "abandoned"


class JournalMismatchError(AgentsCeleryError):
    """A guest agent's run (pydantic-ai, the Agents SDK) met, on replay, a unit of another name or identity than its
    journal recorded at that place (the agent, its model or tools changed while the run was in flight); the run
    fails instead of replaying."""

    code = "journal_mismatch"


class RunFailedError(AgentsCeleryError):
    """A run ``CeleryRunner`` waited for ended ``failed`` on the workers (``agents.Runner.run`` raises as well):
    ``run_id``, and the type and message of the error the run ended with."""

    code = "run_failed"

    def __init__(self, message: str, run_id: str = "", kind: str = "") -> None:
        super().__init__(message)
        self.run_id = run_id
        self.kind = kind


class RunTimeoutError(AgentsCeleryError, TimeoutError):
    """``Runtime.run`` waited longer than its timeout; the run was stopped. ``run_id`` says which."""

    code = "timeout"

    def __init__(self, message: str, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class APIError(AgentsCeleryError):
    """An HTTP error the client has no class for. ``status`` is the HTTP status."""

    code = "api_error"

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


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


class MCPUnavailable(AgentsCeleryError):
    """An MCP server could not be reached, or its connection died during a call (the model sees it as the call's
    error result)."""

    code = "mcp_unavailable"


class MCPToolError(AgentsCeleryError):
    """The MCP server answered a call with an error result."""

    code = "mcp_tool_error"


#: Raised on the caller's side (the client, ``Runtime.run``), never answered by the API: a reply naming one of
#: their codes is an APIError.
LOCAL: tuple[type[AgentsCeleryError], ...] = (
    RunTimeoutError,
    RunFailedError,
    APIError,
    ConnectionLostError,
    StreamGapError,
)


def _tree() -> list[type[AgentsCeleryError]]:
    """Every error class of this module, parents before children."""
    found: list[type[AgentsCeleryError]] = []
    pending: list[type[AgentsCeleryError]] = [AgentsCeleryError]
    while pending:
        cls = pending.pop(0)
        if cls.__module__ == __name__ and cls not in found:
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


@functools.cache
def by_code() -> dict[str, type[AgentsCeleryError]]:
    """Every error class of this module by its ``code`` (the first class wins where two share one)."""
    found: dict[str, type[AgentsCeleryError]] = {}
    for cls in _tree():
        found.setdefault(cls.code, cls)
    return found


@functools.cache
def by_status() -> dict[int, type[AgentsCeleryError]]:
    """For each status the API answers, the most general class answering it: the nearest common ancestor of
    the classes with that status (400 and 422: ValidationError; 404: NotFoundError ...). 500 is not in it."""
    found: dict[int, type[AgentsCeleryError]] = {}
    for status in sorted({cls.status for cls in _tree() if cls not in LOCAL} - {500}):
        answering = [cls for cls in _tree() if cls.status == status and cls not in LOCAL]
        found[status] = next(c for c in answering[0].__mro__ if all(issubclass(a, c) for a in answering))
    return found


def reply_class(code: str | None, status: int) -> type[AgentsCeleryError]:
    """The class an HTTP error reply stands for: the one of its ``code``, else the most general one of its
    status, else APIError (as for the codes of :data:`LOCAL` classes)."""
    cls = by_code().get(code) if code else None
    if cls is None or cls is AgentsCeleryError:
        cls = by_status().get(status, APIError)
    return APIError if cls in LOCAL else cls

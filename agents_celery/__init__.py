"""agents-celery: durable AI-agent runs on the Celery workers and Redis you already operate.

The public names are imported lazily (PEP 562): ``import agents_celery`` costs nothing, and a name loads its
own module the first time it is used, so ``from agents_celery import tool`` in an agents module does not load
the Runtime, and ``import agents_celery.client`` (the HTTP client) loads no Celery, kombu or redis-py.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.3.0"

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    # definitions
    "Agent": "agent",
    "load_agents": "agent",
    "LastTurns": "history",
    "Summarize": "history",
    "Tool": "tools",
    "ToolContext": "tools",
    "tool": "tools",
    "MCPTools": "mcp",
    # workflows
    "Workflow": "workflows",
    "Step": "workflows",
    "StepInput": "workflows",
    "Parallel": "workflows",
    "Condition": "workflows",
    "Loop": "workflows",
    "Router": "workflows",
    # models
    "Model": "models",
    "OpenAIChat": "models",
    "ScriptedModel": "models",
    "ScriptedToolCall": "models",
    "ScriptedTurn": "models",
    # running
    "Runtime": "runtime",
    "RunStream": "runtime",
    "RunView": "runs",
    "RunPage": "runs",
    "SessionInfo": "runs",
    "SessionPage": "runs",
    "SessionView": "runs",
    "Decision": "decisions",
    "RunState": "runs",
    "RunStatus": "runs",
    "Schedule": "schedule",
    # events
    "Event": "events",
    "EventType": "events",
    # celery
    "STEP_TASK": "broker.publisher",
    "configure": "broker.celery_app",
    "run_signature": "broker.signatures",
    "RunDidNotComplete": "broker.signatures",
    "create_celery_app": "broker.celery_app",
    # hooks
    "Hooks": "hooks",
    "LoggingHooks": "hooks",
    "MetricsHooks": "hooks",
    "StepInfo": "hooks",
    # settings
    "Settings": "settings",
    "load_settings": "settings",
    # errors
    **{
        name: "errors"
        for name in (
            "AgentsCeleryError",
            "ConfigurationError",
            "RedisUnavailableError",
            "ValidationError",
            "EventValidationError",
            "ToolArgumentsError",
            "DecisionError",
            "NotFoundError",
            "UnknownAgentError",
            "RunNotFoundError",
            "RunExpiredError",
            "StateError",
            "RunNotPausedError",
            "RunFinishedError",
            "SessionBusyError",
            "RunBusyError",
            "RunLiveError",
            "HistoryMismatchError",
            "SessionNotFoundError",
            "ScheduleNotFoundError",
            "FencedError",
            "SchemaVersionError",
            "ModelError",
            "StopStep",
            "AbandonedRunError",
            "RunTimeoutError",
            "AuthenticationError",
            "ForbiddenError",
            "BadRequestError",
            "PayloadTooLargeError",
            "InputTooLargeError",
            "IdempotencyKeyReusedError",
            "APIError",
            "ConnectionLostError",
            "StreamGapError",
            "LogRewoundError",
            "OutputSchemaError",
            "OutputValidationError",
        )
    },
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agents_celery' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # what type checkers and IDEs see
    from .agent import Agent, load_agents
    from .broker.celery_app import configure, create_celery_app
    from .broker.publisher import STEP_TASK
    from .broker.signatures import RunDidNotComplete, run_signature
    from .decisions import Decision
    from .errors import (
        AbandonedRunError,
        AgentsCeleryError,
        APIError,
        AuthenticationError,
        BadRequestError,
        ConfigurationError,
        ConnectionLostError,
        DecisionError,
        EventValidationError,
        FencedError,
        ForbiddenError,
        HistoryMismatchError,
        IdempotencyKeyReusedError,
        InputTooLargeError,
        ModelError,
        NotFoundError,
        OutputSchemaError,
        OutputValidationError,
        PayloadTooLargeError,
        RedisUnavailableError,
        RunBusyError,
        RunExpiredError,
        RunFinishedError,
        RunLiveError,
        RunNotFoundError,
        RunNotPausedError,
        RunTimeoutError,
        ScheduleNotFoundError,
        SchemaVersionError,
        SessionBusyError,
        SessionNotFoundError,
        StateError,
        StopStep,
        StreamGapError,
        ToolArgumentsError,
        UnknownAgentError,
        ValidationError,
    )
    from .events import Event, EventType
    from .history import LastTurns, Summarize
    from .hooks import Hooks, LoggingHooks, MetricsHooks, StepInfo
    from .mcp import MCPTools
    from .models import Model, OpenAIChat, ScriptedModel, ScriptedToolCall, ScriptedTurn
    from .runs import RunPage, RunState, RunStatus, RunView, SessionInfo, SessionPage, SessionView
    from .runtime import RunStream, Runtime
    from .schedule import Schedule
    from .settings import Settings, load_settings
    from .tools import Tool, ToolContext, tool
    from .workflows import Condition, Loop, Parallel, Router, Step, StepInput, Workflow

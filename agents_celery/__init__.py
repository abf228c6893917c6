"""agents-celery: durable AI-agent runs on the Celery workers and Redis you already operate."""

from __future__ import annotations

from .agent import Agent, load_agents
from .broker.celery_app import STEP_TASK, configure, create_celery_app
from .decisions import Decision
from .errors import (
    AbandonedRunError,
    AgentsCeleryError,
    ConfigurationError,
    DecisionError,
    EventValidationError,
    FencedError,
    ModelError,
    NotFoundError,
    RedisUnavailableError,
    RunBusyError,
    RunExpiredError,
    RunFinishedError,
    RunNotFoundError,
    RunNotPausedError,
    RunTimeoutError,
    SchemaVersionError,
    SessionBusyError,
    StateError,
    StopStep,
    ToolArgumentsError,
    UnknownAgentError,
    ValidationError,
)
from .events import Event, EventType
from .hooks import Hooks, LoggingHooks, MetricsHooks, StepInfo
from .models import Model, OpenAIChat, ScriptedModel, ScriptedToolCall, ScriptedTurn
from .runs import RunState, RunStatus
from .runtime import RunStream, Runtime, RunView
from .settings import Settings, load_settings
from .storage.eventlog import AsyncEventLog, EventLog
from .tools import Tool, ToolContext, tool

__version__ = "0.2.0"

__all__ = [
    # definitions
    "Agent",
    "Tool",
    "ToolContext",
    "tool",
    "load_agents",
    # models
    "Model",
    "OpenAIChat",
    "ScriptedModel",
    "ScriptedToolCall",
    "ScriptedTurn",
    # running
    "Runtime",
    "RunStream",
    "RunView",
    "Decision",
    "RunState",
    "RunStatus",
    # events
    "Event",
    "EventType",
    "EventLog",
    "AsyncEventLog",
    # celery
    "STEP_TASK",
    "configure",
    "create_celery_app",
    # hooks
    "Hooks",
    "LoggingHooks",
    "MetricsHooks",
    "StepInfo",
    # settings
    "Settings",
    "load_settings",
    # errors
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
    "FencedError",
    "SchemaVersionError",
    "ModelError",
    "StopStep",
    "AbandonedRunError",
    "RunTimeoutError",
    "__version__",
]

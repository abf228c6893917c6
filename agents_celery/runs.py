"""Run state: the versioned checkpoint a step loads and commits.

Transitions (anything else is refused)::

    scheduled -> running | cancelled | failed     (a delayed run, until its start time)
    queued   -> running | cancelled | failed
    running  -> running | paused | completed | failed | cancelled
    paused   -> running | cancelled | failed
    completed, failed, cancelled: final

The state is committed by compare-and-set on ``step`` (see :mod:`agents_celery.storage.store`). Its JSON carries
``schema_version``; loading an unknown version fails fast, naming the versions this code supports.
Version 2 stores the conversation (``messages``) in a list beside the JSON, so a commit appends the new
messages instead of rewriting them all; version 1 (messages inside the JSON) is still read, and the next
commit writes it as version 2.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr

from .errors import SchemaVersionError, StateError

SCHEMA_VERSION = 2
SUPPORTED_VERSIONS = (1, 2)


class RunStatus(StrEnum):
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.SCHEDULED: frozenset({RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.FAILED}),
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.FAILED}),
    RunStatus.RUNNING: frozenset(
        {RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED}
    ),
    RunStatus.PAUSED: frozenset({RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.FAILED}),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}

#: Why a tool call waits for a human.
#: ``client_tool``: the call is for a tool of the client (an AG-UI frontend tool): the client runs it and answers
#: with its result.
PauseReason = Literal["confirmation_required", "may_have_run", "client_tool"]


class ToolCall(BaseModel):
    """One tool call of the last assistant turn, and what became of it."""

    id: str
    name: str
    arguments: str = "{}"
    requires_confirmation: bool = False
    #: ``pending`` while a human must decide; None when no decision is needed.
    decision: Literal["pending", "approved", "rejected"] | None = None
    pause_reason: PauseReason | None = None
    note: str | None = None
    result: str | None = None
    error: str | None = None
    #: How many times a human approved running it again though the ledger says an attempt started it (0: never).
    #: Each approval authorises one execution: when that one dies with its worker, the run pauses again.
    rerun: int = 0
    #: The agent this call runs as a child run (a tool made with ``Agent.as_tool()``), and that run's id once
    #: started; the call is done when the child run ended.
    agent: str | None = None
    child_run_id: str | None = None
    #: For a call of a child run waiting for a decision, shown in its parent's pending list: the child's run id.
    run_id: str | None = None

    @property
    def args(self) -> dict[str, Any]:
        """The arguments as a dict ({} when the model sent invalid JSON)."""
        try:
            value = json.loads(self.arguments or "{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    @property
    def done(self) -> bool:
        return self.result is not None


class RunFailure(BaseModel):
    """Why a run failed: an exception stored as type and message, never pickled."""

    type: str
    message: str


class RunState(BaseModel):
    """Everything a step needs to continue a run. Only JSON, so any worker can pick it up."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    agent_id: str
    session_id: str
    user_id: str | None = None
    #: The session was made for this run (none was given): its history expires with the run, not after
    #: ``session_ttl_seconds``.
    own_session: bool = False
    status: RunStatus = RunStatus.QUEUED
    #: What the next step does.
    next: Literal["model", "tools"] = "model"
    #: The conversation sent to the model: system prompt, session history, this run's messages.
    messages: list[dict[str, Any]] = Field(default_factory=list)
    #: How many of ``messages`` came from before this run (system prompt and session history).
    history_len: int = 0
    #: Tool calls of the last assistant turn.
    tool_calls: list[ToolCall] = Field(default_factory=list)
    #: Tools the client runs itself (AG-UI frontend tools: ``name``, ``description``, ``parameters``); the model
    #: may call them and the run pauses until the client answers with the result.
    client_tools: list[dict[str, Any]] = Field(default_factory=list)
    #: What the client passed along (AG-UI ``state``, ``context``, ``forwarded_props``); tools see it as
    #: :attr:`agents_celery.tools.ToolContext.client`, the model sees ``context`` after the instructions.
    client: dict[str, Any] = Field(default_factory=dict)
    #: The tool lists of the agent's MCP toolsets, as this run fetched them (toolset name -> ``listed_at`` ms and
    #: ``tools``: ``name``, ``description``, ``input_schema``): every step of the run, on any worker, offers and
    #: calls these tools (:mod:`agents_celery.mcp`).
    toolsets: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: The agent the conversation was handed to (None: the run's own ``agent_id``); its next turns use it.
    active_agent: str | None = None
    #: A child run (started by a call of an ``Agent.as_tool()`` tool): its parent run and that call, and how
    #: deep it is nested (0: a run started by a caller).
    parent_run_id: str | None = None
    parent_tool_call_id: str | None = None
    depth: int = 0
    #: The child runs this run started, in order.
    children: list[str] = Field(default_factory=list)
    #: Calls of paused child runs waiting for a decision (each with its ``run_id``); part of :attr:`pending`.
    child_pending: list[ToolCall] = Field(default_factory=list)
    #: A workflow run (:mod:`agents_celery.workflows`): where it stands (each step's output by path, the decisions of
    #: its conditions, loops and routers); empty for an agent's run.
    workflow: dict[str, Any] = Field(default_factory=dict)
    #: User messages of the run's inbox taken into ``messages`` so far (``Runtime.send_message``).
    inbox_taken: int = 0
    #: Where to POST a summary when the run completes, fails, is cancelled or pauses.
    webhook_url: str | None = None
    #: The Celery canvas waiting for the run's end (``run_signature``): the rest of the chain, links, errbacks and
    #: chord of the task that started it, sent on with the run's output when it ends.
    canvas: dict[str, Any] | None = None
    #: The schedule that started the run, and the tick (ms) it was started for.
    schedule_id: str | None = None
    scheduled_for: int | None = None
    turns: int = 0
    #: A guest agent's run (:mod:`agents_celery.contrib.pydantic_ai`, :mod:`agents_celery.contrib.openai_agents`): the
    #: segment of its replay journal the next step runs (a segment is one run of the framework's own loop; it ends at
    #: the run's end or at a pause for decisions).
    segment: int = 0
    #: A guest framework's own saved state of the run while it waits for decisions (the Agents SDK's ``RunState``
    #: JSON: the next segment resumes from it); None otherwise.
    guest_state: dict[str, Any] | None = None
    #: The run's own output schema (a JSON Schema; None: the agent's ``output_type``, if any, decides).
    output_schema: dict[str, Any] | None = None
    #: How many final answers failed the output schema and were sent back to the model so far.
    output_retries: int = 0
    #: The final answer: its text, or the validated JSON value under an output schema.
    output: Any = None
    error: RunFailure | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    created_at: int = 0
    updated_at: int = 0
    #: The ``messages`` list as stored in Redis, as last loaded or committed by this process (None: unknown,
    #: so the next commit rewrites the whole list). Copies made with ``model_copy`` share it, so a commit can
    #: tell the stored prefix (the same objects) from new or edited messages.
    _stored: list[dict[str, Any]] | None = PrivateAttr(default=None)

    def moved_to(self, status: RunStatus) -> RunState:
        """A copy in ``status``; raises StateError when the transition table does not allow it."""
        if status not in TRANSITIONS[self.status]:
            raise StateError(f"run {self.run_id!r} cannot go from {self.status.value} to {status.value}")
        return self.model_copy(update={"status": status})

    @property
    def pending(self) -> list[ToolCall]:
        """Tool calls waiting for a human decision (a paused child's included, with their ``run_id``)."""
        return [*(c for c in self.tool_calls if c.decision == "pending"), *self.child_pending]

    @property
    def ledger_calls(self) -> list[str]:
        """Ids of the calls the next tool step starts through the effect ledger: not done, not rejected, not
        invalid, not waiting for a human, and not approved re-runs (those reset their entry first)."""
        if self.next != "tools":
            return []
        return [
            c.id
            for c in self.tool_calls
            if not c.done
            and c.error is None
            and not c.rerun
            and c.agent is None
            and c.decision not in ("rejected", "pending")
        ]

    @property
    def new_messages(self) -> list[dict[str, Any]]:
        """The messages this run added (the user message and every turn since)."""
        return self.messages[self.history_len :]

    def to_json(self) -> str:
        """The stored JSON: everything but ``messages`` (schema 2; the messages live in their own list)."""
        left_out = {"messages"} if self.workflow else {"messages", "workflow"}  # an agent's run: no workflow key
        if self.canvas is None:
            left_out.add("canvas")
        return self.model_copy(update={"schema_version": SCHEMA_VERSION}).model_dump_json(exclude=left_out)

    def to_json_v1(self) -> str:
        """Schema 1: the messages inside the JSON (how a run is created: one key, written atomically)."""
        return self.model_copy(update={"schema_version": 1}).model_dump_json()

    def message_changes(self) -> tuple[int, list[dict[str, Any]]]:
        """How to bring the stored list to ``messages``: keep its first ``n`` elements, then append these."""
        stored, now = self._stored, self.messages
        if stored is None:
            return 0, list(now)
        keep = 0
        for old, new in zip(stored, now, strict=False):
            if old is not new:
                break
            keep += 1
        return keep, list(now[keep:])

    def stored_as(self, messages: list[dict[str, Any]] | None) -> RunState:
        """This state, noting that ``messages`` is what Redis holds now (None: unknown)."""
        self._stored = messages
        return self


def load_state(raw: str | bytes, messages: list[Any] | None = None) -> RunState:
    """Parse stored state, failing fast on an unknown schema version.

    ``messages``: the elements of the run's messages list (schema 2 keeps the conversation there).
    """
    data = json.loads(raw)
    version = data.get("schema_version")
    if version not in SUPPORTED_VERSIONS:
        raise SchemaVersionError(
            f"run state has schema version {version!r}; this code supports {list(SUPPORTED_VERSIONS)}. "
            "Upgrade agents-celery on this process or migrate the stored run."
        )
    if version == 1:
        return RunState.model_validate(data)  # stored list unknown: the next commit writes it whole
    loaded = [json.loads(m) for m in messages or []]
    state = RunState.model_validate({**data, "messages": loaded})
    return state.stored_as(state.messages)


@dataclass
class RunView:
    """A run as callers see it."""

    run_id: str
    agent_id: str
    session_id: str
    status: RunStatus
    last_offset: int
    #: The final answer: its text, or the validated JSON value when the run had an output schema.
    output: Any
    error: dict[str, str] | None
    pending: list[ToolCall] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    stop_requested: bool = False
    usage: dict[str, int] = field(default_factory=dict)
    created_at: int = 0
    #: Who started the run (the front end's user, or ``user_id`` given to ``stream``).
    user_id: str | None = None
    #: The Celery queue its steps go to; a run stays ``queued`` until a worker consuming it takes the first step.
    queue: str | None = None
    #: The schedule that started it (None: started by a caller).
    schedule_id: str | None = None
    #: The agent the conversation was handed to (None: no handoff).
    active_agent: str | None = None
    #: The run that started this one as a child (an agent called as a tool), and the child runs this one
    #: started: ``{"run_id", "agent_id", "status"}`` each.
    parent_run_id: str | None = None
    children: list[dict[str, str]] = field(default_factory=list)
    #: ``<offset>.<tag>`` of the log's newest event, the log's fingerprint (""; none yet, or a listing's
    #: view): a reader holding another position for the same run's end holds a log Redis rewrote since.
    last_position: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunView:
        """A RunView from its :meth:`to_dict` form (``GET /runs/<id>``)."""
        return cls(
            run_id=data["run_id"],
            agent_id=data["agent_id"],
            session_id=data["session_id"],
            status=RunStatus(data["status"]),
            last_offset=int(data["last_offset"]),
            output=data.get("output"),
            error=data.get("error"),
            pending=[ToolCall.model_validate(c) for c in data.get("pending") or []],
            stop_requested=bool(data.get("stop_requested")),
            usage=data.get("usage") or {},
            created_at=int(data.get("created_at") or 0),
            user_id=data.get("user_id"),
            queue=data.get("queue"),
            schedule_id=data.get("schedule_id"),
            active_agent=data.get("active_agent"),
            parent_run_id=data.get("parent_run_id"),
            children=list(data.get("children") or []),
            last_position=str(data.get("last_position") or ""),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "session_id": self.session_id,
            "status": self.status.value,
            "last_offset": self.last_offset,
            "output": self.output,
            "error": self.error,
            "pending": [c.model_dump() for c in self.pending],
            "stop_requested": self.stop_requested,
            "usage": self.usage,
            "created_at": self.created_at,
            "user_id": self.user_id,
            "queue": self.queue,
            "schedule_id": self.schedule_id,
            "active_agent": self.active_agent,
            "parent_run_id": self.parent_run_id,
            "children": self.children,
            "last_position": self.last_position,
        }


@dataclass
class RunPage:
    """A page of runs, newest first; ``next_cursor`` asks for the next page (None: this was the last)."""

    runs: list[RunView]
    next_cursor: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [r.to_dict() for r in self.runs], "next_cursor": self.next_cursor}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunPage:
        return cls([RunView.from_dict(r) for r in data.get("runs") or []], data.get("next_cursor"))


@dataclass
class SessionInfo:
    """A session: its id, when it was last active (ms), the run holding it now (if any)."""

    session_id: str
    updated_at: int
    active_run_id: str | None = None
    #: Who the session belongs to: the user of its first run (None: that run had no user).
    user_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "updated_at": self.updated_at,
            "active_run_id": self.active_run_id,
            "user_id": self.user_id,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionInfo:
        return cls(data["session_id"], int(data.get("updated_at") or 0), data.get("active_run_id"), data.get("user_id"))


@dataclass
class SessionPage:
    """A page of sessions, most recently active first."""

    sessions: list[SessionInfo]
    next_cursor: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"sessions": [s.to_dict() for s in self.sessions], "next_cursor": self.next_cursor}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionPage:
        return cls([SessionInfo.from_dict(s) for s in data.get("sessions") or []], data.get("next_cursor"))


@dataclass
class SessionView:
    """A session: its conversation (the history later runs see) and its runs, newest first."""

    session_id: str
    messages: list[dict[str, Any]]
    runs: list[RunView]
    active_run_id: str | None = None
    #: Who the session belongs to: the user of its first run (None: that run had no user).
    user_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "user_id": self.user_id,
            "active_run_id": self.active_run_id,
            "messages": self.messages,
            "runs": [r.to_dict() for r in self.runs],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionView:
        runs = [RunView.from_dict(r) for r in data.get("runs") or []]
        messages = list(data.get("messages") or [])
        return cls(data["session_id"], messages, runs, data.get("active_run_id"), data.get("user_id"))

"""Agents as tools: a call of an ``Agent.as_tool()`` tool runs that agent as a durable child run.

A tool step that meets such a call starts the child (:func:`start`): a run of its own whose id derives from
the parent run and the call, so a retried step finds the child the crashed attempt started instead of
starting another. The step then ends *waiting*: it commits (the step number moves on) without sending the
next step, and notes in the run's record which children it waits for. No worker holds the parent meanwhile.

When a child pauses or ends, its last commit wakes the parent (:func:`wake_parent` sends the parent's
current step); the sweeper does the same for a parent whose children settled while nobody woke it. The
woken step looks at each child (:func:`look`): an answer becomes the call's result, a failure or a stop an
error result, a pause pauses the parent with the child's calls in its pending list. There a child's call is
named ``<child run id>:<its id>`` (ids of different runs may be equal); a continue of the parent passes each
decision to the child named, without the prefix.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from ..agent import Agent, AgentTool
from ..errors import RunExpiredError, RunNotFoundError, StateError
from ..events import EventType, NewEvent, make_event
from ..runs import RunState, RunStatus, ToolCall
from ..storage.store import RunStore

log = logging.getLogger(__name__)

#: Sends the task for ``(run_id, step, agent_id)`` (the engine's enqueue).
Send = Callable[[str, int, str], None]
#: The tool calls of a workflow run that stand for its running steps (:mod:`agents_celery.workflows`) have ids
#: ``step:<path>``: an agent step's child run is such a call's, and a running step's STEP_STARTED is closed when the
#: run ends without it (a stop) and opened again in the segment a continue starts, as its SUBAGENT events are.
STEP_CALL = "step:"


@dataclass
class Collected:
    """What a tool step found of its agent calls: the calls as they stand (by id), the SUBAGENT events to
    commit, the calls of the paused children waiting for decisions (by child run id), and the run's state with
    the children started so far (None: unchanged). ``halted``: the exception (a stop, a lost lease) that
    ended the collecting early; the step takes ``state`` first, then raises it."""

    calls: dict[str, ToolCall] = field(default_factory=dict)
    events: list[NewEvent] = field(default_factory=list)
    paused: dict[str, list[ToolCall]] = field(default_factory=dict)
    state: RunState | None = None
    halted: BaseException | None = None


#: What a tool step without agent calls found: nothing (shared, read only).
NONE = Collected()


@dataclass(frozen=True)
class Starter:
    """What starting child runs takes: the store, the send of a child's first step (None: no broker here), the
    agent whose tools the calls are, the limits, and ``check`` (raises when the step must end: a stop, a lost
    lease), asked before each start."""

    store: RunStore
    send: Send | None
    agent: Agent
    max_depth: int
    max_children: int
    check: Callable[[], None]


def collect(starter: Starter, state: RunState, calls: list[ToolCall]) -> Collected:
    """Start the child runs of ``calls`` not started yet (within the limits) and look at the others.

    ``Collected.state`` lists a child as soon as it is started, so a step that ends early (a stop, in
    ``Collected.halted``) still knows it.
    """
    got = Collected(state=state)
    for call in calls:
        tool = starter.agent.tools.get(call.name)
        if call.child_run_id is not None:
            got.calls[call.id], events, pending = look(starter.store, call)
            got.events += events
            if pending:
                got.paused[call.child_run_id] = pending
        elif not isinstance(tool, AgentTool) or starter.send is None:
            why = f"agent tool {call.name!r} is not served here"
            got.calls[call.id] = _ended(call, f"Error: {why}", why)
        elif refused := refusal(state, starter.max_depth, starter.max_children):
            got.calls[call.id] = _ended(call, f"Error: {refused}", refused)
        else:
            try:
                starter.check()
            except BaseException as exc:  # the step keeps the children started so far, then raises it
                got.halted = exc
                return got
            got.events.append(start(starter.store, starter.send, state, call, tool))
            child_id = child_run_id(state.run_id, call.id)
            got.state = state = state.model_copy(update={"children": [*state.children, child_id]})
            got.calls[call.id] = call.model_copy(update={"child_run_id": child_id})
    return got


def suspended(paused: dict[str, list[ToolCall]]) -> list[NewEvent]:
    """The SUBAGENT_FINISHED (suspended, with the calls they wait on) of paused children, before the parent's
    own pause ends its stream."""
    return [
        make_event(
            EventType.SUBAGENT_FINISHED,
            subagent_run_id=child_id,
            outcome={"type": "suspended", "interrupt_ids": [c.id for c in held]},
        )
        for child_id, held in paused.items()
    ]


def unfinished(state: RunState) -> list[NewEvent]:
    """A SUBAGENT_ERROR for each child a running parent still waits for, as the parent ends without it."""
    if state.status != RunStatus.RUNNING:  # a paused run's stream already closed its children
        return []
    out = [
        make_event(
            EventType.SUBAGENT_ERROR,
            subagent_run_id=c.child_run_id,
            message=f"run {state.run_id} ended before agent {c.agent or c.name!r} answered",
            code="parent_ended",
        )
        for c in state.tool_calls
        if c.child_run_id and not c.done
    ]
    return out + [step_event(EventType.STEP_FINISHED, c, ended=True) for c in running_steps(state)]


def running_steps(state: RunState) -> list[ToolCall]:
    """A workflow run's steps that run (their STEP_STARTED is open): agent steps whose child works, function
    steps an attempt runs."""
    return [c for c in state.tool_calls if c.id.startswith(STEP_CALL) and not c.done and c.decision is None]


def step_event(type_: EventType, call: ToolCall, **flags: bool) -> NewEvent:
    """A STEP_STARTED or STEP_FINISHED of the workflow step ``call`` stands for (``flags``: why, in its metadata)."""
    return make_event(type_, step_name=call.name, metadata={"workflow_step": call.id[len(STEP_CALL) :], **flags})


def child_run_id(parent_run_id: str, tool_call_id: str) -> str:
    """The id of the child run a call starts: the same for every attempt of the step."""
    return hashlib.sha256(f"{parent_run_id}:{tool_call_id}".encode()).hexdigest()[:32]


def refusal(state: RunState, max_depth: int, max_children: int) -> str | None:
    """Why a new child may not start (None: it may)."""
    if state.depth + 1 > max_depth:
        return f"agent runs nest at most {max_depth} deep (AGENTS_CELERY_MAX_AGENT_DEPTH); this run is at {state.depth}"
    if len(state.children) >= max_children:
        return f"a run starts at most {max_children} child runs (AGENTS_CELERY_MAX_CHILDREN)"
    return None


def start(store: RunStore, send: Send, parent: RunState, call: ToolCall, tool: AgentTool) -> NewEvent:
    """Start the child run of ``call`` (once: a second start finds the first child), and the SUBAGENT_STARTED
    that the parent's waiting commit records."""
    agent, child_id = tool.agent, child_run_id(parent.run_id, call.id)
    now = int(time.time() * 1000)
    state = RunState(
        run_id=child_id,
        agent_id=agent.name,
        session_id=child_id,
        user_id=parent.user_id,
        own_session=True,
        messages=[{"role": "user", "content": str(call.args.get("input", ""))}],
        parent_run_id=parent.run_id,
        parent_tool_call_id=call.id,
        depth=parent.depth + 1,
        created_at=now,
        updated_at=now,
    )
    queue = agent.queue or store.settings.queue
    fields = {"queue": queue, "root_task": uuid.uuid4().hex, "parent_run_id": parent.run_id}
    if parent.user_id:
        fields["user_id"] = parent.user_id
    first = make_event(EventType.RUN_STARTED, thread_id=child_id, run_id=child_id, parent_run_id=parent.run_id)
    try:  # created and indexed in one round trip
        store.create_indexed(state, [first], fields, store.settings.enqueue_grace_seconds)
    except StateError:  # an earlier attempt of this step started it: indexed again, and sent once more
        log.info("run=%s: child run %s exists already (an earlier attempt started it)", parent.run_id, child_id)
    send(child_id, 0, agent.name)
    return subagent_started(call.model_copy(update={"child_run_id": child_id, "agent": agent.name}), tool.description)


def subagent_started(call: ToolCall, description: str | None = None) -> NewEvent:
    """The SUBAGENT_STARTED of a call's child run, in its parent's log (again when a continue resumes it)."""
    assert call.child_run_id is not None
    fields = {"description": description} if description else {}
    return make_event(
        EventType.SUBAGENT_STARTED,
        subagent_run_id=call.child_run_id,
        name=call.agent or call.name,
        parent_tool_call_id=call.id,
        **fields,
    )


def reopened(state: RunState) -> list[NewEvent]:
    """The SUBAGENT_STARTED of each child a paused run still waits for, as a continue opens its next segment (a
    workflow step's STEP_STARTED before it)."""
    out: list[NewEvent] = []
    for c in state.tool_calls:
        if c.child_run_id and not c.done:
            if c.id.startswith(STEP_CALL):
                out.append(step_event(EventType.STEP_STARTED, c, reopened=True))
            out.append(subagent_started(c))
    return out


def look(store: RunStore, call: ToolCall) -> tuple[ToolCall, list[NewEvent], list[ToolCall]]:
    """What became of a call's child run: the call (with its result once the child ended), the SUBAGENT event
    that says so, and the child's calls waiting for a decision when it paused."""
    assert call.child_run_id is not None
    child_id, name = call.child_run_id, call.agent or call.name
    try:
        child, _ = store.load(child_id)
    except (RunNotFoundError, RunExpiredError) as exc:
        return (
            _ended(call, f"Error: the run of agent {name!r} is gone ({exc})", None),
            [make_event(EventType.SUBAGENT_ERROR, subagent_run_id=child_id, message=str(exc), code="gone")],
            [],
        )
    if child.status == RunStatus.COMPLETED:
        output = child.output if isinstance(child.output, str) else json.dumps(child.output)  # a structured output
        finished = make_event(
            EventType.SUBAGENT_FINISHED, subagent_run_id=child_id, result=output, outcome={"type": "success"}
        )
        return _ended(call, output, None), [finished], []
    if child.status == RunStatus.FAILED:
        why = child.error.message if child.error else "failed"
        code = child.error.type if child.error else "failed"
        error = make_event(EventType.SUBAGENT_ERROR, subagent_run_id=child_id, message=why, code=code)
        return _ended(call, f"Error: agent {name!r} failed: {why}", why), [error], []
    if child.status == RunStatus.CANCELLED:
        why = f"agent {name!r} was stopped before it finished"
        error = make_event(EventType.SUBAGENT_ERROR, subagent_run_id=child_id, message=why, code="cancelled")
        return _ended(call, f"Error: {why}", why), [error], []
    if child.status == RunStatus.PAUSED:
        waiting = [
            c.model_copy(update={"id": f"{child_id}:{c.id}", "run_id": c.run_id or child_id}) for c in child.pending
        ]
        return call, [], waiting
    return call, [], []  # still queued or running


def _ended(call: ToolCall, result: str, error: str | None) -> ToolCall:
    return call.model_copy(update={"result": result, "error": error})


def wake_parent(store: RunStore, send: Send, child: RunState) -> None:
    """A child run paused or ended: send its parent's current step, which collects what the child became."""
    if child.parent_run_id is None:
        return
    found = store.live_step(child.parent_run_id)
    if found is not None:
        send(child.parent_run_id, *found)

"""What one step does: a model turn, or the tool calls of the last turn.

Plain Python on top of a :class:`StepContext`; the Celery task (:mod:`agents_celery.engine`) takes the
lease, builds the context, and commits the :class:`StepResult` these functions return. Events that must
appear live (text and tool-call deltas) go through ``ctx.writer``; events that belong with the checkpoint
(tool results, step end, run end) are returned and committed atomically with the new state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..agent import Agent, AgentTool
from ..content import refs_in, resolved
from ..errors import (
    AgentsCeleryError,
    FencedError,
    MCPUnavailable,
    ModelError,
    OutputValidationError,
    StopStep,
    ToolArgumentsError,
)
from ..events import EventType, NewEvent, make_event, now_ms
from ..history import Summarize, prompt_messages, with_usage
from ..hooks import Hooks, StepInfo, call_hooks
from ..mcptools import LIST_TIMEOUT
from ..models import TurnAccumulator, Usage, reading_until
from ..output import prompt_hint, retry_message, spec_for, stream_options
from ..runs import RunFailure, RunState, RunStatus, ToolCall
from ..settings import Settings
from ..storage.eventlog import LogStatus
from ..storage.ledger import Effect
from ..storage.pending import Pending
from ..storage.store import RunStore
from ..tools import Tool, ToolContext
from . import children
from .calls import CallAbandoned, Watch, run_call
from .turn import TurnStream, new_id
from .writer import EventWriter

log = logging.getLogger(__name__)


class Cancelled(Exception):
    """A stop request was noticed inside a step (``abandoned``: a call the step walked away from for it)."""

    def __init__(self, abandoned: CallAbandoned | None = None) -> None:
        super().__init__("stopped")
        self.abandoned = abandoned


@dataclass
class StepContext:
    """What a step works with."""

    state: RunState
    agent: Agent
    step: int
    attempt: int
    token: str
    store: RunStore
    settings: Settings
    writer: EventWriter
    info: StepInfo
    #: Worker-level hooks, then the agent's own: model and tool hooks go to both.
    hooks: list[Hooks] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event = field(default_factory=threading.Event)
    #: This attempt wrote a STEP_STARTED, so whatever ends it must write the STEP_FINISHED.
    step_open: bool = False
    #: Calls the claim already started in the effect ledger (see :attr:`agents_celery.storage.store.Claim.effects`).
    effects: dict[str, Effect | None] = field(default_factory=dict)
    #: Ledger results sent to Redis whose replies the engine reads before it commits.
    sent: list[Pending] = field(default_factory=list)
    #: How many messages the run's inbox holds (the claim's count); more than ``state.inbox_taken``: new ones.
    inbox: int = 0
    #: Attempts of this step that died of a connection error: not counted in ``max_step_attempts``.
    blips: int = 0
    #: Tool calls this attempt invoked (or was about to): an attempt given back forgets the others' ledger entries.
    invoked: set[str] = field(default_factory=set)
    #: Sends a step's task, ``send(run_id, step, agent_id)``: a child run's first step (agents as tools).
    send: Callable[[str, int, str], None] | None = None

    def watch(self) -> Watch:
        """What a call waited on by this step watches for (:func:`agents_celery.engine.calls.run_call`)."""
        s = self.settings
        return Watch(self.stop, self.lost, s.stop_grace_seconds, min(s.stop_poll_seconds, 0.2))

    def starter(self) -> children.Starter:
        """What the step's agent calls start their child runs with (:func:`agents_celery.engine.children.collect`)."""
        s = self.settings
        return children.Starter(self.store, self.send, self.agent, s.max_agent_depth, s.max_children, self.check)

    def check(self) -> None:
        """Raise Cancelled when a stop was requested, FencedError once the heartbeat lost the lease."""
        if self.lost.is_set():
            raise FencedError(f"run {self.state.run_id!r}: lease lost; another attempt owns the run")
        if self.stop.is_set():
            raise Cancelled()


@dataclass
class StepResult:
    """The new state and the events to commit with it."""

    state: RunState
    events: list[NewEvent]
    log_status: LogStatus
    #: Child runs the step waits for: the commit sends no next step (the children's ends wake the run).
    waits: list[str] = field(default_factory=list)
    #: What the run's record says it waits for: set to ``waits`` (a list), or left alone (None).
    awaiting: list[str] | None = None


# -- endings -----------------------------------------------------------------------------------------


def user_message_events(text: str) -> list[NewEvent]:
    """A user message sent to a live run, as the log shows it (message ids of users start with ``usr_``)."""
    mid = new_id("usr")
    return [
        make_event(EventType.TEXT_MESSAGE_START, message_id=mid, role="user"),
        make_event(EventType.TEXT_MESSAGE_CONTENT, message_id=mid, delta=text),
        make_event(EventType.TEXT_MESSAGE_END, message_id=mid),
    ]


def goes_on(result: StepResult) -> StepResult:
    """A completing result turned into one that goes on with another model turn (a user message arrived)."""
    state = result.state.model_copy(update={"status": RunStatus.RUNNING, "next": "model"})
    events = [e for e in result.events if e.type is not EventType.RUN_FINISHED]
    return StepResult(state, events, "live")


def completed(state: RunState, events: list[NewEvent]) -> StepResult:
    """The run completed: RUN_FINISHED with its output."""
    state = state.moved_to(RunStatus.COMPLETED)
    finished = make_event(
        EventType.RUN_FINISHED,
        thread_id=state.session_id,
        run_id=state.run_id,
        outcome={"type": "success"},
        result=state.output if state.output is not None else "",
    )
    return StepResult(state, [*events, finished], "ended")


def failed(state: RunState, error: BaseException, events: Sequence[NewEvent] = ()) -> StepResult:
    """The run failed with ``error``: RUN_ERROR with its message and code."""
    failure = RunFailure(type=type(error).__name__, message=str(error))
    state = state.model_copy(update={"status": RunStatus.FAILED, "error": failure})
    code = getattr(error, "code", None) or type(error).__name__
    err = make_event(EventType.RUN_ERROR, message=failure.message or failure.type, code=str(code))
    return StepResult(state, [*events, err], "ended")


def cancelled(state: RunState, events: Sequence[NewEvent] = ()) -> StepResult:
    """The run was stopped: the children it waited for are told, then RUN_FINISHED (cancelled)."""
    events = [*events, *children.unfinished(state)]  # the children it waited for are stopped with it
    state = state.moved_to(RunStatus.CANCELLED)
    done = make_event(
        EventType.RUN_FINISHED, thread_id=state.session_id, run_id=state.run_id, outcome={"type": "cancelled"}
    )
    return StepResult(state, [*events, done], "ended")


def paused(agent: Agent, state: RunState, events: list[NewEvent]) -> StepResult:
    """The run waits: for a human's decisions (an ``interrupt`` outcome, as AG-UI 1.0 has it), or only for the
    client's answers to calls of its own tools (``success`` with ``pending_tool_call_ids``, as AG-UI has it)."""
    state = state.moved_to(RunStatus.PAUSED)
    waiting = [c for c in state.pending if c.pause_reason != "client_tool"]
    if waiting:
        outcome: dict[str, Any] = {"type": "interrupt", "interrupts": [_interrupt(agent, c) for c in waiting]}
    else:
        outcome = {"type": "success", "pending_tool_call_ids": [c.id for c in state.pending]}
    pause = make_event(EventType.RUN_FINISHED, thread_id=state.session_id, run_id=state.run_id, outcome=outcome)
    return StepResult(state, [*events, pause], "paused")


def _interrupt(agent: Agent, call: ToolCall) -> dict[str, Any]:
    tool = agent.tools.get(call.name)
    if call.pause_reason == "may_have_run":
        message = (
            f"Tool {call.name!r} started in an attempt that crashed and may have run. Approve to run it again, "
            "or reject to tell the model it may or may not have completed."
        )
    else:
        message = f"Tool {call.name!r} needs your confirmation to run with {call.arguments}."
    schema = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
    if tool is not None:
        schema["properties"]["editedArgs"] = tool.parameters  # type: ignore[index]
    return {
        "id": call.id,
        "reason": call.pause_reason or "confirmation_required",
        "message": message,
        "tool_call_id": call.id,
        "response_schema": schema,
        "metadata": {"tool_name": call.name, "tool_args": call.args, **_child_of(call)},
    }


def _child_of(call: ToolCall) -> dict[str, str]:
    """The child run holding a call shown in its parent's pending list (nothing for the run's own calls)."""
    return {"run_id": call.run_id} if call.run_id else {}


# -- model turn --------------------------------------------------------------------------------------


def model_turn(ctx: StepContext) -> StepResult:
    """Call the model once (with retries), stream its deltas, and decide what comes next."""
    if ctx.state.turns >= ctx.settings.max_turns:
        return failed(ctx.state, AgentsCeleryError(f"the run took more than {ctx.settings.max_turns} model turns"))
    list_toolsets(ctx)
    state = ctx.state
    turn: TurnStream | None = None
    for retry in range(ctx.settings.model_retries + 1):
        turn = TurnStream(ctx.writer.emit, ctx.stop, ctx.lost)
        try:
            _stream_once(ctx, turn)
            break
        except ModelError as exc:
            turn.close()
            if not exc.retryable or retry == ctx.settings.model_retries:
                return failed(state, exc, [_step_finished(ctx, "model")])
            ctx.writer.emit(
                make_event(
                    EventType.CUSTOM,
                    name="model_retry",
                    value={"attempt": retry + 1, "error": str(exc), "status_code": exc.status_code},
                )
            )
            _sleep_unless_stopped(ctx, ctx.settings.model_backoff_seconds * (2**retry))
        except BaseException:
            turn.close()
            raise
    assert turn is not None
    return _after_turn(ctx, turn)


def list_toolsets(ctx: StepContext) -> None:
    """The agent's MCP toolsets as the run sees them: the tool lists the run recorded, fetched now (on the call
    pool, so a stop or a lost lease still ends the wait) for a toolset the run has none of, or whose list went
    stale (:meth:`~agents_celery.mcptools.MCPTools.stale`). A new list goes into ``ctx.state`` (committed with the
    turn) and this worker's manifest; a server that does not answer leaves the run with the list it had (none
    at first: its tools are not offered this turn) and a CUSTOM ``mcp_unavailable`` event."""
    agent = ctx.agent
    if not agent.toolsets:
        return
    listings = dict(ctx.state.toolsets)
    fetched = False
    for toolset in agent.toolsets:
        have = listings.get(toolset.name)
        if have is not None and not toolset.stale(have):
            continue
        ctx.check()
        what = f"run {ctx.state.run_id} MCP tools/list of {toolset.name!r}"
        try:
            listings[toolset.name] = run_call(
                toolset.list_tools, ctx.watch(), what=what, deadline=time.monotonic() + LIST_TIMEOUT * 2
            )
            fetched = True
            continue
        except CallAbandoned as exc:
            if exc.reason != "deadline":
                raise _walked_away(ctx, exc) from None
            error = f"MCP server {toolset.name!r} did not list its tools within {exc.seconds:.0f}s"
        except MCPUnavailable as exc:
            error = str(exc)
        value = {"toolset": toolset.name, "error": error, "tools_kept": len((have or {}).get("tools", []))}
        ctx.writer.emit(make_event(EventType.CUSTOM, name="mcp_unavailable", value=value))
    if fetched:
        ctx.state = ctx.state.model_copy(update={"toolsets": listings})
        try:
            ctx.store.agents.refresh(agent.manifest())
        except Exception as exc:  # the manifest is a listing for people; the run goes on without it
            log.warning("could not publish the manifest of %r: %s", agent.name, exc)
    ctx.agent = agent.for_run(listings)


def _stream_once(ctx: StepContext, turn: TurnStream) -> None:
    """One model call, read on a call thread (:mod:`.calls`) so the step can walk away from a model that never
    finishes: at a stop (after the grace), when the lease is lost, or at the turn's wall-clock deadline."""
    ctx.check()
    call_hooks(ctx.hooks, "before_model_call", ctx.info, ctx.state.messages)
    prompt = _with_context(ctx.agent.instructions, ctx.state.client.get("context"))
    model, spec = ctx.agent.model, spec_for(ctx.agent.output, ctx.state.output_schema)
    asked = stream_options(model, spec)  # response_format, for a model that takes it
    if spec is not None and not asked:  # any other model is told in its prompt
        prompt = "\n\n".join(p for p in (prompt, prompt_hint(spec)) if p)
    system = [{"role": "system", "content": prompt}] if prompt else []
    tools = [*ctx.agent.tool_schemas(), *(_client_schema(t) for t in ctx.state.client_tools)]
    # the history policy shortens the prompt (never the stored history); images and files are stored once beside
    # the run: the model gets the ones its prompt names back in their Chat Completions form
    shortened = prompt_messages(ctx.agent.history, ctx.state.messages)
    messages = [*system, *with_parts(ctx.state, ctx.store, shortened)]

    def read() -> None:
        ctx.writer.starting()
        with reading_until(turn.unwanted):  # the model's stop signal: OpenAIChat looks on every line
            chunks = model.stream(messages, tools, **asked)
            try:
                for chunk in chunks:
                    if not turn.offer(chunk):
                        return  # stopped, lost, or walked away from: stop reading
            finally:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()  # the model's HTTP stream ends with its generator

    limit = ctx.settings.turn_timeout_seconds
    try:
        run_call(read, ctx.watch(), what=f"run {ctx.state.run_id} model turn", deadline=time.monotonic() + limit)
    except CallAbandoned as exc:
        turn.abandon()
        if exc.reason != "deadline":
            raise _walked_away(ctx, exc) from None
        raise ModelError(f"the model gave no complete answer within {limit:g}s", retryable=True) from None
    ctx.check()  # the reading stopped early for a stop or a lost lease
    turn.close()


def with_parts(state: RunState, store: RunStore, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` (the run's, as its prompt has them) with their reference parts replaced by the stored images
    and files."""
    refs = refs_in(messages)
    return resolved(messages, store.parts.fetch(state, refs)) if refs else messages


def _with_context(instructions: str, context: Any) -> str:
    """The instructions, then the client's context entries (AG-UI ``context``: description and value)."""
    if not isinstance(context, list) or not context:
        return instructions
    lines = [f"- {c.get('description', '')}: {c.get('value', '')}" for c in context if isinstance(c, dict)]
    return "\n\n".join(p for p in (instructions, "Context from the client:\n" + "\n".join(lines)) if p)


def _client_schema(spec: dict[str, Any]) -> dict[str, Any]:
    """A client tool in Chat Completions ``tools`` form."""
    params = spec.get("parameters") or {"type": "object", "properties": {}}
    return {
        "type": "function",
        "function": {"name": spec["name"], "description": spec.get("description", ""), "parameters": params},
    }


def _walked_away(ctx: StepContext, exc: CallAbandoned) -> BaseException:
    """What a call walked away from means for the step: cancelled, superseded, or given back (shutdown)."""
    if exc.reason == "stopped":
        return Cancelled(exc)
    if exc.reason == "lost":
        return FencedError(f"run {ctx.state.run_id!r}: lease lost; another attempt owns the run")
    return exc


def _sleep_unless_stopped(ctx: StepContext, seconds: float) -> None:
    if ctx.stop.wait(seconds):
        raise Cancelled()


def step_name(kind: str, step: int) -> str:
    return f"model_turn:{step}" if kind == "model" else f"tools:{step}"


def step_event(type_: EventType, kind: str, step: int, attempt: int) -> NewEvent:
    """A STEP_STARTED or STEP_FINISHED, exactly as :func:`make_event` writes it (tests/test_events.py checks).

    Every step writes two and every claim sends two, so they skip make_event's checks: all their fields are
    the engine's own (two ints and one of two names).
    """
    if kind not in ("model", "tools") or type(step) is not int or type(attempt) is not int:
        meta = {"step": step, "kind": kind, "attempt": attempt}
        return make_event(type_, step_name=step_name(kind, step), metadata=meta)
    return NewEvent(
        type_,
        f'{{"type":"{type_.value}","timestamp":{now_ms()},'
        f'"metadata":{{"step":{step},"kind":"{kind}","attempt":{attempt}}},"step_name":"{step_name(kind, step)}"}}',
    )


def step_started(kind: str, step: int, attempt: int) -> NewEvent:
    """The STEP_STARTED of an attempt (the claim writes a first attempt's; the engine a retried one's)."""
    return step_event(EventType.STEP_STARTED, kind, step, attempt)


def _step_finished(ctx: StepContext, kind: str) -> NewEvent:
    return step_event(EventType.STEP_FINISHED, kind, ctx.step, ctx.attempt)


def with_step_finished(ctx: StepContext, result: StepResult) -> StepResult:
    """``result`` with the step's STEP_FINISHED in front of its run-ending events, if it has none."""
    if not ctx.step_open or any(e.type is EventType.STEP_FINISHED for e in result.events):
        return result
    return StepResult(result.state, [_step_finished(ctx, ctx.info.kind), *result.events], result.log_status)


def _after_turn(ctx: StepContext, turn: TurnStream) -> StepResult:
    message = turn.acc.assistant_message()
    call_hooks(ctx.hooks, "after_model_call", ctx.info, message)
    if isinstance(ctx.agent.history, Summarize):  # the next turn's prompt is counted from it
        message = with_usage(message, turn.acc.usage.prompt_tokens, turn.acc.usage.completion_tokens)
    finished = _step_finished(ctx, "model")
    return after_turn(ctx.agent, ctx.state, turn.acc, finished, message, output_retries=ctx.settings.output_retries)


def after_turn(
    agent: Agent,
    state: RunState,
    acc: TurnAccumulator,
    finished: NewEvent,
    message: dict[str, Any] | None = None,
    *,
    output_retries: int = 0,
) -> StepResult:
    """What a model turn's answer (``acc``, as the assistant ``message``) makes of the run, with the turn's
    STEP_FINISHED (``finished``); no I/O. No tool call: the run completes with the turn's text (under an output
    schema: with the validated answer, see :func:`final_answer`). A call that waits for a human or for the
    client: the run pauses. Otherwise the tool step comes next."""
    usage = dict(state.usage)
    if isinstance(acc.usage, Usage):
        for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
            usage[name] = usage.get(name, 0) + getattr(acc.usage, name)
    client_tools = {t["name"] for t in state.client_tools}
    calls = [new_call(agent, c, client_tools) for c in acc.tool_calls]
    state = state.model_copy(
        update={
            "messages": [*state.messages, message if message is not None else acc.assistant_message()],
            "turns": state.turns + 1,
            "usage": usage,
            "tool_calls": calls,
            "next": "tools" if calls else "model",
            "output": acc.text if not calls else state.output,
        }
    )
    events = [finished]
    if not calls:
        return final_answer(agent, state, acc.text, events, output_retries)
    if state.pending:
        return paused(agent, state, events)
    return StepResult(state, events, "live")


def final_answer(agent: Agent, state: RunState, text: str, events: list[NewEvent], retries: int) -> StepResult:
    """A turn without tool calls: the run completes with ``text``, or, under an output schema, with the validated
    answer. An answer that fails the schema is sent back to the model as a turn of its own (a CUSTOM
    ``output_retry`` event says why, then the message sent back as a user message), ``retries`` times at most;
    then the run fails with OutputValidationError."""
    spec = spec_for(agent.output, state.output_schema)
    if spec is None:
        return completed(state, events)
    try:
        value = spec.check(text)
    except OutputValidationError as exc:
        if state.output_retries >= retries:
            error = OutputValidationError(
                f"the model's answer did not match the output schema {spec.name!r} after {state.output_retries} "
                f"retries: {exc}"
            )
            return failed(state.model_copy(update={"output": None}), error, events)
        attempt = state.output_retries + 1
        feedback = retry_message(str(exc))
        state = state.model_copy(
            update={
                "messages": [*state.messages, feedback],
                "output_retries": attempt,
                "output": None,
                "next": "model",
            }
        )
        value = {"attempt": attempt, "max_retries": retries, "error": str(exc), "schema": spec.name}
        # the message sent back shows as a user message (``usr_``), so a client's copy of the conversation
        # (AG-UI's messages) stays the one the session stores
        said = user_message_events(feedback["content"])
        return StepResult(
            state, [*events, make_event(EventType.CUSTOM, name="output_retry", value=value), *said], "live"
        )
    return completed(state.model_copy(update={"output": value}), events)


def new_call(agent: Agent, raw: dict[str, str], client_tools: set[str] | None = None) -> ToolCall:
    """What a tool call a model turn asked for (``raw``: id, name, arguments) becomes, before anything runs; no
    I/O: a handoff, a call of the client's own tool (pending), an unknown tool or invalid arguments (an error
    the model sees), a child run of an agent tool, a call that waits for confirmation, or a plain call."""
    client_tools = client_tools or set()
    call = ToolCall(id=raw["id"], name=raw["name"], arguments=raw.get("arguments") or "{}")
    if call.name in agent.handoffs:  # no side effect of its own: the tool step records the handoff
        return call
    tool = agent.tools.get(call.name)
    if tool is None and call.name in client_tools:  # the client runs it and answers with the result
        return call.model_copy(update={"decision": "pending", "pause_reason": "client_tool"})
    if tool is None:
        known = sorted({*agent.tools, *agent.handoffs, *client_tools})
        return call.model_copy(update={"error": f"unknown tool {call.name!r}; available: {known}"})
    try:
        tool.validate(call.arguments)
    except ToolArgumentsError as exc:
        return call.model_copy(update={"error": str(exc)})
    if isinstance(tool, AgentTool):  # runs as a child run: the tool step starts it
        return call.model_copy(update={"agent": tool.agent.name})
    if tool.requires_confirmation:
        return call.model_copy(
            update={"requires_confirmation": True, "decision": "pending", "pause_reason": "confirmation_required"}
        )
    return call


# -- tool step ---------------------------------------------------------------------------------------


def tool_step(ctx: StepContext) -> StepResult:
    """Run the tool calls of the last turn (concurrently), through the effect ledger."""
    ctx.check()
    ctx.agent = ctx.agent.for_run(ctx.state.toolsets)  # the MCP tools the run's last turn was offered
    todo = [c for c in ctx.state.tool_calls if not c.done]
    agents = [c for c in todo if c.agent]
    got, finished = children.NONE, {}
    if agents:  # started or looked at first: the children work while the plain calls run
        got = children.collect(ctx.starter(), ctx.state, agents)
        ctx.state = got.state or ctx.state
        if got.halted is not None:
            raise got.halted
        finished, todo = got.calls, [c for c in todo if not c.agent]
    if len(todo) == 1:  # no pool for the common case
        finished[todo[0].id] = _run_call(ctx, todo[0], ahead=True)
    elif todo:
        with ThreadPoolExecutor(max_workers=len(todo), thread_name_prefix="tool") as pool:
            finished.update(zip([c.id for c in todo], pool.map(lambda c: _run_call(ctx, c), todo), strict=True))
    calls = [finished.get(c.id, c) for c in ctx.state.tool_calls]
    result = after_tools(ctx.agent, ctx.state, calls, got, bool(agents), _step_finished(ctx, "tools"))
    if result.log_status == "live" and not result.waits:
        ctx.check()  # the results go to the model: not when a stop came meanwhile
    return result


def after_tools(
    agent: Agent, state: RunState, calls: list[ToolCall], got: children.Collected, looked: bool, finished: NewEvent
) -> StepResult:
    """What a tool step's calls (as they stand after it ran them) make of the run, with its STEP_FINISHED
    (``finished``); no I/O. ``got``: what it found of its child runs (``looked``: it had agent calls).

    Child runs still working: the step ends waiting for them (their ends wake the run). A call that waits
    for a human (it may have run in a crashed attempt) or a child that paused: the run pauses. Otherwise the
    results go to the model's next turn, with the agent the turn handed off to, if any.
    """
    state = state.model_copy(update={"tool_calls": calls, "child_pending": []} if looked else {"tool_calls": calls})
    notes = list(got.events)
    waits = [c.child_run_id for c in calls if c.child_run_id and not c.done and c.child_run_id not in got.paused]
    if waits:  # child runs are working: the step ends here, their ends (or pauses) wake the run
        return StepResult(state, [*notes, finished], "live", waits, awaiting=waits)
    if got.paused:  # every child settled, some wait for decisions: so does this run, with their calls
        state = state.model_copy(update={"child_pending": [c for held in got.paused.values() for c in held]})
        notes += children.suspended(got.paused)
    if state.pending:  # a call may have run in a crashed attempt, or a child run waits: a human decides
        return paused(agent, state, [*notes, finished])
    results = [
        make_event(EventType.TOOL_CALL_RESULT, message_id=new_id("tool"), tool_call_id=c.id, content=c.result or "")
        for c in calls
    ]
    messages = [{"role": "tool", "tool_call_id": c.id, "content": c.result or ""} for c in calls]
    state = state.model_copy(update={"messages": [*state.messages, *messages], "next": "model", "tool_calls": []})
    state, handoff = _handed_off(agent, state, calls)
    awaited: list[str] | None = [] if any(c.child_run_id for c in calls) else None  # the record stops saying it waits
    return StepResult(state, [*notes, *results, *handoff, finished], "live", awaiting=awaited)


def _handed_off(agent: Agent, state: RunState, calls: list[ToolCall]) -> tuple[RunState, list[NewEvent]]:
    """The state after the turn's handoff, if it asked for one (the first wins): the next turns use that agent."""
    call = next((c for c in calls if c.name in agent.handoffs and c.error is None), None)
    if call is None:
        return state, []
    target = agent.handoffs[call.name].name
    value = {"from": agent.name, "to": target, "tool_call_id": call.id, "reason": call.args.get("reason")}
    return state.model_copy(update={"active_agent": target}), [
        make_event(EventType.CUSTOM, name="handoff", value=value)
    ]


def answered(agent: Agent, call: ToolCall) -> ToolCall | None:
    """The call with its result when it does not run (a handoff, a call the user rejected, an error found when
    the turn asked for it); None: it runs. No I/O."""
    if call.name in agent.handoffs and call.error is None:
        return call.model_copy(update={"result": f"Transferred to {agent.handoffs[call.name].name}."})
    if call.decision == "rejected":
        note = f" Note from the user: {call.note}" if call.note else ""
        return call.model_copy(update={"result": f"The user rejected this tool call; it did not run.{note}"})
    if call.error is not None:
        return call.model_copy(update={"result": f"Error: {call.error}"})
    return None


def from_ledger(call: ToolCall, tool: Tool, entry: Effect | None) -> ToolCall | None:
    """What the effect ledger's entry for a call about to run decides; None: run it (this attempt started it).
    Done in an earlier attempt: its recorded result. Started in an attempt that crashed, and the tool is not
    idempotent: the run asks a human (``may_have_run``) rather than run it twice. No I/O."""
    if entry is not None and entry.status == "done":
        return _with_result(call, entry.result or "", entry.error)
    if entry is not None and not tool.idempotent:
        return call.model_copy(update={"decision": "pending", "pause_reason": "may_have_run"})
    return None


def _run_call(ctx: StepContext, call: ToolCall, ahead: bool = False) -> ToolCall:
    done = answered(ctx.agent, call)
    if done is not None:
        return done
    tool = ctx.agent.tools[call.name]
    if call.rerun:
        ctx.store.ledger.reset(ctx.state.run_id, call.id, ctx.token)
    if not call.rerun and call.id in ctx.effects:  # the claim started it (one round trip fewer)
        entry = ctx.effects[call.id]
    else:
        entry = ctx.store.ledger.begin(ctx.state.run_id, call.id, ctx.token)
    decided = from_ledger(call, tool, entry)
    return decided if decided is not None else _invoke(ctx, call, tool, ahead)


def _invoke(ctx: StepContext, call: ToolCall, tool: Tool, ahead: bool) -> ToolCall:
    ctx.invoked.add(call.id)
    args = call.args
    call_hooks(ctx.hooks, "before_tool_call", ctx.info, call.name, args)
    context = ToolContext(ctx.state.run_id, call.id, ctx.attempt, ctx.state.client)
    error: str | None = None
    limit = tool.timeout if tool.timeout is not None else ctx.settings.tool_timeout_seconds
    what = f"run {ctx.state.run_id} tool {call.name} ({call.id})"
    try:
        deadline = time.monotonic() + limit
        result = run_call(lambda: tool.invoke(call.arguments, context), ctx.watch(), what=what, deadline=deadline)
    except CallAbandoned as exc:
        if exc.reason != "deadline":
            raise _walked_away(ctx, exc) from None
        # The model sees it; the ledger records it, so a retried step does not run the call again.
        error = f"tool {call.name!r} did not finish within {limit:g}s; it was abandoned"
        result = f"Error: {error}"
    except ToolArgumentsError as exc:
        result, error = f"Error: {exc}", str(exc)
    except StopStep:
        raise
    except Exception as exc:  # the tool's own failure is the model's business, not a crash
        result, error = f"Error: {type(exc).__name__}: {exc}", f"{type(exc).__name__}: {exc}"
    if ahead:  # the step's only call: its reply is read just before the commit (Engine._do_step)
        ctx.sent.append(ctx.store.ledger.done_sent(ctx.state.run_id, call.id, ctx.token, result, error))
    else:  # calls running side by side: none holds a connection while the others run
        ctx.store.ledger.done(ctx.state.run_id, call.id, ctx.token, result, error)
    call_hooks(ctx.hooks, "after_tool_call", ctx.info, call.name, result, error)
    return _with_result(call, result, error)


def _with_result(call: ToolCall, result: str, error: str | None) -> ToolCall:
    return call.model_copy(update={"result": result, "error": error, "decision": call.decision})

"""A tool step: run the tool calls of the last model turn (concurrently), through the effect ledger.

Every call is begun and finished in the ledger, so a retried step never runs a call twice; agent tools run as
child runs (:mod:`.children`). The results, the STEP_FINISHED and what ends the run are returned in the
:class:`~.stepcontext.StepResult`, committed with the new state.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from ..agent import Agent
from ..errors import StopStep, ToolArgumentsError
from ..events import EventType, NewEvent, make_event
from ..hooks import call_hooks
from ..runs import RunState, ToolCall
from ..storage.ledger import Effect
from ..tools import Tool, ToolContext
from . import children
from .calls import CallAbandoned, run_call
from .endings import paused
from .stepcontext import StepContext, StepResult, step_finished, walked_away
from .turn import new_id


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
    if ctx.store.fence and any(c.id in ctx.effects and ctx.effects[c.id] is None for c in todo):
        ctx.store.fence.hold(ctx.state.run_id)  # the claim wrote their ``started`` records: on a replica first
    if len(todo) == 1:  # no pool for the common case
        finished[todo[0].id] = _run_call(ctx, todo[0], ahead=True)
    elif todo:
        with ThreadPoolExecutor(max_workers=len(todo), thread_name_prefix="tool") as pool, ctx.writer.standing_by():
            finished.update(zip([c.id for c in todo], pool.map(lambda c: _run_call(ctx, c), todo), strict=True))
    calls = [finished.get(c.id, c) for c in ctx.state.tool_calls]
    result = after_tools(ctx.agent, ctx.state, calls, got, bool(agents), step_finished(ctx, "tools"))
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
    if call.rerun:  # approved again after a crash: one execution per approval
        entry = ctx.store.ledger.rerun(ctx.state.run_id, call.id, ctx.token, call.rerun)
    elif call.id in ctx.effects:  # the claim started it (one round trip fewer)
        entry = ctx.effects[call.id]
    else:
        entry = ctx.store.ledger.begin(ctx.state.run_id, call.id, ctx.token)
    decided = from_ledger(call, tool, entry)
    return decided if decided is not None else _invoke(ctx, call, tool, ahead)


def _invoke(ctx: StepContext, call: ToolCall, tool: Tool, ahead: bool) -> ToolCall:
    ctx.invoked.add(call.id)
    args = call.args
    call_hooks(ctx.hooks, "before_tool_call", ctx.info, call.name, args)
    error: str | None = None
    limit = tool.timeout if tool.timeout is not None else ctx.settings.tool_timeout_seconds
    context = ToolContext(ctx.state.run_id, call.id, ctx.attempt, ctx.state.client, limit)
    what = f"run {ctx.state.run_id} tool {call.name} ({call.id})"
    try:
        deadline = time.monotonic() + limit
        result = run_call(lambda: tool.invoke(call.arguments, context), ctx.watch(), what=what, deadline=deadline)
    except CallAbandoned as exc:
        if exc.reason != "deadline":
            raise walked_away(ctx, exc) from None
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

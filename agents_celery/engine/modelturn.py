"""A model turn: call the model once (with retries), stream its deltas live, and decide what comes next.

Events that must appear live (text and tool-call deltas) go through ``ctx.writer``; the turn's STEP_FINISHED and
what ends the run are returned in the :class:`~.stepcontext.StepResult`, committed with the new state.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..agent import Agent, AgentTool
from ..content import refs_in, resolved
from ..errors import AgentsCeleryError, MCPUnavailable, ModelError, OutputValidationError, ToolArgumentsError
from ..events import EventType, NewEvent, make_event
from ..history import Summarize, prompt_messages, with_usage
from ..hooks import call_hooks
from ..mcp import LIST_TIMEOUT
from ..models import TurnAccumulator, Usage, reading_until
from ..output import prompt_hint, retry_message, spec_for, stream_options
from ..runs import RunState, ToolCall
from ..storage.store import RunStore
from .calls import CallAbandoned, run_call
from .endings import completed, failed, paused, user_message_events
from .stepcontext import StepContext, StepResult, sleep_unless_stopped, step_finished, walked_away
from .turn import TurnStream

log = logging.getLogger(__name__)


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
                return failed(state, exc, [step_finished(ctx, "model")])
            ctx.writer.emit(
                make_event(
                    EventType.CUSTOM,
                    name="model_retry",
                    value={"attempt": retry + 1, "error": str(exc), "status_code": exc.status_code},
                )
            )
            sleep_unless_stopped(ctx, ctx.settings.model_backoff_seconds * (2**retry))
        except BaseException:
            turn.close()
            raise
    assert turn is not None
    return _after_turn(ctx, turn)


def list_toolsets(ctx: StepContext) -> None:
    """The agent's MCP toolsets as the run sees them: the tool lists the run recorded, fetched now (on the call
    pool, so a stop or a lost lease still ends the wait) for a toolset the run has none of, or whose list went
    stale (:meth:`~agents_celery.mcp.MCPTools.stale`). A new list goes into ``ctx.state`` (committed with the
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
                raise walked_away(ctx, exc) from None
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
            raise walked_away(ctx, exc) from None
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


def _after_turn(ctx: StepContext, turn: TurnStream) -> StepResult:
    message = turn.acc.assistant_message()
    call_hooks(ctx.hooks, "after_model_call", ctx.info, message)
    if isinstance(ctx.agent.history, Summarize):  # the next turn's prompt is counted from it
        message = with_usage(message, turn.acc.usage.prompt_tokens, turn.acc.usage.completion_tokens)
    finished = step_finished(ctx, "model")
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

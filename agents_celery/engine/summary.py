"""The summary step: a model turn of its own that replaces the older part of a long conversation with a summary.

Before a model turn whose prompt would pass the agent's :class:`~agents_celery.history.Summarize` budget, the step
asks the summary model (the policy's ``summary_model``, else the agent's) for a summary of the turns older than the
ones it keeps, appends it to the conversation as a marker message (:mod:`agents_celery.history`) and ends with a
CUSTOM ``history_summarized`` event; the next step is the model turn, whose prompt the summary shortens. It is
committed like every step (by compare-and-set on the step number, fenced by the lease): an attempt that dies
during the summary call commits nothing, and the retried attempt asks again; once committed, the marker is in the
conversation and no attempt summarises the same turns twice. Its text is not streamed (it is not the assistant
speaking); the event carries it.
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import FencedError, ModelError
from ..events import EventType, make_event
from ..history import Summarize, SummaryPlan, fixed_tokens, plan_summary, prompt_tokens
from ..models import Model, TextDelta, Usage, reading_until
from .calls import CallAbandoned, run_call
from .stepcontext import sleep_unless_stopped
from .steps import Cancelled, StepContext, StepResult, failed, step_event
from .turn import new_id


def due(ctx: StepContext) -> SummaryPlan | None:
    """The summary the next model turn needs first (None: none). No I/O."""
    policy = ctx.agent.history
    if not isinstance(policy, Summarize):
        return None
    return plan_summary(policy, ctx.state.messages, _fixed(ctx))


def summary_step(ctx: StepContext, plan: SummaryPlan) -> StepResult:
    """Ask for the summary (retried like a model turn's errors), append its marker, and go on to the model turn."""
    policy = ctx.agent.history
    assert isinstance(policy, Summarize)
    model = policy.summary_model or ctx.agent.model
    finished = step_event(EventType.STEP_FINISHED, "model", ctx.step, ctx.attempt)
    request = plan.request(policy, ctx.state.messages)
    for retry in range(ctx.settings.model_retries + 1):
        try:
            text, usage = _ask(ctx, model, request)
            break
        except ModelError as exc:
            if not exc.retryable or retry == ctx.settings.model_retries:
                return failed(ctx.state, exc, [finished])
            value = {"attempt": retry + 1, "error": str(exc), "status_code": exc.status_code, "summary": True}
            ctx.writer.emit(make_event(EventType.CUSTOM, name="model_retry", value=value))
            sleep_unless_stopped(ctx, ctx.settings.model_backoff_seconds * (2**retry))
    messages = ctx.state.messages
    marker = plan.marker(text, messages, new_id("sum"), getattr(model, "name", type(model).__name__))
    totals = dict(ctx.state.usage)
    for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
        totals[name] = totals.get(name, 0) + getattr(usage, name)
    state = ctx.state.model_copy(update={"messages": [*messages, marker], "usage": totals})
    info = marker["history_summary"]
    value = {
        **info,
        "summary": text,
        "prompt_tokens_before": plan.tokens,
        "prompt_tokens_after": prompt_tokens(state.messages, _fixed(ctx)),
        "max_prompt_tokens": policy.max_prompt_tokens,
    }
    return StepResult(state, [make_event(EventType.CUSTOM, name="history_summarized", value=value), finished], "live")


def _fixed(ctx: StepContext) -> int:
    tools = [*ctx.agent.tool_schemas(), *ctx.state.client_tools]
    return fixed_tokens(ctx.agent.instructions, tools)


def _ask(ctx: StepContext, model: Model, request: list[dict[str, Any]]) -> tuple[str, Usage]:
    """One summary call on a call thread (so a stop, a lost lease or the turn's deadline can walk away from it)."""
    ctx.check()
    parts: list[str] = []
    usage = [Usage()]

    def read() -> None:
        with reading_until(lambda: ctx.stop.is_set() or ctx.lost.is_set()):
            chunks = model.stream(request, [])
            try:
                for chunk in chunks:
                    if ctx.stop.is_set() or ctx.lost.is_set():
                        return
                    if isinstance(chunk, TextDelta):
                        parts.append(chunk.text)
                    elif isinstance(chunk, Usage):
                        usage[0] = chunk
            finally:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()

    limit = ctx.settings.turn_timeout_seconds
    what = f"run {ctx.state.run_id} history summary"
    try:
        run_call(read, ctx.watch(), what=what, deadline=time.monotonic() + limit)
    except CallAbandoned as exc:
        if exc.reason == "stopped":
            raise Cancelled(exc) from None
        if exc.reason == "deadline":
            raise ModelError(f"the summary model gave no answer within {limit:g}s", retryable=True) from None
        if exc.reason == "lost":
            raise FencedError(f"run {ctx.state.run_id!r}: lease lost; another attempt owns the run") from None
        raise  # the worker shuts down: the step is given back
    ctx.check()
    text = "".join(parts).strip()
    if not text:
        raise ModelError("the summary model answered with no text", retryable=True)
    return text, usage[0]

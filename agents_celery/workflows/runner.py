"""A step of a workflow run on the workers: the engine calls :func:`run_step` for a run of a :class:`~.plan.Workflow`
(it is a guest agent), under the run's lease, and commits the :class:`~agents_celery.engine.steps.StepResult`.

A step first collects the agent steps whose child runs ended (their outputs join the run's progress), then walks
the plan (:mod:`.walk`) and does what is ready: it starts the agent steps (each a child run, whose id derives from
the workflow run and the step's path, so a retried step finds the child started before), and runs the function
steps (side by side on threads when a parallel offers several), each begun and finished in the effect ledger under
the key ``step:<path>``: a finished one is never run again, one that started in an attempt that crashed pauses the
workflow (``may_have_run``) unless the step is idempotent. After function steps it commits what they did (the
run's step number unchanged, its lease kept) and walks again, so a crash resumes at the step that was running.
When nothing more can run it ends: waiting for its children (no task sent, no worker held: their ends wake the
run, as an agent's child runs do), paused (a child waits for a human, or a function step may have run), or with
the workflow's output.

A workflow step's events: STEP_STARTED and STEP_FINISHED (``step_name``: the step's name; ``metadata``:
``workflow_step`` its path, ``step_index``, ``executor``), a CUSTOM ``step_output`` (``value``: the step's path,
name, executor and output) before the STEP_FINISHED, and between them, for an agent step, the child's
SUBAGENT_STARTED and SUBAGENT_FINISHED (or SUBAGENT_ERROR). A container (parallel, condition, loop, router) says
when it starts and completes (a loop: each iteration too) in a CUSTOM ``workflow_node`` (:mod:`.walk`).
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from ..agent import Agent
from ..content import text_of
from ..engine import children
from ..engine.calls import CallAbandoned, run_call
from ..engine.steps import StepContext, StepResult, completed, failed, paused, step_finished, walked_away
from ..engine.turn import new_id
from ..errors import AgentsCeleryError, RunExpiredError, RunNotFoundError
from ..events import EventType, NewEvent, make_event
from ..hooks import call_hooks
from ..runs import RunState, RunStatus, ToolCall
from ..storage.ledger import Effect
from .plan import Node, StepInput, as_text
from .walk import Frontier, Progress, Ready, name_of, walk

log = logging.getLogger(__name__)

STEP_CALL = children.STEP_CALL


class StepFailedError(AgentsCeleryError):
    """A step of a workflow failed (its function raised, its agent's run failed), so the workflow did."""

    code = "step_failed"


@dataclass
class _Run:
    """One step of a workflow run as it goes: the context, the run's state and progress, the events to commit."""

    ctx: StepContext
    #: The workflow (an agent: the pause names its calls) and its plan.
    workflow: Agent
    plan: list[Node]
    state: RunState
    progress: Progress
    events: list[NewEvent] = field(default_factory=list)
    #: The child runs paused for a human's decisions: their calls, by child run id.
    paused_children: dict[str, list[ToolCall]] = field(default_factory=dict)

    def update(self, **changes: Any) -> None:
        """The state with ``changes`` (and the progress), kept in the context: what a stop ends the run from."""
        self.state = self.state.model_copy(update={**changes, "workflow": self.progress.to_json()})
        self.ctx.state = self.state

    def calls(self, keep: list[ToolCall] | None = None, drop: set[str] | frozenset[str] = frozenset()) -> None:
        """The run's tool calls: those not in ``drop``, then ``keep`` (replacing those of the same id)."""
        added = {c.id: c for c in keep or []}
        kept = [c for c in self.state.tool_calls if c.id not in drop and c.id not in added]
        self.update(tool_calls=[*kept, *added.values()])

    def commit(self) -> None:
        """Commit what the step did so far (the step number stays; the lease is kept)."""
        self.update()
        events = [*self.ctx.writer.drain(), *self.events]
        self.ctx.store.commit(self.state, self.ctx.token, self.ctx.step, self.ctx.step, events, "live", release=False)
        self.events = []


def run_step(workflow: Agent, plan: list[Node], ctx: StepContext) -> StepResult:
    """One step of a run of ``workflow``, whose steps are ``plan`` (see the module docs)."""
    run = _Run(ctx, workflow, plan, ctx.state, Progress.of(ctx.state.workflow))
    if ctx.attempt > 1:
        _reopen(run)
    halted = _collect(run)
    if halted is not None:
        return halted
    base = _base(run.state)
    while True:
        ctx.check()
        frontier = walk(plan, run.progress, base)
        run.events += [make_event(EventType.CUSTOM, name="workflow_node", value=mark) for mark in frontier.marks]
        if frontier.error is not None:
            return _failed(run, frontier.error)
        if frontier.ended:
            return _completed(run, frontier.output)
        refused = _start_agents(run, frontier)
        if refused is not None:
            return refused
        todo = [r for r in frontier.functions if _due(run, r)]
        if not todo:
            break
        ended = _run_functions(run, todo)
        if ended is not None:
            return ended
        run.commit()
    return _settle(run)


def _base(state: RunState) -> StepInput:
    """What every step's input starts from: the run's message, its ids."""
    first = state.new_messages[0]["content"] if state.new_messages else ""
    message = text_of(first)
    return StepInput(message=message, previous_output=message, session_id=state.session_id, run_id=state.run_id)


def _call_id(path: str) -> str:
    return f"{STEP_CALL}{path}"


def _index(ready: Ready) -> str:
    return ".".join(map(str, ready.index))


def _started(ready: Ready, **flags: bool) -> NewEvent:
    meta: dict[str, Any] = {
        "workflow_step": ready.path,
        "step_index": _index(ready),
        "executor": "agent" if ready.step.agent is not None else "function",
        **flags,
    }
    if ready.parent is not None:
        meta["parent"] = ready.parent
    if ready.input.iteration:
        meta["iteration"] = ready.input.iteration
    return make_event(EventType.STEP_STARTED, step_name=ready.step.name, metadata=meta)


def _output_event(path: str, executor: str, output: Any) -> NewEvent:
    value = {"step": path, "name": name_of(path), "executor": executor, "output": output}
    return make_event(EventType.CUSTOM, name="step_output", value=value)


def _finished(path: str, **flags: bool) -> NewEvent:
    return make_event(EventType.STEP_FINISHED, step_name=name_of(path), metadata={"workflow_step": path, **flags})


def _reopen(run: _Run) -> None:
    """A retried attempt: the engine closed the steps the crashed one opened in this step; the agent steps among
    them still run (their child runs were committed), so their STEP_STARTED opens again."""
    for call in children.running_steps(run.state):
        path = call.id[len(STEP_CALL) :]
        if call.child_run_id and run.progress.opened.get(path) == run.ctx.step:
            run.events.append(children.step_event(EventType.STEP_STARTED, call, reopened=True))


# -- agent steps ----------------------------------------------------------------------------------------


def _collect(run: _Run) -> StepResult | None:
    """What became of the agent steps' child runs: outputs join the progress; a failure ends the workflow (a
    stopped child: cancelled); a pause is kept in ``child_pending`` for :func:`_settle`."""
    pending: list[ToolCall] = []
    waiting: dict[str, list[ToolCall]] = {}
    running = list(run.progress.running.items())
    found = run.ctx.store.states_of([child_id for _, child_id in running])  # one round trip for them all
    for path, child_id in running:
        call_id = _call_id(path)
        try:
            child = found[child_id] if child_id in found else run.ctx.store.load(child_id)[0]  # raises: gone
        except (RunNotFoundError, RunExpiredError) as exc:
            run.events.append(
                make_event(EventType.SUBAGENT_ERROR, subagent_run_id=child_id, message=str(exc), code="gone")
            )
            return _failed(run, f"the run of step {name_of(path)!r} is gone ({exc})", drop={call_id})
        if child.status == RunStatus.COMPLETED:
            result = child.output if isinstance(child.output, str) else json.dumps(child.output)
            run.events += [
                make_event(
                    EventType.SUBAGENT_FINISHED, subagent_run_id=child_id, result=result, outcome={"type": "success"}
                ),
                _output_event(path, "agent", child.output),
                _finished(path),
            ]
            run.progress.finish(path, child.output)
            run.calls(drop={call_id})
        elif child.status in (RunStatus.FAILED, RunStatus.CANCELLED):
            stopped = child.status == RunStatus.CANCELLED
            why = "it was stopped" if stopped else (child.error.message if child.error else "failed")
            code = "cancelled" if stopped else (child.error.type if child.error else "failed")
            run.events.append(make_event(EventType.SUBAGENT_ERROR, subagent_run_id=child_id, message=why, code=code))
            if stopped:
                run.events.append(_finished(path, stopped=True))
                run.calls(drop={call_id})
                return _stopped(run, f"step {name_of(path)!r} was stopped")
            return _failed(run, f"step {name_of(path)!r} failed: {why}", drop={call_id})
        elif child.status == RunStatus.PAUSED:
            held = [
                c.model_copy(update={"id": f"{child_id}:{c.id}", "run_id": c.run_id or child_id}) for c in child.pending
            ]
            waiting[child_id] = held
            pending += held
    run.update(child_pending=pending)
    run.paused_children = waiting
    return None


def _start_agents(run: _Run, frontier: Frontier) -> StepResult | None:
    """Start the child run of each agent step ready (once: a retried step finds the child started before); the
    workflow fails when the limits of child runs refuse one."""
    ctx, s = run.ctx, run.ctx.settings
    for ready in frontier.agents:
        step = ready.step
        assert step.agent is not None and ctx.send is not None
        refused = children.refusal(run.state, s.max_agent_depth, s.max_children)
        if refused:
            return _failed(run, f"step {step.name!r} cannot start: {refused}")
        ctx.check()
        message = _message(ready)
        call = ToolCall(id=_call_id(ready.path), name=step.name or "", arguments=json.dumps({"input": message}))
        call = call.model_copy(update={"agent": step.agent.name})
        tool = step.tool
        run.events.append(_started(ready))
        run.events.append(children.start(ctx.store, ctx.send, run.state, call, tool))
        child_id = children.child_run_id(run.state.run_id, call.id)
        run.progress.running[ready.path] = child_id
        run.progress.opened[ready.path] = ctx.step
        started = call.model_copy(update={"child_run_id": child_id})
        kids = run.state.children if child_id in run.state.children else [*run.state.children, child_id]
        run.update(children=kids)
        run.calls(keep=[started])
    return None


def _message(ready: Ready) -> str:
    """An agent step's message: the previous output as text, or the step's template or function of its input."""
    shape, given = ready.step.message, ready.input
    if shape is None:
        return given.previous_text
    if callable(shape):
        return str(shape(given))
    return shape.format(message=given.message, previous_output=given.previous_text, outputs=given.outputs)


# -- function steps -------------------------------------------------------------------------------------


def _due(run: _Run, ready: Ready) -> bool:
    """Whether a function step runs now: not while it waits for a human's decision (``may_have_run``)."""
    call = next((c for c in run.state.tool_calls if c.id == _call_id(ready.path)), None)
    return call is None or call.decision != "pending"


def _run_functions(run: _Run, todo: list[Ready]) -> StepResult | None:
    """Run the function steps ready (side by side when there are several), each through the effect ledger; their
    outputs join the progress. A step that failed ends the workflow; one that may have run waits for a human."""
    decided = {c.id: c for c in run.state.tool_calls if c.id.startswith(STEP_CALL) and c.decision is not None}
    for ready in todo:
        if (earlier := decided.get(_call_id(ready.path))) is not None and earlier.decision == "rejected":
            note = f" ({earlier.note})" if earlier.note else ""
            return _failed(
                run, f"step {ready.step.name!r} may have run in an attempt that crashed; not run again{note}"
            )
    running = [
        ToolCall(
            id=_call_id(r.path),
            name=r.step.name or "",
            rerun=decided[c].rerun if (c := _call_id(r.path)) in decided else 0,
        )
        for r in todo
    ]
    run.calls(keep=running)  # running: a stop closes their steps with the run
    for ready in todo:
        run.events.append(_started(ready))
    run.commit()
    reruns = {c.id: c.rerun for c in running}
    if len(todo) == 1:
        outcomes = [_function(run, todo[0], reruns[_call_id(todo[0].path)])]
    else:
        pool = ThreadPoolExecutor(max_workers=len(todo), thread_name_prefix="workflow-step")
        with pool, run.ctx.writer.standing_by():
            outcomes = list(pool.map(lambda r: _function(run, r, reruns[_call_id(r.path)]), todo))
    return _after_functions(run, todo, outcomes)


@dataclass(frozen=True)
class _Outcome:
    """What became of a function step: its output, its error, or (``held``) it may have run: a human decides."""

    output: Any = None
    error: str | None = None
    held: bool = False


def _function(run: _Run, ready: Ready, rerun: int) -> _Outcome:
    """One function step through the effect ledger (its key: ``step:<path>``)."""
    ctx, key = run.ctx, _call_id(ready.path)
    store, run_id = ctx.store, run.state.run_id
    entry = store.ledger.rerun(run_id, key, ctx.token, rerun) if rerun else store.ledger.begin(run_id, key, ctx.token)
    if entry is not None and (entry.status == "done" or not ready.step.idempotent):
        return _recorded(entry)
    ctx.invoked.add(key)
    step = ready.step
    assert step.function is not None
    limit = step.timeout if step.timeout is not None else ctx.settings.tool_timeout_seconds
    given = replace(ready.input, idempotency_key=f"{run_id}:{ready.path}")
    what = f"run {run_id} step {step.name}"
    error: str | None = None
    output: Any = None
    call_hooks(ctx.hooks, "before_tool_call", ctx.info, step.name, {})
    try:
        raw = run_call(lambda: step.function(given), ctx.watch(), what=what, deadline=time.monotonic() + limit)  # type: ignore[misc]
        output = _json_value(raw)
    except CallAbandoned as exc:
        if exc.reason != "deadline":
            raise walked_away(ctx, exc) from None
        error = f"did not finish within {limit:g}s; it was abandoned"
    except Exception as exc:  # the function's own failure: the workflow's, recorded so it never runs again
        error = f"{type(exc).__name__}: {exc}"
    store.ledger.done(run_id, key, ctx.token, json.dumps(output), error)
    call_hooks(ctx.hooks, "after_tool_call", ctx.info, step.name, as_text(output), error)
    return _Outcome(output, error)


def _recorded(entry: Effect) -> _Outcome:
    """What the ledger says of a step an earlier attempt began: its result, or (it may have run) ask a human."""
    if entry.status == "done":
        return _Outcome(json.loads(entry.result) if entry.result else None, entry.error)
    return _Outcome(held=True)


def _json_value(value: Any) -> Any:
    """A function step's output as JSON: text as it is, a pydantic model dumped, anything else JSON-able."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        value = dump(mode="json")
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"a step returned {type(value).__name__}, which is not text or a JSON value") from exc


def _after_functions(run: _Run, todo: list[Ready], outcomes: list[_Outcome]) -> StepResult | None:
    held: list[ToolCall] = []
    for ready, outcome in zip(todo, outcomes, strict=True):
        key = _call_id(ready.path)
        if outcome.held:
            held.append(ToolCall(id=key, name=ready.step.name or "", decision="pending", pause_reason="may_have_run"))
            run.events.append(_finished(ready.path, suspended=True))
            continue
        run.calls(drop={key})
        if outcome.error is not None:
            run.events.append(_finished(ready.path, failed=True))
            return _failed(run, f"step {ready.step.name!r} failed: {outcome.error}")
        run.events += [_output_event(ready.path, "function", outcome.output), _finished(ready.path)]
        run.progress.finish(ready.path, outcome.output)
    if held:
        run.calls(keep=held)
    return None


# -- how the step ends ----------------------------------------------------------------------------------


def _settle(run: _Run) -> StepResult:
    """Nothing more can run now: wait for the children that work, else pause for the human decisions due."""
    paused_children = run.paused_children
    working = [cid for cid in run.progress.running.values() if cid not in paused_children]
    run.update()
    if working:  # their ends (or pauses) wake the run
        return StepResult(run.state, [*run.events, *_own_end(run)], "live", working, awaiting=working)
    events = [*run.events, *children.suspended(paused_children)]
    events += [
        children.step_event(EventType.STEP_FINISHED, c, suspended=True) for c in children.running_steps(run.state)
    ]
    return paused(run.workflow, run.state, [*events, *_own_end(run)])


def _own_end(run: _Run) -> list[NewEvent]:
    """The STEP_FINISHED of the run's own step (the engine's) after the workflow's events of the step, so a reader
    sees them inside it (else the engine puts it in front of them)."""
    return [step_finished(run.ctx, run.ctx.info.kind)] if run.ctx.step_open else []


def _completed(run: _Run, output: Any) -> StepResult:
    text = as_text(output)
    run.update(output=output, messages=[*run.state.messages, {"role": "assistant", "content": text}], tool_calls=[])
    said = _said(text) if output is not None else []
    return completed(run.state, [*run.events, *said, *_own_end(run)])


def _said(text: str) -> list[NewEvent]:
    """The workflow's answer as its own assistant message (every dialect shows a run's answer from its messages)."""
    mid = new_id("msg")
    content = [make_event(EventType.TEXT_MESSAGE_CONTENT, message_id=mid, delta=text)] if text else []
    start = make_event(EventType.TEXT_MESSAGE_START, message_id=mid, role="assistant")
    return [start, *content, make_event(EventType.TEXT_MESSAGE_END, message_id=mid)]


def _failed(run: _Run, why: str, drop: set[str] | frozenset[str] = frozenset()) -> StepResult:
    """The workflow fails: the steps still running are closed (their child runs are stopped with the run)."""
    if drop:
        run.calls(drop=drop)
    run.update()
    closers = [*children.unfinished(run.state), *_own_end(run)]
    return failed(run.state, StepFailedError(why), [*run.events, *closers])


def _stopped(run: _Run, why: str) -> StepResult:
    """A step's run was stopped by itself: the workflow ends cancelled, its other steps with it."""
    from ..engine.steps import cancelled

    log.info("run=%s: %s; the workflow ends cancelled", run.state.run_id, why)
    run.update()
    stopped = make_event(EventType.CUSTOM, name="step_stopped", value={"why": why})
    return cancelled(run.state, [*run.events, stopped, *_own_end(run)])

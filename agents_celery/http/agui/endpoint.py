"""The AG-UI endpoint: ``POST /agui/<agent_id>`` takes AG-UI's ``RunAgentInput`` and answers an AG-UI 1.0 event
stream, so AG-UI frontends (``@ag-ui/client``'s ``HttpAgent``, CopilotKit) run our agents directly.

How AG-UI's words map onto ours:

- ``threadId`` is the session; ``runId`` names one *segment* of a run: a run that pauses and is resumed goes
  on under the same run id of ours, and each input that resumes it names the next segment with its own runId.
  The stream presents every event under the client's ids (:class:`~agents_celery.http.sse.AguiSegment`).
- The same ``runId`` again attaches to its segment (replayed from its start, then live), never starting
  another run: a retried POST is safe. Segments are recorded per session (``storage.keys``: ``agui``).
- A new run takes the last message (a user message); earlier messages, when sent, must agree with the
  session's stored history (user and assistant texts, in order), or the input is refused (409).
- A pause ends the stream with STATE_SNAPSHOT, MESSAGES_SNAPSHOT and RUN_FINISHED: outcome ``interrupt`` for
  calls waiting for a human (reason ``tool_call``), or ``success`` with ``pendingToolCallIds`` for calls of
  the client's own tools (``tools``). The next input resumes: ``resume`` entries cover every open interrupt
  (``resolved`` with ``{approved, editedArgs, note}``, or ``cancelled``), and ``tool`` messages answer the
  client's calls. Input without them while the thread waits is refused with RUN_ERROR, as the spec says; a
  resume replayed (even under another runId) attaches to the segment the first one started.
- ``forwardedProps.output_schema`` (a JSON Schema) makes a new run's answer structured output (docs/output.md):
  RUN_FINISHED's ``result`` is then the validated JSON value.
- ``POST /agui/<agent_id>/connect`` attaches to the thread's run where it stands (``Last-Event-ID``: from
  that offset); a synthesized RUN_STARTED and the open messages come first, as ``?format=agui`` does.

Errors found before the stream starts are HTTP 4xx JSON; after, RUN_ERROR.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import ag_ui.core as agui
import pydantic

from ...content import check_parts
from ...conversation import as_chat
from ...decisions import Decision
from ...errors import (
    BodyValidationError,
    HistoryMismatchError,
    RunBusyError,
    RunNotPausedError,
    SessionBusyError,
    SessionNotFoundError,
    ValidationError,
)
from ...events import Event
from ...output import check_schema
from ...runs import RunStatus, RunView
from ...runtime import Runtime
from ..access import Access
from ..messages import Reply, Request, position_param
from ..sse import AguiSegment, LogStream
from . import render as agui_mod
from .input import content_of, upgrade_binary

#: RunAgentInput's fields, as AG-UI spells them (camelCase).
FIELDS = frozenset(
    {"threadId", "runId", "parentRunId", "protocolVersion", "state", "messages", "tools", "context", "forwardedProps"}
    | {"resume"}
)
#: How long a resume that lost a race waits for the winner to record its segment.
RACE_SECONDS = 5.0


def parse_input(body: dict[str, Any]) -> agui.RunAgentInput:
    """A RunAgentInput from a request body (BodyValidationError, 422, naming what is wrong)."""
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise BodyValidationError(
            f"RunAgentInput has no field(s) {unknown}; its fields are camelCase: {sorted(FIELDS)}"
        )
    try:
        value = agui.RunAgentInput.model_validate(upgrade_binary(body))
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())
        raise BodyValidationError(f"invalid RunAgentInput: {problems}") from None
    for name, ident in (("threadId", value.thread_id), ("runId", value.run_id)):
        if not ident or len(ident) > 200:
            raise BodyValidationError(f"{name} must be 1 to 200 characters")
    return value


def text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of multimodal content."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # AG-UI parts, or the stored history's (dicts)
        texts = (p.get("text") if isinstance(p, dict) else getattr(p, "text", None) for p in content)
        return "".join(t for t in texts if isinstance(t, str))
    return "" if content is None else json.dumps(content)


def _texts(messages: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(role, text) for role, text in messages if role in ("user", "assistant") and text]


def history_check(earlier: list[Any]) -> Any:
    """A ``check_history`` for :meth:`Runtime.stream`: the client's earlier messages must tell the stored
    history's user and assistant texts, in order (no earlier messages: nothing to check)."""
    sent = _texts([(m.role, text_of(getattr(m, "content", None))) for m in earlier])

    def check(history: list[dict[str, Any]]) -> None:
        if not earlier:
            return
        stored = _texts([(m.get("role", ""), text_of(m.get("content"))) for m in as_chat(history)])
        if sent != stored:
            raise HistoryMismatchError(
                f"the earlier messages ({len(sent)} user/assistant texts) do not agree with the thread's stored "
                f"history ({len(stored)}); send the conversation as the last MESSAGES_SNAPSHOT had it"
            )

    return check


def trailing_tool_answers(messages: list[Any]) -> dict[str, str]:
    """The ``tool`` messages after the last assistant message: answers to calls of the client's tools."""
    answers: dict[str, str] = {}
    for m in reversed(messages):
        if m.role != "tool":
            break
        answers[m.tool_call_id] = text_of(m.content)
    return answers


def resume_name(ids: set[str]) -> str:
    """The segment name of a resume that answers exactly ``ids`` (so a replayed resume finds it)."""
    return "resume:" + ",".join(sorted(ids))


class AguiEndpoint:
    """``POST /agui/<agent_id>`` and ``/connect`` over the API's Runtime and access checks (see the module docs);
    ``child_log`` reads a child run's whole log for the parent's stream."""

    def __init__(
        self,
        runtime: Runtime,
        access: Access,
        keepalive_seconds: float = 15.0,
        child_log: Callable[[str], list[Event]] | None = None,
    ) -> None:
        self.runtime = runtime
        self.access = access
        self.store = runtime.store
        self.keepalive_seconds = keepalive_seconds
        self.child_log = child_log

    # -- run ---------------------------------------------------------------------------------------------

    def run(self, req: Request, agent_id: str) -> Reply:
        self.runtime.agent_manifest(agent_id)  # 404 before looking at the body
        self.access.allow(req, "start", agent_id=agent_id)
        inp = parse_input(req.body())
        thread, client_run = inp.thread_id, inp.run_id
        schema = output_schema_of(inp)
        if schema is not None:  # before the session check records an owner
            check_schema(schema)
        if inp.messages and inp.messages[-1].role == "user":  # its images and files too: a 413 creates nothing
            check_parts(content_of(inp.messages[-1].content), self.runtime.settings)
        self.access.session(req, thread, "start", agent_id)  # another user's thread: 404, as a hidden run
        seen = self.store.sessions.segment(thread, client_run)
        if seen is not None:
            return self._attach(req, inp, *seen)
        key = f"agui:{thread}:{client_run}"
        existing = self.runtime.idempotent_run(key, req.user_id)
        if existing is not None:  # a retry racing the first POST of this runId
            return self._attach(req, inp, existing, -1)
        active = self.runtime.live_run(thread)
        if active is not None and active.agent_id != agent_id:
            raise SessionBusyError(f"thread {thread!r} is busy: it has a live run of another agent")
        if active is not None and active.status == RunStatus.PAUSED:
            return self._resume(req, inp, active)
        answers = trailing_tool_answers(inp.messages)
        if inp.resume or answers:
            replay = self.store.sessions.segment(
                thread, resume_name({r.interrupt_id for r in inp.resume or []} | set(answers))
            )
            if replay is not None:
                self.store.sessions.mark_segment(thread, [client_run], *replay)
                return self._attach(req, inp, *replay)
            return self._refuse(inp, "the thread has no open interrupts or tool calls to answer", "nothing_to_resume")
        if active is not None:
            raise SessionBusyError(f"thread {thread!r} is busy: a run of it is {active.status.value}; wait or stop it")
        if not inp.messages or inp.messages[-1].role != "user":
            raise BodyValidationError("messages must end with the new user message")
        message = content_of(inp.messages[-1].content)  # its images and documents as content parts
        stream = self.runtime.stream(
            agent_id,
            message,
            session_id=thread,
            user_id=req.user_id,
            idempotency_key=key,
            client_tools=[t.model_dump(exclude_none=True) for t in inp.tools or []],
            client=_client(inp),
            check_history=history_check(inp.messages[:-1]),
            output_schema=schema,
        )
        self.store.sessions.mark_segment(thread, [client_run], stream.run_id, -1)
        return self._reply(inp, stream.run_id, -1)

    def _resume(self, req: Request, inp: agui.RunAgentInput, view: RunView) -> Reply:
        self.access.allow(req, "continue", view)
        interrupts = [c for c in view.pending if c.pause_reason != "client_tool"]
        client_calls = [c for c in view.pending if c.pause_reason == "client_tool"]
        answers = trailing_tool_answers(inp.messages)
        resume = {r.interrupt_id: r for r in inp.resume or []}
        if interrupts and not resume:
            ids = ", ".join(c.id for c in interrupts)
            return self._refuse(
                inp, f"the thread has open interrupts ({ids}): send 'resume' for them", "interrupts_open"
            )
        open_ids = {c.id for c in interrupts}
        if set(resume) != open_ids:
            missing, unknown = sorted(open_ids - set(resume)), sorted(set(resume) - open_ids)
            message = f"resume must cover every open interrupt: missing {missing}, unknown {unknown}"
            return self._refuse(inp, message, "resume_mismatch")
        unanswered = [c.id for c in client_calls if c.id not in answers]
        if unanswered:
            return self._refuse(inp, f"answer the client's tool calls {unanswered} with tool messages", "tools_open")
        decisions = [_decision(c.id, resume[c.id]) for c in interrupts]
        decisions += [Decision(c.id, result=answers[c.id]) for c in client_calls]
        names = [inp.run_id, resume_name(open_ids | {c.id for c in client_calls})]
        before = self.store.log.info(view.run_id).last_offset
        try:
            self.runtime.continue_run(view.run_id, decisions)
        except (RunNotPausedError, RunBusyError):  # the same resume, racing this one, went first
            return self._attach(req, inp, *self._wait_segment(inp.thread_id, names))
        self.store.sessions.mark_segment(inp.thread_id, names, view.run_id, before)
        return self._reply(inp, view.run_id, before)

    def _wait_segment(self, thread: str, names: list[str]) -> tuple[str, int]:
        deadline = time.monotonic() + RACE_SECONDS
        while True:
            for name in names:
                if (seen := self.store.sessions.segment(thread, name)) is not None:
                    return seen
            if time.monotonic() > deadline:
                raise RunBusyError(f"thread {thread!r} is being resumed by another request; retry with its runId")
            time.sleep(0.02)

    # -- connect -----------------------------------------------------------------------------------------

    def connect(self, req: Request, agent_id: str) -> Reply:
        """The thread's run (the one ``runId`` names, else the live one, else the newest) from where it is."""
        self.runtime.agent_manifest(agent_id)
        inp = parse_input(req.body())
        self.access.session(req, inp.thread_id, "read", agent_id)
        seen = self.store.sessions.segment(inp.thread_id, inp.run_id)
        run_id = seen[0] if seen else self.store.sessions.active(inp.thread_id)
        if run_id is None:
            newest = self.runtime.runs(session_id=inp.thread_id, agent_id=agent_id, limit=1).runs
            if not newest:
                raise SessionNotFoundError(f"thread {inp.thread_id!r} has no run of agent {agent_id!r}")
            run_id = newest[0].run_id
        info = self.access.run(req, run_id, "read", agent_id)
        position = position_param(req.headers.get("Last-Event-ID"), "Last-Event-ID")
        if position is not None:
            after = min(position[0], info.last_offset)
        elif info.status == "live":
            after = info.last_offset  # from here on, the open messages synthesized first
        else:
            after = info.last_offset - 1  # the segment's end: snapshots, then its terminal event
        return self._reply(inp, run_id, after)

    # -- answers -----------------------------------------------------------------------------------------

    def _attach(self, req: Request, inp: agui.RunAgentInput, run_id: str, after: int) -> Reply:
        self.access.run(req, run_id, "read")
        return self._reply(inp, run_id, after)

    def _reply(self, inp: agui.RunAgentInput, run_id: str, after: int) -> Reply:
        def snapshots(timestamp: int) -> list[dict[str, Any]]:
            state, _ = self.store.load(run_id)
            return agui_mod.snapshots(state.client.get("state"), state.messages, inp.thread_id, timestamp)

        segment = AguiSegment(inp.thread_id, inp.run_id, snapshots)
        stream = LogStream(
            run_id, after, "agui", until_pause=True, keepalive_seconds=self.keepalive_seconds, segment=segment
        )
        stream.child_log = self.child_log
        return Reply(200, stream=stream)

    def _refuse(self, inp: agui.RunAgentInput, message: str, code: str) -> Reply:
        segment = AguiSegment(inp.thread_id, inp.run_id, error=(message, code))
        return Reply(200, stream=LogStream("", -1, "agui", until_pause=True, segment=segment))


def output_schema_of(inp: agui.RunAgentInput) -> Any:
    """The run's output schema, ``forwardedProps.output_schema`` (None: none; ``Runtime.stream`` checks it)."""
    props = inp.forwarded_props
    return props.get("output_schema") if isinstance(props, dict) else None


def _client(inp: agui.RunAgentInput) -> dict[str, Any]:
    """What the tools see of the input (``ToolContext.client``)."""
    return {
        "state": inp.state,
        "context": [c.model_dump() for c in inp.context or []],
        "forwarded_props": inp.forwarded_props,
    }


def _decision(call_id: str, entry: agui.ResumeEntry) -> Decision:
    """A resume entry as a decision: ``cancelled`` rejects; ``resolved`` approves unless ``approved`` is false."""
    if entry.status == "cancelled":
        return Decision(call_id, confirmed=False, note="cancelled by the user")
    payload = entry.payload if entry.payload is not None else {}
    if not isinstance(payload, dict):
        raise ValidationError(f"the payload of interrupt {call_id!r} must be an object: {{approved, editedArgs}}")
    approved = payload.get("approved", True)
    edited = payload.get("editedArgs")
    if not isinstance(approved, bool) or (edited is not None and not isinstance(edited, dict)):
        raise ValidationError(f"interrupt {call_id!r}: 'approved' must be true or false, 'editedArgs' an object")
    note = payload.get("note") if isinstance(payload.get("note"), str) else None
    return Decision(call_id, approved, note, edited if approved else None)

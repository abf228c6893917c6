"""A2A tasks without I/O: a run's stored log folded into an A2A 1.0 task, its snapshot (``Task``) and the
``StreamResponse`` objects each event adds, in ProtoJSON's spelling (camelCase keys, enums by name). The HTTP door
(:mod:`agents_celery.http.a2a`) streams and answers them; the worker's push deliveries
(:mod:`agents_celery.broker.a2apush`) POST the status updates. A task is a run, its ``contextId`` the run's session.

Mapping (stored event -> A2A):

- RUN_STARTED -> status ``WORKING`` (a continue's too). Before it the task is ``SUBMITTED``.
- The assistant's text: each text message is an artifact, ``text-<n>`` (``n`` counts the run's text messages).
  Its first TEXT_MESSAGE_CONTENT is an artifact update with ``append: false`` (the artifact, created or replaced),
  the next ones ``append: true``; TEXT_MESSAGE_END is ``lastChunk: true`` with no parts.
- **A retried step** (a crashed attempt: STEP_FINISHED ``abandoned``, CUSTOM ``attempt_abandoned``; a retried
  model call: CUSTOM ``model_retry``; a second STEP_STARTED) takes back the artifacts the step's attempt began:
  the count goes back to where the step started, so the retry's text messages get the same artifact ids, and the
  first chunk of each, ``append: false``, replaces what the dead attempt streamed. The task's artifacts after the
  run equal those of a run that never crashed. The snapshot drops them at once.
- A tool call (TOOL_CALL_END) and its result (TOOL_CALL_RESULT) -> status ``WORKING`` updates whose message holds a
  data part: ``{"tool_call": {id, name, arguments}}``, ``{"tool_result": {id, name, content}}``.
- A pause (RUN_FINISHED ``interrupt``; a success that waits for the client's own tools) -> ``INPUT_REQUIRED``, the
  status message a text part and a data part ``{"pending": [{tool_call_id, name, arguments}]}``; a follow-up
  ``SendMessage`` on the task carries the decisions.
- RUN_FINISHED success -> ``COMPLETED`` (a structured output first as an artifact ``output``, one data part);
  cancelled -> ``CANCELED``; RUN_ERROR -> ``FAILED``, the status message its error.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from ..events import UNIT_SAVED, Event, EventType, json_or_text

TaskState = Literal[
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_FAILED",
    "TASK_STATE_REJECTED",
]
#: The states a task never leaves.
TERMINAL: frozenset[str] = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED"}
)
#: The states a stream ends at (a task waiting for input is interrupted: its stream closes, it goes on later).
STREAM_ENDS: frozenset[str] = TERMINAL | {"TASK_STATE_INPUT_REQUIRED"}
#: Our run statuses that a ``ListTasks`` status filter names.
RUN_STATUSES = {
    "TASK_STATE_SUBMITTED": "queued",
    "TASK_STATE_WORKING": "running",
    "TASK_STATE_INPUT_REQUIRED": "paused",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_CANCELED": "cancelled",
    "TASK_STATE_FAILED": "failed",
}


def timestamp(ms: int | None = None) -> str:
    """A ProtoJSON ``Timestamp``: RFC 3339 in UTC with a ``Z``."""
    when = datetime.fromtimestamp((time.time() * 1000 if ms is None else ms) / 1000, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


# -- the objects ---------------------------------------------------------------------------------------


def text_part(text: str) -> dict[str, Any]:
    return {"text": text}


def data_part(value: Any) -> dict[str, Any]:
    return {"data": value}


def message(message_id: str, role: str, parts: list[dict[str, Any]], task_id: str, context_id: str) -> dict[str, Any]:
    return {"messageId": message_id, "contextId": context_id, "taskId": task_id, "role": role, "parts": parts}


def status(state: str, at_ms: int, msg: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"state": state, "timestamp": timestamp(at_ms)}
    if msg is not None:
        out["message"] = msg
    return out


def status_update(task_id: str, context_id: str, task_status: dict[str, Any]) -> dict[str, Any]:
    """A ``StreamResponse`` holding a ``TaskStatusUpdateEvent``."""
    return {"statusUpdate": {"taskId": task_id, "contextId": context_id, "status": task_status}}


def artifact_update(
    task_id: str, context_id: str, artifact: dict[str, Any], *, append: bool, last_chunk: bool
) -> dict[str, Any]:
    """A ``StreamResponse`` holding a ``TaskArtifactUpdateEvent``."""
    event = {"taskId": task_id, "contextId": context_id, "artifact": artifact, "append": append}
    return {"artifactUpdate": {**event, "lastChunk": last_chunk}}


_RETRIES = ("attempt_abandoned", "model_retry")


@dataclass
class TaskFold:
    """One run folded into an A2A task (see the module docs).

    Args:
        run_id: The run (the task's id).
        session_id: The run's session (the task's ``contextId``).
        history: The task's messages (``Message`` objects), the user's and the agent's, oldest first.
    """

    run_id: str
    session_id: str
    history: list[dict[str, Any]] = field(default_factory=list)
    state: str = "TASK_STATE_SUBMITTED"
    status_message: dict[str, Any] | None = None
    updated_at: int = 0
    #: The last offset folded (-1: none).
    offset: int = -1
    #: Artifact id -> its parts, in the order they were created.
    artifacts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _count: int = 0
    _step_base: int = 0
    _in_step: bool = False
    #: Open text messages: message id -> artifact id, and whether a chunk of it went out.
    _texts: dict[str, str] = field(default_factory=dict)
    _sent: set[str] = field(default_factory=set)
    _calls: dict[str, dict[str, Any]] = field(default_factory=dict)

    # -- the snapshot ----------------------------------------------------------------------------------------

    def task(self, history_length: int | None = None, *, artifacts: bool = True) -> dict[str, Any]:
        """The ``Task`` as folded so far (``history_length``: its last messages only; 0: none)."""
        out: dict[str, Any] = {
            "id": self.run_id,
            "contextId": self.session_id,
            "status": status(self.state, self.updated_at, self.status_message),
        }
        if artifacts and self.artifacts:
            out["artifacts"] = [{"artifactId": a, "parts": parts} for a, parts in self.artifacts.items()]
        history = self.history if history_length is None else self.history[len(self.history) - history_length :]
        if history and history_length != 0:
            out["history"] = history
        return out

    # -- the stream ------------------------------------------------------------------------------------------

    def feed(self, ev: Event) -> list[dict[str, Any]]:
        """The ``StreamResponse`` results ``ev`` adds (it is folded into the snapshot too)."""
        self.offset = ev.offset
        self.updated_at = ev.timestamp
        kind, data = ev.type, ev.data
        if kind is EventType.RUN_STARTED:
            return self._moved("TASK_STATE_WORKING", None)
        if kind in (EventType.STEP_STARTED, EventType.STEP_FINISHED, EventType.CUSTOM):
            self._step(ev)
            return []
        if kind in (EventType.TEXT_MESSAGE_START, EventType.TEXT_MESSAGE_CONTENT, EventType.TEXT_MESSAGE_END):
            return self._text(ev)
        if kind in (EventType.TOOL_CALL_START, EventType.TOOL_CALL_ARGS, EventType.TOOL_CALL_END):
            return self._call(ev)
        if kind is EventType.TOOL_CALL_RESULT:
            cid = str(data.get("tool_call_id", ""))
            content = data.get("content")
            result = {"id": cid, "name": self._calls.get(cid, {}).get("name", ""), "content": content}
            return self._working(f"result-{cid}", {"tool_result": result})
        if kind is EventType.RUN_FINISHED:
            return self._finished(ev)
        if kind is EventType.RUN_ERROR:
            text = str(data.get("message") or "the run failed")
            return self._moved("TASK_STATE_FAILED", self._agent_message(f"error-{ev.offset}", [text_part(text)]))
        return []

    def _step(self, ev: Event) -> None:
        """Where a step starts and ends, and whether its attempt was left behind (then :meth:`_reset`)."""
        data = ev.data
        if ev.type is EventType.STEP_STARTED:
            if self._in_step:  # the retry of a step whose attempt died
                self._reset()
            self._in_step, self._step_base = True, self._count
        elif ev.type is EventType.STEP_FINISHED:
            if (data.get("metadata") or {}).get("abandoned"):
                self._reset()
            else:
                self._in_step = False
        elif data.get("name") in _RETRIES:
            self._reset()
        elif data.get("name") == UNIT_SAVED:  # a guest's saved unit: a retry replays it, it is not taken back
            self._step_base = self._count

    def _reset(self) -> None:
        """Take back what the step's attempt began (its artifacts go from the snapshot; the retry replaces them)."""
        for n in range(self._step_base, self._count):
            self.artifacts.pop(f"text-{n}", None)
            self._sent.discard(f"text-{n}")
        self._count = self._step_base
        self._texts.clear()
        for cid in [c for c, call in self._calls.items() if not call.get("done")]:
            self._calls.pop(cid)

    def _text(self, ev: Event) -> list[dict[str, Any]]:
        mid = str(ev.data.get("message_id", ""))
        if ev.type is EventType.TEXT_MESSAGE_START:
            if ev.data.get("role", "assistant") != "assistant":
                return []  # a user message sent to the live run: the history has it
            self._texts[mid] = f"text-{self._count}"
            self._count += 1
            return []
        aid = self._texts.get(mid)
        if aid is None:
            return []
        if ev.type is EventType.TEXT_MESSAGE_CONTENT:
            part = text_part(str(ev.data.get("delta", "")))
            first = aid not in self._sent
            self._sent.add(aid)
            held = self.artifacts.setdefault(aid, [])
            if first:
                held[:] = [dict(part)]
            elif held and "text" in held[-1]:  # the snapshot holds the text so far as one part
                held[-1]["text"] += part["text"]
            else:
                held.append(dict(part))
            artifact = {"artifactId": aid, "parts": [part]}
            return [artifact_update(self.run_id, self.session_id, artifact, append=not first, last_chunk=False)]
        del self._texts[mid]
        if aid not in self._sent:
            return []  # a message with no text: no artifact
        self._sent.discard(aid)  # a retry's message of the same id starts it again
        artifact = {"artifactId": aid, "parts": []}
        return [artifact_update(self.run_id, self.session_id, artifact, append=True, last_chunk=True)]

    def _call(self, ev: Event) -> list[dict[str, Any]]:
        cid = str(ev.data.get("tool_call_id", ""))
        if ev.type is EventType.TOOL_CALL_START:
            self._calls[cid] = {"name": str(ev.data.get("tool_call_name", "")), "args": ""}
            return []
        call = self._calls.get(cid)
        if call is None or call.get("done"):
            return []
        if ev.type is EventType.TOOL_CALL_ARGS:
            call["args"] += str(ev.data.get("delta", ""))
            return []
        call["done"] = True
        arguments = json_or_text(call["args"]) if call["args"] else {}
        return self._working(f"call-{cid}", {"tool_call": {"id": cid, "name": call["name"], "arguments": arguments}})

    def _finished(self, ev: Event) -> list[dict[str, Any]]:
        outcome = ev.data.get("outcome") or {}
        kind = outcome.get("type") if isinstance(outcome, dict) else None
        if kind == "interrupt" or (kind == "success" and outcome.get("pending_tool_call_ids")):
            ids = [str(i.get("id")) for i in outcome.get("interrupts") or [] if isinstance(i, dict)]
            ids = ids or [str(i) for i in outcome.get("pending_tool_call_ids") or []]
            return self._moved("TASK_STATE_INPUT_REQUIRED", self.pending_message(ev.offset, ids))
        if kind == "cancelled":
            return self._moved("TASK_STATE_CANCELED", None)
        out: list[dict[str, Any]] = []
        result = ev.data.get("result")
        if result is not None and not isinstance(result, str):  # structured output: the validated value
            self.artifacts["output"] = [data_part(result)]
            artifact = {"artifactId": "output", "name": "output", "parts": [data_part(result)]}
            out.append(artifact_update(self.run_id, self.session_id, artifact, append=False, last_chunk=True))
        return out + self._moved("TASK_STATE_COMPLETED", None)

    def pending_message(self, offset: int, ids: list[str]) -> dict[str, Any]:
        """The ``INPUT_REQUIRED`` status message: what to decide, and the calls (a data part)."""
        pending = []
        for cid in ids:
            call = self._calls.get(cid, {})
            args = call.get("args") or "{}"
            pending.append({"tool_call_id": cid, "name": call.get("name", ""), "arguments": json_or_text(args)})
        names = ", ".join(f"{p['name']} ({p['tool_call_id']})" for p in pending)
        text = (
            f"waiting for decisions on {names}: send a message on this task with a data part "
            '{"decisions": [{"tool_call_id", "confirmed", "confirmation_note"?, "tool_args"?}]}'
        )
        return self._agent_message(f"input-{offset}", [text_part(text), data_part({"pending": pending})])

    def _agent_message(self, message_id: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
        return message(f"{self.run_id}-{message_id}", "ROLE_AGENT", parts, self.run_id, self.session_id)

    def _working(self, message_id: str, value: dict[str, Any]) -> list[dict[str, Any]]:
        return self._moved("TASK_STATE_WORKING", self._agent_message(message_id, [data_part(value)]))

    def _moved(self, state: str, msg: dict[str, Any] | None) -> list[dict[str, Any]]:
        self.state, self.status_message = state, msg
        task_status = status(state, self.updated_at, msg)
        return [status_update(self.run_id, self.session_id, task_status)]

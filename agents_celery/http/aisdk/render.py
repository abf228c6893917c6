"""Render a run's stored log as the Vercel AI SDK's UI message stream (``useChat``, npm ``ai`` 5 to 7).

No I/O here. One run is one assistant message of the chat: it opens with ``start`` (``messageId`` the run's,
``messageMetadata`` naming the run, its session and the log offset the message starts at), goes on across
pauses (a run answered after an approval is the same message, as the SDK continues it) and ends with
``finish`` at the run's end or pause. The SDK validates every chunk against its schema and throws on one it
does not know, so only the protocol's chunks are written.

Mapping (stored event -> chunks):

- STEP_STARTED / STEP_FINISHED -> ``start-step`` / ``finish-step`` (a workflow's step too: an SDK step of its own,
  closing the one open). A step an attempt left behind (a crash: STEP_FINISHED ``abandoned``, CUSTOM
  ``attempt_abandoned``; a model retry: CUSTOM ``model_retry``) is ``reset-step``: the SDK drops the parts since the
  last ``start-step``, and the next attempt's parts come in the same step, so the message equals one of a run that
  never crashed. A guest's step (a pydantic-ai segment) holds many units, and a retry replays the saved ones without
  writing their events again: each CUSTOM ``unit_saved`` closes the SDK's step there (the next part opens another), so
  a reset drops only what no unit saved.
- TEXT_MESSAGE_START/CONTENT/END of the assistant -> ``text-start/delta/end`` (the message id).
- TOOL_CALL_START/ARGS/END -> ``tool-input-start/delta/available`` (``input`` parsed from the arguments);
  TOOL_CALL_RESULT -> ``tool-output-available`` (``output`` the result, JSON when it parses), or
  ``tool-output-denied`` for a call the human rejected.
- A pause for decisions (RUN_FINISHED ``interrupt``) -> ``tool-approval-request`` per call (``approvalId`` is
  the call id), then ``finish`` (``tool-calls``). A pause for the client's own tools -> ``finish`` (their
  ``tool-input-available`` went out: the page runs them and sends ``addToolOutput``'s answer).
- The RUN_STARTED of a continue -> ``tool-approval-response`` per decided call, so a replay of the whole
  message shows each approval answered, as the page had it.
- RUN_FINISHED success -> ``finish`` (``stop``), after a ``data-output`` part holding the value when the run's
  output is structured (an output schema, a pydantic-ai ``output_type``); cancelled -> ``abort`` then
  ``finish``; RUN_ERROR -> ``error`` (its message) then ``finish`` (``error``).
- Our events that have no chunk: CUSTOM ``<name>`` -> ``data-<name>`` (transient: the page need not keep it);
  SUBAGENT_STARTED/FINISHED/ERROR -> ``data-subagent`` (id the child run: each updates the one part).

The stream ends with ``data: [DONE]``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...events import UNIT_SAVED, Event, EventType, json_or_text
from ...storage.eventlog import Entry

#: The response header that names the protocol (the SDK's own servers send it).
HEADER = ("x-vercel-ai-ui-message-stream", "v1")
DONE = "data: [DONE]\n\n"

_RETRIES = ("attempt_abandoned", "model_retry")
#: The chunks that add a part to the message (what a ``reset-step`` takes back).
_PARTS = ("text-start", "tool-input-start", "data-subagent")
_SUBAGENT = (EventType.SUBAGENT_STARTED, EventType.SUBAGENT_FINISHED, EventType.SUBAGENT_ERROR)


def message_id(run_id: str) -> str:
    """The id of the assistant message a run is."""
    return f"msg-{run_id}"


def chunk_frame(chunk: dict[str, Any]) -> str:
    """One SSE frame of the stream: ``data: <json>``, no id and no event name (the SDK reads only data)."""
    return f"data: {json.dumps(chunk, separators=(',', ':'), ensure_ascii=False)}\n\n"


@dataclass
class ChatFold:
    """The chunks of one run's message, folded from its log event by event (see the module docs).

    Args:
        run_id: The run; its message id is :func:`message_id` of it.
        session_id: The chat (our session), named in the message metadata.
        ends_after: A terminal event ends the stream only at an offset above this: a replay of a run continued
            after a pause goes on past the earlier pauses (-1: the first terminal event ends it).
    """

    run_id: str
    session_id: str
    ends_after: int = -1
    #: The stream ended (its ``finish`` went out).
    finished: bool = False
    started: bool = False
    #: Our step is open (STEP_STARTED, not yet finished); the SDK's step is open (``start-step`` sent); the
    #: parts that SDK step holds.
    _in_step: bool = False
    _sdk_open: bool = False
    _step_parts: int = 0
    _texts: set[str] = field(default_factory=set)
    #: The calls the message shows (id -> tool name), and those its current step opened.
    _calls: dict[str, str] = field(default_factory=dict)
    _step_calls: set[str] = field(default_factory=set)
    _args: dict[str, str] = field(default_factory=dict)
    _rejected: set[str] = field(default_factory=set)
    #: The calls the message asked a human about (their approval ids are their call ids).
    _asked: set[str] = field(default_factory=set)

    def feed(self, ev: Event) -> list[dict[str, Any]]:
        """The chunks ``ev`` adds (none once the stream finished)."""
        if self.finished:
            return []
        out: list[dict[str, Any]] = []
        if not self.started:
            self.started = True
            meta = {"run_id": self.run_id, "session_id": self.session_id, "offset": ev.offset}
            out.append({"type": "start", "messageId": message_id(self.run_id), "messageMetadata": meta})
        rendered = self._render(ev)
        first = next((i for i, c in enumerate(rendered) if c["type"] in _PARTS), None)
        if first is not None and not self._sdk_open:  # a part after a saved unit opens the next SDK step
            rendered.insert(first, {"type": "start-step"})
            self._sdk_open, self._step_parts = True, 0
        self._step_parts += sum(1 for c in rendered if c["type"] in _PARTS)
        return out + rendered

    def take_in(self, ev: Event) -> None:
        """Fold ``ev`` without rendering it: the earlier segments of a message the page already has (a continue's
        stream shows the results of calls it made there)."""
        if ev.type is EventType.TOOL_CALL_START:
            self._calls[str(ev.data.get("tool_call_id", ""))] = str(ev.data.get("tool_call_name", ""))
        elif ev.type is EventType.RUN_FINISHED:
            self._asked.update(_interrupt_ids(ev))
        elif ev.type is EventType.RUN_STARTED:
            self._decided((ev.data.get("metadata") or {}).get("decisions") or [])

    def _render(self, ev: Event) -> list[dict[str, Any]]:
        data, kind = ev.data, ev.type
        if kind is EventType.RUN_STARTED:
            return self._decided((data.get("metadata") or {}).get("decisions") or [])
        if kind in (EventType.STEP_STARTED, EventType.STEP_FINISHED):
            return self._step(ev)
        if kind is EventType.CUSTOM:
            name = str(data.get("name") or "custom")
            if name == UNIT_SAVED:
                self._step_calls.clear()
                return self._close_sdk_step() if self._step_parts else []
            reset = self._reset() if name in _RETRIES else []
            return [*reset, {"type": f"data-{name}", "data": data.get("value"), "transient": True}]
        if kind in _SUBAGENT:
            return [{"type": "data-subagent", "id": str(data.get("subagent_run_id", "")), "data": _subagent(ev)}]
        if kind in (EventType.TEXT_MESSAGE_START, EventType.TEXT_MESSAGE_CONTENT, EventType.TEXT_MESSAGE_END):
            return self._text(ev)
        if kind in (EventType.TOOL_CALL_START, EventType.TOOL_CALL_ARGS, EventType.TOOL_CALL_END):
            return self._call(ev)
        if kind is EventType.TOOL_CALL_RESULT:
            return self._result(ev)
        if kind is EventType.RUN_FINISHED:
            return self._finished(ev)
        if kind is EventType.RUN_ERROR:
            failure = {"type": "error", "errorText": str(data.get("message") or "the run failed")}
            return self._end(ev, [failure], "error")
        return []

    def _step(self, ev: Event) -> list[dict[str, Any]]:
        meta = ev.data.get("metadata") or {}
        if "workflow_step" in meta:  # a workflow's step: an SDK step of its own, inside the run's own steps
            if ev.type is EventType.STEP_STARTED:
                closed = self._close_sdk_step()
                self._sdk_open, self._step_parts = True, 0
                return [*closed, {"type": "start-step"}]
            return self._close_sdk_step()
        if ev.type is EventType.STEP_STARTED:
            if self._in_step:  # the retry of a step whose attempt died (its parts were reset, or are now)
                return self._reset()
            self._in_step, self._sdk_open, self._step_parts = True, True, 0
            self._step_calls.clear()
            return [{"type": "start-step"}]
        if (ev.data.get("metadata") or {}).get("abandoned"):
            return self._reset()
        self._in_step = False
        return self._close_sdk_step()

    def _reset(self) -> list[dict[str, Any]]:
        """Drop what the step showed so far (an attempt that died, a model call retried)."""
        self._texts.clear()
        for cid in self._step_calls:
            self._calls.pop(cid, None)
            self._args.pop(cid, None)
        self._step_calls.clear()
        if not self._sdk_open or self._step_parts == 0:
            return []
        self._step_parts = 0
        return [{"type": "reset-step"}]

    def _close_sdk_step(self) -> list[dict[str, Any]]:
        if not self._sdk_open:
            return []
        self._sdk_open = False
        return [{"type": "finish-step"}]

    def _text(self, ev: Event) -> list[dict[str, Any]]:
        mid = str(ev.data.get("message_id", ""))
        if ev.type is EventType.TEXT_MESSAGE_START:
            if ev.data.get("role", "assistant") != "assistant":
                return []  # the user's message (or a steering one): the page has it
            self._texts.add(mid)
            return [{"type": "text-start", "id": mid}]
        if mid not in self._texts:
            return []  # the user's text, or what a reset dropped
        if ev.type is EventType.TEXT_MESSAGE_CONTENT:
            return [{"type": "text-delta", "id": mid, "delta": str(ev.data.get("delta", ""))}]
        self._texts.discard(mid)
        return [{"type": "text-end", "id": mid}]

    def _call(self, ev: Event) -> list[dict[str, Any]]:
        cid = str(ev.data.get("tool_call_id", ""))
        if ev.type is EventType.TOOL_CALL_START:
            self._calls[cid], self._args[cid] = str(ev.data.get("tool_call_name", "")), ""
            self._step_calls.add(cid)
            return [{"type": "tool-input-start", "toolCallId": cid, "toolName": self._calls[cid]}]
        if cid not in self._args:
            return []  # closed already, or dropped by a reset
        if ev.type is EventType.TOOL_CALL_ARGS:
            delta = str(ev.data.get("delta", ""))
            self._args[cid] += delta
            return [{"type": "tool-input-delta", "toolCallId": cid, "inputTextDelta": delta}]
        args = self._args.pop(cid)
        parsed = json_or_text(args) if args else {}
        return [{"type": "tool-input-available", "toolCallId": cid, "toolName": self._calls[cid], "input": parsed}]

    def _result(self, ev: Event) -> list[dict[str, Any]]:
        cid = str(ev.data.get("tool_call_id", ""))
        if cid not in self._calls:
            return []  # a call this message never showed (a child's, or before a reset)
        if cid in self._rejected:
            return [{"type": "tool-output-denied", "toolCallId": cid}]
        content = ev.data.get("content")
        output = json_or_text(content) if isinstance(content, str) else content
        return [{"type": "tool-output-available", "toolCallId": cid, "output": output}]

    def _decided(self, decisions: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for d in decisions:
            cid, decision = str(d.get("tool_call_id", "")), d.get("decision")
            if cid not in self._asked or decision not in ("approved", "rejected"):
                continue  # a client tool's answer (its output comes as a result) or a call not shown
            if decision == "rejected":
                self._rejected.add(cid)
            out.append({"type": "tool-approval-response", "approvalId": cid, "approved": decision == "approved"})
        return out

    def _finished(self, ev: Event) -> list[dict[str, Any]]:
        outcome = ev.data.get("outcome") or {}
        kind = outcome.get("type") if isinstance(outcome, dict) else None
        if kind == "interrupt":
            ids = [cid for cid in _interrupt_ids(ev) if cid in self._calls]
            self._asked.update(ids)
            asks = [{"type": "tool-approval-request", "approvalId": cid, "toolCallId": cid} for cid in ids]
            return self._end(ev, asks, "tool-calls")
        if kind == "success" and outcome.get("pending_tool_call_ids"):
            return self._end(ev, [], "tool-calls")
        if kind == "cancelled":
            return self._end(ev, [{"type": "abort", "reason": "stopped"}], "other")
        result = ev.data.get("result")
        if result is not None and not isinstance(result, str):  # structured output: the validated value
            return self._end(ev, [{"type": "data-output", "id": "output", "data": result}], "stop")
        return self._end(ev, [], "stop")

    def _end(self, ev: Event, before: list[dict[str, Any]], reason: str) -> list[dict[str, Any]]:
        if ev.offset <= self.ends_after:
            return before  # an earlier pause of a run replayed whole: the message goes on
        self.finished = True
        self._in_step = False
        return [*before, *self._close_sdk_step(), {"type": "finish", "finishReason": reason}]


def _interrupt_ids(ev: Event) -> list[str]:
    """The calls a RUN_FINISHED pause asks a human about (none for another end)."""
    outcome = ev.data.get("outcome")
    if not isinstance(outcome, dict) or outcome.get("type") != "interrupt":
        return []
    return [str(i.get("id")) for i in outcome.get("interrupts") or [] if isinstance(i, dict)]


def _subagent(ev: Event) -> dict[str, Any]:
    state = {EventType.SUBAGENT_STARTED: "running", EventType.SUBAGENT_FINISHED: "finished"}.get(ev.type, "failed")
    return {"state": state, **{k: v for k, v in ev.data.items() if k != "metadata"}}


class ChatPresenter:
    """The :class:`~agents_celery.http.sse.Presenter` of an AI SDK stream: renders pages through a
    :class:`ChatFold`, ``prefix`` (the earlier segments of a replayed message, already folded) first, and
    ``data: [DONE]`` once the fold finished."""

    def __init__(self, fold: ChatFold, prefix: str = "", skip: int = 0) -> None:
        self.fold = fold
        self._prefix = prefix
        #: Chunks not to send (a reconnect by chunk index: the client has them).
        self._skip = skip
        self.finished = False

    def needs_thread(self, page: Sequence[Entry]) -> bool:
        """Rendering reads and writes no Redis."""
        return False

    def frames(self, events: list[Event]) -> str:
        out = [self._prefix] if self._prefix else []
        self._prefix = ""
        for ev in events:
            chunks = self.fold.feed(ev)
            dropped = min(self._skip, len(chunks))
            self._skip -= dropped
            out += [chunk_frame(c) for c in chunks[dropped:]]
            if self.fold.finished:
                out.append(DONE)
                self.finished = True
                break
        return "".join(out)

    def error(self, exc: BaseException) -> str:
        """The stream broke off (Redis went away): an ``error`` chunk, and the end (the page may resume)."""
        self.finished = True
        return chunk_frame({"type": "error", "errorText": f"the stream broke off: {exc}"}) + DONE

"""Render a run's stored log in the vocabulary of OpenAI's Responses API (the ``/v1`` routes, :mod:`.endpoint`).

No I/O here. A *response* is one segment of a run, as AG-UI's ``runId`` is: it starts at a RUN_STARTED of the log
(offset ``base``: 0 for a new run, the continue's RUN_STARTED for a run answered after a pause) and ends at the
segment's first RUN_FINISHED / RUN_ERROR. Its id spells both: ``resp_<run_id>_<base>`` (:func:`response_id`).

:class:`ResponseFold` reads the log from offset 0 (what comes before ``base`` is taken in silently: tool names
and arguments of earlier segments, the previous segment's start) and turns the segment's events into Responses
stream events, each with its ``sequence_number``: 0, 1, 2 ... in the order they are rendered. The rendering is a
pure function of the log, so the numbers are the same on every replay and ``starting_after=N`` resumes exactly
after N (the fold renders from the start and drops what is at or before N). It also builds the Response object
(``output`` items, ``status``, ``error``), the same one the stream's last event carries.

Mapping (stored AG-UI event -> Responses events):

- RUN_STARTED at ``base`` -> ``response.created`` (status ``queued``); the segment's first STEP_STARTED ->
  ``response.in_progress``.
- TEXT_MESSAGE_START/CONTENT/END (the assistant's) -> a ``message`` item: ``output_item.added``,
  ``content_part.added``, ``output_text.delta`` ..., ``output_text.done``, ``content_part.done``.
- TOOL_CALL_START/ARGS/END of a client's function tool (``tools`` of type ``function``) -> a ``function_call``
  item with ``function_call_arguments.delta`` / ``.done``; of one of the agent's own tools -> an ``mcp_call`` item
  (``server_label`` = the agent) with ``mcp_call_arguments.delta`` / ``.done``, done with its ``output`` when
  TOOL_CALL_RESULT comes. A tool that needs a confirmation shows nothing until the pause, where it is an
  ``mcp_approval_request`` item; once approved its result is an ``mcp_call`` item of the next response.
- A message or function call item is done (``output_item.done``) when its step finishes: ``completed``, or
  ``incomplete`` when the step was abandoned (a crashed attempt, a model retry): the retried attempt's text comes
  as a new item. Items still open at the segment's end are done ``incomplete``.
- RUN_FINISHED success, interrupt (approval requests) or pending client calls (``function_call`` items) ->
  ``response.completed``; a structured output that came as a value, not as the model's text (a pydantic-ai
  agent's output tool), is first a ``message`` item holding its JSON; cancelled -> ``response.cancelled``
  (status ``cancelled``); RUN_ERROR -> ``response.failed`` with ``error``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...events import Event, EventType, ToolCalls

#: The version of the fold's rendering a checkpoint was made by (:meth:`ResponseFold.snapshot`): bump it when the
#: rendering changes, so a checkpoint of the old one is not resumed from.
RENDERING = 1
#: The Response statuses.
TERMINAL_EVENT = {"completed": "response.completed", "cancelled": "response.cancelled", "failed": "response.failed"}


def response_id(run_id: str, base: int) -> str:
    """The id of the response that is the segment of ``run_id`` starting at offset ``base``."""
    return f"resp_{run_id}_{base}"


def parse_response_id(value: str) -> tuple[str, int] | None:
    """(run id, base offset) of a response id; None when it is not one of ours."""
    if not value.startswith("resp_"):
        return None
    run_id, _, base = value[5:].rpartition("_")
    if not run_id or not base.isascii() or not base.isdigit() or len(base) > 18:
        return None
    return run_id, int(base)


def client_call_id(run_id: str, call_id: str) -> str:
    """The ``call_id`` a client sees for a call of its function tool: the model's id, prefixed with the run's, so
    that a stateless client's ``function_call_output`` (which carries nothing else) finds its paused run."""
    return f"call_{run_id}_{call_id}"


_CLIENT_CALL = re.compile(r"call_([0-9a-f]{32})_(.+)", re.ASCII | re.DOTALL)


def parse_client_call_id(value: str) -> tuple[str, str] | None:
    """(run id, the model's call id) of a :func:`client_call_id`; None for another id."""
    found = _CLIENT_CALL.fullmatch(value)
    return (found.group(1), found.group(2)) if found else None


def approval_request_id(run_id: str, call_id: str) -> str:
    """The id of the ``mcp_approval_request`` item for a call: the model's id prefixed with the run's, so that a
    stateless client's ``mcp_approval_response`` (or the request item it echoes) finds its paused run."""
    return f"mcpr_{run_id}_{call_id}"


_APPROVAL = re.compile(r"mcpr_([0-9a-f]{32})_(.+)", re.ASCII | re.DOTALL)


def parse_approval_id(value: str) -> tuple[str, str] | None:
    """(run id, the model's call id) of an :func:`approval_request_id`; None for another id."""
    found = _APPROVAL.fullmatch(value)
    return (found.group(1), found.group(2)) if found else None


def starts_segment(ev: Event) -> bool:
    """Whether ``ev`` opens a response: a RUN_STARTED that is not only there to end a paused run (a stop)."""
    return ev.type is EventType.RUN_STARTED and not (ev.data.get("metadata") or {}).get("stopping")


def usage_between(start: dict[str, int], end: dict[str, int]) -> dict[str, int]:
    """The usage of a stretch of a run: its running total at the end less the one at the start."""
    return {name: max(0, int(value) - int(start.get(name, 0))) for name, value in end.items()}


def usage_object(usage: dict[str, int]) -> dict[str, Any]:
    """Our usage counters as the Responses API spells them."""
    given, made = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
    return {
        "input_tokens": given,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": made,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": int(usage.get("total_tokens", given + made)),
    }


@dataclass
class ResponseSegment:
    """What a response says of itself besides its output (from the request that started its run)."""

    run_id: str
    base: int
    agent_id: str
    record: dict[str, Any] = field(default_factory=dict)
    #: The client's function tools (their calls are ``function_call`` items) and the agent's tools that need a
    #: confirmation (their calls show as approval requests).
    functions: frozenset[str] = frozenset()
    confirm: frozenset[str] = frozenset()
    #: The run's running total of usage, as its state holds it now.
    usage: dict[str, int] = field(default_factory=dict)
    #: The run's running total where the segment ended, given the offset of its terminal event (read when the
    #: fold reaches it; None: ``usage``).
    end_usage: Callable[[int], dict[str, int]] | None = None

    @property
    def id(self) -> str:
        return response_id(self.run_id, self.base)

    @property
    def structured(self) -> bool:
        """The request asked for structured output (``text.format`` ``json_schema`` / ``json_object``)."""
        spec = (self.record.get("text") or {}).get("format") or {}
        return isinstance(spec, dict) and spec.get("type") in ("json_schema", "json_object")


#: The fold's fields a checkpoint holds: all of its state but the segment (which the request gives) and the calls.
_STATE = (
    "seq", "output", "status", "_in_progress_sent", "start_usage", "usage", "_at", "error", "created_at", "started",
    "ended", "previous_base", "decisions", "answered", "function_outputs", "_open", "_step_items",
)  # fmt: skip


class ResponseFold:
    """The Responses events of one segment and its Response object, folded from the run's log (module docs)."""

    def __init__(self, segment: ResponseSegment) -> None:
        self.segment = segment
        self.seq = -1
        self.output: list[dict[str, Any]] = []
        # A background response waits in a queue; a foreground one is worked on from the start, as OpenAI's.
        self.status = "queued" if segment.record.get("background") else "in_progress"
        self._in_progress_sent = False
        #: The run's usage when the segment started (its RUN_STARTED records it) and the segment's own, once ended.
        self.start_usage: dict[str, int] = {}
        self.usage: dict[str, int] | None = None
        self._at = -1  # the offset of the event being rendered
        self.error: dict[str, Any] | None = None
        self.created_at = 0
        #: Set once the segment's RUN_STARTED was seen; ``ended`` once its terminal event was.
        self.started = False
        self.ended = False
        #: The previous segment's base (its response is this one's ``previous_response_id``).
        self.previous_base: int | None = None
        #: The decisions the continue that opened this segment carried (``input_items`` of a continued response).
        self.decisions: list[dict[str, Any]] = []
        #: The segment ended the run with its answer (the last message is the final answer).
        self.answered = False
        #: The client's answers to its function calls, as the log recorded them.
        self.function_outputs: dict[str, str] = {}
        self._calls = ToolCalls()
        self._open: dict[str, int] = {}  # message or call id -> output index, while its item is open
        self._step_items: list[str] = []  # ids of the items opened in the current step (closed at its end)

    # -- checkpoints (agents_celery.storage.renders) ------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The fold's state as JSON data: :meth:`restore` with the same segment folds on exactly as this one."""
        state = {name: getattr(self, name) for name in _STATE}
        return {**state, "calls": [self._calls.names, self._calls.raw_args], "rendering": RENDERING}

    @classmethod
    def restore(cls, segment: ResponseSegment, state: dict[str, Any]) -> ResponseFold | None:
        """The fold a :meth:`snapshot` was taken of; None for one made by another rendering."""
        if state.get("rendering") != RENDERING:
            return None
        fold = cls(segment)
        for name in _STATE:
            setattr(fold, name, state[name])
        fold._calls.names, fold._calls.raw_args = state["calls"]
        return fold

    # -- folding ---------------------------------------------------------------------------------------------

    def feed(self, ev: Event) -> list[dict[str, Any]]:
        """The Responses events ``ev`` renders to (none before the segment or after its end)."""
        self._calls.take(ev)
        if self.ended:
            return []
        if not self.started:
            if ev.offset < self.segment.base:
                if starts_segment(ev):
                    self.previous_base = ev.offset
                return []
            self.started = True
            self.created_at = ev.timestamp // 1000
            meta = ev.data.get("metadata") or {}
            self.decisions = list(meta.get("decisions") or [])
            self.start_usage = dict(meta.get("usage") or {})
            return [self._event("response.created", response=self.response())]
        self._at = ev.offset
        return self._render(ev)

    def _render(self, ev: Event) -> list[dict[str, Any]]:
        data, kind = ev.data, ev.type
        if kind is EventType.STEP_STARTED:
            self._step_items = []
            if not self._in_progress_sent:
                self.status, self._in_progress_sent = "in_progress", True
                return [self._event("response.in_progress", response=self.response())]
            return []
        if kind is EventType.STEP_FINISHED:
            return self._close_step(bool((data.get("metadata") or {}).get("abandoned")))
        if kind is EventType.CUSTOM and data.get("name") == "model_retry":
            return self._close_step(abandoned=True)  # the failed call's items; the retry's come as new ones
        if kind in (EventType.TEXT_MESSAGE_START, EventType.TEXT_MESSAGE_CONTENT, EventType.TEXT_MESSAGE_END):
            return self._text(ev)
        if kind in (EventType.TOOL_CALL_START, EventType.TOOL_CALL_ARGS, EventType.TOOL_CALL_END):
            return self._call(ev)
        if kind is EventType.TOOL_CALL_RESULT:
            return self._result(ev)
        if kind is EventType.RUN_FINISHED:
            return self._finished(data)
        if kind is EventType.RUN_ERROR:
            self.error = {"code": str(data.get("code") or "run_error"), "message": data.get("message", "")}
            return self._end("failed")
        return []

    def _text(self, ev: Event) -> list[dict[str, Any]]:
        mid = str(ev.data.get("message_id", ""))
        if mid.startswith("usr_"):  # a user's message sent to the live run: input, not output
            return []
        if ev.type is EventType.TEXT_MESSAGE_START:
            item: dict[str, Any] = {
                "id": mid,
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            if self.segment.structured:  # only the final answer is the structured output (the SDK parses it)
                item["phase"] = "commentary"
            index = self._add(mid, item)
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item["content"].append(dict(part))
            added = self._event("response.output_item.added", output_index=index, item=_copy(item, content=[]))
            common = {"item_id": mid, "output_index": index, "content_index": 0}
            return [added, self._event("response.content_part.added", **common, part=part)]
        found = self._open.get(mid)
        if found is None:
            return []
        index, item = found, self.output[found]
        part = item["content"][0]
        common = {"item_id": mid, "output_index": index, "content_index": 0}
        if ev.type is EventType.TEXT_MESSAGE_CONTENT:
            delta = ev.data.get("delta", "")
            part["text"] += delta
            return [self._event("response.output_text.delta", **common, delta=delta, logprobs=[])]
        if item.get("_text_done"):
            return []
        item["_text_done"] = True
        return [
            self._event("response.output_text.done", **common, text=part["text"], logprobs=[]),
            self._event("response.content_part.done", **common, part=dict(part)),
        ]

    def _call(self, ev: Event) -> list[dict[str, Any]]:
        cid = str(ev.data.get("tool_call_id", ""))
        name = self._calls.names.get(cid, "")
        if ev.type is EventType.TOOL_CALL_START:
            if name in self.segment.confirm and name not in self.segment.functions:
                return []  # shown as an approval request at the pause (or as an mcp_call once it ran)
            item: dict[str, Any]
            if name in self.segment.functions:
                exposed = client_call_id(self.segment.run_id, cid)
                item = {
                    "id": f"fc_{exposed}",
                    "type": "function_call",
                    "call_id": exposed,
                    "name": name,
                    "arguments": "",
                }
            else:
                item = {
                    "id": cid,
                    "type": "mcp_call",
                    "server_label": self.segment.agent_id,
                    "name": name,
                    "arguments": "",
                    "output": None,
                    "error": None,
                }
            item["status"] = "in_progress"
            index = self._add(cid, item)
            return [self._event("response.output_item.added", output_index=index, item=dict(item))]
        found = self._open.get(cid)
        if found is None:
            return []
        index, item = found, self.output[found]
        prefix = (
            "response.function_call_arguments" if item["type"] == "function_call" else "response.mcp_call_arguments"
        )
        if ev.type is EventType.TOOL_CALL_ARGS:
            delta = ev.data.get("delta", "")
            item["arguments"] += delta
            return [self._event(f"{prefix}.delta", item_id=item["id"], output_index=index, delta=delta)]
        return [self._event(f"{prefix}.done", item_id=item["id"], output_index=index, arguments=item["arguments"])]

    def _result(self, ev: Event) -> list[dict[str, Any]]:
        cid = str(ev.data.get("tool_call_id", ""))
        name = self._calls.names.get(cid, "")
        content = ev.data.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        if name in self.segment.functions:
            self.function_outputs[cid] = text
            return []  # the client's own answer (its input), not our output
        out: list[dict[str, Any]] = []
        found = self._open.get(cid)
        if found is None:  # started before this segment (an approved call), or its item was closed
            item: dict[str, Any] = {
                "id": cid,
                "type": "mcp_call",
                "server_label": self.segment.agent_id,
                "name": name,
                "arguments": self._calls.arguments(cid),
                "output": None,
                "error": None,
                "status": "in_progress",
            }
            found = self._add(cid, item, in_step=False)
            out.append(self._event("response.output_item.added", output_index=found, item=dict(item)))
        item = self.output[found]
        item["output"] = text
        return [*out, self._done(cid, "completed")]

    def _finished(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        outcome = data.get("outcome") or {}
        kind = outcome.get("type", "success")
        if kind == "cancelled":
            return self._end("cancelled")
        out = []
        if kind == "success" and not outcome.get("pending_tool_call_ids"):
            self.answered = True
            result = data.get("result")
            if result is not None and not isinstance(result, str) and self._answer_not_said():
                out += self._structured_answer(result)
        out += self._close_all()
        for interrupt in outcome.get("interrupts") or []:
            meta = interrupt.get("metadata") or {}
            cid = interrupt.get("tool_call_id") or interrupt.get("id", "")
            args = meta.get("tool_args")
            item = {
                "id": approval_request_id(self.segment.run_id, cid),
                "type": "mcp_approval_request",
                "server_label": self.segment.agent_id,
                "name": meta.get("tool_name") or self._calls.names.get(cid, ""),
                "arguments": json.dumps(args) if isinstance(args, dict) else self._calls.arguments(cid),
            }
            index = len(self.output)
            self.output.append(item)
            out.append(self._event("response.output_item.added", output_index=index, item=dict(item)))
            out.append(self._event("response.output_item.done", output_index=index, item=dict(item)))
        return [*out, *self._end("completed")]

    def _answer_not_said(self) -> bool:
        """The segment's last item is not a message: its structured output came without a text answer."""
        return not self.output or self.output[-1]["type"] != "message"

    def _structured_answer(self, result: Any) -> list[dict[str, Any]]:
        """A structured output that came as a value, not as the model's text (a pydantic-ai agent's output tool):
        one message item holding its JSON, so ``output_text`` is the answer as for a typed agent of ours. Its id
        is the segment's, so a replay renders it the same."""
        mid, text = f"msg_{self.segment.id}_output", json.dumps(result)
        item: dict[str, Any] = {"id": mid, "type": "message", "role": "assistant", "status": "in_progress"}
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        index = self._add(mid, {**item, "content": [{**part, "text": text}], "_text_done": True}, in_step=False)
        common = {"item_id": mid, "output_index": index, "content_index": 0}
        return [
            self._event("response.output_item.added", output_index=index, item={**item, "content": []}),
            self._event("response.content_part.added", **common, part=part),
            self._event("response.output_text.delta", **common, delta=text, logprobs=[]),
            self._event("response.output_text.done", **common, text=text, logprobs=[]),
            self._event("response.content_part.done", **common, part={**part, "text": text}),
            self._done(mid, "completed"),
        ]

    def _end(self, status: str) -> list[dict[str, Any]]:
        out = self._close_all()
        self.status, self.ended = status, True
        seg = self.segment
        self.usage = usage_between(self.start_usage, seg.end_usage(self._at) if seg.end_usage else seg.usage)
        return [*out, self._event(TERMINAL_EVENT[status], response=self.response())]

    # -- items -----------------------------------------------------------------------------------------------

    def _add(self, ident: str, item: dict[str, Any], in_step: bool = True) -> int:
        index = len(self.output)
        self.output.append(item)
        self._open[ident] = index
        if in_step:
            self._step_items.append(ident)
        return index

    def _done(self, ident: str, status: str) -> dict[str, Any]:
        index = self._open.pop(ident)
        item = self.output[index]
        item.pop("_text_done", None)
        item["status"] = status
        return self._event("response.output_item.done", output_index=index, item=_copy(item))

    def _close_step(self, abandoned: bool) -> list[dict[str, Any]]:
        """The items of the step that ended: done (``incomplete`` when it was abandoned); an ``mcp_call`` of a
        model turn that finished stays open for its result."""
        out = []
        for ident in self._step_items:
            if ident not in self._open:
                continue
            if not abandoned and self.output[self._open[ident]]["type"] == "mcp_call":
                continue
            out += self._text_end(ident)
            out.append(self._done(ident, "incomplete" if abandoned else "completed"))
        self._step_items = []
        return out

    def _close_all(self) -> list[dict[str, Any]]:
        out = []
        for ident in list(self._open):
            out += self._text_end(ident)
            out.append(self._done(ident, "incomplete"))
        return out

    def _text_end(self, ident: str) -> list[dict[str, Any]]:
        """A message item's text and part, ended if its TEXT_MESSAGE_END did not come."""
        item = self.output[self._open[ident]]
        if item["type"] != "message" or item.get("_text_done"):
            return []
        item["_text_done"] = True
        part = item["content"][0]
        common = {"item_id": ident, "output_index": self._open[ident], "content_index": 0}
        return [
            self._event("response.output_text.done", **common, text=part["text"], logprobs=[]),
            self._event("response.content_part.done", **common, part=dict(part)),
        ]

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq, **fields}

    # -- the Response object ---------------------------------------------------------------------------------

    def response(self, usage: bool = False) -> dict[str, Any]:
        """The Response object as it stands. Once the segment ended it carries the segment's own usage (in its
        terminal stream event too: a segment's usage no longer changes once it ended, so replays are the same);
        before, ``usage`` asks for the usage so far (not in stream events, which must be the same on every
        replay)."""
        seg, record = self.segment, self.segment.record
        previous = record.get("previous_response_id") if seg.base == 0 else None
        if self.previous_base is not None:
            previous = response_id(seg.run_id, self.previous_base)
        text_format = record.get("text") or {"format": {"type": "text"}}
        return {
            "id": seg.id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status,
            "background": bool(record.get("background", False)),
            "model": seg.agent_id,
            "instructions": record.get("instructions"),
            "output": self._output(),
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": list(record.get("tools") or []),
            "metadata": dict(record.get("metadata") or {}),
            "previous_response_id": previous,
            "conversation": {"id": record["conversation"]} if record.get("conversation") else None,
            "text": text_format,
            "store": True,
            "truncation": "disabled",
            "temperature": None,
            "top_p": None,
            "max_output_tokens": None,
            "incomplete_details": None,
            "error": self.error,
            "usage": self._usage(usage),
        }

    def _usage(self, so_far: bool) -> dict[str, Any] | None:
        if self.usage is not None:
            return usage_object(self.usage)
        return usage_object(usage_between(self.start_usage, self.segment.usage)) if so_far else None

    def _output(self) -> list[dict[str, Any]]:
        """The items as the Response object has them. Once a structured response has its answer, the messages
        before it (text before a tool call, an answer that failed the schema and was sent back) are shown as
        ``reasoning`` items: the SDK's ``output_text`` joins the text of every ``message`` item, and it is the
        answer (``json.loads(response.output_text)`` works, as with OpenAI's)."""
        out = [_copy(i) for i in self.output]
        if self.segment.structured and self.answered:
            last = next((n for n in range(len(out) - 1, -1, -1) if out[n]["type"] == "message"), None)
            if last is not None:
                out[last]["phase"] = "final_answer"
                out[:last] = [_reasoning(i) if i["type"] == "message" else i for i in out[:last]]
        return out


def _reasoning(message: dict[str, Any]) -> dict[str, Any]:
    """A commentary message of a structured response as a ``reasoning`` item (its text kept, as reasoning text)."""
    text = "".join(p.get("text", "") for p in message.get("content", []))
    content = [{"type": "reasoning_text", "text": text}]
    return {"id": message["id"], "type": "reasoning", "summary": [], "content": content, "status": message["status"]}


def _copy(item: dict[str, Any], **override: Any) -> dict[str, Any]:
    """An item as sent: private keys left out, content parts copied."""
    out = {k: v for k, v in item.items() if not k.startswith("_")}
    if "content" in out:
        out["content"] = [dict(p) for p in out["content"]]
    out.update(override)
    return out

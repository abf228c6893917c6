"""The one check of a run's stored log that every test asks for: :func:`assert_run_sound`.

It proves the durability rules a stream must keep whatever happened to the run (DESIGN.md, rules 1, 4 and 5):

- **offsets** are contiguous, ``first``, ``first + 1``, ... with no gap and no duplicate;
- **AG-UI well-formed**, as the official JS client verifies a stream: every event valid for its type (rendered
  with ``ag-ui-protocol``'s models by :func:`agents_celery.http.agui.render.render`, the renderer of ``?format=agui``);
  the first event is RUN_STARTED; nothing after RUN_FINISHED / RUN_ERROR but a new RUN_STARTED; every CONTENT
  and ARGS inside its START/END; no END of something not open; steps, messages, tool calls and subagents all
  closed before RUN_FINISHED; a subagent started once per segment and finished only while active;
- **retried attempts are visible**: a step started again (after a crash or a blip) carries a higher attempt
  number than before, and any STEP_STARTED of an attempt > 1 follows the ``attempt_abandoned`` CUSTOM event
  that names it as the next attempt;
- **each tool once**: at most one TOOL_CALL_RESULT per tool call id, each for a call the log started; and,
  where the test gives ``tool_counts`` (with ``counter`` reading the side effects the fixture's tools count in
  Redis), each side effect counted exactly that many times.

A log read from the middle (``first`` > 0) is checked for offsets and per-event validity, the sequence rules
from its first RUN_STARTED on. :func:`assert_agui_stream` applies the same sequence rules to what a client of
``?format=agui`` or ``POST /agui/<agent>`` receives (camelCase events, validated with ``ag_ui.core``'s models).
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Mapping
from typing import Any

import ag_ui.core as agui
import pydantic
import redis

from agents_celery.events import Event, EventType

#: The pairs that open and close something, the kind it is, and the field naming it.
_OPENS = {
    EventType.STEP_STARTED: ("step", "step_name"),
    EventType.TEXT_MESSAGE_START: ("message", "message_id"),
    EventType.TOOL_CALL_START: ("tool call", "tool_call_id"),
}
_CLOSES = {
    EventType.STEP_FINISHED: ("step", "step_name"),
    EventType.TEXT_MESSAGE_END: ("message", "message_id"),
    EventType.TOOL_CALL_END: ("tool call", "tool_call_id"),
}
_INSIDE = {
    EventType.TEXT_MESSAGE_CONTENT: ("message", "message_id"),
    EventType.TOOL_CALL_ARGS: ("tool call", "tool_call_id"),
}
_ENDS = (EventType.RUN_FINISHED, EventType.RUN_ERROR)


def counter_of(r: redis.Redis, prefix: str) -> Callable[[str], int]:
    """Reads the executions ``tests/agents/fixture.py``'s tools count under ``prefix`` (``count_key``)."""
    return lambda name: int(r.get(f"{prefix}:test:count:{name}") or 0)


def assert_run_sound(
    events: list[Event],
    *,
    first: int = 0,
    tool_counts: Mapping[str, int] | None = None,
    counter: Callable[[str], int] | None = None,
) -> None:
    """Fails with the offset and the rule when ``events`` (a run's log, from offset ``first``) breaks any of the
    invariants in this module's docstring; ``tool_counts`` maps a count key to its expected count, read with
    ``counter`` (:func:`counter_of`)."""
    offsets = [e.offset for e in events]
    assert offsets == list(range(first, first + len(events))), f"gap or duplicate offset: {offsets}"
    _Sequence(from_middle=first > 0).check(events)
    if tool_counts:
        assert counter is not None, "tool_counts needs a counter (counter_of(r, prefix))"
        counted = {name: counter(name) for name in tool_counts}
        assert counted == dict(tool_counts), f"tool side effects counted {counted}, expected {dict(tool_counts)}"


_AGUI_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(agui.Event)


def assert_agui_stream(events: list[dict[str, Any]]) -> None:
    """Fails when the AG-UI events a client received (camelCase JSON) break the sequence rules of
    :func:`assert_run_sound`, or one is not valid AG-UI 1.0 as the JS client reads it (its model, no ``null``
    field, none of our ``metadata``). Attempt numbers travel in that metadata, so they are checked on the log only;
    a stream that joined mid-run may carry the result of a call it saw no start of."""
    assert events and events[0]["type"] == "RUN_STARTED", f"the stream starts with {events[:1]}, not RUN_STARTED"
    for ev in events:
        _AGUI_EVENT.validate_python(ev)
        assert "metadata" not in ev and all(v is not None for v in ev.values()), f"not strict AG-UI: {ev}"
    _Sequence(from_middle=False, wire=True).check([_from_wire(i, ev) for i, ev in enumerate(events)])


def _from_wire(index: int, ev: dict[str, Any]) -> Any:
    """A wire event as the fold reads a stored one: its type (ours when we have it) and snake_case fields; in a run
    tree's stream, a child's steps, messages and calls are named within that child (``subagentRunId``)."""
    data = {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): v for k, v in ev.items() if k not in ("type", "timestamp")}
    if (child := ev.get("subagentRunId")) and not ev["type"].startswith("SUBAGENT_"):
        data.update({k: f"{child}/{data[k]}" for k in ("step_name", "message_id", "tool_call_id") if k in data})
    kind = EventType(ev["type"]) if ev["type"] in EventType.__members__ else ev["type"]
    return types.SimpleNamespace(offset=index, type=kind, data=data)


class _Sequence:
    """A fold of the log that asserts the AG-UI sequence rules, one event at a time."""

    def __init__(self, from_middle: bool, wire: bool = False) -> None:
        self.wire = wire  # the events are a client's (already validated): no render, no attempts
        self.started = not from_middle  # a log from the middle is checked from its first RUN_STARTED
        self.ended = False
        self.opened: dict[str, set[str]] = {"step": set(), "message": set(), "tool call": set(), "subagent": set()}
        self.subagents_done: set[str] = set()
        self.attempts: dict[str, int] = {}  # step name -> the attempt of its last STEP_STARTED
        self.abandoned_next: int | None = None  # next_attempt of the last attempt_abandoned
        self.calls_started: set[str] = set()
        self.results: set[str] = set()

    def check(self, events: list[Event]) -> None:
        from agents_celery.http.agui.render import render

        if self.started and events:
            assert events[0].type is EventType.RUN_STARTED, f"the log starts with {events[0].type}, not RUN_STARTED"
        for e in events:
            if not self.wire:
                render(e)  # strict AG-UI 1.0 for its type (raises pydantic.ValidationError)
            if e.type is EventType.RUN_STARTED:
                self.run_started()
            elif self.started:
                assert not self.ended, f"{e.type} after the run's end, at {e.offset}"
                self.see(e)

    def run_started(self) -> None:
        self.started, self.ended = True, False
        for open_items in self.opened.values():
            open_items.clear()
        self.subagents_done.clear()

    def see(self, e: Event) -> None:
        if e.type in _OPENS:
            kind, field = _OPENS[e.type]
            assert e.data[field] not in self.opened[kind], f"{kind} {e.data[field]!r} started twice, at {e.offset}"
            self.opened[kind].add(e.data[field])
            if e.type is EventType.STEP_STARTED and not self.wire:
                self.step_started(e)
            elif e.type is EventType.TOOL_CALL_START:
                self.calls_started.add(e.data["tool_call_id"])
        elif e.type in _CLOSES or e.type in _INSIDE:
            kind, field = _CLOSES.get(e.type) or _INSIDE[e.type]
            assert e.data[field] in self.opened[kind], f"{e.type} outside its {kind} {e.data[field]!r}, at {e.offset}"
            if e.type in _CLOSES:
                self.opened[kind].discard(e.data[field])
        else:
            self.see_other(e)

    def see_other(self, e: Event) -> None:
        if e.type is EventType.TOOL_CALL_RESULT:
            cid = e.data["tool_call_id"]
            assert cid not in self.results, f"a second TOOL_CALL_RESULT for {cid!r}, at {e.offset}"
            never = cid not in self.calls_started and not self.wire
            assert not never, f"TOOL_CALL_RESULT of a call never started ({cid!r}), at {e.offset}"
            self.results.add(cid)
        elif e.type is EventType.CUSTOM and e.data.get("name") == "attempt_abandoned":
            self.abandoned_next = e.data["value"]["next_attempt"]
        elif e.type is EventType.SUBAGENT_STARTED:
            sub = e.data["subagent_run_id"]
            assert sub not in self.opened["subagent"] | self.subagents_done, f"subagent started twice at {e.offset}"
            self.opened["subagent"].add(sub)
        elif e.type in (EventType.SUBAGENT_FINISHED, EventType.SUBAGENT_ERROR):
            sub = e.data["subagent_run_id"]
            assert sub in self.opened["subagent"], f"{e.type} of a subagent not active, at {e.offset}"
            self.opened["subagent"].discard(sub)
            self.subagents_done.add(sub)
        elif e.type in _ENDS:
            if e.type is EventType.RUN_FINISHED:
                still = {kind: ids for kind, ids in self.opened.items() if ids}
                assert not still, f"the run finished at {e.offset} with {still} open"
            self.ended = True

    def step_started(self, e: Event) -> None:
        meta: dict[str, Any] = e.data.get("metadata") or {}
        if "workflow_step" in meta:  # a workflow's step (agents_celery.workflows): a loop starts it again, by design
            assert isinstance(meta["workflow_step"], str), f"a workflow step without its path, at {e.offset}"
            return
        name, attempt = e.data["step_name"], meta.get("attempt")
        assert isinstance(attempt, int) and attempt >= 1, f"STEP_STARTED without its attempt number, at {e.offset}"
        before = self.attempts.get(name)
        assert before is None or attempt > before, f"{name} started again as attempt {attempt}, at {e.offset}"
        if attempt > 1:
            assert self.abandoned_next == attempt, f"attempt {attempt} of {name} not announced, at {e.offset}"
        self.attempts[name] = attempt
        self.abandoned_next = None

"""Canonical run events, in the AG-UI 1.0 vocabulary.

An event is made with :func:`make_event` (validated against ``ag-ui-protocol``'s model for its type, so
a malformed event is refused before anything is written) and read back as an :class:`Event` carrying its
``offset`` and the run's ``run_id``, ``session_id`` and ``agent_id``. Stored JSON holds the AG-UI fields in
snake_case plus ``type`` and ``timestamp`` (ms); renderers turn it into a wire dialect.
"""

from __future__ import annotations

import json
import re
import time
import types
import typing
import zlib
from dataclasses import dataclass, field
from enum import StrEnum
from json.encoder import encode_basestring_ascii
from typing import Any

import ag_ui.core as agui
import pydantic

from .errors import EventValidationError


class EventType(StrEnum):
    """The event types a run emits (a subset of AG-UI 1.0's)."""

    RUN_STARTED = "RUN_STARTED"
    RUN_FINISHED = "RUN_FINISHED"
    RUN_ERROR = "RUN_ERROR"
    STEP_STARTED = "STEP_STARTED"
    STEP_FINISHED = "STEP_FINISHED"
    TEXT_MESSAGE_START = "TEXT_MESSAGE_START"
    TEXT_MESSAGE_CONTENT = "TEXT_MESSAGE_CONTENT"
    TEXT_MESSAGE_END = "TEXT_MESSAGE_END"
    TOOL_CALL_START = "TOOL_CALL_START"
    TOOL_CALL_ARGS = "TOOL_CALL_ARGS"
    TOOL_CALL_END = "TOOL_CALL_END"
    TOOL_CALL_RESULT = "TOOL_CALL_RESULT"
    CUSTOM = "CUSTOM"
    SUBAGENT_STARTED = "SUBAGENT_STARTED"
    SUBAGENT_FINISHED = "SUBAGENT_FINISHED"
    SUBAGENT_ERROR = "SUBAGENT_ERROR"


#: The ag-ui-protocol model of each event type (validation here, strict rendering in the API).
AGUI_MODELS: dict[EventType, type[agui.BaseEvent]] = {
    EventType.RUN_STARTED: agui.RunStartedEvent,
    EventType.RUN_FINISHED: agui.RunFinishedEvent,
    EventType.RUN_ERROR: agui.RunErrorEvent,
    EventType.STEP_STARTED: agui.StepStartedEvent,
    EventType.STEP_FINISHED: agui.StepFinishedEvent,
    EventType.TEXT_MESSAGE_START: agui.TextMessageStartEvent,
    EventType.TEXT_MESSAGE_CONTENT: agui.TextMessageContentEvent,
    EventType.TEXT_MESSAGE_END: agui.TextMessageEndEvent,
    EventType.TOOL_CALL_START: agui.ToolCallStartEvent,
    EventType.TOOL_CALL_ARGS: agui.ToolCallArgsEvent,
    EventType.TOOL_CALL_END: agui.ToolCallEndEvent,
    EventType.TOOL_CALL_RESULT: agui.ToolCallResultEvent,
    EventType.CUSTOM: agui.CustomEvent,
    EventType.SUBAGENT_STARTED: agui.SubagentStartedEvent,
    EventType.SUBAGENT_FINISHED: agui.SubagentFinishedEvent,
    EventType.SUBAGENT_ERROR: agui.SubagentErrorEvent,
}

# Flat events serialised without a pydantic round trip, checked against the AG-UI model's own fields.
#
# Most events a step writes (STEP_STARTED, TOOL_CALL_START, TOOL_CALL_RESULT ...) carry only strings, a literal
# or a small ``metadata`` dict. For those, :class:`PlainShape` checks the given fields against what
# ``ag-ui-protocol``'s model declares (names, required fields, ``str`` / ``Optional[str]`` / ``Literal`` types)
# and writes the JSON ``model_dump(mode="json", exclude_none=True)`` would write, in the model's field order, at
# a sixth of the cost. Anything else (another type, a nested object, an unknown field, a missing one) returns
# None and goes through pydantic, which also produces the error message.

_SIMPLE = (str, int, bool)
_MAX_TS = 9007199254740991


def _checker(annotation: Any) -> Any:
    """A predicate for values of a plain field type, or None when the type is not plain."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if annotation is str:
        return lambda v: isinstance(v, str)
    if origin is typing.Literal and all(isinstance(a, str) for a in args):
        allowed = {str(a) for a in args}
        return lambda v: isinstance(v, str) and v in allowed
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            check = _checker(inner[0])
            return (lambda v: v is None or check(v)) if check else None
        if str in inner:  # e.g. content: str | list[parts]: only the str form is plain
            return lambda v: isinstance(v, str)
    if origin is dict and args and args[0] is str:  # metadata: flat, no None values
        return lambda v: (
            isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, _SIMPLE) for k, x in v.items())
        )
    return None


class PlainShape:
    """What one AG-UI model accepts as a plain event."""

    def __init__(self, model: type[pydantic.BaseModel]) -> None:
        self.order: list[str] = []
        self.checks: dict[str, Any] = {}
        self.required: set[str] = set()
        for name, info in model.model_fields.items():
            if name in ("type", "timestamp"):
                continue
            check = None if info.metadata else _checker(info.annotation)  # constraints: pydantic's job
            if check is None:
                continue  # such a field may not be given on the plain path
            self.order.append(name)
            self.checks[name] = check
            if info.is_required():
                self.required.add(name)
        # A model with a required field of another type (RUN_FINISHED's ids are plain, CUSTOM's value is not)
        # can never be given plainly.
        self.usable = all(n in self.checks for n, i in model.model_fields.items() if i.is_required())

    def dump(self, kind: str, fields: dict[str, Any]) -> str | None:
        ts = fields.get("timestamp")
        if not self.usable or not isinstance(ts, int) or isinstance(ts, bool) or abs(ts) > _MAX_TS:
            return None
        given = fields.keys() - {"timestamp"}
        if not self.required <= given or not given <= self.checks.keys():
            return None
        for name in given:
            if not self.checks[name](fields[name]):
                return None
        data: dict[str, Any] = {"type": kind, "timestamp": ts}
        for name in self.order:
            value = fields.get(name)
            if value is not None:
                data[name] = value
        return json.dumps(data, separators=(",", ":"))


_PLAIN = {kind: PlainShape(model) for kind, model in AGUI_MODELS.items()}

# Deltas come fast; their shape is simple enough to check by hand instead of through pydantic.
_DELTA_KEYS = {
    EventType.TEXT_MESSAGE_CONTENT: "message_id",
    EventType.TOOL_CALL_ARGS: "tool_call_id",
}


def now_ms() -> int:
    """Wall-clock time in milliseconds, as every event's ``timestamp``."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class NewEvent:
    """A validated event not yet written: its type and its stored JSON."""

    type: EventType
    json: str


def make_event(type: EventType | str, /, **fields: Any) -> NewEvent:
    """Validate an event of ``type`` with ``fields`` (AG-UI fields, snake_case) and serialise it.

    Raises:
        EventValidationError: the type is unknown or a field is missing or of the wrong type.
    """
    try:
        kind = EventType(type)
    except ValueError:
        known = [t.value for t in EventType]
        raise EventValidationError(f"unknown event type {type!r}; expected one of {known}") from None
    fields.setdefault("timestamp", now_ms())
    key = _DELTA_KEYS.get(kind)
    if key is not None and set(fields) == {key, "delta", "timestamp"}:
        return _delta_event(kind, key, fields)
    plain = _PLAIN[kind].dump(kind.value, fields)
    if plain is not None:
        return NewEvent(kind, plain)
    try:
        model = AGUI_MODELS[kind].model_validate({**fields, "type": kind.value})
    except (pydantic.ValidationError, TypeError) as exc:
        raise EventValidationError(f"invalid {kind.value} event: {_first_error(exc)}") from None
    data = model.model_dump(mode="json", exclude_none=True)
    return NewEvent(kind, json.dumps(data, separators=(",", ":")))


def _delta_event(kind: EventType, key: str, fields: dict[str, Any]) -> NewEvent:
    ident, delta, ts = fields[key], fields["delta"], fields["timestamp"]
    if not isinstance(ident, str) or not ident:
        raise EventValidationError(f"invalid {kind.value} event: {key} must be a non-empty string")
    if not isinstance(delta, str) or not delta:
        raise EventValidationError(f"invalid {kind.value} event: delta must be a non-empty string")
    if not isinstance(ts, int):
        raise EventValidationError(f"invalid {kind.value} event: timestamp must be an integer (ms)")
    data = {"type": kind.value, "timestamp": ts, key: ident, "delta": delta}
    return NewEvent(kind, json.dumps(data, separators=(",", ":")))


class Deltas:
    """The delta events of one message or tool call (``TEXT_MESSAGE_CONTENT`` / ``TOOL_CALL_ARGS``).

    ``Deltas(kind, ident)(delta)`` is ``make_event(kind, <id field>=ident, delta=delta)``, byte for byte, built
    from a prefix made once: a streamed token passes through here between the model's socket and Redis, and
    after the millisecond idle between tokens the general path's per-call work (enum lookup, field checks, a
    JSON encoder built per call) costs ~50 us of cold CPU against ~10 us for this.
    """

    __slots__ = ("_head", "_middle", "kind")

    def __init__(self, kind: EventType, ident: str) -> None:
        key = _DELTA_KEYS.get(kind)
        if key is None:
            raise EventValidationError(f"{kind.value} events carry no delta")
        if not isinstance(ident, str) or not ident:
            raise EventValidationError(f"invalid {kind.value} event: {key} must be a non-empty string")
        self.kind = kind
        self._head = f'{{"type":"{kind.value}","timestamp":'
        self._middle = f',"{key}":{encode_basestring_ascii(ident)},"delta":'

    def __call__(self, delta: str) -> NewEvent:
        if not isinstance(delta, str) or not delta:
            raise EventValidationError(f"invalid {self.kind.value} event: delta must be a non-empty string")
        ts = time.time_ns() // 1_000_000
        return NewEvent(self.kind, f"{self._head}{ts}{self._middle}{encode_basestring_ascii(delta)}}}")


def _first_error(exc: Exception) -> str:
    if isinstance(exc, pydantic.ValidationError):
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return f"{where}: {err['msg']}" if where else str(err["msg"])
    return str(exc)


@dataclass(slots=True)
class Event:
    """One stored event of a run, as read back from the log."""

    offset: int
    type: EventType
    run_id: str
    session_id: str
    agent_id: str
    timestamp: int
    #: The AG-UI fields of the event (snake_case), ``type`` and ``timestamp`` excluded.
    data: dict[str, Any] = field(default_factory=dict)
    #: A fingerprint of the stored event (:func:`tag_of`): ``offset.tag`` names this very event, so a reader
    #: can tell when the log no longer holds what it read at an offset (Redis lost writes and the run went on).
    tag: str = ""

    @classmethod
    def from_stored(cls, offset: int, raw: str | bytes, run_id: str, session_id: str, agent_id: str) -> Event:
        data = json.loads(raw)
        kind = EventType(data.pop("type"))
        ts = int(data.pop("timestamp", 0))
        return cls(offset, kind, run_id, session_id, agent_id, ts, data, tag_of(raw))

    @property
    def position(self) -> str:
        """``<offset>.<tag>``: what to resume from (``Last-Event-ID``), checked against the log."""
        return f"{self.offset}.{self.tag}" if self.tag else str(self.offset)

    @property
    def is_terminal(self) -> bool:
        """True for RUN_ERROR and for RUN_FINISHED other than an interrupt (a pause)."""
        return self.type is EventType.RUN_ERROR or (self.type is EventType.RUN_FINISHED and not self.is_pause)

    @property
    def is_pause(self) -> bool:
        """True for RUN_FINISHED with outcome ``interrupt`` (the run waits for a human)."""
        outcome = self.data.get("outcome") or {}
        return self.type is EventType.RUN_FINISHED and outcome.get("type") == "interrupt"

    def to_json(self) -> str:
        """The event on the wire (canonical dialect, CLI ``--json``): :meth:`to_dict` as compact JSON."""
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)

    def to_dict(self) -> dict[str, Any]:
        """The event as one flat JSON-able dict: envelope fields plus the AG-UI fields."""
        return {
            "offset": self.offset,
            "type": self.type.value,
            "run_id": self.run_id,
            "session_id": self.session_id,
            "agent_id": self.agent_id,
            "timestamp": self.timestamp,
            **self.data,
        }


_HEAD = re.compile(r'\{"type":"([A-Z_]+)","timestamp":(-?\d+)([,}])')
#: Field names of the envelope; a stored event carrying one of them is serialised the slow way.
_ENVELOPE = ('"offset"', '"run_id"', '"session_id"', '"agent_id"', '"type"', '"timestamp"')


def tag_of(stored: str | bytes) -> str:
    """The fingerprint of a stored event: CRC-32 of its JSON, 8 hex digits. Two events at one offset differ in
    their timestamp at least, so a rewritten offset shows a different tag (all but certainly)."""
    return f"{zlib.crc32(stored if isinstance(stored, bytes) else stored.encode()):08x}"


_POSITION = re.compile(r"^(-?[0-9]{1,18})(?:\.([0-9a-f]{8}))?$")


def parse_position(text: str) -> tuple[int, str | None]:
    """``"140"`` or ``"140.1a2b3c4d"`` -> (140, tag or None); ValueError for anything else."""
    m = _POSITION.match(text)
    if m is None:
        raise ValueError(f"expected an offset, optionally with its tag (140 or 140.1a2b3c4d), got {text!r}")
    return int(m.group(1)), m.group(2)


class WireJSON:
    """:meth:`Event.to_json` of one run's stored entries, built from the stored text without decoding it.

    A stored event is ``{"type":...,"timestamp":...,<fields>}``; its wire form puts the offset and the run's
    ids between the two. Built by string, it is byte for byte what ``to_json`` writes (tests/test_events.py
    checks), at a fraction of the cost: an SSE stream writes one per event. Anything unusual (an envelope name
    among the fields) takes the ordinary way.
    """

    def __init__(self, run_id: str, session_id: str, agent_id: str) -> None:
        self.ids = (run_id, session_id, agent_id)
        self._envelope = ",".join(
            f'"{k}":{json.dumps(v, ensure_ascii=False)}'
            for k, v in (("run_id", run_id), ("session_id", session_id), ("agent_id", agent_id))
        )

    def __call__(self, offset: int, stored: str) -> tuple[str, str]:
        """The event's type and its wire JSON."""
        m = _HEAD.match(stored)
        if m is not None:
            rest = stored[m.end() :] if m.group(3) == "," else ""
            if not any(name in rest for name in _ENVELOPE):
                kind, ts = m.group(1), m.group(2)
                tail = "," + rest if rest else "}"
                return kind, f'{{"offset":{offset},"type":"{kind}",{self._envelope},"timestamp":{ts}{tail}'
        ev = Event.from_stored(offset, stored, *self.ids)
        return ev.type.value, ev.to_json()


_PAIRS = (
    (EventType.TEXT_MESSAGE_START, EventType.TEXT_MESSAGE_END, "message_id"),
    (EventType.TOOL_CALL_START, EventType.TOOL_CALL_END, "tool_call_id"),
    (EventType.STEP_STARTED, EventType.STEP_FINISHED, "step_name"),
)


#: The CUSTOM event a guest's unit ends with once it is journaled (its events before it are saved: a retried
#: attempt replays them without writing them again, and a reader that resets a crashed step keeps them).
UNIT_SAVED = "unit_saved"


def json_or_text(text: str) -> Any:
    """A tool's arguments or result as stored: the JSON value when the text is JSON, else the text."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


class ToolCalls:
    """The name and the arguments streamed so far of each tool call a run's events announced, by call id: what
    the renderers that show a call whole (AgentOS, Responses) fold from TOOL_CALL_START and TOOL_CALL_ARGS."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.raw_args: dict[str, str] = {}

    def take(self, ev: Event) -> None:
        """Fold in ``ev`` (events of other types are left alone)."""
        ident = ev.data.get("tool_call_id", "")
        if ev.type is EventType.TOOL_CALL_START:
            self.names[ident] = ev.data.get("tool_call_name", "")
            self.raw_args[ident] = ""
        elif ev.type is EventType.TOOL_CALL_ARGS:
            self.raw_args[ident] = self.raw_args.get(ident, "") + ev.data.get("delta", "")

    def arguments(self, ident: str) -> str:
        """The call's arguments as streamed (JSON text; ``{}`` before any came)."""
        return self.raw_args.get(ident) or "{}"

    def args(self, ident: str) -> dict[str, Any]:
        """The call's arguments as a JSON object; an empty one while they are not (yet) one."""
        try:
            value = json.loads(self.arguments(ident))
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


def close_open(events: list[Event]) -> list[NewEvent]:
    """Events that close every message, tool call and step left open in ``events`` (a crashed attempt's)."""
    open_ids: dict[EventType, list[str]] = {start: [] for start, _, _ in _PAIRS}
    for ev in events:
        for start, end, key in _PAIRS:
            ident = str(ev.data.get(key))
            if ev.type is start:
                open_ids[start].append(ident)
            elif ev.type is end and ident in open_ids[start]:
                open_ids[start].remove(ident)
    closers = [make_event(EventType.TEXT_MESSAGE_END, message_id=m) for m in open_ids[EventType.TEXT_MESSAGE_START]]
    closers += [make_event(EventType.TOOL_CALL_END, tool_call_id=c) for c in open_ids[EventType.TOOL_CALL_START]]
    closers += [
        make_event(EventType.STEP_FINISHED, step_name=s, metadata={"abandoned": True})
        for s in open_ids[EventType.STEP_STARTED]
    ]
    return closers

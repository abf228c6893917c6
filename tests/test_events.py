"""make_event's plain path writes exactly what the AG-UI model would, and refuses what the model refuses."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from agents_celery.errors import EventValidationError
from agents_celery.events import _PLAIN, AGUI_MODELS, Deltas, EventType, make_event

pytestmark = pytest.mark.timeout(30)

TS = 1_700_000_000_000

VALID: list[tuple[EventType, dict[str, Any]]] = [
    (EventType.STEP_STARTED, {"step_name": "tools:3", "metadata": {"step": 3, "kind": "tools", "attempt": 1}}),
    (EventType.STEP_FINISHED, {"step_name": "model_turn:0"}),
    (EventType.TOOL_CALL_START, {"tool_call_id": "c1", "tool_call_name": "noop", "parent_message_id": "m1"}),
    (EventType.TOOL_CALL_START, {"tool_call_id": "c1", "tool_call_name": "noop", "parent_message_id": None}),
    (EventType.TOOL_CALL_END, {"tool_call_id": "c1"}),
    (EventType.TOOL_CALL_RESULT, {"message_id": "t1", "tool_call_id": "c1", "content": "ok", "role": "tool"}),
    (EventType.TOOL_CALL_RESULT, {"message_id": "t1", "tool_call_id": "c1", "content": ""}),
    (EventType.TEXT_MESSAGE_START, {"message_id": "m1", "role": "assistant"}),
    (EventType.TEXT_MESSAGE_END, {"message_id": "m1"}),
    (EventType.TEXT_MESSAGE_CONTENT, {"message_id": "m1", "delta": "hi", "metadata": {"x": True}}),
    (EventType.RUN_STARTED, {"thread_id": "s1", "run_id": "r1"}),
    (EventType.RUN_ERROR, {"message": "boom", "code": "ModelError"}),
    # not plain (nested or Any-typed fields): pydantic writes them
    (EventType.RUN_FINISHED, {"thread_id": "s1", "run_id": "r1", "outcome": {"type": "success"}, "result": "x"}),
    (EventType.CUSTOM, {"name": "attempt_abandoned", "value": {"step": 1}}),
    (EventType.STEP_STARTED, {"step_name": "s", "metadata": {"nested": {"a": 1}}}),
    (EventType.STEP_STARTED, {"step_name": "s", "extra_field": "allowed by the model"}),
]

INVALID: list[tuple[EventType, dict[str, Any]]] = [
    (EventType.STEP_STARTED, {}),
    (EventType.STEP_STARTED, {"step_name": 3}),
    (EventType.TOOL_CALL_START, {"tool_call_id": "c1"}),
    (EventType.TEXT_MESSAGE_START, {"message_id": "m1", "role": "robot"}),
    (EventType.TOOL_CALL_RESULT, {"message_id": "t1", "tool_call_id": "c1", "content": "ok", "role": "user"}),
    (EventType.TOOL_CALL_END, {"tool_call_id": None}),
]


def _pydantic_json(kind: EventType, fields: dict[str, Any]) -> dict[str, Any]:
    model = AGUI_MODELS[kind].model_validate({**fields, "timestamp": TS, "type": kind.value})
    return model.model_dump(mode="json", exclude_none=True)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("kind", "fields"), VALID)
def test_plain_path_writes_what_the_model_writes(kind: EventType, fields: dict[str, Any]) -> None:
    event = make_event(kind, timestamp=TS, **fields)
    assert event.json == json.dumps(_pydantic_json(kind, fields), separators=(",", ":"))


def test_the_flat_events_a_step_writes_take_the_plain_path() -> None:
    taken = [kind for kind, fields in VALID[:12] if _PLAIN[kind].dump(kind.value, {**fields, "timestamp": TS})]
    assert len(taken) == 12
    assert _PLAIN[EventType.CUSTOM].dump("CUSTOM", {"name": "n", "value": 1, "timestamp": TS}) is None


@pytest.mark.parametrize(("kind", "fields"), INVALID)
def test_what_the_model_refuses_is_refused(kind: EventType, fields: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        _pydantic_json(kind, fields)
    with pytest.raises(EventValidationError):
        make_event(kind, timestamp=TS, **fields)


@pytest.mark.parametrize("type_", [EventType.STEP_STARTED, EventType.STEP_FINISHED])
@pytest.mark.parametrize(("kind", "step", "attempt"), [("model", 0, 1), ("tools", 17, 3), ("model", 10**9, 2)])
def test_step_events_are_written_as_make_event_writes_them(
    monkeypatch: pytest.MonkeyPatch, type_: EventType, kind: str, step: int, attempt: int
) -> None:
    from agents_celery.engine import stepcontext as steps  # step_event reads its clock there

    monkeypatch.setattr(steps, "now_ms", lambda: 1_700_000_000_123)
    got = steps.step_event(type_, kind, step, attempt)
    meta = {"step": step, "kind": kind, "attempt": attempt}
    want = make_event(type_, step_name=steps.step_name(kind, step), metadata=meta, timestamp=1_700_000_000_123)
    assert got == want
    AGUI_MODELS[type_].model_validate_json(got.json)  # the protocol's own model accepts it


def test_an_odd_step_event_goes_through_make_event() -> None:
    from agents_celery.engine import steps

    odd = steps.step_event(EventType.STEP_STARTED, 'we"ird', 1, 1)  # not one of the engine's two names
    assert json.loads(odd.json)["metadata"]["kind"] == 'we"ird'  # quoted, as make_event quotes
    assert json.loads(steps.step_event(EventType.STEP_FINISHED, "tools", True, 1).json)["metadata"]["step"] is True


DELTAS = ["hello ", 'say "hi"\n', "back\\slash\ttab", "naïve café ", "🙂 emoji", "\x00\x1f ctl", "</script>", " "]


@pytest.mark.parametrize(
    ("kind", "key"), [(EventType.TEXT_MESSAGE_CONTENT, "message_id"), (EventType.TOOL_CALL_ARGS, "tool_call_id")]
)
@pytest.mark.parametrize("ident", ["msg_0f3a", 'id "quoted" ü'])
def test_deltas_write_what_make_event_writes(kind: EventType, key: str, ident: str) -> None:
    deltas = Deltas(kind, ident)
    for delta in DELTAS:
        got = deltas(delta)
        want = make_event(kind, timestamp=json.loads(got.json)["timestamp"], **{key: ident, "delta": delta})
        assert got == want
        AGUI_MODELS[kind].model_validate_json(got.json)


def test_deltas_refuse_what_make_event_refuses() -> None:
    with pytest.raises(EventValidationError, match="message_id"):
        Deltas(EventType.TEXT_MESSAGE_CONTENT, "")
    with pytest.raises(EventValidationError, match="no delta"):
        Deltas(EventType.TEXT_MESSAGE_START, "msg_1")
    deltas = Deltas(EventType.TOOL_CALL_ARGS, "call_1")
    for bad in ["", None, 3]:
        with pytest.raises(EventValidationError, match="delta"):
            deltas(bad)  # type: ignore[arg-type]
        with pytest.raises(EventValidationError, match="delta"):
            make_event(EventType.TOOL_CALL_ARGS, tool_call_id="call_1", delta=bad)

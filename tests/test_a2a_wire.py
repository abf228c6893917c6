"""What the A2A door writes parses into a2a-sdk's own protobuf types with no key left over (strict ProtoJSON), and
a log folds into the task a reader of its stream builds with the SDK's own artifact merge. No Redis, no worker."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.server.tasks.task_manager import append_artifact_to_task
from a2a.types import AgentCard, StreamResponse, Task
from google.protobuf import json_format

from agents_celery.a2a.task import TaskFold
from agents_celery.events import Event, EventType
from agents_celery.http.a2a import wire

pytestmark = pytest.mark.timeout(30)


def ev(offset: int, kind: EventType, **data: Any) -> Event:
    return Event(
        offset=offset,
        type=kind,
        run_id="r1",
        session_id="s1",
        agent_id="fake",
        timestamp=1_700_000_000_000 + offset,
        data=data,
    )


def crashed_log() -> list[Event]:
    """A step whose first attempt died mid-text, retried: the retry says the same text again."""
    log = [ev(0, EventType.RUN_STARTED), ev(1, EventType.STEP_STARTED, step_name="model")]
    log += [ev(2, EventType.TEXT_MESSAGE_START, message_id="m1", role="assistant")]
    log += [ev(3, EventType.TEXT_MESSAGE_CONTENT, message_id="m1", delta="Hel")]
    log += [ev(4, EventType.TEXT_MESSAGE_END, message_id="m1")]  # closed by the recovering worker
    log += [ev(5, EventType.CUSTOM, name="attempt_abandoned", value={"step": 0})]
    log += [ev(6, EventType.STEP_STARTED, step_name="model")]
    log += [ev(7, EventType.TEXT_MESSAGE_START, message_id="m2", role="assistant")]
    log += [ev(8 + i, EventType.TEXT_MESSAGE_CONTENT, message_id="m2", delta=d) for i, d in enumerate(["Hel", "lo"])]
    log += [ev(10, EventType.TEXT_MESSAGE_END, message_id="m2"), ev(11, EventType.STEP_FINISHED, step_name="model")]
    log += [ev(12, EventType.RUN_FINISHED, outcome={"type": "success"}, result="Hello")]
    return log


def strict(data: dict[str, Any], message: Any) -> Any:
    return json_format.ParseDict(data, message)  # raises on an unknown key or a wrong type


def test_every_update_and_the_task_parse_strictly_and_a_crash_leaves_no_trace() -> None:
    fold = TaskFold("r1", "s1", history=[wire.message("u1", "ROLE_USER", [wire.text_part("hi")], "r1", "s1")])
    task = strict(fold.task(), Task())  # the snapshot before anything: SUBMITTED
    for event in crashed_log():
        for result in fold.feed(event):
            update = strict(result, StreamResponse())
            if update.HasField("artifact_update"):
                append_artifact_to_task(task, update.artifact_update)
            elif update.HasField("status_update"):
                task.status.CopyFrom(update.status_update.status)
    final = strict(fold.task(), Task())
    assert final.status.state == task.status.state == 3  # TASK_STATE_COMPLETED
    texts = {a.artifact_id: "".join(p.text for p in a.parts) for a in task.artifacts}
    assert texts == {"text-0": "Hello"}  # the dead attempt's "Hel" was replaced, not added to
    assert {a.artifact_id: "".join(p.text for p in a.parts) for a in final.artifacts} == texts
    assert [m.parts[0].text for m in final.history] == ["hi"]
    assert list(fold.task(history_length=0)) == ["id", "contextId", "status", "artifacts"]


def test_a_pause_is_input_required_with_the_pending_calls() -> None:
    fold = TaskFold("r1", "s1")
    log = [ev(0, EventType.RUN_STARTED), ev(1, EventType.TOOL_CALL_START, tool_call_id="c1", tool_call_name="rm")]
    log += [ev(2, EventType.TOOL_CALL_ARGS, tool_call_id="c1", delta='{"path": "/x"}')]
    log += [ev(3, EventType.TOOL_CALL_END, tool_call_id="c1")]
    log += [ev(4, EventType.RUN_FINISHED, outcome={"type": "interrupt", "interrupts": [{"id": "c1"}]})]
    results = [r for e in log for r in fold.feed(e)]
    last = strict(results[-1], StreamResponse()).status_update
    assert last.status.state == 6  # TASK_STATE_INPUT_REQUIRED
    data = json_format.MessageToDict(last.status.message.parts[1].data)
    assert data == {"pending": [{"tool_call_id": "c1", "name": "rm", "arguments": {"path": "/x"}}]}
    call = json_format.MessageToDict(strict(results[1], StreamResponse()).status_update.status.message.parts[0].data)
    assert call == {"tool_call": {"id": "c1", "name": "rm", "arguments": {"path": "/x"}}}


def test_errors_carry_the_reason_the_sdk_maps_back() -> None:
    body = wire.error_response(7, wire.A2AError(wire.TASK_NOT_FOUND, "no task 'x'"))
    assert body["error"]["code"] == -32001 and body["error"]["data"][0]["reason"] == "TASK_NOT_FOUND"
    with pytest.raises(wire.A2AError) as bad:
        wire.params_of(wire.SendParams, {"message": {"messageId": "m", "parts": []}})
    assert bad.value.rpc_code == wire.INVALID_PARAMS and "parts" in str(bad.value)
    snake = wire.params_of(wire.SendParams, {"message": {"message_id": "m", "parts": [{"text": "a"}], "task_id": "t"}})
    assert snake.message.task_id == "t"


def test_a_card_shape_parses() -> None:
    card = {
        "name": "fake",
        "description": "d",
        "version": "1",
        "supportedInterfaces": [{"url": "http://h/a2a/fake", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": True, "pushNotifications": False},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "add", "name": "add", "description": "Add.", "tags": ["tool"]}],
        "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
    }
    assert strict(card, AgentCard()).skills[0].id == "add"

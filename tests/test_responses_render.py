"""The Responses renderer (agents_celery/http/responses/render.py) on logs written by hand: no Redis, no server. What
the live tests cannot force at will: a retried model call, a run error, an abandoned step, a replay from any point."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from agents_celery.events import Event, EventType
from agents_celery.http.responses.presenter import Presenter
from agents_celery.http.responses.render import ResponseFold, ResponseSegment, parse_response_id, response_id

RUN = "ab" * 16


def log(*events: tuple[EventType, dict[str, Any]]) -> list[Event]:
    return [Event(i, kind, RUN, "s", "agent", 1_000 * i, data) for i, (kind, data) in enumerate(events)]


def text(mid: str, *deltas: str) -> list[tuple[EventType, dict[str, Any]]]:
    return [
        (EventType.TEXT_MESSAGE_START, {"message_id": mid, "role": "assistant"}),
        *((EventType.TEXT_MESSAGE_CONTENT, {"message_id": mid, "delta": d}) for d in deltas),
        (EventType.TEXT_MESSAGE_END, {"message_id": mid}),
    ]


START = (EventType.RUN_STARTED, {"thread_id": "s", "run_id": RUN})
STEP = (EventType.STEP_STARTED, {"step_name": "model"})
STEP_END = (EventType.STEP_FINISHED, {"step_name": "model"})
DONE = (EventType.RUN_FINISHED, {"thread_id": "s", "run_id": RUN, "outcome": {"type": "success"}, "result": "x"})


def render(events: list[Event], base: int = 0, **segment: Any) -> tuple[list[dict[str, Any]], ResponseFold]:
    fold = ResponseFold(ResponseSegment(RUN, base, "agent", **segment))
    out: list[dict[str, Any]] = []
    for ev in events:
        out += fold.feed(ev)
    return out, fold


def test_a_retried_model_call_keeps_its_partial_text_as_an_incomplete_item() -> None:
    events = log(
        START,
        STEP,
        *text("m1", "Hel"),
        (EventType.CUSTOM, {"name": "model_retry", "value": {"attempt": 1}}),
        *text("m2", "Hello", " world"),
        STEP_END,
        DONE,
    )
    out, fold = render(events)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    assert out[0]["type"] == "response.created" and out[-1]["type"] == "response.completed"
    items = [e["item"] for e in out if e["type"] == "response.output_item.done"]
    assert [(i["id"], i["status"]) for i in items] == [("m1", "incomplete"), ("m2", "completed")]
    whole = "".join(e["delta"] for e in out if e["type"] == "response.output_text.delta")
    assert whole == "HelHello world" == "".join(i["content"][0]["text"] for i in fold.output)


def test_an_abandoned_step_and_a_run_error() -> None:
    events = log(
        START,
        STEP,
        *text("m1", "half")[:2],
        (EventType.TEXT_MESSAGE_END, {"message_id": "m1"}),  # a recovering attempt's closers
        (EventType.STEP_FINISHED, {"step_name": "model", "metadata": {"abandoned": True}}),
        (EventType.RUN_ERROR, {"message": "the model refused", "code": "model_error"}),
    )
    out, fold = render(events)
    assert [e["item"]["status"] for e in out if e["type"] == "response.output_item.done"] == ["incomplete"]
    assert out[-1]["type"] == "response.failed"
    assert out[-1]["response"]["error"] == {"code": "model_error", "message": "the model refused"}
    assert fold.response()["status"] == "failed"


def test_a_pause_for_approval_and_the_segment_that_continues_it() -> None:
    interrupt = {
        "id": "c1",
        "tool_call_id": "c1",
        "reason": "confirmation_required",
        "metadata": {"tool_name": "delete_file", "tool_args": {"path": "/x"}},
    }
    events = log(
        START,
        STEP,
        (EventType.TOOL_CALL_START, {"tool_call_id": "c1", "tool_call_name": "delete_file"}),
        (EventType.TOOL_CALL_ARGS, {"tool_call_id": "c1", "delta": '{"path": "/x"}'}),
        (EventType.TOOL_CALL_END, {"tool_call_id": "c1"}),
        STEP_END,
        (EventType.RUN_FINISHED, {"outcome": {"type": "interrupt", "interrupts": [interrupt]}}),
        (EventType.RUN_STARTED, {"metadata": {"continued": True, "decisions": [{"tool_call_id": "c1"}]}}),
        (EventType.STEP_STARTED, {"step_name": "tools"}),
        (EventType.TOOL_CALL_RESULT, {"message_id": "t", "tool_call_id": "c1", "content": "deleted /x"}),
        (EventType.STEP_FINISHED, {"step_name": "tools"}),
        DONE,
    )
    first, fold = render(events, confirm=frozenset({"delete_file"}))
    assert [i["type"] for i in fold.output] == ["mcp_approval_request"]  # nothing of the call before the pause
    assert json.loads(fold.output[0]["arguments"]) == {"path": "/x"} and first[-1]["type"] == "response.completed"
    second, fold = render(events, base=7, confirm=frozenset({"delete_file"}))
    assert second[0]["type"] == "response.created" and second[0]["sequence_number"] == 0
    assert [(i["type"], i["name"], i["output"]) for i in fold.output] == [("mcp_call", "delete_file", "deleted /x")]
    assert fold.response()["previous_response_id"] == response_id(RUN, 0)


def test_replays_from_any_point_are_the_same_events() -> None:
    events = log(START, STEP, *text("m1", *"abcdefgh"), STEP_END, DONE)
    whole, _ = render(events)
    frames = Presenter(ResponseFold(ResponseSegment(RUN, 0, "agent")), -1).frames(events)
    assert frames.count("\n\n") == len(whole)
    for n in range(len(whole)):
        presenter = Presenter(ResponseFold(ResponseSegment(RUN, 0, "agent")), n)
        text_ = "".join(presenter.frames([ev]) for ev in events)  # one event per page, as a live tail reads
        got = [json.loads(line[6:]) for line in text_.splitlines() if line.startswith("data: ")]
        assert got == whole[n + 1 :] and presenter.finished


def test_the_error_event_is_what_the_sdk_raises() -> None:
    presenter = Presenter(ResponseFold(ResponseSegment(RUN, 0, "agent")))
    presenter.frames(log(START, STEP, *text("m1", "ab")))
    frame = presenter.error(RuntimeError("Redis went away"))
    data = json.loads(next(line[6:] for line in frame.splitlines() if line.startswith("data: ")))
    assert data["type"] == "error" and data["error"]["message"] == "Redis went away"
    assert data["sequence_number"] == presenter.fold.seq + 1 and "id:" not in frame  # next in order, not resumable
    assert set(data["error"]) == {"message", "type", "param", "code"}
    assert isinstance(openai.APIError("x", None, body=data["error"]), openai.OpenAIError)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["resp_", "resp_x_", "resp__1", "resp_x_-1", "resp_x_1a", "run_x_1", "resp_x_\uff11"])
def test_malformed_response_ids_name_nothing(value: str) -> None:
    assert parse_response_id(value) is None


def test_response_ids_round_trip() -> None:
    assert parse_response_id(response_id("a_b", 12)) == ("a_b", 12)


def test_a_fold_restored_from_its_checkpoint_at_any_event_renders_on_the_same() -> None:
    """A resume starts from a checkpoint (the fold's state as JSON, agents_celery/storage/renders.py): from any
    event, a fold restored from it renders the rest of the log exactly as the fold it was taken of."""
    call = [
        (EventType.TOOL_CALL_START, {"tool_call_id": "c1", "tool_call_name": "add"}),
        (EventType.TOOL_CALL_ARGS, {"tool_call_id": "c1", "delta": '{"a": 1}'}),
        (EventType.TOOL_CALL_END, {"tool_call_id": "c1"}),
    ]
    paused = {"outcome": {"type": "interrupt", "interrupts": [{"id": "c1", "tool_call_id": "c1"}]}}
    events = log(
        START, STEP, *text("m1", "He"), (EventType.CUSTOM, {"name": "model_retry"}), *text("m2", "Hi", "!"), *call,
        STEP_END, (EventType.RUN_FINISHED, paused), (EventType.RUN_STARTED, {"metadata": {"continued": True}}),
        (EventType.STEP_STARTED, {"step_name": "tools"}),
        (EventType.TOOL_CALL_RESULT, {"message_id": "t", "tool_call_id": "c1", "content": "2"}),
        (EventType.STEP_FINISHED, {"step_name": "tools"}), STEP, *text("m3", "Two", "."), STEP_END, DONE,
    )  # fmt: skip
    for base, confirm in ((0, frozenset({"add"})), (17, frozenset({"add"})), (0, frozenset())):
        segment = ResponseSegment(RUN, base, "agent", confirm=confirm)
        whole, _ = render(events, base, confirm=confirm)
        for cut in range(len(events)):
            fold = ResponseFold(segment)
            for ev in events[: cut + 1]:
                fold.feed(ev)
            restored = ResponseFold.restore(segment, json.loads(json.dumps(fold.snapshot())))
            assert restored is not None
            rest = [e for ev in events[cut + 1 :] for e in restored.feed(ev)]
            assert (
                rest == whole[len(whole) - len(rest) :]
                and restored.response() == render(events, base, confirm=confirm)[1].response()
            )
    fresh = ResponseSegment(RUN, 0, "agent")
    assert ResponseFold.restore(fresh, {**ResponseFold(fresh).snapshot(), "rendering": 0}) is None


def test_a_stream_saves_its_fold_every_so_many_sequence_numbers() -> None:
    from agents_celery.http.responses.presenter import CHECKPOINT_EVERY

    events = log(START, STEP, *text("m1", *["w"] * 3 * CHECKPOINT_EVERY), STEP_END, DONE)
    saved: list[tuple[int, int]] = []
    presenter = Presenter(
        ResponseFold(ResponseSegment(RUN, 0, "agent")), save=lambda f, ev: saved.append((f.seq, ev.offset))
    )
    for ev in events:
        assert presenter.needs_thread([(ev.offset, "")]) or presenter.fold.seq + 1 < presenter._next_save
        presenter.frames([ev])
    assert [seq // CHECKPOINT_EVERY for seq, _ in saved] == [1, 2, 3] and all(
        s % CHECKPOINT_EVERY < 8 for s, _ in saved
    )
    assert presenter.finished and saved[-1][1] < len(events) - 1  # none at the end: nothing follows it

"""The shared checks themselves: :func:`tests.support.invariants.assert_run_sound` refuses each broken log it exists to
catch (and accepts a crashed-and-retried one), and the SSE reader's deadline fires while keep-alives arrive."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from agents_celery.events import Event, EventType

from .support.apis import frames, read_until
from .support.invariants import assert_agui_stream, assert_run_sound

pytestmark = pytest.mark.timeout(30)

E = EventType


def log(*items: tuple[EventType, dict[str, Any]]) -> list[Event]:
    return [Event(i, t, "r", "s", "a", 1_000 + i, dict(d)) for i, (t, d) in enumerate(items)]


def step(name: str, attempt: int = 1) -> dict[str, Any]:
    kind, _, number = name.partition(":")
    return {"step_name": name, "metadata": {"step": int(number), "kind": kind, "attempt": attempt}}


START = (E.RUN_STARTED, {"thread_id": "s", "run_id": "r"})
DONE = (E.RUN_FINISHED, {"thread_id": "s", "run_id": "r", "outcome": {"type": "success"}})
M = {"message_id": "m1"}
TEXT = [(E.TEXT_MESSAGE_START, {**M, "role": "assistant"}), (E.TEXT_MESSAGE_CONTENT, {**M, "delta": "hi"})]
CALL = [(E.TOOL_CALL_START, {"tool_call_id": "c1", "tool_call_name": "add"}), (E.TOOL_CALL_END, {"tool_call_id": "c1"})]
RESULT = (E.TOOL_CALL_RESULT, {"message_id": "t1", "tool_call_id": "c1", "content": "3"})
ABANDONED = (E.CUSTOM, {"name": "attempt_abandoned", "value": {"step": 0, "attempt": 1, "next_attempt": 2}})


def test_a_crashed_and_retried_run_is_sound() -> None:
    assert_run_sound(
        log(
            START,
            (E.STEP_STARTED, step("model_turn:0")),
            *TEXT,
            (E.TEXT_MESSAGE_END, M),  # closed by the recovering worker
            (E.STEP_FINISHED, {"step_name": "model_turn:0", "metadata": {"abandoned": True}}),
            ABANDONED,
            (E.STEP_STARTED, step("model_turn:0", 2)),
            *CALL,
            (E.STEP_FINISHED, step("model_turn:0", 2)),
            (E.STEP_STARTED, step("tools:1")),
            RESULT,
            (E.STEP_FINISHED, step("tools:1")),
            DONE,
            START,  # a continue starts a new segment
            DONE,
        ),
        tool_counts={"add": 1},
        counter={"add": 1}.__getitem__,
    )


BROKEN = {
    "gap or duplicate offset": [START, DONE],  # offsets renumbered below
    "starts with": [(E.STEP_STARTED, step("model_turn:0")), DONE],
    "after the run's end": [START, DONE, (E.CUSTOM, {"name": "late", "value": 1})],
    "outside its message": [START, (E.TEXT_MESSAGE_CONTENT, {**M, "delta": "x"})],
    "outside its tool call": [START, (E.TOOL_CALL_ARGS, {"tool_call_id": "c9", "delta": "{}"})],
    "open": [START, *TEXT, DONE],
    "a second TOOL_CALL_RESULT": [START, *CALL, RESULT, RESULT],
    "never started": [START, RESULT],
    "not announced": [START, (E.STEP_STARTED, step("model_turn:0", 2))],
    "started again as attempt 1": [
        START,
        (E.STEP_STARTED, step("model_turn:0")),
        (E.STEP_FINISHED, step("model_turn:0")),
        (E.STEP_STARTED, step("model_turn:0")),
    ],
    "without its attempt number": [START, (E.STEP_STARTED, {"step_name": "model_turn:0"})],
}


@pytest.mark.parametrize("rule", list(BROKEN))
def test_each_broken_log_is_refused_naming_the_rule(rule: str) -> None:
    events = log(*BROKEN[rule])
    if rule.startswith("gap"):
        events[1].offset = 2
    with pytest.raises(AssertionError, match=rule):
        assert_run_sound(events)


def test_an_event_invalid_for_its_type_is_refused() -> None:
    with pytest.raises(Exception, match="delta"):
        assert_run_sound(log(START, (E.TEXT_MESSAGE_START, {**M, "role": "assistant"}), (E.TEXT_MESSAGE_CONTENT, M)))


def test_a_side_effect_counted_twice_is_refused() -> None:
    with pytest.raises(AssertionError, match="counted"):
        assert_run_sound(log(START, DONE), tool_counts={"add": 1}, counter={"add": 2}.__getitem__)


WIRE_START = {"type": "RUN_STARTED", "threadId": "s", "runId": "r", "timestamp": 1}
WIRE_DONE = {"type": "RUN_FINISHED", "threadId": "s", "runId": "r", "timestamp": 2, "outcome": {"type": "success"}}


def wire_text(child: str | None) -> list[dict[str, Any]]:
    scope = {"subagentRunId": child} if child else {}
    start = {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant", "timestamp": 1, **scope}
    return [start, {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "hi", "timestamp": 1, **scope}]


def test_a_client_stream_is_checked_by_the_same_rules() -> None:
    end = {"type": "TEXT_MESSAGE_END", "messageId": "m1", "timestamp": 1}
    # A parent and its child may both have a message "m1" open: each is named within its run.
    both = [WIRE_START, *wire_text(None), *wire_text("kid"), end, {**end, "subagentRunId": "kid"}, WIRE_DONE]
    assert_agui_stream(both)
    with pytest.raises(AssertionError, match="open"):
        assert_agui_stream([WIRE_START, *wire_text(None), *wire_text("kid"), end, WIRE_DONE])
    with pytest.raises(AssertionError, match="not strict"):
        assert_agui_stream([WIRE_START, {**WIRE_DONE, "result": None}])
    with pytest.raises(AssertionError, match="after the run's end"):
        assert_agui_stream([WIRE_START, WIRE_DONE, *wire_text(None)])


class _KeepAlive(BaseHTTPRequestHandler):
    """An SSE stream that sends one frame, then only keep-alive comments, forever."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            self.wfile.write(b'id: 0\nevent: RunStarted\ndata: {"event": "RunStarted"}\n\n')
            while True:
                self.wfile.write(b": keep-alive\n\n")
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:
            return

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def keepalive_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KeepAlive)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_sse_reads_time_out_while_only_keep_alives_arrive(keepalive_url: str) -> None:
    for read in (lambda resp: list(frames(resp, timeout=0.5)), lambda resp: read_until(resp, {"never"}, timeout=0.5)):
        started = time.monotonic()
        with httpx.stream("GET", keepalive_url, timeout=5) as resp, pytest.raises(AssertionError, match="timed out"):
            read(resp)
        assert time.monotonic() - started < 3

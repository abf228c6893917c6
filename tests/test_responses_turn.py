"""What a ``POST /v1/responses`` is (agents_celery/http/responses/turn.py), case by case, as docs/responses.md's table
says: no I/O, the input parsed as the route parses it and an anchor run as the route would gather it."""

from __future__ import annotations

from typing import Any

import pytest

from agents_celery.errors import BadRequestError, StateError, UnsupportedError
from agents_celery.http.responses.input import parse_input
from agents_celery.http.responses.render import approval_request_id, client_call_id
from agents_celery.http.responses.turn import Anchor, anchor_runs, classify

RUN, OLDER = "a" * 32, "b" * 32


def call(run: str, ident: str, output: str = "out") -> list[dict[str, Any]]:
    """A function call a stateless client sends back, and its output."""
    cid = client_call_id(run, ident)
    return [
        {"type": "function_call", "call_id": cid, "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": cid, "output": output},
    ]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def anchor(*, paused: bool, pending: tuple[str, ...] = (), answered: dict[str, str | None] | None = None) -> Anchor:
    return Anchor(RUN, "s1", paused, frozenset(pending), dict(answered or {}))


def test_a_new_message_without_an_anchor_is_a_new_run_with_its_history_as_context() -> None:
    got = parse_input([user("hi"), {"role": "assistant", "content": "hello"}, user("again")], None)
    assert classify(got, None).kind == "new"
    assert [c["description"] for c in got.earlier] == ["earlier user message", "earlier assistant message"]


def test_the_second_round_of_a_whole_history_decides_only_the_pending_calls() -> None:
    items = [user("q"), *call(RUN, "c1"), *call(RUN, "c2"), *call(RUN, "c3", "three")]
    got = parse_input(items, None)
    assert anchor_runs(got)[-1] == RUN
    turn = classify(got, anchor(paused=True, pending=("c3",), answered={"c1": "out", "c2": "out"}))
    assert turn.kind == "answer" and turn.outputs == [{"call_id": "c3", "output": "three"}]


def test_a_history_of_old_answers_and_a_new_message_is_the_next_turn() -> None:
    items = [user("q1"), *call(OLDER, "c0"), *call(RUN, "c1"), {"role": "assistant", "content": "a1"}, user("q2")]
    got = parse_input(items, None)
    assert classify(got, anchor(paused=False, answered={"c1": "out"})).kind == "next"
    assert got.text == "q2"


def test_a_new_message_while_the_anchor_waits_for_answers_is_409() -> None:
    got = parse_input([user("q1"), *call(RUN, "c1"), user("q2")], None)
    with pytest.raises(StateError):
        classify(got, anchor(paused=True, pending=("c2",), answered={"c1": "out"}))


def test_answers_and_a_new_message_together_are_refused() -> None:
    got = parse_input([user("q1"), *call(RUN, "c1"), user("q2")], None)
    with pytest.raises(UnsupportedError, match="cannot come with answers"):
        classify(got, anchor(paused=True, pending=("c1",)))


def test_answers_given_already_are_409_and_another_output_for_one_is_409_too() -> None:
    got = parse_input(call(RUN, "c1"), None)
    with pytest.raises(StateError, match="given already"):
        classify(got, anchor(paused=False, answered={"c1": "out"}))
    with pytest.raises(StateError, match="another output"):
        classify(parse_input(call(RUN, "c1", "changed"), None), anchor(paused=True, answered={"c1": "out"}))


def test_answers_without_an_anchor_are_400_unless_a_new_message_follows() -> None:
    with pytest.raises(BadRequestError, match="previous_response_id"):
        classify(parse_input([{"type": "function_call_output", "call_id": "x", "output": "o"}], None), None)
    expired = parse_input([user("q1"), *call(RUN, "c1"), user("q2")], None)  # the history's run is gone
    assert classify(expired, None).kind == "new"


def test_approvals_name_their_run_and_old_ones_are_skipped() -> None:
    old = {"type": "mcp_approval_response", "approval_request_id": approval_request_id(RUN, "d1"), "approve": True}
    new = {"type": "mcp_approval_response", "approval_request_id": approval_request_id(RUN, "d2"), "approve": False}
    got = parse_input([user("q"), old, new], None)
    assert anchor_runs(got) == [RUN, RUN]
    turn = classify(got, anchor(paused=True, pending=("d2",), answered={"d1": None}))
    assert turn.kind == "answer" and [a["approval_request_id"] for a in turn.approvals] == ["d2"]


def test_deeply_nested_approval_arguments_are_a_400() -> None:
    import pytest

    from agents_celery.errors import BadRequestError
    from agents_celery.http.responses.input import approval

    deep = "[" * 5000 + "]" * 5000
    with pytest.raises(BadRequestError, match="nests deeper"):  # was a RecursionError: a 500 the SDK retries
        approval({"approval_request_id": "mcpr_x", "approve": True, "arguments": deep})
    with pytest.raises(BadRequestError, match="not valid JSON"):
        approval({"approval_request_id": "mcpr_x", "approve": True, "arguments": "{nope"})

"""Decisions on paused tool calls, without Redis: what continue will commit."""

from __future__ import annotations

import json

import pytest

from agents_celery.decisions import Decision, as_decision, decide, route, with_edited_args
from agents_celery.errors import DecisionError, ToolArgumentsError
from agents_celery.runs import RunState, RunStatus, ToolCall

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
MANIFEST = {"name": "a", "tools": [{"name": "delete_file", "parameters": SCHEMA}]}


def _paused() -> RunState:
    calls = [
        ToolCall(id="c1", name="delete_file", arguments='{"path": "/a"}', requires_confirmation=True,
                 decision="pending", pause_reason="confirmation_required"),
        ToolCall(id="c2", name="delete_file", arguments='{"path": "/b"}', requires_confirmation=True,
                 decision="pending", pause_reason="may_have_run"),
        ToolCall(id="c3", name="get_time", arguments="{}"),
    ]  # fmt: skip
    return RunState(run_id="r", agent_id="a", session_id="s", status=RunStatus.PAUSED, tool_calls=calls)


def test_no_decisions_approve_every_pending_call() -> None:
    calls = decide(_paused(), [], MANIFEST)
    assert [c.decision for c in calls] == ["approved", "approved", None]
    assert calls[1].rerun == 1  # approving a call that may have run re-runs it, once


def test_each_approval_of_a_call_that_may_have_run_authorises_one_more_execution() -> None:
    state = _paused()
    again = state.tool_calls[1].model_copy(update={"rerun": 1})  # its approved re-run died with its worker
    state = state.model_copy(update={"tool_calls": [state.tool_calls[0], again, state.tool_calls[2]]})
    calls = decide(state, [], MANIFEST)
    assert calls[1].rerun == 2


def test_reject_with_note_and_edit_arguments() -> None:
    calls = decide(
        _paused(),
        [as_decision({"tool_call_id": "c1", "confirmed": True, "tool_args": {"path": "/edited"}}),
         Decision("c2", confirmed=False, note="leave it")],
        MANIFEST,
    )  # fmt: skip
    assert json.loads(calls[0].arguments) == {"path": "/edited"} and calls[0].decision == "approved"
    assert calls[1].decision == "rejected" and calls[1].note == "leave it" and not calls[1].rerun
    assistant = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                 "function": {"name": "delete_file", "arguments": '{"path": "/a"}'}}]}  # fmt: skip
    edited = with_edited_args([{"role": "user", "content": "x"}, assistant], calls)
    assert edited[-1]["tool_calls"][0]["function"]["arguments"] == calls[0].arguments


@pytest.mark.parametrize(
    ("decisions", "error"),
    [
        ([{"tool_call_id": "c9"}], DecisionError),  # names no pending call
        ([{"tool_call_id": "c3"}], DecisionError),  # not pending (needs no decision)
        ([{"tool_call_id": "c1"}], DecisionError),  # c2 left undecided
        ([{"confirmed": True}], DecisionError),  # no id
        ([{"tool_call_id": "c1", "confirmed": "yes"}, {"tool_call_id": "c2"}], DecisionError),
        ([{"tool_call_id": "c1", "tool_args": {"path": 3}}, {"tool_call_id": "c2"}], ToolArgumentsError),
        ([{"tool_call_id": "c1", "tool_args": "not an object"}, {"tool_call_id": "c2"}], ToolArgumentsError),
    ],
)
def test_bad_decisions_are_refused(decisions: list[dict[str, object]], error: type[Exception]) -> None:
    with pytest.raises(error):
        decide(_paused(), [as_decision(d) for d in decisions], MANIFEST)


def _waiting_for_the_client() -> RunState:
    calls = [
        ToolCall(id="c1", name="delete_file", arguments='{"path": "/a"}', requires_confirmation=True,
                 decision="pending", pause_reason="confirmation_required"),
        ToolCall(id="f1", name="pick_color", arguments="{}", decision="pending", pause_reason="client_tool"),
    ]  # fmt: skip
    return RunState(run_id="r", agent_id="a", session_id="s", status=RunStatus.PAUSED, tool_calls=calls)


def test_a_client_tool_call_is_answered_with_its_result() -> None:
    state = _waiting_for_the_client()
    calls = decide(state, [Decision("c1"), as_decision({"tool_call_id": "f1", "result": {"color": "red"}})], MANIFEST)
    assert calls[1].result == '{"color": "red"}' and calls[1].decision == "approved" and calls[1].done
    assert calls[0].decision == "approved" and not calls[0].done  # the worker runs that one
    with pytest.raises(DecisionError, match="the client's: answer it with its result"):
        decide(state, [], MANIFEST)  # "approve all" cannot answer for the client
    with pytest.raises(DecisionError, match="the client's"):
        decide(state, [Decision("c1"), Decision("f1")], MANIFEST)
    with pytest.raises(DecisionError, match="runs here"):
        decide(state, [Decision("c1", result="made up"), Decision("f1", result="red")], MANIFEST)


def _tree() -> tuple[RunState, dict[str, RunState]]:
    """A parent paused for the calls of two children (``k1`` holding ``a`` and ``b``, ``k2`` holding ``a``) and
    for one call of its own (``own``)."""
    own = ToolCall(id="own", name="delete_file", arguments="{}", requires_confirmation=True, decision="pending")
    waiting = [ToolCall(id=f"t{i}", name="helper", arguments="{}", child_run_id=f"k{i}") for i in (1, 2)]
    parent = RunState(run_id="p", agent_id="a", session_id="s", status=RunStatus.PAUSED, tool_calls=[own, *waiting])

    def child(run_id: str, *ids: str) -> RunState:
        calls = [ToolCall(id=i, name="delete_file", arguments="{}", requires_confirmation=True, decision="pending")
                 for i in ids]  # fmt: skip
        return RunState(run_id=run_id, agent_id="b", session_id=run_id, status=RunStatus.PAUSED, tool_calls=calls)

    return parent, {"k1": child("k1", "a", "b"), "k2": child("k2", "a")}


def test_route_sends_each_decision_to_the_child_holding_it_under_the_childs_own_name() -> None:
    parent, paused = _tree()
    decisions = [Decision("own"), Decision("k1:a", confirmed=False, note="no"), Decision("k1:b"), Decision("k2:a")]
    routing = route(parent, paused, decisions)
    assert routing.own == [Decision("own")] and routing.has_own
    assert routing.forwarded == {
        "k1": [Decision("a", confirmed=False, note="no"), Decision("b")],
        "k2": [Decision("a")],
    }


def test_route_without_decisions_approves_all_through_every_holder() -> None:
    parent, paused = _tree()
    routing = route(parent, paused, [])
    assert routing.own == [] and routing.has_own and routing.forwarded == {"k1": [], "k2": []}
    without_own = parent.model_copy(update={"tool_calls": parent.tool_calls[1:]})
    assert not route(without_own, {}, []).has_own  # a child ended meanwhile: nothing to forward either


def test_route_refuses_unknown_calls_and_some_decided_but_not_all() -> None:
    parent, paused = _tree()
    with pytest.raises(DecisionError, match="not pending"):
        route(parent, paused, [Decision("a")])  # a child's call needs its child's prefix
    with pytest.raises(DecisionError, match="every pending tool call or none"):
        route(parent, paused, [Decision("own"), Decision("k1:a")])

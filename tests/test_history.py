"""Long sessions: history policies (``Agent(history=LastTurns(n) | Summarize(...))``).

The pure part (what goes into the prompt, how it is counted, what a summary replaces) is tested without Redis;
the rest with real workers serving ``tests/agents/history.py`` and the real openai SDK against the fake OpenAI
server, whose received requests are the prompts checked against the budget.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agents_celery import Agent, LastTurns, Runtime, ScriptedModel, ScriptedToolCall, ScriptedTurn, Summarize, tool
from agents_celery.contrib.flask import close_app, create_app
from agents_celery.errors import ConfigurationError
from agents_celery.events import EventType
from agents_celery.history import (
    MARKER,
    SUMMARY_PREFIX,
    estimate,
    fixed_tokens,
    is_marker,
    is_summary_request,
    plan_summary,
    prompt_messages,
    prompt_tokens,
)
from agents_celery.http.agui import render as agui
from agents_celery.models import TextDelta, Usage
from agents_celery.models.scripted import word_count
from agents_celery.testing import InlineRunner
from agents_celery.testing.openai_server import FakeReply, SummaryResponder

from .agents.history import KEEP
from .conftest import all_events, wait_for
from .support.invariants import assert_agui_stream, assert_run_sound
from .support.workers import Deployment


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str, usage: int = 0) -> dict[str, Any]:
    m: dict[str, Any] = {"role": "assistant", "content": text}
    if usage:
        m["usage"] = {"prompt_tokens": usage, "completion_tokens": 3}
    return m


def turns(n: int, words: int = 10) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out += [user(f"question {i} " + "word " * words), assistant(f"answer {i} " + "word " * words)]
    return out


# -- what goes into the prompt (no I/O) ----------------------------------------------------------------------


def test_no_policy_sends_everything_but_markers_and_usage() -> None:
    marker = {"role": "system", "content": "S", MARKER: {"id": "sum_1", "kept": 0}}
    messages = [user("a"), assistant("b", usage=9), marker, user("c")]
    assert prompt_messages(None, messages) == [user("a"), assistant("b"), user("c")]


def test_last_turns_keeps_whole_turns() -> None:
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "f"}}]}
    messages = [*turns(3), user("now"), call, {"role": "tool", "tool_call_id": "c1", "content": "r"}]
    sent = prompt_messages(LastTurns(2), messages)
    assert sent == [messages[4], messages[5], user("now"), call, messages[-1]]  # turn 2 and the current one
    assert prompt_messages(LastTurns(10), messages) == messages  # fewer turns than n: all of them


def test_an_output_retry_or_a_steering_message_is_not_a_turn() -> None:
    """LastTurns(1) during an output retry sent the retry prompt without the question; a message steering a live
    run after a tool result counted as a turn of its own (#39)."""
    from agents_celery.output import retry_message

    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "f"}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "r"}
    retried = [*turns(2), user("give JSON"), assistant("not json"), retry_message("not an object")]
    assert prompt_messages(LastTurns(1), retried) == retried[4:]  # the question, the bad answer, the retry
    steered = [*turns(2), user("look it up"), call, result, user("and in French, please")]
    assert prompt_messages(LastTurns(1), steered) == steered[4:]
    assert prompt_messages(LastTurns(2), steered) == steered[2:]
    twice = [*turns(1), user("look"), user("also this")]  # a steer taken before the first model call
    assert prompt_messages(LastTurns(1), twice) == twice[2:]


def test_summary_plan_marker_and_view() -> None:
    policy = Summarize(max_prompt_tokens=60, keep_last_turns=2)
    messages = turns(5)
    assert plan_summary(policy, messages[:2], 0) is None  # within the budget
    plan = plan_summary(policy, messages, 0)
    assert plan is not None and (plan.start, plan.cut, plan.previous) == (0, 6, -1)
    request = plan.request(policy, messages)
    assert is_summary_request({"messages": request}) and "question 2" in request[1]["content"]
    assert "question 3" not in request[1]["content"]  # the kept turns are not summarised
    marker = plan.marker("S1", messages, "sum_1", "m")
    assert marker[MARKER]["kept"] == 4 and marker[MARKER]["replaced"] == 6
    after = [*messages, marker]
    view = prompt_messages(policy, after)
    assert view == [{"role": "system", "content": SUMMARY_PREFIX + "S1"}, *messages[6:]]
    assert prompt_messages(None, after) == messages  # the full history is still there

    # More turns pass the budget again: the next summary replaces the first one and the turns it kept.
    later = [*after, *turns(3)]
    plan2 = plan_summary(policy, later, 0)
    assert plan2 is not None and (plan2.start, plan2.previous) == (6, 10)
    assert "[earlier summary] S1" in plan2.request(policy, later)[1]["content"]
    marker2 = plan2.marker("S2", later, "sum_2", "m")
    assert marker2[MARKER]["replaced"] == 6 + (plan2.cut - 6 - 1) and marker2[MARKER]["previous"] == "sum_1"
    view2 = prompt_messages(policy, [*later, marker2])
    assert view2[0]["content"] == SUMMARY_PREFIX + "S2" and [m for m in view2 if is_marker(m)] == []
    assert view2[1:] == [m for m in later[plan2.cut :]]


def rounds(n: int, first: int = 0) -> list[dict[str, Any]]:
    """``n`` tool rounds of one turn: an assistant message calling a tool, and the tool's long result."""
    out: list[dict[str, Any]] = []
    for i in range(first, first + n):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "look", "arguments": f'{{"page": {i}}}'}}
        out += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"page {i}: " + "text " * 40},
        ]
    return out


def test_one_long_turn_is_summarised_inside_keeping_its_question() -> None:
    """Summarize could not shrink one question followed by many tool rounds: the kept turn was all there was, so
    the prompt grew past max_prompt_tokens (#39)."""
    policy = Summarize(max_prompt_tokens=120, keep_last_turns=1)
    question = user("Read every page and tell me what they say.")
    messages = [question, *rounds(6)]
    plan = plan_summary(policy, messages, 0)
    assert plan is not None and (plan.start, plan.cut, plan.question) == (0, 11, 0)
    request = plan.request(policy, messages)[1]["content"]
    assert "page 0:" in request and "page 4:" in request and "page 5:" not in request  # the last round stays
    marker = plan.marker("S1", messages, "sum_1", "m")
    assert marker[MARKER]["question"] == 13 and marker[MARKER]["replaced"] == 10
    after = [*messages, marker]
    view = prompt_messages(policy, after)
    assert view == [question, {"role": "system", "content": SUMMARY_PREFIX + "S1"}, *messages[11:]]
    assert prompt_tokens(after, 0) <= policy.max_prompt_tokens < prompt_tokens(messages, 0)

    # More rounds of the same turn: the next summary replaces the first and the rounds since, the question stays.
    later = [*after, *rounds(4, first=6)]
    plan2 = plan_summary(policy, later, 0)
    assert plan2 is not None and (plan2.start, plan2.previous, plan2.question) == (11, 13, 0)
    request2 = plan2.request(policy, later)[1]["content"]
    assert "[earlier summary] S1" in request2 and "user: Read every page" in request2
    view2 = prompt_messages(policy, [*later, plan2.marker("S2", later, "sum_2", "m")])
    assert view2[:2] == [question, {"role": "system", "content": SUMMARY_PREFIX + "S2"}]
    assert view2[2:] == later[plan2.cut :] and len(view2[2:]) == 2  # the last round, verbatim

    # A new turn: a summary of whole turns again, the old question in its request (it was in no summary).
    reply = assistant("They say: " + "hello " * 60)
    answered = [*later, plan2.marker("S2", later, "sum_2", "m"), reply, user("Thanks!")]
    plan3 = plan_summary(policy, answered, 0)
    assert plan3 is not None and plan3.question == -1
    assert "user: Read every page" in plan3.request(policy, answered)[1]["content"]
    assert prompt_messages(policy, [*answered, plan3.marker("S3", answered, "sum_3", "m")])[1:] == [user("Thanks!")]


def test_one_round_alone_is_not_summarised() -> None:
    assert plan_summary(Summarize(max_prompt_tokens=1, keep_last_turns=1), [user("q"), *rounds(1)], 0) is None


def test_a_summary_request_names_images_and_files_without_their_data() -> None:
    parts = [{"type": "text", "text": "look at this"}, {"type": "image_url", "ref": "r/0", "bytes": 99}]
    messages = [{"role": "user", "content": parts}, assistant("a cat"), *turns(2)]
    plan = plan_summary(Summarize(max_prompt_tokens=10, keep_last_turns=2), messages, 0)
    assert plan is not None
    assert "user: look at this [image_url]" in plan.request(Summarize(max_prompt_tokens=10), messages)[1]["content"]


def test_nothing_to_summarise_when_the_kept_turns_are_all() -> None:
    assert plan_summary(Summarize(max_prompt_tokens=1, keep_last_turns=2), turns(2), 0) is None


def test_counting_uses_the_reported_usage_of_the_last_turn() -> None:
    messages = [*turns(2), user("next one")]
    messages[3] = assistant(messages[3]["content"], usage=1000)
    # The usage reported for turn 1 (1000 + 3) plus the estimate of the new user message (8 chars + 4).
    assert prompt_tokens(messages, 0) == 1003 + 2 + 4
    without = [*turns(2), user("next one")]
    assert prompt_tokens(without, 50) < 200  # estimated: 4 characters per token, plus the fixed part


def test_bad_policies_are_refused() -> None:
    model = ScriptedModel(["x"])
    with pytest.raises(ConfigurationError, match="history"):
        Agent("a", model=model, history=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="n >= 1"):
        LastTurns(0)
    with pytest.raises(ConfigurationError, match="max_prompt_tokens"):
        Summarize(max_prompt_tokens=0)


class Recording:
    """A ScriptedModel that records every prompt, and answers summary requests with a summary."""

    name = "recording"

    def __init__(self, turns: list[Any]) -> None:
        self.inner = ScriptedModel(turns)
        self.prompts: list[list[dict[str, Any]]] = []

    def stream(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Iterator[Any]:
        self.prompts.append(messages)
        if is_summary_request({"messages": messages}):
            return iter([TextDelta("The user asked about times; the tool said noon."), Usage(len(messages), 8, 0)])
        return self.inner.stream(messages, tools)


@tool
def clock(city: str) -> str:
    """The time in a city."""
    return f"12:00 in {city}. " + "The clock tower's bells ring every quarter hour in the old town. " * 5


def test_a_summary_in_the_middle_of_a_tool_loop_keeps_the_prompt_well_formed(settings: Any) -> None:
    model = Recording([ScriptedTurn("", [ScriptedToolCall("clock", {"city": "Paris"})]), "It is noon in Paris."])
    agent = Agent("looping", model=model, tools=[clock], history=Summarize(max_prompt_tokens=300, keep_last_turns=1))
    session = uuid.uuid4().hex
    with InlineRunner([agent], settings=settings) as runner:
        for i in range(8):
            view = runner.run("looping", f"What time is it in Paris, question {i}?", session_id=session)
            assert view.status.value == "completed", view.error
        summaries = [p for p in model.prompts if is_summary_request({"messages": p})]
        turns_sent = [p for p in model.prompts if not is_summary_request({"messages": p})]
        assert summaries and len(turns_sent) == 16
        after = [model.prompts[i + 1] for i, p in enumerate(model.prompts) if is_summary_request({"messages": p})]
        assert any(p[-1]["role"] == "tool" for p in after), "no summary between a tool step and the next turn"
        for prompt in turns_sent:  # every tool result follows the assistant message that asked for it
            asked: set[str] = set()
            for m in prompt:
                asked |= {c["id"] for c in m.get("tool_calls") or []}
                assert m["role"] != "tool" or m["tool_call_id"] in asked, prompt
                assert "usage" not in m and MARKER not in m
        assert sum(1 for m in runner.runtime.session(session).messages if not is_marker(m)) == 8 * 4


class InOrder(Recording):
    """A :class:`Recording` that plays its turns in the order it is called (ScriptedModel picks a turn from the
    assistant messages in the prompt, which a summary inside the turn replaces) and reports no usage, so the
    engine counts the prompt as the test does."""

    def __init__(self, turns: list[Any]) -> None:
        super().__init__(turns)
        self.played = 0

    def stream(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Iterator[Any]:
        self.prompts.append(messages)
        if is_summary_request({"messages": messages}):
            return iter([TextDelta("Noon in every city asked so far.")])
        turn = self.inner.turns[min(self.played, len(self.inner.turns) - 1)]
        self.played += 1
        return (c for c in ScriptedModel([turn]).stream(messages, tools) if not isinstance(c, Usage))


def test_a_question_answered_in_many_tool_rounds_stays_under_the_budget(settings: Any) -> None:
    calls = [ScriptedTurn("", [ScriptedToolCall("clock", {"city": f"city{i}"})]) for i in range(10)]
    model = InOrder([*calls, "Noon everywhere."])
    policy = Summarize(max_prompt_tokens=400, keep_last_turns=1)
    agent = Agent("rounds", model=model, tools=[clock], history=policy)
    with InlineRunner([agent], settings=settings) as runner:
        view = runner.run("rounds", "What time is it in ten cities?")
        assert view.status.value == "completed", view.error
    turns_sent = [p for p in model.prompts if not is_summary_request({"messages": p})]
    assert len(turns_sent) == 11 and sum(is_summary_request({"messages": p}) for p in model.prompts) >= 2
    fixed = fixed_tokens(agent.instructions, agent.tool_schemas())
    for prompt in turns_sent:
        assert any(m == user("What time is it in ten cities?") for m in prompt), prompt  # the question, always
        assert fixed + sum(estimate(m) for m in prompt if m.get("role") != "system" or "Summary" in m["content"]) <= 400


# -- real workers ------------------------------------------------------------------------------------------

ANSWER = "Here is a short answer with several plain words in it for the test."


def _deployment(deploy: Any, budget: int) -> Deployment:
    cluster: Deployment = deploy(
        "history", {"AGENTS_CELERY_AGENTS": "tests.agents.history", "HISTORY_TEST_BUDGET": str(budget)}
    )
    return cluster


def _answering(summary_delay: float = 0.0) -> SummaryResponder:
    return SummaryResponder(lambda request: FakeReply(text=ANSWER), token_delay=summary_delay)


def _agent_turns(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in requests if not is_summary_request(r)]


def _custom(events: list[Any], name: str) -> list[Any]:
    return [e for e in events if e.type is EventType.CUSTOM and e.data.get("name") == name]


def test_200_turn_session_stays_under_the_budget(deploy: Any, fake_openai: Any) -> None:
    budget = 400
    cluster = _deployment(deploy, budget)
    cluster.start(1)
    rt = cluster.runtime
    fake_openai.responder = responder = _answering()
    before = len(fake_openai.requests)
    session = uuid.uuid4().hex
    for i in range(200):
        view = rt.run("summarizing", f"Question number {i} about the weather today?", session_id=session, timeout=30)
        assert view.status.value == "completed", view.error
    prompts = _agent_turns(fake_openai.requests[before:])
    assert len(prompts) == 200
    sizes = [word_count(p["messages"]) for p in prompts]  # what the fake server reports as prompt_tokens
    assert max(sizes) <= budget, f"a prompt passed the budget: {max(sizes)} > {budget}"
    assert responder.summaries >= 5  # without them the prompt would reach ~6000 words
    last = prompts[-1]["messages"]
    assert last[1]["content"].startswith(SUMMARY_PREFIX)
    asked = [m["content"] for m in last if m["role"] == "user"]
    assert asked[-KEEP:] == [f"Question number {i} about the weather today?" for i in (198, 199)]

    # Every turn is still readable: the session's history has all 400 messages, in order, plus the markers.
    # (the last run's messages reach the session just after its RUN_FINISHED)
    def full() -> list[dict[str, Any]] | None:
        messages = rt.session(session).messages
        return messages if len([m for m in messages if not is_marker(m)]) >= 400 else None

    history = wait_for(full, what="the session's history")
    plain = [m for m in history if not is_marker(m)]
    assert len(plain) == 400 and [m["content"] for m in plain[::2]] == [
        f"Question number {i} about the weather today?" for i in range(200)
    ]
    assert len(history) - len(plain) == responder.summaries
    app = create_app(Runtime(settings=cluster.settings))  # and over HTTP, as GET /sessions/<id> shows it
    try:
        shown = app.test_client().get(f"/sessions/{session}", query_string={"limit": 1})
        assert shown.status_code == 200 and shown.json is not None and shown.json["messages"] == history, shown.text
    finally:
        close_app(app)


def test_last_turns_sends_only_the_last_turns(deploy: Any, fake_openai: Any) -> None:
    cluster = _deployment(deploy, 400)
    cluster.start(1)
    fake_openai.responder = _answering()
    before = len(fake_openai.requests)
    session = uuid.uuid4().hex
    for i in range(5):
        cluster.runtime.run("last_turns", f"message {i}", session_id=session, timeout=30)
    last = fake_openai.requests[before:][-1]["messages"]
    assert last == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "message 3"},
        {"role": "assistant", "content": ANSWER},
        {"role": "user", "content": "message 4"},
    ]
    stored = wait_for(lambda: len(cluster.runtime.session(session).messages) >= 10, what="the session's history")
    assert stored and len(cluster.runtime.session(session).messages) == 10  # the stored history keeps every turn


def test_replay_of_the_log_shows_the_summary_step(deploy: Any, fake_openai: Any) -> None:
    cluster = _deployment(deploy, 100)
    cluster.start(1)
    rt = cluster.runtime
    fake_openai.responder = responder = _answering()
    session = uuid.uuid4().hex
    runs = [
        rt.run("summarizing", f"question {i} about things", session_id=session, timeout=30).run_id for i in range(8)
    ]
    assert responder.summaries >= 1
    run_id, events = next((r, ev) for r in runs if _custom(ev := all_events(rt, r), "history_summarized"))
    assert_run_sound(events)
    kinds = [(e.type, e.data.get("name")) for e in events]
    at = kinds.index((EventType.CUSTOM, "history_summarized"))
    assert kinds[at - 1][0] is EventType.STEP_STARTED and kinds[at + 1][0] is EventType.STEP_FINISHED
    assert kinds[at + 2][0] is EventType.STEP_STARTED  # the model turn is the next step
    value = _custom(events, "history_summarized")[0].data["value"]
    assert value["summary"].startswith("Summary of") and value["replaced"] >= 2 and value["kept"] >= 1
    assert value["prompt_tokens_before"] > 100 >= value["prompt_tokens_after"]
    assert rt.get(run_id).output == ANSWER
    rendered = [agui.render(e) for e in events]  # the AG-UI dialect of the same log: valid, with the event
    assert_agui_stream(rendered)
    assert any(e["type"] == "CUSTOM" and e["name"] == "history_summarized" for e in rendered)


def test_a_summary_that_cannot_be_made_fails_the_run_with_the_reason(deploy: Any, fake_openai: Any) -> None:
    cluster = _deployment(deploy, 100)
    cluster.start(1)
    rt = cluster.runtime
    answering = _answering()

    def refusing(request: dict[str, Any]) -> FakeReply:
        if is_summary_request(request):
            return FakeReply(status=400, error="summary refused")
        return answering(request)

    fake_openai.responder = refusing
    session = uuid.uuid4().hex
    for i in range(20):
        view = rt.run("summarizing", f"question {i} about things", session_id=session, timeout=30)
        if view.status.value != "completed":
            break
    assert view.status.value == "failed" and "summary refused" in (view.error or {}).get("message", "")
    events = all_events(rt, view.run_id)
    assert_run_sound(events)
    assert events[-1].type is EventType.RUN_ERROR and not _custom(events, "history_summarized")


@pytest.mark.slow
def test_summary_step_survives_kill_9(deploy: Any, fake_openai: Any) -> None:
    cluster = _deployment(deploy, 100)
    first = cluster.worker()
    rt = cluster.runtime
    fake_openai.responder = responder = _answering(summary_delay=0.3)  # ~2 s per summary: time to kill
    session = uuid.uuid4().hex
    for i in range(20):  # runs of the session until one starts a summary step
        stream = rt.stream("summarizing", f"question {i} about things", session_id=session)
        wait_for(lambda r=stream.id: responder.summaries >= 1 or rt.get(r).status.is_final, timeout=30, what="a run")
        if responder.summaries:
            break
    assert responder.summaries == 1 and i > 2
    first.kill()
    cluster.worker()
    events = all_events(rt, stream.id)
    assert_run_sound(events)
    assert len(_custom(events, "history_summarized")) == 1  # applied once
    assert _custom(events, "attempt_abandoned")  # the killed attempt is visible, and was repeated
    assert responder.summaries >= 2
    view = rt.get(stream.id)
    assert view.status.value == "completed" and view.output == ANSWER
    markers = lambda: [m for m in rt.session(session).messages if is_marker(m)]  # noqa: E731
    wait_for(lambda: markers(), what="the summary in the session's history")  # it follows the run's end
    assert len(markers()) == 1


def test_stop_during_the_summary_step_cancels_the_run(deploy: Any, fake_openai: Any) -> None:
    cluster = _deployment(deploy, 100)
    cluster.start(1)
    rt = cluster.runtime
    fake_openai.responder = responder = _answering(summary_delay=2.0)  # a summary that takes ~12 s
    session = uuid.uuid4().hex
    for i in range(20):  # runs of the session until one starts a summary step
        stream = rt.stream("summarizing", f"question {i} about things", session_id=session)
        wait_for(lambda r=stream.id: responder.summaries >= 1 or rt.get(r).status.is_final, timeout=30, what="a run")
        if responder.summaries:
            break
    stopped = time.monotonic()
    rt.stop(stream.id)
    events = all_events(rt, stream.id)
    assert time.monotonic() - stopped < 5  # bounded by stop_grace_seconds, not by the summary's 12 s
    assert_run_sound(events)
    assert events[-1].type is EventType.RUN_FINISHED and events[-1].data["outcome"]["type"] == "cancelled"
    assert not _custom(events, "history_summarized") and rt.get(stream.id).status.value == "cancelled"

"""Agents as tools: a call of ``Agent.as_tool()`` runs that agent as a durable child run. Real workers, real
Redis, the real openai SDK path (the fake server answers each agent by its system prompt)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from agents_celery import ConfigurationError, DecisionError, RunNotFoundError, RunStatus, Runtime, RunView
from agents_celery.engine.children import child_run_id
from agents_celery.events import Event, EventType
from agents_celery.models import ScriptedToolCall
from agents_celery.storage.store import entry_of
from agents_celery.testing.openai_server import FakeReply

from .conftest import wait_event, wait_for
from .support.invariants import assert_run_sound, counter_of
from .support.workers import Deployment

pytestmark = pytest.mark.timeout(90)

Turns = Callable[[int, str], FakeReply]


def by_agent(**scripts: Turns) -> Callable[[dict[str, Any]], FakeReply]:
    """A responder that answers each agent (by the first word after "You are the" in its system prompt) with
    ``scripts[word](turn, last user message)``; the turn counts assistant messages after that message."""

    def respond(request: dict[str, Any]) -> FakeReply:
        messages = request["messages"]
        who = str(messages[0]["content"]).removeprefix("You are the ").split()[0].rstrip(".")
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        turn = sum(1 for m in messages[last_user:] if m["role"] == "assistant")
        return scripts[who](turn, str(messages[last_user]["content"]))

    return respond


def lead_asks(*inputs: str, then: str = "Summary written.") -> Turns:
    """The lead calls the researcher once per input, then answers ``then``."""

    def turns(turn: int, _message: str) -> FakeReply:
        if turn == 0:
            calls = [ScriptedToolCall("researcher", {"input": text}, f"call_r{i}") for i, text in enumerate(inputs)]
            return FakeReply(text="Asking the researcher.", tool_calls=calls)
        return FakeReply(text=then)

    return turns


def researcher_counts(seconds: float = 0.0, token_delay: float = 0.0) -> Turns:
    """The researcher runs slow_count (keyed by its message) once, then answers "Found: <message>"."""

    def turns(turn: int, message: str) -> FakeReply:
        if turn == 0:
            args = {"key": f"sub:{message}", "seconds": seconds}
            return FakeReply(text="Looking.", tool_calls=[ScriptedToolCall("slow_count", args, "call_count")])
        return FakeReply(text=f"Found: {message}", token_delay=token_delay)

    return turns


def log_of(runtime: Runtime, run_id: str) -> list[Event]:
    return list(runtime.store.log.read(run_id, after=-1))


def count(runtime: Runtime, name: str) -> int:
    """How many times the workers' tools counted ``name`` (tests/agents/fixture.py)."""
    return counter_of(runtime.redis, runtime.settings.key_prefix)(name)


def ended(runtime: Runtime, run_id: str, timeout: float = 30) -> RunView:
    """The run once it ended (waits up to ``timeout`` seconds)."""
    view: RunView = wait_for(lambda: (v := runtime.get(run_id)).status.is_final and v, timeout=timeout, what="the end")
    return view


def test_a_parent_runs_two_children_concurrently_and_gets_their_answers(runtime: Runtime, fake_openai: Any) -> None:
    alpha, beta = (f"{name}-{uuid.uuid4().hex[:6]}" for name in ("alpha", "beta"))  # counted by name
    fake_openai.responder = by_agent(lead=lead_asks(alpha, beta), researcher=researcher_counts(seconds=1.0))
    manifest = runtime.agent_manifest("lead")
    assert {t["name"]: t.get("agent") for t in manifest["tools"]}["researcher"] == "researcher"
    view = runtime.run("lead", "research alpha and beta", timeout=60)
    assert view.status is RunStatus.COMPLETED and view.output == "Summary written."
    kids = {child_run_id(view.run_id, "call_r0"), child_run_id(view.run_id, "call_r1")}
    assert {c["run_id"] for c in view.children} == kids
    assert all(c["agent_id"] == "researcher" and c["status"] == "completed" for c in view.children)
    log = log_of(runtime, view.run_id)
    assert_run_sound(log)
    results = {e.data["tool_call_id"]: e.data["content"] for e in log if e.type is EventType.TOOL_CALL_RESULT}
    assert results == {"call_r0": f"Found: {alpha}", "call_r1": f"Found: {beta}"}
    started = [e.data for e in log if e.type is EventType.SUBAGENT_STARTED]
    assert sorted(s["parent_tool_call_id"] for s in started) == ["call_r0", "call_r1"]
    assert {s["subagent_run_id"] for s in started} == kids and all(s["name"] == "researcher" for s in started)
    finished = [e.data for e in log if e.type is EventType.SUBAGENT_FINISHED]
    assert sorted(f["result"] for f in finished) == [f"Found: {alpha}", f"Found: {beta}"]
    spans = []
    for kid in kids:
        child = runtime.get(kid)
        assert child.parent_run_id == view.run_id and child.status is RunStatus.COMPLETED
        child_log = log_of(runtime, kid)
        assert_run_sound(child_log)
        tools = [e for e in child_log if e.type in (EventType.STEP_STARTED, EventType.STEP_FINISHED)]
        tools = [e for e in tools if e.data["metadata"]["kind"] == "tools"]
        spans.append((tools[0].timestamp, tools[-1].timestamp))
    (a0, a1), (b0, b1) = spans
    assert a0 < b1 and b0 < a1, "the two children's tool steps (1 s each) overlapped in time"
    assert count(runtime, f"sub:{alpha}") == 1 and count(runtime, f"sub:{beta}") == 1


def researcher_deletes(turn: int, message: str) -> FakeReply:
    """The researcher asks to delete a file named by its message (needs a human), then reports."""
    if turn == 0:
        return FakeReply(text="Deleting.", tool_calls=[ScriptedToolCall("delete_file", {"path": message}, "call_del")])
    return FakeReply(text=f"Deleted {message}")


def test_a_child_waiting_for_approval_pauses_the_parent_and_continue_reaches_it(
    runtime: Runtime, fake_openai: Any
) -> None:
    path = f"f-{uuid.uuid4().hex[:6]}"
    fake_openai.responder = by_agent(lead=lead_asks(path, then="All clean."), researcher=researcher_deletes)
    view = runtime.run("lead", "clean up", timeout=30)
    assert view.status is RunStatus.PAUSED
    (child,) = view.children
    assert child["status"] == "paused"
    (pending,) = view.pending
    named = f"{child['run_id']}:call_del"  # the child's call, as its parent names it
    assert pending.id == named and pending.name == "delete_file" and pending.run_id == child["run_id"]
    assert [c.id for c in runtime.get(child["run_id"]).pending] == ["call_del"]
    log = log_of(runtime, view.run_id)
    suspended = [e.data for e in log if e.type is EventType.SUBAGENT_FINISHED]
    assert suspended == [
        {"subagent_run_id": child["run_id"], "outcome": {"type": "suspended", "interrupt_ids": [named]}}
    ]
    interrupts = log[-1].data["outcome"]["interrupts"]
    assert [(i["id"], i["metadata"]["run_id"]) for i in interrupts] == [(named, child["run_id"])]
    assert count(runtime, f"delete_file:{path}") == 0
    for wrong in ("call_del", f"{child['run_id']}:call_nope"):
        with pytest.raises(DecisionError, match="not pending"):
            runtime.continue_run(view.run_id, [{"tool_call_id": wrong}])
    assert runtime.get(view.run_id).status is RunStatus.PAUSED  # a refused continue changed nothing
    runtime.continue_run(view.run_id, [{"tool_call_id": named, "confirmed": True}])
    done = ended(runtime, view.run_id)
    assert done.status is RunStatus.COMPLETED and done.output == "All clean."
    assert count(runtime, f"delete_file:{path}") == 1
    assert runtime.get(child["run_id"]).output == f"Deleted {path}"
    log = log_of(runtime, view.run_id)
    assert_run_sound(log)
    results = {e.data["tool_call_id"]: e.data["content"] for e in log if e.type is EventType.TOOL_CALL_RESULT}
    assert results == {"call_r0": f"Deleted {path}"}


def test_stopping_the_parent_stops_its_children(runtime: Runtime, fake_openai: Any) -> None:
    fake_openai.responder = by_agent(lead=lead_asks("one", "two"), researcher=researcher_counts(seconds=30.0))
    stream = runtime.stream("lead", "research slowly")
    wait_for(lambda: len(runtime.get(stream.id).children) == 2, what="both children to start")
    kids = [c["run_id"] for c in runtime.get(stream.id).children]
    wait_for(lambda: all(runtime.get(k).status is RunStatus.RUNNING for k in kids), what="the children to run")
    runtime.stop(stream.id)
    view = ended(runtime, stream.id, timeout=20)
    assert view.status is RunStatus.CANCELLED
    for kid in kids:
        assert wait_for(lambda k=kid: runtime.get(k).status.is_final, timeout=20, what="a child's end")
        assert runtime.get(kid).status is RunStatus.CANCELLED
    log = log_of(runtime, stream.id)
    assert_run_sound(log)
    closed = {
        e.data["subagent_run_id"] for e in log if e.type in (EventType.SUBAGENT_ERROR, EventType.SUBAGENT_FINISHED)
    }
    assert closed == set(kids)  # every child the stream opened is closed before the run's end
    assert log[-1].type is EventType.RUN_FINISHED and log[-1].data["outcome"]["type"] == "cancelled"


def test_a_child_stopped_alone_gives_its_parent_an_error_result(runtime: Runtime, fake_openai: Any) -> None:
    fake_openai.responder = by_agent(lead=lead_asks("slow"), researcher=researcher_counts(seconds=30.0))
    stream = runtime.stream("lead", "research slowly")
    wait_for(lambda: len(runtime.get(stream.id).children) == 1, what="the child to start")
    kid = runtime.get(stream.id).children[0]["run_id"]
    wait_for(lambda: runtime.get(kid).status is RunStatus.RUNNING, what="the child to run")
    runtime.stop(kid)
    view = ended(runtime, stream.id, timeout=20)
    assert view.status is RunStatus.COMPLETED and view.output == "Summary written."
    log = log_of(runtime, stream.id)
    (result,) = [e.data["content"] for e in log if e.type is EventType.TOOL_CALL_RESULT]
    assert result == "Error: agent 'researcher' was stopped before it finished"
    (error,) = [e.data for e in log if e.type is EventType.SUBAGENT_ERROR]
    assert error["subagent_run_id"] == kid and error["code"] == "cancelled"


def test_deleting_the_parent_deletes_its_children(runtime: Runtime, fake_openai: Any) -> None:
    fake_openai.responder = by_agent(lead=lead_asks("x"), researcher=researcher_counts())
    view = runtime.run("lead", "research", timeout=30)
    (kid,) = [c["run_id"] for c in view.children]
    assert runtime.get(kid).status is RunStatus.COMPLETED
    runtime.delete_run(view.run_id)
    with pytest.raises(RunNotFoundError):
        runtime.get(kid)


def test_agent_tools_are_offered_as_functions_of_one_input() -> None:
    from .agents.fixture import researcher

    tool = researcher.as_tool(name="ask_researcher", description="Ask.")
    assert tool.name == "ask_researcher" and tool.description == "Ask."
    assert tool.parameters["required"] == ["input"] and tool.manifest()["agent"] == "researcher"
    assert researcher.as_tool().description == "Looks things up."
    with pytest.raises(ConfigurationError, match="child run"):
        tool.fn(input="x")


@pytest.fixture
def own(deploy: Any) -> Deployment:
    deployment: Deployment = deploy("sub")
    return deployment


def test_depth_and_children_limits_refuse_with_an_error_result(own: Deployment, fake_openai: Any) -> None:
    runtime = own.runtime

    def researcher_checks(turn: int, message: str) -> FakeReply:
        if turn == 0:
            call = ScriptedToolCall("checker", {"input": message}, "call_check")
            return FakeReply(text="Checking.", tool_calls=[call])
        return FakeReply(text="Checked what I could.")

    fake_openai.responder = by_agent(
        lead=lead_asks("a", "b"), researcher=researcher_checks, checker=lambda _t, m: FakeReply(text=f"ok {m}")
    )
    limits = {"AGENTS_CELERY_MAX_AGENT_DEPTH": "1", "AGENTS_CELERY_MAX_CHILDREN": "1"}
    worker = own.worker(limits)
    try:
        wait_for(lambda: runtime.store.agents.get("lead") is not None, what="the agents to be published")
        view = runtime.run("lead", "research a and b", timeout=30)
        assert view.status is RunStatus.COMPLETED
        (kid,) = view.children  # one child per run at most: the second call was refused
        log = log_of(runtime, view.run_id)
        results = {e.data["tool_call_id"]: e.data["content"] for e in log if e.type is EventType.TOOL_CALL_RESULT}
        assert results["call_r0"] == "Checked what I could."
        assert results["call_r1"].startswith("Error: a run starts at most 1 child runs")
        child_log = log_of(runtime, kid["run_id"])
        (nested,) = [e.data["content"] for e in child_log if e.type is EventType.TOOL_CALL_RESULT]
        assert nested.startswith("Error: agent runs nest at most 1 deep")  # the researcher may not call the checker
        assert runtime.get(kid["run_id"]).children == []
        assert_run_sound(log)
        assert_run_sound(child_log)
    finally:
        worker.stop()


def lead_asks_and_counts(key: str, seconds: float) -> Turns:
    """The lead calls the researcher twice and an idempotent slow tool in one turn, then answers."""

    def turns(turn: int, _message: str) -> FakeReply:
        if turn == 0:
            calls = [
                ScriptedToolCall("researcher", {"input": "alpha"}, "call_r0"),
                ScriptedToolCall("researcher", {"input": "beta"}, "call_r1"),
                ScriptedToolCall("idempotent_count", {"key": key, "seconds": seconds}, "call_count"),
            ]
            return FakeReply(text="Asking twice.", tool_calls=calls)
        return FakeReply(text="Summary written.")

    return turns


def researcher_talks(turn: int, message: str) -> FakeReply:
    return FakeReply(text=f"Found: {message} " + " ".join(f"w{i}" for i in range(40)), token_delay=0.05)


@pytest.mark.slow
def test_kill_after_the_parent_started_its_children(own: Deployment, fake_openai: Any) -> None:
    """The worker running the parent's tool step dies after that step started both children (while its
    third call runs), with the children streaming on it too: a second worker finishes everything, each
    child started exactly once."""
    runtime = own.runtime
    key = f"lead-{uuid.uuid4().hex[:6]}"
    fake_openai.responder = by_agent(lead=lead_asks_and_counts(key, seconds=2.0), researcher=researcher_talks)
    first = own.worker()
    try:
        wait_for(lambda: runtime.store.agents.get("lead") is not None, what="the agents to be published")
        stream = runtime.stream("lead", "research")
        wait_for(lambda: count(runtime, key) == 1, what="the parent's tool step to start its third call")
        kids = [child_run_id(stream.id, "call_r0"), child_run_id(stream.id, "call_r1")]
        assert all(runtime.store.run_fields(k, "log")[0] is not None for k in kids)  # both started before it
        first.kill()
    finally:
        first.stop()
    second = own.worker()
    try:
        view = ended(runtime, stream.id, timeout=60)
        assert view.status is RunStatus.COMPLETED and view.output == "Summary written."
        assert [c["run_id"] for c in view.children] == kids
        log = log_of(runtime, stream.id)
        assert_run_sound(log)
        assert sorted(e.data["subagent_run_id"] for e in log if e.type is EventType.SUBAGENT_STARTED) == sorted(kids)
        assert any(e.type is EventType.CUSTOM and e.data.get("name") == "attempt_abandoned" for e in log)
        results = {e.data["tool_call_id"]: e.data["content"] for e in log if e.type is EventType.TOOL_CALL_RESULT}
        assert results["call_r0"].startswith("Found: alpha") and results["call_r1"].startswith("Found: beta")
        for kid in kids:
            child_log = log_of(runtime, kid)
            assert_run_sound(child_log)
            assert [e.type for e in child_log].count(EventType.RUN_STARTED) == 1  # created once
            assert runtime.get(kid).status is RunStatus.COMPLETED
    finally:
        second.stop()


@pytest.mark.slow
def test_kill_of_the_worker_streaming_a_child(own: Deployment, fake_openai: Any) -> None:
    """The worker streaming a child's answer dies mid-stream: the child's turn is retried on another worker,
    and its end wakes the parent, which completes with the child's answer."""
    runtime = own.runtime
    fake_openai.responder = by_agent(lead=lead_asks("gamma"), researcher=researcher_talks)
    first = own.worker()
    try:
        wait_for(lambda: runtime.store.agents.get("lead") is not None, what="the agents to be published")
        stream = runtime.stream("lead", "research")
        kid = child_run_id(stream.id, "call_r0")
        wait_for(lambda: runtime.store.run_fields(kid, "log")[0] is not None, what="the child to start")
        # The child's answer is streaming on the only worker.
        wait_event(runtime, kid, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT)
        first.kill()
    finally:
        first.stop()
    second = own.worker()
    try:
        view = ended(runtime, stream.id, timeout=60)
        assert view.status is RunStatus.COMPLETED and view.output == "Summary written."
        child_log = log_of(runtime, kid)
        assert_run_sound(child_log)
        assert any(e.type is EventType.CUSTOM and e.data.get("name") == "attempt_abandoned" for e in child_log)
        log = log_of(runtime, stream.id)
        assert_run_sound(log)
        (result,) = [e.data["content"] for e in log if e.type is EventType.TOOL_CALL_RESULT]
        assert result.startswith("Found: gamma") and result == runtime.get(kid).output
    finally:
        second.stop()


def test_an_ended_child_is_kept_as_long_as_its_parent(runtime: Runtime, fake_openai: Any) -> None:
    """The child answers at once; the parent ends two seconds later (a slow tool of the same turn): the
    child's retention starts over with the parent's end, so both expire together."""
    key = f"keep-{uuid.uuid4().hex[:6]}"

    def lead(turn: int, _message: str) -> FakeReply:
        if turn == 0:
            calls = [
                ScriptedToolCall("researcher", {"input": "quick"}, "call_r0"),
                ScriptedToolCall("idempotent_count", {"key": key, "seconds": 2.0}, "call_slow"),
            ]
            return FakeReply(text="Both.", tool_calls=calls)
        return FakeReply(text="Done.")

    fake_openai.responder = by_agent(lead=lead, researcher=lambda _t, m: FakeReply(text=f"Found: {m}"))
    view = runtime.run("lead", "keep", timeout=30)
    assert view.status is RunStatus.COMPLETED
    (kid,) = [c["run_id"] for c in view.children]
    retention_ms = runtime.settings.retention_ms

    def renewed() -> int | None:
        """The parent's TTL once the child's is within a second of it."""
        parent = runtime.redis.pttl(runtime.store.keys.run(view.run_id).run)
        child = runtime.redis.pttl(runtime.store.keys.run(kid).run)
        return parent if abs(child - parent) < 1000 else None

    # The parent's worker renews its ended children right after its final commit (the follow-through of a run's
    # end), a moment after the final event reached this reader: not the 2 s shorter the child ended with.
    parent_ttl = wait_for(renewed, timeout=10, what="the child's retention renewed with its parent's end")
    assert retention_ms - 3000 < parent_ttl <= retention_ms
    # The index lets the child go with its parent too, and still lists it as completed.
    store = runtime.store

    def leaves(run_id: str) -> float:
        expiring = store.keys.bucket(store.keys.runs_expiring, run_id)
        score = runtime.redis.zscore(expiring, entry_of(store.load(run_id)[0]).to_json())
        assert score is not None, f"run {run_id} is not in the expiring index"
        return float(score)

    assert abs(leaves(kid) - leaves(view.run_id)) < 1000  # not the 2 s sooner the child ended
    assert runtime.redis.zscore(store.keys.bucket(store.keys.runs_status("completed"), kid), kid) is not None


@pytest.mark.slow
def test_the_sweeper_wakes_a_parent_whose_child_died_before_waking_it(own: Deployment, fake_openai: Any) -> None:
    """The worker of a child is killed right after the child's final commit, before it could wake the parent:
    the surviving worker's sweeper sees that a child the parent waits for ended, and sends the parent's step."""
    runtime = own.runtime
    fake_openai.responder = by_agent(lead=lead_asks("delta"), researcher=lambda _t, m: FakeReply(text=f"Found: {m}"))
    workers = [own.worker(), own.worker()]
    try:
        wait_for(lambda: runtime.store.agents.get("lead") is not None, what="the agents to be published")
        stream = runtime.stream("lead", "research")
        kid = child_run_id(stream.id, "call_r0")  # armed long before the child's one (final) commit:
        crash = f"{runtime.settings.key_prefix}:test:crash:after_commit:{kid}"  # CrashHooks kill its worker then
        runtime.redis.set(crash, 1, ex=600)
        wait_for(lambda: any(w.proc.poll() is not None for w in workers), timeout=30, what="a worker to die")
        view = ended(runtime, stream.id)
        assert view.status is RunStatus.COMPLETED and view.output == "Summary written."
        assert runtime.get(kid).status is RunStatus.COMPLETED and not runtime.redis.exists(crash)
        child_log = log_of(runtime, kid)
        assert [e.type for e in child_log].count(EventType.RUN_FINISHED) == 1
        log = log_of(runtime, stream.id)
        assert_run_sound(log)
        (result,) = [e.data["content"] for e in log if e.type is EventType.TOOL_CALL_RESULT]
        assert result == "Found: delta"
    finally:
        for w in workers:
            w.stop()


def test_stopping_a_paused_child_lets_its_paused_parent_go_on(runtime: Runtime, fake_openai: Any) -> None:
    path = f"f-{uuid.uuid4().hex[:6]}"
    fake_openai.responder = by_agent(lead=lead_asks(path, then="Gave up."), researcher=researcher_deletes)
    view = runtime.run("lead", "clean up", timeout=30)
    assert view.status is RunStatus.PAUSED
    (child,) = view.children
    runtime.stop(child["run_id"])  # the child alone, paused for its delete_file
    done = ended(runtime, view.run_id)
    assert done.status is RunStatus.COMPLETED and done.output == "Gave up." and done.pending == []
    log = log_of(runtime, view.run_id)
    assert_run_sound(log)
    (result,) = [e.data["content"] for e in log if e.type is EventType.TOOL_CALL_RESULT]
    assert result == "Error: agent 'researcher' was stopped before it finished"
    assert count(runtime, f"delete_file:{path}") == 0


def stored(offset: int, event: Any) -> Event:
    """A stored event, as a log read gives it back."""
    return Event.from_stored(offset, event.json, "parent", "thread", "lead")


def test_a_stream_joining_mid_invocation_reopens_the_subagent_and_attributes_its_work() -> None:
    from agents_celery.events import make_event
    from agents_celery.http.agui.render import AguiRenderer, attributed

    started = make_event(EventType.SUBAGENT_STARTED, subagent_run_id="kid", name="researcher", parent_tool_call_id="c1")
    history = [stored(0, make_event(EventType.RUN_STARTED, thread_id="thread", run_id="parent")), stored(1, started)]
    first = stored(2, make_event(EventType.SUBAGENT_FINISHED, subagent_run_id="kid", outcome={"type": "success"}))
    prelude = AguiRenderer("parent", "thread").prelude(history, first)
    assert [e["type"] for e in prelude] == ["RUN_STARTED", "SUBAGENT_STARTED"]
    assert prelude[1]["subagentRunId"] == "kid" and prelude[1]["parentToolCallId"] == "c1"
    child = [
        make_event(EventType.RUN_STARTED, thread_id="kid", run_id="kid"),
        make_event(EventType.TOOL_CALL_START, tool_call_id="call_x", tool_call_name="delete_file"),
        make_event(EventType.TOOL_CALL_END, tool_call_id="call_x"),
        make_event(EventType.RUN_FINISHED, thread_id="kid", run_id="kid", outcome={"type": "success"}),
        make_event(EventType.RUN_STARTED, thread_id="kid", run_id="kid"),
        make_event(EventType.TOOL_CALL_RESULT, message_id="m1", tool_call_id="call_x", content="deleted"),
        make_event(EventType.RUN_FINISHED, thread_id="kid", run_id="kid", outcome={"type": "success"}),
    ]
    log = [stored(i, e) for i, e in enumerate(child)]
    first_part, second_part = attributed(log, "kid", 0), attributed(log, "kid", 1)
    assert [(e["type"], e["toolCallId"], e["subagentRunId"]) for e in first_part] == [
        ("TOOL_CALL_START", "kid:call_x", "kid"),
        ("TOOL_CALL_END", "kid:call_x", "kid"),
    ]
    assert [(e["type"], e["content"]) for e in second_part] == [("TOOL_CALL_RESULT", "deleted")]
    assert attributed(log, "kid", 2) == []


def test_workers_serve_the_agents_their_agents_call_as_tools() -> None:
    from agents_celery.agent import _register

    from .agents.fixture import lead

    registry: dict[str, Any] = {}
    _register(registry, lead)
    assert list(registry) == ["lead", "researcher", "checker"]


def test_stopping_a_paused_parent_keeps_its_ended_children_as_long_as_itself(
    runtime: Runtime, fake_openai: Any
) -> None:
    """A paused parent is stopped where nobody works on it (the Runtime ends it): its ended children's retention
    starts over with its end, as when a worker ends a parent."""
    path = f"f-{uuid.uuid4().hex[:6]}"

    def researcher(turn: int, message: str) -> FakeReply:
        return FakeReply(text="Found: quick") if message == "quick" else researcher_deletes(turn, message)

    fake_openai.responder = by_agent(lead=lead_asks("quick", path), researcher=researcher)
    view = runtime.run("lead", "both", timeout=30)
    assert view.status is RunStatus.PAUSED
    quick = child_run_id(view.run_id, "call_r0")
    wait_for(lambda: runtime.get(quick).status is RunStatus.COMPLETED, what="the quick child to answer")
    kept = runtime.store.keys.run(quick).run
    runtime.redis.pexpire(kept, 10_000)  # as if it had ended long before its parent
    assert runtime.stop(view.run_id).status is RunStatus.CANCELLED
    assert runtime.redis.pttl(kept) > runtime.settings.retention_ms - 5_000

"""MCP tools (``MCPTools``): the ``mcp`` package's own server (``agents_celery.testing.mcp_server``) over streamable
HTTP (uvicorn in a subprocess) and stdio, real workers, the real openai SDK against the fake OpenAI server.

What is proved: each ``tools/call`` goes through the effect ledger with its ``run_id:tool_call_id`` key in
``_meta``; ``tools/list`` is sent once per run however many turns; confirmations and edited arguments work as
for Python tools; a kill -9 of the worker after the call was sent does not run it twice; the server killed
mid-call gives the model an error result and the run completes; a stop during a call that never returns ends
the run within the bound; agents modules without MCP tools do not import ``mcp``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from agents_celery import Agent, MCPTools, ScriptedModel, ScriptedToolCall
from agents_celery.errors import ConfigurationError, ToolArgumentsError
from agents_celery.events import EventType
from agents_celery.models.scripted import turn_index
from agents_celery.testing.openai_server import FakeReply

from .conftest import TEST_REDIS_URL, all_events, wait_for
from .support.apis import free_port
from .support.invariants import assert_run_sound, counter_of
from .support.workers import ROOT, Deployment

pytestmark = pytest.mark.timeout(120)


def scripted(request: dict[str, Any]) -> FakeReply:
    """The user message says what the model does: ``<tool>:<key>[:<n>[:<seconds>]]`` calls the tool ``n`` times
    (one call a turn), then answers with the last tool result it saw."""
    messages = request.get("messages") or []
    user = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
    name, key, *rest = user.split(":")
    times = int(rest[0]) if rest else 1
    turn = turn_index(messages)
    if turn >= times:
        last = next((m["content"] for m in reversed(messages) if m.get("role") == "tool"), "")
        return FakeReply(text=f"Done: {last}")
    args: dict[str, Any] = {"key": key} if name != "m_delete" else {"path": key}
    if len(rest) > 1:
        args["seconds"] = float(rest[1])
    return FakeReply(tool_calls=(ScriptedToolCall(name, args, f"call_{turn}"),))


class Server:
    """``agents_celery.testing.mcp_server`` over streamable HTTP, in a subprocess of its own."""

    def __init__(self, prefix: str, port: int | None = None) -> None:
        env = {**os.environ, "MCP_TEST_REDIS": TEST_REDIS_URL, "MCP_TEST_PREFIX": prefix, "PYTHONPATH": str(ROOT)}
        # A free port can be taken before the server binds it (any process's outgoing connection may get it as
        # its local port): the server then exits, and a new port is tried. A given port (a restart) is kept.
        for _ in range(1 if port else 3):
            self.port = port or free_port()
            self.url = f"http://127.0.0.1:{self.port}/mcp"
            cmd = [sys.executable, "-m", "agents_celery.testing.mcp_server", "http", str(self.port)]
            self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for(self._listening_or_exited, timeout=30, what="the MCP server to listen")
            if self.proc.poll() is None:
                return
        raise AssertionError(f"the MCP server exited (port {self.port})")

    def _listening_or_exited(self) -> bool:
        if self.proc.poll() is not None:
            return True
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0 and self.proc.poll() is None

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture
def r() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(TEST_REDIS_URL)
    yield client
    client.close()


@pytest.fixture
def mcp_deploy(fake_openai: Any, deploy: Any) -> Iterator[tuple[Deployment, Server]]:
    fake_openai.responder = scripted
    own: Deployment = deploy("mcp", {"AGENTS_CELERY_AGENTS": "tests.agents.mcp_tools"})
    server = Server(own.prefix)
    own.env["MCP_TEST_URL"] = server.url
    yield own, server
    server.kill()


@pytest.fixture(scope="module")
def module_deploy(fake_openai: Any, versions_seam: None) -> Iterator[tuple[Deployment, Server]]:
    """One deployment, MCP server and worker for the tests that kill neither (their keys and runs are their own)."""
    own = Deployment("mcpm", fake_openai.url, {"AGENTS_CELERY_AGENTS": "tests.agents.mcp_tools"})
    server = None
    try:
        server = Server(own.prefix)
        own.env["MCP_TEST_URL"] = server.url
        own.worker()
        yield own, server
    finally:
        if server is not None:
            server.kill()
        own.close()


@pytest.fixture
def shared(module_deploy: tuple[Deployment, Server], fake_openai: Any) -> tuple[Deployment, Server]:
    fake_openai.responder = scripted
    return module_deploy


def metas(r: redis.Redis, prefix: str, run_id: str | None = None) -> list[dict[str, Any]]:
    found = [json.loads(raw) for raw in r.lrange(f"{prefix}:test:mcp:meta", 0, -1)]
    return [m for m in found if run_id is None or m["meta"].get("run_id") == run_id]


def tool_results(events: list[Any]) -> list[str]:
    return [e.data["content"] for e in events if e.type is EventType.TOOL_CALL_RESULT]


def test_tools_listed_once_per_run_and_called_with_the_idempotency_key(
    shared: tuple[Deployment, Server], fake_openai: Any, r: redis.Redis
) -> None:
    own, _ = shared
    rt, count = own.runtime, counter_of(r, own.prefix)
    listed = count("tools_list")
    before = fake_openai.calls  # the fake server serves the whole session
    stream = rt.stream("mcp_http", "m_count:k1:4")
    events = all_events(rt, stream.id)
    assert rt.get(stream.id).status == "completed"
    assert_run_sound(events, tool_counts={"k1": 4}, counter=count)
    assert count("tools_list") == listed + 1  # four tool turns and a last one: one tools/list
    assert tool_results(events) == [f"count k1: {n}" for n in range(1, 5)]
    keys = [m["meta"].get("idempotency_key") for m in metas(r, own.prefix, stream.id)]
    assert keys == [f"{stream.id}:call_{turn}" for turn in range(4)]
    offered = [{t["function"]["name"] for t in req.get("tools", [])} for req in fake_openai.requests[before:]]
    assert len(offered) == 5 and all({"m_count", "m_delete", "m_hang", "local_count"} <= names for names in offered)
    manifest = rt.agent_manifest("mcp_http")  # the worker published what the toolset served
    (toolset,) = manifest["toolsets"]
    assert toolset["name"] == "m" and toolset["transport"] == "http"
    served = {t["name"]: t for t in toolset["tools"]}
    assert served["m_delete"]["requires_confirmation"] and not served["m_count"]["requires_confirmation"]
    second = rt.run("mcp_http", "m_count:k2:1", timeout=60)
    assert count("tools_list") == listed + 2  # a run of its own lists again
    sessions = {m["session"] for m in metas(r, own.prefix, stream.id) + metas(r, own.prefix, second.run_id)}
    assert len(sessions) == 1 and "" not in sessions, (
        sessions
    )  # five calls of two runs on the worker's one pooled session


def test_confirmation_with_edited_arguments(shared: tuple[Deployment, Server], r: redis.Redis) -> None:
    own, _ = shared
    rt, count = own.runtime, counter_of(r, own.prefix)
    listed = count("tools_list")
    stream = rt.stream("mcp_http", "m_delete:/tmp/a")
    events = all_events(rt, stream.id)
    interrupt = events[-1].data["outcome"]["interrupts"][0]
    assert interrupt["reason"] == "confirmation_required"
    assert interrupt["response_schema"]["properties"]["editedArgs"]["required"] == ["path"]  # the server's schema
    assert count("delete:/tmp/a") == 0
    with pytest.raises(ToolArgumentsError):  # checked against the schema the run recorded
        rt.continue_run(stream.id, [{"tool_call_id": "call_0", "confirmed": True, "tool_args": {"path": 3}}])
    rt.continue_run(stream.id, [{"tool_call_id": "call_0", "confirmed": True, "tool_args": {"path": "/tmp/b"}}])
    events = all_events(rt, stream.id)
    assert rt.get(stream.id).status == "completed"
    assert (count("delete:/tmp/a"), count("delete:/tmp/b")) == (0, 1)
    assert tool_results(events) == ["deleted /tmp/b"]
    assert count("tools_list") == listed + 1  # the run kept its list across the pause


@pytest.mark.slow
def test_kill_9_after_the_call_was_sent_runs_it_once(mcp_deploy: tuple[Deployment, Server], r: redis.Redis) -> None:
    own, _ = mcp_deploy
    first = own.worker()
    rt, count = own.runtime, counter_of(r, own.prefix)
    stream = rt.stream("mcp_http", "m_slow_count:slow:1:30")
    wait_for(lambda: count("slow") == 1, timeout=30, what="the MCP call to reach the server")
    first.kill()
    own.worker()
    events = all_events(rt, stream.id)  # the new worker finds the call started, not finished: a human decides
    interrupt = events[-1].data["outcome"]["interrupts"][0]
    assert interrupt["reason"] == "may_have_run" and interrupt["metadata"]["tool_name"] == "m_slow_count"
    assert count("slow") == 1
    rt.continue_run(stream.id, [{"tool_call_id": interrupt["tool_call_id"], "confirmed": False}])
    events = all_events(rt, stream.id)
    assert rt.get(stream.id).status == "completed"
    assert_run_sound(events, tool_counts={"slow": 1}, counter=count)
    assert count("tools_list") == 1  # the second worker used the tools the run recorded: it did not list them
    retried = [e for e in events if e.type is EventType.STEP_STARTED and e.data["metadata"]["attempt"] == 2]
    assert retried, "the tool step was retried by the second worker"


def test_server_killed_mid_call_gives_an_error_result(mcp_deploy: tuple[Deployment, Server], r: redis.Redis) -> None:
    own, server = mcp_deploy
    own.worker()
    rt, count = own.runtime, counter_of(r, own.prefix)
    waiting = rt.stream("mcp_http", "m_delete:/tmp/w")  # listed its tools, then paused for a confirmation
    got = all_events(rt, waiting.id)
    assert got[-1].is_pause, [e.data for e in got if e.type is EventType.CUSTOM]  # an mcp_unavailable says why
    stream = rt.stream("mcp_http", "m_slow_count:mid:1:30")
    wait_for(lambda: count("mid") == 1, timeout=30, what="the MCP call to reach the server")
    killed = time.monotonic()
    server.kill()
    events = all_events(rt, stream.id)
    took = time.monotonic() - killed
    assert rt.get(stream.id).status == "completed", events[-1]
    (result,) = tool_results(events)
    assert result.startswith("Error: MCPUnavailable") and "may or may not have run" in result, result
    assert took < 10, f"the lost connection took {took:.1f}s to notice"
    assert_run_sound(events, tool_counts={"mid": 1}, counter=count)
    # The server is gone: the paused run's approved call cannot reach it (so it did not run); the run completes.
    rt.continue_run(waiting.id, [{"tool_call_id": "call_0", "confirmed": True}])
    events = all_events(rt, waiting.id)
    assert rt.get(waiting.id).status == "completed"
    (result,) = tool_results(events)
    assert result.startswith("Error: MCPUnavailable: MCP server 'm' is unreachable; the tool did not run"), result
    # A new run cannot list the tools; the model is told, the run still completes.
    stream = rt.stream("mcp_http", "m_count:gone:1")
    events = all_events(rt, stream.id)
    assert rt.get(stream.id).status == "completed"
    unavailable = [e for e in events if e.type is EventType.CUSTOM and e.data["name"] == "mcp_unavailable"]
    assert unavailable and unavailable[0].data["value"]["toolset"] == "m"
    (result,) = tool_results(events)
    assert result.startswith("Error: unknown tool 'm_count'")
    assert count("gone") == 0


def test_a_stale_list_is_fetched_again_at_the_next_model_turn(
    shared: tuple[Deployment, Server], r: redis.Redis
) -> None:
    own, _ = shared
    rt, count = own.runtime, counter_of(r, own.prefix)
    listed = count("tools_list")
    view = rt.run("mcp_fresh", "f_count:fresh:3", timeout=60)  # MCPTools(list_ttl=0.001)
    assert view.status == "completed" and count("fresh") == 3
    assert count("tools_list") == listed + 4  # at each of the 4 model turns, never in the 3 tool steps


def test_stop_during_a_hanging_call_ends_the_run_in_time(shared: tuple[Deployment, Server], r: redis.Redis) -> None:
    own, _ = shared
    rt, count = own.runtime, counter_of(r, own.prefix)
    stream = rt.stream("mcp_http", "m_hang:hung:1")
    wait_for(lambda: count("hung") == 1, timeout=30, what="the hanging MCP call to start")
    stopped = time.monotonic()
    rt.stop(stream.id)
    events = all_events(rt, stream.id)
    took = time.monotonic() - stopped
    assert rt.get(stream.id).status == "cancelled"
    bound = own.settings.stop_grace_seconds + 3
    assert took < bound, f"the stop took {took:.1f}s (bound {bound:g}s)"
    assert events[-1].data["outcome"]["type"] == "cancelled"
    assert_run_sound(events)
    # The worker's next run still gets through to the server (the abandoned request did not wedge the session).
    view = rt.run("mcp_http", "m_count:after:1", timeout=60)
    assert view.status == "completed" and count("after") == 1


def test_a_call_past_its_timeout_is_an_error_result(shared: tuple[Deployment, Server], r: redis.Redis) -> None:
    own, _ = shared
    rt, count = own.runtime, counter_of(r, own.prefix)
    stream = rt.stream("mcp_short", "t_hang:late:1")  # MCPTools(timeout=1)
    events = all_events(rt, stream.id)
    assert rt.get(stream.id).status == "completed"
    (result,) = tool_results(events)
    assert result == "Error: tool 't_hang' did not finish within 1s; it was abandoned"
    assert count("late") == 1
    assert_run_sound(events, tool_counts={"late": 1}, counter=count)


def test_a_call_takes_the_step_s_timeout_not_300_s() -> None:
    """An MCPTools without a timeout of its own: the call is bounded by what the step waits
    (AGENTS_CELERY_TOOL_TIMEOUT_SECONDS reaches it as ToolContext.timeout), not by a fixed 300 s."""
    import threading

    from agents_celery.mcp import MCPTools, MCPUnavailable
    from agents_celery.tools import ToolContext

    server = Server(f"mcpt-{os.urandom(4).hex()}")
    try:
        toolset = MCPTools(url=server.url, name="bounded")
        (hang,) = [t for t in toolset.tools(toolset.list_tools()) if t.remote_name == "hang"]
        outcome: list[BaseException] = []

        def call() -> None:
            try:
                hang.invoke({"key": "bounded"}, ToolContext("r", "c1", timeout=1.0))
            except BaseException as exc:
                outcome.append(exc)

        started = time.monotonic()
        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        caller.join(timeout=20)
        assert not caller.is_alive(), "the call was still waiting after 20 s"
        assert time.monotonic() - started < 10
        (error,) = outcome
        assert isinstance(error, MCPUnavailable) and "did not answer" in str(error)
    finally:
        server.kill()


def _names(listing: dict[str, Any]) -> set[str]:
    return {t["name"] for t in listing["tools"]}


def test_an_http_server_restarted_behind_the_same_url_is_used_again_at_once(r: redis.Redis) -> None:
    """The restarted server answers the old session with 404 ("Session not found"): the next listing and the
    next call (not idempotent: the server never acted on the refused request) go out again on a new session."""
    from agents_celery.mcp import MCPTools
    from agents_celery.tools import ToolContext

    prefix = f"mcpr-{os.urandom(4).hex()}"
    server = Server(prefix)
    toolset = MCPTools(url=server.url, name="restarted")
    try:
        assert "count" in _names(toolset.list_tools())
        server.kill()
        server = Server(prefix, server.port)
        listing = toolset.list_tools()  # the next run's tools
        assert "count" in _names(listing)
        server.kill()
        server = Server(prefix, server.port)
        (count,) = [t for t in toolset.tools(listing) if t.remote_name == "count"]
        assert count.invoke({"key": "restarted"}, ToolContext("r", "c1")) == "count restarted: 1"
        assert counter_of(r, prefix)("restarted") == 1
    finally:
        server.kill()


def test_a_stdio_server_that_died_lists_its_tools_at_the_next_run() -> None:
    import sys

    import psutil

    from agents_celery.mcp import MCPTools

    env = {"MCP_TEST_REDIS": TEST_REDIS_URL, "MCP_TEST_PREFIX": f"mcps-{os.urandom(4).hex()}", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "agents_celery.testing.mcp_server", "stdio"]
    toolset = MCPTools(command=command, env=env, name="dies")
    assert "count" in _names(toolset.list_tools())
    (child,) = [p for p in psutil.Process().children(recursive=True) if p.cmdline()[-2:] == command[-2:]]
    child.kill()
    child.wait(timeout=10)
    assert "count" in _names(toolset.list_tools())  # not "Connection closed": a new server, its tools


def test_stdio_server(shared: tuple[Deployment, Server], r: redis.Redis) -> None:
    own, _ = shared
    rt, count = own.runtime, counter_of(r, own.prefix)
    listed = count("tools_list")
    stream = rt.stream("mcp_stdio", "s_count:io:3")
    events = all_events(rt, stream.id)
    assert rt.get(stream.id).status == "completed"
    assert not [e.data for e in events if e.type is EventType.CUSTOM and e.data["name"] == "mcp_unavailable"]
    assert tool_results(events) == [f"count io: {n}" for n in (1, 2, 3)]
    assert count("tools_list") == listed + 1
    assert_run_sound(events, tool_counts={"io": 3}, counter=count)
    stream = rt.stream("mcp_stdio", "s_fails:x:1")  # the server's error result is the model's business
    events = all_events(rt, stream.id)
    (result,) = tool_results(events)
    assert rt.get(stream.id).status == "completed" and result.startswith("Error: MCPToolError") and "x" in result


def test_an_idempotent_call_is_sent_again_when_the_server_dies_mid_call(
    shared: tuple[Deployment, Server], r: redis.Redis
) -> None:
    own, _ = shared
    rt, count = own.runtime, counter_of(r, own.prefix)
    stream = rt.stream("mcp_stdio", "s_slow_once:again:1:30")  # idempotent in the stdio toolset
    pid = int(wait_for(lambda: r.get(f"{own.prefix}:test:mcp:pid:again"), timeout=30, what="the stdio call"))
    os.kill(pid, signal.SIGKILL)  # the worker's stdio server dies mid-call
    events = all_events(rt, stream.id)
    assert rt.get(stream.id).status == "completed"
    assert tool_results(events) == ["slow once again: 2"]  # sent once more, to a new server process
    assert count("again") == 2
    (entry,) = {m["meta"]["idempotency_key"] for m in metas(r, own.prefix, stream.id)}
    assert entry == f"{stream.id}:call_0"  # both sends carried the same key


# -- no worker -------------------------------------------------------------------------------------------


def test_agents_modules_without_mcp_tools_do_not_import_mcp() -> None:
    code = "import sys, tests.agents.fixture, agents_celery; agents_celery.MCPTools; print('mcp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_toolset_configuration_and_the_run_view() -> None:
    with pytest.raises(ConfigurationError):
        MCPTools()
    with pytest.raises(ConfigurationError):
        MCPTools(url="http://x/mcp", command=["srv"])
    with pytest.raises(ConfigurationError):
        MCPTools(command="srv --stdio")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        Agent(name="a", model=ScriptedModel(["x"]), tools=[MCPTools(url="http://x/mcp"), MCPTools(url="http://x/m")])
    toolset = MCPTools(url="http://x/mcp", prefix="fs.", requires_confirmation=True, idempotent=["read"], list_ttl=60)
    agent = Agent(name="a", model=ScriptedModel(["x"]), tools=[toolset])
    listing = {"listed_at": 1_000, "tools": [{"name": "read", "description": "Read.", "input_schema": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]}  # fmt: skip
    view = agent.for_run({"fs": listing})
    assert list(agent.tools) == [] and list(view.tools) == ["fs_read"]  # the agent itself is left alone
    read = view.tools["fs_read"]
    assert read.requires_confirmation and read.idempotent
    assert read.validate('{"path": "/a"}') == {"path": "/a"}
    with pytest.raises(ToolArgumentsError):
        read.validate('{"path": 1}')
    assert not toolset.stale(listing, now_ms=60_999) and toolset.stale(listing, now_ms=61_000)
    toolset.changed_at = 1_001  # the server said its list changed after the run fetched it
    assert toolset.stale(listing, now_ms=2_000)


def test_a_list_changed_notification_refreshes_the_list_at_the_next_model_turn(
    shared: tuple[Deployment, Server], fake_openai: Any, r: redis.Redis
) -> None:
    """The server adds a tool during the run's first tool step and sends ``notifications/tools/list_changed``: the
    second model turn is offered the new tool (the TTL is 300 s, far away), and ``tools/list`` is fetched twice
    over four model turns (at the first turn and after the change), not before every model request."""
    own, _ = shared
    rt, count = own.runtime, counter_of(r, own.prefix)
    key = f"grow{os.getpid()}"
    offered: list[list[str]] = []

    def responder(request: dict[str, Any]) -> FakeReply:
        messages = request.get("messages") or []
        turn = turn_index(messages)
        offered.append(sorted(t["function"]["name"] for t in request.get("tools") or []))
        script = [("g_grow", {"key": key}), (f"g_added_{key}", {"note": "new"}), ("g_count", {"key": key})]
        if turn >= len(script):
            return FakeReply(text="Done: " + " | ".join(m["content"] for m in messages if m.get("role") == "tool"))
        name, args = script[turn]
        return FakeReply(tool_calls=(ScriptedToolCall(name, args, f"call_{turn}"),))

    # a run of another toolset on the same connection first, so the pooled connection is not this toolset's own
    assert rt.run("mcp_fresh", f"f_count:{key}-warm:1", timeout=60).status == "completed"
    fake_openai.responder = responder
    listed = count("tools_list")
    view = rt.run("mcp_grow", "grow", timeout=60)
    assert view.status == "completed", view
    new = f"g_added_{key}"
    assert len(offered) >= 4
    assert new not in offered[-4] and new in offered[-3] and new in offered[-2] and new in offered[-1]
    assert count(f"grow:{key}") == 1 and count(f"added:{key}") == 1 and count(key) == 1
    assert count("tools_list") == listed + 2  # four model turns: listed at the first, again after the change only
    assert f"added {key}: 1" in str(view.output)
    events = all_events(rt, view.run_id)
    assert f"added {key}: 1" in tool_results(events)
    assert_run_sound(events, tool_counts={key: 1, f"added:{key}": 1, f"grow:{key}": 1}, counter=count)


def test_a_list_changed_notification_on_the_standalone_stream_refreshes_the_list(
    shared: tuple[Deployment, Server], fake_openai: Any, r: redis.Redis
) -> None:
    """As above, but the server announces the change on the session's standalone GET stream, which the client
    reads on its own schedule: the model keeps calling ``g_count`` (for at most 20 turns) until it is offered the new
    tool, then calls it. One ``tools/list`` more than the first one proves the refresh came from the notification
    (the TTL is 300 s) and that the turns in between did not list."""
    own, _ = shared
    rt, count = own.runtime, counter_of(r, own.prefix)
    key = f"solo{os.getpid()}"
    new = f"g_added_{key}"
    offered: list[list[str]] = []

    def responder(request: dict[str, Any]) -> FakeReply:
        messages = request.get("messages") or []
        turn = turn_index(messages)
        names = sorted(t["function"]["name"] for t in request.get("tools") or [])
        offered.append(names)
        if turn == 0:
            return FakeReply(tool_calls=(ScriptedToolCall("g_grow", {"key": key, "standalone": True}, "call_0"),))
        if any(m.get("role") == "tool" and m["content"].startswith(f"added {key}") for m in messages):
            return FakeReply(text="Done")
        if new in names:
            return FakeReply(tool_calls=(ScriptedToolCall(new, {}, f"call_{turn}"),))
        if turn >= 20:
            return FakeReply(text="Gave up: never offered the new tool")
        return FakeReply(tool_calls=(ScriptedToolCall("g_count", {"key": key}, f"call_{turn}"),))

    fake_openai.responder = responder
    listed = count("tools_list")
    view = rt.run("mcp_grow", "grow", timeout=60)
    assert view.status == "completed", view
    assert count(f"added:{key}") == 1, offered  # the model was offered the new tool, and called it
    assert count("tools_list") == listed + 2  # the first turn's listing, and one after the notification
    waited = count(key)  # turns that ran before the notification arrived
    assert len(offered) == waited + 3, offered
    assert_run_sound(all_events(rt, view.run_id), tool_counts={f"added:{key}": 1, f"grow:{key}": 1}, counter=count)

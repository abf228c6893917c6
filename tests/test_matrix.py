"""Every agent kind we serve through every dialect, each with its official client, clean and with a kill -9 of the
worker in the middle of the answer: the same final text, each tool once.

Rows (agent kinds): ours (``fake``, tests/agents/fixture.py), pydantic-ai (``pai_weather``,
tests/agents/pydantic_ai_agents.py; its row also sends an image and a file, and asks ``pai_bank`` for structured
output) and the OpenAI Agents SDK (``sdk_weather``, tests/agents/openai_sdk.py: the SDK's own agent and model, served
as they are).
Columns (dialects): AgentOS (its HTTP routes, as an AgentOS client reads them), AG-UI (``@ag-ui/client`` through
tests/agui_client), the OpenAI Responses API (the ``openai`` SDK) and the AI SDK's chat (npm ``ai`` through
tests/aisdk_client). A later dialect or guest adds its column or row here.

One private deployment for the module (its workers are the ones killed) and one API server in front of it."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import redis

from agents_celery.events import Event
from agents_celery.http.responses.render import parse_response_id
from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing import ScriptResponder

from .conftest import TEST_REDIS_URL, all_events, wait_for
from .support.apis import ApiServer, frames
from .support.invariants import assert_run_sound, counter_of
from .support.workers import Deployment
from .test_agui_client import CLIENT, node
from .test_aisdk_client import CLIENT as AISDK

pytestmark = pytest.mark.timeout(120)

#: The answer every cell ends with (long enough to be killed in the middle of).
ANSWER = " ".join(f"w{i}" for i in range(40))


@dataclass(frozen=True)
class Kind:
    """An agent kind: the agent, the tool its first turn calls (and its arguments), the counter of that tool."""

    agent: str
    tool: str
    args: dict[str, Any]
    counter: str


KINDS = {
    "ours": Kind("fake", "add", {"a": 2, "b": 3}, "add"),
    "pydantic-ai": Kind("pai_weather", "get_lat_lng", {"location": "Oslo"}, "pai:get_lat_lng"),
    "openai-agents": Kind("sdk_weather", "get_lat_lng", {"location": "Oslo"}, "sdk:get_lat_lng"),
}
# the modules serving every kind's agent: a deployment that runs the matrix loads these
KIND_AGENTS = "tests.agents.fixture,tests.agents.pydantic_ai_agents,tests.agents.openai_sdk"


@pytest.fixture(scope="module")
def matrix(fake_openai: Any) -> Iterator[tuple[Deployment, ApiServer]]:
    dep = Deployment("matrix", fake_openai.url, {"AGENTS_CELERY_AGENTS": KIND_AGENTS})
    try:
        dep.start(1)
        api = ApiServer({**dep.env, "AGENTS_CELERY_KEEPALIVE_SECONDS": "0.3"}).wait_ready()
        yield dep, api
        api.stop()
    finally:
        dep.close()


def kill_and_replace(dep: Deployment) -> None:
    """SIGKILL every live worker of the deployment (the one answering among them), then start a fresh one."""
    for w in [w for w in dep.workers if w.proc.poll() is None]:
        w.kill()
    dep.start(1)


def answering(text: str) -> bool:
    """A piece of the answer (the second turn's text), not of the first turn's."""
    return text.startswith("w")


# -- the dialects: each runs one question with its client, calling ``killed`` at the first piece of the answer ----


def agentos(api: ApiServer, dep: Deployment, agent: str, killed: Callable[[], None]) -> tuple[str, str]:
    """POST /agents/<agent>/runs with ``stream``: the AgentOS events until RunCompleted (its ``content``)."""
    with (
        httpx.Client(base_url=api.url, timeout=60) as http,
        http.stream("POST", f"/agents/{agent}/runs", data={"message": "Go.", "stream": "true"}) as resp,
    ):
        assert resp.status_code == 200
        run_id, last = "", None
        for f in frames(resp, timeout=90):
            run_id = run_id or f.data.get("run_id", "")
            if f.event == "RunContent" and answering(str(f.data.get("content", ""))):
                killed()
            last = f
    assert last is not None and last.event == "RunCompleted", last
    return run_id, str(last.data["content"])


def agui(api: ApiServer, dep: Deployment, agent: str, killed: Callable[[], None]) -> tuple[str, str]:
    """``@ag-ui/client``'s HttpAgent reads the run live (in node); the last message is the answer."""
    if shutil.which("node") is None or not (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.fail("the AG-UI client is not installed: run scripts/ensure-agui-client (make test does)")
    thread, run = uuid.uuid4().hex, uuid.uuid4().hex
    cmd = ["node", "scenarios.mjs", "live", f"{api.url}/agui/{agent}", thread, json.dumps({"runId": run})]
    client = subprocess.Popen(cmd, cwd=CLIENT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        rt = dep.runtime
        run_id = wait_for(lambda: rt.runs(session_id=thread).runs, timeout=30, what="the client's run")[0].run_id
        for ev in rt.get_stream(run_id).events():
            if ev.type.value == "TEXT_MESSAGE_CONTENT" and answering(str(ev.data.get("delta", ""))):
                killed()
                break
            if ev.is_terminal:
                break
        out, err = client.communicate(timeout=90)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(timeout=10)
    assert client.returncode == 0, f"the AG-UI client failed:\n{out}\n{err}"
    got = json.loads(out.strip().splitlines()[-1])
    assert got["errors"] == [] and got["types"][-1] == "RUN_FINISHED", got["types"]
    return run_id, str(got["messages"][-1]["content"])


def responses(api: ApiServer, dep: Deployment, agent: str, killed: Callable[[], None]) -> tuple[str, str]:
    """The openai SDK streams ``responses.create``; the answer is the last completed message of the Response."""
    with openai.OpenAI(base_url=api.url + "/v1", api_key="unused", max_retries=0) as client:
        response_id, kinds = "", []
        for event in client.responses.create(model=agent, input="Go.", stream=True):
            kinds.append(event.type)
            if event.type == "response.created":
                response_id = event.response.id
            if event.type == "response.output_text.delta" and answering(event.delta):
                killed()
        assert kinds[-1] == "response.completed", kinds[-5:]
        final = client.responses.retrieve(response_id)
    messages = [i for i in final.output if i.type == "message" and i.status == "completed"]
    parsed = parse_response_id(response_id)
    assert parsed is not None
    return parsed[0], messages[-1].content[0].text  # type: ignore[union-attr]


def aisdk(api: ApiServer, dep: Deployment, agent: str, killed: Callable[[], None]) -> tuple[str, str]:
    """The AI SDK's chat client (``AbstractChat``, in node) reads the run live; a crash is a ``reset-step`` there,
    so the message's text parts are the clean run's, nothing twice and nothing partial."""
    if shutil.which("node") is None or not (AISDK / "node_modules" / "ai").is_dir():
        pytest.fail("the AI SDK client is not installed: run scripts/ensure-aisdk-client (make test does)")
    chat = uuid.uuid4().hex
    cmd = ["node", "scenarios.mjs", "text", f"{api.url}/aisdk/{agent}", chat, json.dumps({"text": "Go."})]
    client = subprocess.Popen(cmd, cwd=AISDK, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        rt = dep.runtime
        run_id = wait_for(lambda: rt.runs(session_id=chat).runs, timeout=30, what="the client's run")[0].run_id
        for ev in rt.get_stream(run_id).events():
            if ev.type.value == "TEXT_MESSAGE_CONTENT" and answering(str(ev.data.get("delta", ""))):
                killed()
                break
            if ev.is_terminal:
                break
        out, err = client.communicate(timeout=90)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(timeout=10)
    assert client.returncode == 0, f"the AI SDK client failed:\n{out}\n{err}"
    got = json.loads(out.strip().splitlines()[-1])
    assert got["errors"] == [] and got["status"] == "ready", got
    texts = [p["text"] for p in got["messages"][-1]["parts"] if p["type"] == "text"]
    assert texts == ["Looking.", ANSWER], texts
    return run_id, texts[-1]


DIALECTS = {"agentos": agentos, "agui": agui, "responses": responses, "aisdk": aisdk}


@pytest.mark.parametrize(
    "crash", [pytest.param(False, id="clean"), pytest.param(True, id="kill-9", marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("dialect", list(DIALECTS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_the_same_answer_and_each_tool_once(
    matrix: tuple[Deployment, ApiServer], fake_openai: Any, kind: str, dialect: str, crash: bool
) -> None:
    dep, api = matrix
    spec = KINDS[kind]
    first = ScriptedTurn("Looking.", [ScriptedToolCall(spec.tool, spec.args)])
    fake_openai.responder = ScriptResponder([first, ANSWER], token_delay=0.02 if crash else 0.0)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        count = counter_of(r, dep.prefix)
        before, calls = count(spec.counter), fake_openai.calls
        kills: list[int] = []

        def killed() -> None:
            if crash and not kills:
                kills.append(1)
                kill_and_replace(dep)

        run_id, answer = DIALECTS[dialect](api, dep, spec.agent, killed)
        assert answer == ANSWER
        assert count(spec.counter) - before == 1  # the tool ran once, killed or not
    assert len(kills) == int(crash)
    assert fake_openai.calls - calls == 2 + int(crash)  # the killed model turn once more
    events: list[Event] = all_events(dep.runtime, run_id)
    assert_run_sound(events)
    abandoned = [e for e in events if e.type.value == "CUSTOM" and e.data.get("name") == "attempt_abandoned"]
    assert len(abandoned) == int(crash)


# -- the pydantic-ai row with images and structured output ---------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + bytes(300)
PDF = b"%PDF-1.4\n" + b"x" * 300
IMAGE, DOC = base64.b64encode(PNG).decode(), base64.b64encode(PDF).decode()
#: What pydantic-ai's model sends for the question, the PNG and the PDF (its file name is pydantic-ai's).
SENT = [
    {"type": "text", "text": "What are these?"},
    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{IMAGE}"}},
    {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{DOC}", "filename": "filename.pdf"}},
]
ADVICE = {"support_advice": "All fine.", "block_card": False, "risk": 1}
BANK = [
    ScriptedTurn(tool_calls=[ScriptedToolCall("customer_balance", {"include_pending": True})]),
    ScriptedTurn(tool_calls=[ScriptedToolCall("final_result", ADVICE)]),
]


def images_by(dialect: str, api: ApiServer) -> None:
    """Ask pai_weather about a PNG and a PDF with the dialect's client."""
    if dialect == "agentos":
        files = [("files", ("cat.png", PNG, "image/png")), ("files", ("report.pdf", PDF, "application/pdf"))]
        with httpx.Client(base_url=api.url, timeout=60) as http:
            resp = http.post(
                "/agents/pai_weather/runs", data={"message": "What are these?", "stream": "false"}, files=files
            )
        assert resp.status_code == 200 and resp.json()["status"] == "COMPLETED", resp.text
    elif dialect == "agui":
        got = node(api, "multimodal", uuid.uuid4().hex, agent="pai_weather", image=IMAGE, pdf=DOC)
        assert got["errors"] == [] and got["first"][-1] == got["second"][-1] == "RUN_FINISHED", got
    elif dialect == "aisdk":
        files = [
            {"type": "file", "mediaType": "image/png", "url": f"data:image/png;base64,{IMAGE}", "filename": "cat.png"},
            {"type": "file", "mediaType": "application/pdf", "url": f"data:application/pdf;base64,{DOC}"},
        ]
        got = aisdk_chat("pai_weather", api, text="What are these?", files=files)
        assert got["messages"][-1]["role"] == "assistant", got
    else:
        content = [
            {"type": "input_text", "text": "What are these?"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{IMAGE}"},
            {"type": "input_file", "filename": "report.pdf", "file_data": f"data:application/pdf;base64,{DOC}"},
        ]
        with openai.OpenAI(base_url=api.url + "/v1", api_key="unused", max_retries=0) as client:
            done = client.responses.create(model="pai_weather", input=[{"role": "user", "content": content}])  # type: ignore[list-item]
        assert done.status == "completed", done


def structured_by(dialect: str, api: ApiServer, dep: Deployment) -> Any:
    """Ask pai_bank (structured output) with the dialect's client; the output as that client got it."""
    if dialect == "agentos":
        with httpx.Client(base_url=api.url, timeout=60) as http:
            resp = http.post("/agents/pai_bank/runs", data={"message": "Balance?", "stream": "false"})
        assert resp.status_code == 200 and resp.json()["content_type"] == "json", resp.text
        return resp.json()["content"]
    if dialect == "agui":
        thread = uuid.uuid4().hex
        got = node(api, "live", thread, agent="pai_bank", message="Balance?")
        assert got["errors"] == [] and got["types"][-1] == "RUN_FINISHED", got
        (run,) = dep.runtime.runs(session_id=thread).runs
        finished = all_events(dep.runtime, run.run_id)[-1]
        return finished.data["result"]
    if dialect == "aisdk":
        got = aisdk_chat("pai_bank", api, text="Balance?")
        (output,) = [p["data"] for p in got["messages"][-1]["parts"] if p["type"] == "data-output"]
        return output
    with openai.OpenAI(base_url=api.url + "/v1", api_key="unused", max_retries=0) as client:
        done = client.responses.create(model="pai_bank", input="Balance?")
    assert done.status == "completed", done
    return json.loads(done.output_text)


def aisdk_chat(agent: str, api: ApiServer, **args: Any) -> dict[str, Any]:
    """One message from the AI SDK's chat client (node) to ``agent``: what it printed."""
    chat = uuid.uuid4().hex
    done = subprocess.run(
        ["node", "scenarios.mjs", "text", f"{api.url}/aisdk/{agent}", chat, json.dumps(args)],
        cwd=AISDK,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, f"the AI SDK client failed:\n{done.stdout}\n{done.stderr}"
    got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["errors"] == [] and got["status"] == "ready", got
    return got


@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_the_pydantic_ai_row_takes_images_and_gives_structured_output(
    matrix: tuple[Deployment, ApiServer], fake_openai: Any, dialect: str
) -> None:
    """Each dialect's client sends pai_weather a PNG and a PDF: pydantic-ai's model gets them (as BinaryContent);
    each asks pai_bank, whose ``output_type`` is a pydantic model: its client gets the object, not a JSON string."""
    if dialect == "agui" and (
        shutil.which("node") is None or not (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir()
    ):
        pytest.fail("the AG-UI client is not installed: run scripts/ensure-agui-client (make test does)")
    dep, api = matrix
    fake_openai.responder = ScriptResponder(["A cat and a report.", "The report."])
    seen = len(fake_openai.requests)
    images_by(dialect, api)
    first = fake_openai.requests[seen]
    # The parts go in the order the client put them: the AI SDK's sendMessage puts files before the text.
    sent = SENT[1:] + SENT[:1] if dialect == "aisdk" else SENT
    assert next(m["content"] for m in first["messages"] if m["role"] == "user") == sent
    fake_openai.responder = ScriptResponder(BANK)
    assert structured_by(dialect, api, dep) == ADVICE

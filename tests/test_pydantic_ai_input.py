"""What a pydantic-ai agent is given and gives back (#39 point 7): images and files reach its model as pydantic-ai's
user content, a video is refused at the door, structured output comes back as the object (with its schema in
``GET /agents``), ``GET /runs/<id>/input`` shows the run's input, a user's event stream handler leaves the tokens
live, and a run raises no PydanticAIDeprecationWarning. A real API server and a real worker serving
tests/agents/pydantic_ai_agents.py, pydantic-ai's OpenAIChatModel against the fake OpenAI server."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from agents_celery.errors import UnsupportedError
from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing import ScriptResponder

from .conftest import TEST_REDIS_URL, all_events, status_is, wait_event, wait_for
from .support.apis import ApiServer, frames
from .support.invariants import assert_run_sound, counter_of
from .support.workers import Deployment

pytestmark = pytest.mark.timeout(120)

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
PDF = b"%PDF-1.4\n" + b"x" * 300
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
PDF_URL = "data:application/pdf;base64," + base64.b64encode(PDF).decode()


@pytest.fixture(scope="module")
def served(fake_openai: Any) -> Iterator[tuple[Deployment, ApiServer]]:
    """One worker and one API server (Flask) of the module's own, serving the pydantic-ai agents."""
    os.environ.setdefault("FAKE_OPENAI_URL", fake_openai.url)
    dep = Deployment(
        "paiinput", fake_openai.url, {"AGENTS_CELERY_AGENTS": "tests.agents.fixture,tests.agents.pydantic_ai_agents"}
    )
    try:
        dep.start(1)
        api = ApiServer(dict(dep.env)).wait_ready()
        yield dep, api
        api.stop()
    finally:
        dep.close()


@pytest.fixture
def client(served: tuple[Deployment, ApiServer]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served[1].url, timeout=30) as c:
        yield c


def user_contents(request: dict[str, Any]) -> list[Any]:
    """The content of each user message of a chat completion request the fake server received."""
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def upload(client: httpx.Client, agent: str, files: list[tuple[bytes, str, str]], **fields: str) -> httpx.Response:
    """POST a multipart form as AgentOS clients send it: the fields, and the files in ``files``."""
    sent = [("files", (name, content, kind)) for content, name, kind in files]
    return client.post(f"/agents/{agent}/runs", data={"stream": "false", **fields}, files=sent)


def test_uploaded_images_and_files_reach_the_pydantic_ai_model_and_its_session(
    client: httpx.Client, served: tuple[Deployment, ApiServer], fake_openai: Any
) -> None:
    """An AgentOS multipart upload (a PNG and a PDF) reaches pydantic-ai's model as ``BinaryContent`` (sent as the
    image and file parts of Chat Completions); the run's state keeps the reference parts, not the data; the next
    run of the session still sends them; ``GET /runs/<id>/input`` shows them, each with its bytes' URL."""
    fake_openai.responder = ScriptResponder(["A cat and a report."])
    seen = len(fake_openai.requests)
    files = [(PNG, "cat.png", "image/png"), (PDF, "report.pdf", "application/pdf")]
    answer = upload(client, "pai_weather", files, message="What are these?")
    assert answer.status_code == 200, answer.text
    assert answer.json()["content"] == "A cat and a report."
    run_id = answer.json()["run_id"]
    (request,) = fake_openai.requests[seen:]
    assert user_contents(request) == [
        [
            {"type": "text", "text": "What are these?"},
            {"type": "image_url", "image_url": {"url": PNG_URL}},
            {"type": "file", "file": {"file_data": PDF_URL, "filename": "filename.pdf"}},  # (pydantic-ai's name)
        ]
    ]
    rt = served[0].runtime
    state, _ = rt.store.load(run_id)
    stored = json.dumps(state.messages)
    assert base64.b64encode(PNG).decode() not in stored and base64.b64encode(PDF).decode() not in stored
    assert f'"ref": "{run_id}/0"' in stored and f'"ref": "{run_id}/1"' in stored

    (message,) = client.get(f"/runs/{run_id}/input").json()["messages"]  # point 7c: the inspector's input
    text, image, pdf = message["content"]
    assert text == {"type": "text", "text": "What are these?"}
    assert (image["filename"], image["media_type"], image["url"]) == ("cat.png", "image/png", f"/runs/{run_id}/parts/0")
    assert (pdf["filename"], pdf["bytes"]) == ("report.pdf", len(PDF))
    got = client.get(image["url"])
    assert got.content == PNG and 'filename="cat.png"' in got.headers["Content-Disposition"]

    session = rt.get(run_id).session_id
    wait_for(lambda: rt.store.sessions.history(session), timeout=10, what="the session's history")
    fake_openai.responder = ScriptResponder(["Still a cat."])
    second = rt.stream("pai_weather", "And now?", session_id=session)
    wait_for(lambda: second.get().status == "completed", timeout=30, what="the second run")
    earlier = user_contents(fake_openai.requests[-1])
    assert earlier[0][1] == {"type": "image_url", "image_url": {"url": PNG_URL}} and earlier[1] == "And now?"


def test_an_image_still_reaches_the_model_after_a_pause_and_a_worker_killed_mid_segment(
    served: tuple[Deployment, ApiServer], fake_openai: Any
) -> None:
    """A run with an image pauses for an approval; the next segment puts the image back into the restored history
    (the model is sent it again); a worker killed in the middle of that segment's answer: the retried attempt, its
    history restored once more, sends it too."""
    dep = served[0]
    rt = dep.runtime
    path = f"/tmp/{uuid.uuid4().hex}"
    answer = " ".join(f"w{i}" for i in range(60))
    turns = [ScriptedTurn("Deleting.", [ScriptedToolCall("delete_file", {"path": path})]), answer]
    fake_openai.responder = ScriptResponder(turns, token_delay=0.02)
    image = {"type": "image_url", "image_url": {"url": PNG_URL}}
    stream = rt.stream("pai_files", [{"type": "text", "text": "Delete the file in this picture."}, image])
    all_events(rt, stream.id)
    assert stream.get().status == "paused"
    seen = len(fake_openai.requests)
    rt.continue_run(stream.id, [{"tool_call_id": stream.get().pending[0].id, "confirmed": True}])
    answering = lambda e: e.type.value == "TEXT_MESSAGE_CONTENT" and str(e.data.get("delta", "")).startswith("w")  # noqa: E731
    wait_event(rt, stream.id, answering)
    for w in [w for w in dep.workers if w.proc.poll() is None]:
        w.kill()
    dep.start(1)
    status_is(stream, "completed", 60, "the retried run")
    sent = fake_openai.requests[seen:]
    assert len(sent) == 2  # the answer, killed, and its retry
    for request in sent:
        (content,) = user_contents(request)
        assert content == [{"type": "text", "text": "Delete the file in this picture."}, image]
    events = all_events(rt, stream.id)
    assert_run_sound(events)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        assert counter_of(r, dep.prefix)(f"pai:delete_file:{path}") == 1


def test_image_urls_with_detail_and_json_parts_reach_the_pydantic_ai_model(
    client: httpx.Client, fake_openai: Any
) -> None:
    """JSON content parts: an image by URL (``ImageUrl`` with its ``detail``), an image as a data URL with its
    ``detail``, a text file (pydantic-ai inlines it as text), each as pydantic-ai's user content."""
    fake_openai.responder = ScriptResponder(["Seen."])
    text = "id,name\n1,Ada\n"
    message = [
        {"type": "text", "text": "What is in these?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "high"}},
        {
            "type": "file",
            "file": {
                "filename": "people.csv",
                "file_data": "data:text/csv;base64," + base64.b64encode(text.encode()).decode(),
            },
        },
    ]
    answer = client.post("/agents/pai_weather/runs", json={"message": message, "stream": False})
    assert answer.status_code == 200, answer.text
    (content,) = user_contents(fake_openai.requests[-1])
    assert content[:3] == [
        {"type": "text", "text": "What is in these?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "high"}},
    ]
    assert content[3]["type"] == "text" and text in content[3]["text"] and "people.csv" in content[3]["text"]


def test_a_video_is_refused_with_400_and_nothing_created(
    client: httpx.Client, served: tuple[Deployment, ApiServer], fake_openai: Any
) -> None:
    """pydantic-ai's OpenAI models raise on a video, late, in the worker: the door says so first."""
    session = f"s-{uuid.uuid4().hex}"
    fake_openai.responder = ScriptResponder(["A clip."])
    answer = upload(client, "pai_weather", [(b"\x00\x00\x00\x18ftypmp42", "clip.mp4", "video/mp4")], message="Hm?",
                    session_id=session)  # fmt: skip
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["code"] == "unsupported" and "video/mp4" in body["detail"] and "pydantic-ai" in body["detail"]
    assert served[0].runtime.runs(session_id=session).runs == []
    # a run of ours takes it (its model gets the file as a file part)
    assert upload(client, "fake", [(b"\x00", "clip.mp4", "video/mp4")], message="Hm?").status_code == 200
    # nor can a message sent to a live run bring one
    fake_openai.responder = ScriptResponder(["Said."], token_delay=0.05)
    rt = served[0].runtime
    live = rt.stream("pai_weather", "Talk.")
    with pytest.raises(UnsupportedError, match="video/mp4"):
        rt.send_message(
            live.id, [{"type": "file", "file": {"filename": "c.mp4", "file_data": "data:video/mp4;base64,AAAA"}}]
        )
    all_events(rt, live.id)


def test_get_runs_input_shows_a_pydantic_ai_run_s_input(client: httpx.Client, fake_openai: Any) -> None:
    """The run's state keeps its prompt as pydantic-ai's message once a segment took it in: the input is read from
    there (the inspector shows it above the timeline), as for our own agents' runs."""
    fake_openai.responder = ScriptResponder(["Hello, Ada."])
    answer = client.post("/agents/pai_weather/runs", data={"message": "I am Ada.", "stream": "false"})
    assert answer.status_code == 200 and answer.json()["status"] == "COMPLETED", answer.text
    got = client.get(f"/runs/{answer.json()['run_id']}/input").json()["messages"]
    assert got == [{"role": "user", "content": "I am Ada."}]


BANK = [
    ScriptedTurn(tool_calls=[ScriptedToolCall("customer_balance", {"include_pending": True})]),
    ScriptedTurn(
        tool_calls=[ScriptedToolCall("final_result", {"support_advice": "All fine.", "block_card": False, "risk": 1})]
    ),
]


def test_structured_output_comes_back_as_the_object_and_get_agents_shows_its_schema(
    client: httpx.Client, fake_openai: Any
) -> None:
    agents = {a["name"]: a for a in client.get("/agents").json()}
    bank = agents["pai_bank"]["output_schema"]
    assert bank["type"] == "object" and set(bank["properties"]) == {"support_advice", "block_card", "risk"}
    point = agents["pai_point"]["output_schema"]
    assert point["type"] == "object" and set(point["properties"]) == {"x", "y"}
    assert agents["pai_weather"]["output_schema"] is None  # text output
    assert agents["pai_files"]["output_schema"] is None  # text (and DeferredToolRequests, which pauses)

    fake_openai.responder = ScriptResponder(BANK)
    with client.stream("POST", "/agents/pai_bank/runs", data={"message": "Balance?", "stream": "true"}) as resp:
        assert resp.status_code == 200
        got = list(frames(resp))
    done = got[-1]
    assert done.event == "RunCompleted", done
    advice = {"support_advice": "All fine.", "block_card": False, "risk": 1}
    assert done.data["content"] == advice and done.data["content_type"] == "json"
    assert client.get(f"/runs/{done.data['run_id']}").json()["output"] == advice

    fake_openai.responder = ScriptResponder(
        [ScriptedTurn(tool_calls=[ScriptedToolCall("final_result", {"x": 1, "y": 2})])]
    )
    answer = client.post("/agents/pai_point/runs", data={"message": "Where?", "stream": "false"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["content"] == {"x": 1, "y": 2}
    assert client.get(f"/runs/{answer.json()['run_id']}").json()["output"] == {"x": 1, "y": 2}


def test_a_user_s_event_stream_handler_leaves_the_tokens_live_and_a_stop_keeps_the_partial_text(
    served: tuple[Deployment, ApiServer], fake_openai: Any
) -> None:
    """The agent has an ``event_stream_handler`` of its own: the log gets each token as it streams (not once the
    model finished), the handler sees the events too, and a stop mid-stream keeps the text said so far."""
    dep = served[0]
    rt = dep.runtime
    words = [f"w{i}" for i in range(300)]
    fake_openai.responder = ScriptResponder([" ".join(words)], token_delay=0.02)
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        count = counter_of(r, dep.prefix)
        before = count("pai:watched_event")
        stream = rt.stream("pai_watched", "Talk for a while.")
        for ev in stream.events():
            if ev.type.value == "TEXT_MESSAGE_CONTENT":
                break
        rt.stop(stream.id)
        status_is(stream, "cancelled", 15, "the cancelled run")
        events = all_events(rt, stream.id)
        assert count("pai:watched_event") > before  # the user's handler was handed the events
    said = "".join(e.data["delta"] for e in events if e.type.value == "TEXT_MESSAGE_CONTENT")
    assert said and len(said.split()) < len(words) // 2, said[-40:]  # live: cut well before the end
    assert events[-1].data["outcome"] == {"type": "cancelled"}
    assert_run_sound(events)


def test_a_completed_run_of_the_handler_agent_logs_every_token_once(
    served: tuple[Deployment, ApiServer], fake_openai: Any
) -> None:
    rt = served[0].runtime
    fake_openai.responder = ScriptResponder(["one two three four"])
    stream = rt.stream("pai_watched", "Count.")
    events = all_events(rt, stream.id)
    assert stream.get().status == "completed"
    assert "".join(e.data["delta"] for e in events if e.type.value == "TEXT_MESSAGE_CONTENT") == "one two three four"
    assert_run_sound(events)


def test_settling_a_run_raises_no_pydantic_ai_deprecation_warning(fake_openai: Any) -> None:
    """The guest's end of a segment reads the run's usage through pydantic-ai's current API (``usage`` is a
    property in 2.68; calling it warns): with that warning an error, a real run's result settles."""
    from pydantic_ai.exceptions import PydanticAIDeprecationWarning

    from agents_celery.contrib.pydantic_ai import served as guest_of
    from agents_celery.contrib.pydantic_ai.prompt import Prompt
    from agents_celery.runs import RunState

    os.environ.setdefault("FAKE_OPENAI_URL", fake_openai.url)
    import tests.agents.pydantic_ai_agents as agents

    fake_openai.responder = ScriptResponder(BANK)
    result = asyncio.run(agents.bank.run("Balance?"))
    guest = guest_of(agents.bank)
    assert guest is not None
    state = RunState(run_id="r", agent_id="pai_bank", session_id="s", status="running", created_at=0, updated_at=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PydanticAIDeprecationWarning)
        settled = guest._settle(state, result, [], Prompt({}, "openai"))
    assert settled.state.output == {"support_advice": "All fine.", "block_card": False, "risk": 1}
    assert settled.state.usage["total_tokens"] > 0


def test_a_worker_running_pydantic_ai_runs_logs_no_deprecation_warning(
    served: tuple[Deployment, ApiServer], fake_openai: Any
) -> None:
    """The same seen from the worker: after runs that end and pause, its log holds no PydanticAIDeprecationWarning
    (a warning is printed once per place: any run of the module before this one would have printed it too)."""
    dep = served[0]
    rt = dep.runtime
    fake_openai.responder = ScriptResponder(BANK)
    done = rt.stream("pai_bank", "Balance?")
    all_events(rt, done.id)
    assert done.get().status == "completed"
    fake_openai.responder = ScriptResponder([ScriptedTurn(tool_calls=[ScriptedToolCall("delete_file", {"path": "x"})])])
    pause = rt.stream("pai_files", "Delete x.")
    all_events(rt, pause.id)
    assert pause.get().status == "paused"
    rt.stop(pause.id)
    logs = "".join(w.log.read_text(errors="replace") for w in dep.workers)
    assert "PydanticAIDeprecationWarning" not in logs

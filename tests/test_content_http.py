"""Images and files over HTTP: the AgentOS route's multipart ``files`` field and JSON content parts, AG-UI's
multimodal user messages, the 413s. The Flask front end in this process, a real worker, real Redis, the real
openai SDK against the fake server (whose recorded requests show what the model got)."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask, request
from werkzeug.datastructures import FileStorage, MultiDict
from werkzeug.test import encode_multipart

from agents_celery import Runtime
from agents_celery.contrib.flask import close_app, create_app, init_app, make_blueprint
from agents_celery.settings import Settings

from .support.invariants import assert_agui_stream
from .test_content import PDF, PDF_URL, PNG, PNG_URL, keys_added, parts, prefix_keys, user_parts

pytestmark = pytest.mark.timeout(90)

#: An image bigger than the default body limit (1 MiB): routes that take images and files take it.
BIG_PNG = b"\x89PNG\r\n\x1a\n" + bytes(1_500_000)


@pytest.fixture
def app(fast_settings: Settings, worker: Any) -> Iterator[Flask]:
    app = create_app(Runtime(settings=fast_settings))
    yield app
    close_app(app)


def upload(app: Flask, files: list[tuple[bytes, str, str]], **fields: str) -> Any:
    """POST a multipart form as AgentOS clients send it: the fields, and the files in ``files``."""
    data = MultiDict([("stream", "false"), *fields.items()])
    for content, name, kind in files:
        data.add("files", FileStorage(io.BytesIO(content), name, content_type=kind))
    boundary, body = encode_multipart(data)  # in memory (the test client would spool a big body to a file)
    kind = f"multipart/form-data; boundary={boundary}"
    return app.test_client().post("/agents/fake/runs", data=body, content_type=kind)


def test_agentos_multipart_files_reach_the_model(app: Flask, script: Any, fake_openai: Any) -> None:
    script("A cat and a report.")
    seen = len(fake_openai.requests)
    files = [(BIG_PNG, "cat.png", "image/png"), (PDF, "report.pdf", "application/pdf")]
    answer = upload(app, files, message="What are these?")
    assert answer.status_code == 200, answer.text
    assert answer.json["status"] == "COMPLETED" and answer.json["content"] == "A cat and a report."
    (request,) = fake_openai.requests[seen:]
    big_url = "data:image/png;base64," + __import__("base64").b64encode(BIG_PNG).decode()
    assert user_parts(request) == [
        [
            {"type": "text", "text": "What are these?"},
            {"type": "image_url", "image_url": {"url": big_url}},
            {"type": "file", "file": {"filename": "report.pdf", "file_data": PDF_URL}},
        ]
    ]
    # a file sent as application/octet-stream is typed by its name
    answer = upload(app, [(PNG, "small.png", "application/octet-stream")], message="And this?")
    assert answer.status_code == 200, answer.text
    assert user_parts(fake_openai.requests[-1]) == [
        [{"type": "text", "text": "And this?"}, {"type": "image_url", "image_url": {"url": PNG_URL}}]
    ]


def test_an_uploaded_image_downloads_under_its_file_name(app: Flask, script: Any, fake_openai: Any) -> None:
    script("A cat.")
    answer = upload(app, [(PNG, "cat.png", "image/png")], message="What is this?")
    assert answer.status_code == 200, answer.text
    assert user_parts(fake_openai.requests[-1])[0][1] == {"type": "image_url", "image_url": {"url": PNG_URL}}
    client = app.test_client()
    (message,) = client.get(f"/runs/{answer.json['run_id']}/input").json["messages"]
    image = message["content"][1]
    assert (image["filename"], image["media_type"]) == ("cat.png", "image/png")
    got = client.get(image["url"])
    assert got.data == PNG and 'filename="cat.png"' in got.headers["Content-Disposition"]


def test_an_image_type_the_model_cannot_take_is_refused_at_the_door(
    app: Flask, r: redis.Redis, fast_settings: Settings
) -> None:
    """An SVG (or TIFF, HEIC ...) is an ``image/*`` the model refuses only after the run started: 422 first (#39)."""
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"/>'
    before = prefix_keys(r, fast_settings.key_prefix)
    for kind in ["image/svg+xml", "image/tiff"]:
        answer = upload(app, [(svg, "logo.svg", kind)], message="What is this?", session_id=f"s-{uuid.uuid4().hex}")
        assert answer.status_code == 422 and kind in answer.json["detail"], answer.text
        assert "image/png" in answer.json["detail"]  # names what it takes
    assert keys_added(r, fast_settings.key_prefix, before) == set()


def test_json_content_parts_reach_the_model(app: Flask, script: Any, fake_openai: Any) -> None:
    script("Seen.")
    seen = len(fake_openai.requests)
    answer = app.test_client().post("/agents/fake/runs", json={"message": parts(), "stream": False})
    assert answer.status_code == 200, answer.text
    (request,) = fake_openai.requests[seen:]
    assert user_parts(request) == [parts()]
    bad = app.test_client().post("/agents/fake/runs", json={"message": [{"type": "audio"}], "stream": False})
    assert bad.status_code == 422 and "'audio'" in bad.json["detail"]


@pytest.mark.parametrize("limits", [{"max_part_bytes": len(PDF) - 1}, {"max_input_bytes": len(PNG) + len(PDF) - 1}])
def test_oversized_uploads_are_413_and_create_nothing(
    fast_settings: Settings, worker: Any, r: redis.Redis, limits: dict[str, int]
) -> None:
    app = Flask("host")  # with an access rule, so that a session check would record the session's owner
    init_app(
        app,
        Runtime(settings=fast_settings.model_copy(update=limits)),
        authorize=lambda action, user, resource, agent: resource is None or resource.user_id == user,
        user_id=lambda: "ann",
    )
    app.register_blueprint(make_blueprint())
    try:
        before = prefix_keys(r, fast_settings.key_prefix)
        files = [(PNG, "cat.png", "image/png"), (PDF, "report.pdf", "application/pdf")]
        answer = upload(app, files, message="too much", session_id=f"s-{uuid.uuid4().hex}")
        assert answer.status_code == 413, answer.text
        assert answer.json["code"] == "input_too_large" and answer.json["detail"]
        body = {"message": parts(), "stream": False, "session_id": f"s-{uuid.uuid4().hex}"}
        json_answer = app.test_client().post("/agents/fake/runs", json=body)
        assert json_answer.status_code == 413 and json_answer.json["code"] == "input_too_large"
        content = [
            {"type": "image", "source": {"type": "data", "value": PNG_B64, "mimeType": "image/png"}},
            {"type": "document", "source": {"type": "data", "value": PDF_B64, "mimeType": "application/pdf"}},
        ]
        agui_body = {"threadId": uuid.uuid4().hex, "runId": "r1", "messages": [agui_user(content)], "tools": []}
        agui_answer = app.test_client().post("/agui/fake", json={**agui_body, "state": {}})
        assert agui_answer.status_code == 413 and agui_answer.json["code"] == "input_too_large", agui_answer.text
        assert keys_added(r, fast_settings.key_prefix, before) == set()  # no run, no session, no owner, no keys
    finally:
        close_app(app)


def test_a_body_over_the_content_limit_is_413(fast_settings: Settings, worker: Any) -> None:
    app = create_app(Runtime(settings=fast_settings.model_copy(update={"max_input_bytes": 1000})))
    try:
        big = [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 1_500_000}}]
        answer = app.test_client().post("/agents/fake/runs", json={"message": big, "stream": False})
        assert answer.status_code == 413 and answer.json["code"] == "payload_too_large", answer.text
    finally:
        close_app(app)


# -- AG-UI -------------------------------------------------------------------------------------------------


def agui_post(app: Flask, thread: str, *messages: dict[str, Any]) -> list[dict[str, Any]]:
    body = {"threadId": thread, "runId": uuid.uuid4().hex, "state": {}, "messages": list(messages), "tools": []}
    answer = app.test_client().post("/agui/fake", json=body)
    assert answer.status_code == 200, answer.text
    events = [json.loads(line[6:]) for line in answer.text.split("\n") if line.startswith("data: ")]
    assert_agui_stream(events)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return events


def agui_user(content: Any) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex, "role": "user", "content": content}


PNG_B64 = PNG_URL.split(",", 1)[1]
PDF_B64 = PDF_URL.split(",", 1)[1]


def test_agui_image_and_document_parts_reach_the_model_and_stay_in_the_thread(
    app: Flask, script: Any, fake_openai: Any
) -> None:
    script("A cat and a report.")
    thread = uuid.uuid4().hex
    seen = len(fake_openai.requests)
    first = agui_user(
        [
            {"type": "text", "text": "What are these?"},
            {"type": "image", "source": {"type": "url", "value": "https://example.com/cat.jpg"}},
            {"type": "image", "source": {"type": "data", "value": PNG_B64, "mimeType": "image/png"}},
            {
                "type": "document",
                "source": {"type": "data", "value": PDF_B64, "mimeType": "application/pdf"},
                "metadata": {"filename": "report.pdf"},
            },
        ]
    )
    events = agui_post(app, thread, first)
    expected = [
        {"type": "text", "text": "What are these?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "image_url", "image_url": {"url": PNG_URL}},
        {"type": "file", "file": {"filename": "report.pdf", "file_data": PDF_URL}},
    ]
    (request,) = fake_openai.requests[seen:]
    assert user_parts(request) == [expected]
    # the next turn sends the conversation as the snapshot had it: the earlier image is still sent to the model
    (snapshot,) = [e for e in events if e["type"] == "MESSAGES_SNAPSHOT"]
    assert snapshot["messages"][0]["content"] == "What are these?"
    agui_post(app, thread, *snapshot["messages"], agui_user("Which one is bigger?"))
    assert user_parts(fake_openai.requests[-1]) == [expected]


def test_agui_binary_parts_and_refusals(app: Flask, script: Any, fake_openai: Any) -> None:
    script("Seen.")
    binary = [
        {"type": "text", "text": "Look."},
        {"type": "binary", "mimeType": "image/png", "data": PNG_B64},
        {"type": "binary", "mimeType": "application/pdf", "data": PDF_B64, "filename": "report.pdf"},
    ]
    agui_post(app, uuid.uuid4().hex, agui_user(binary))
    assert user_parts(fake_openai.requests[-1]) == [
        [
            {"type": "text", "text": "Look."},
            {"type": "image_url", "image_url": {"url": PNG_URL}},
            {"type": "file", "file": {"filename": "report.pdf", "file_data": PDF_URL}},
        ]
    ]
    audio = [{"type": "audio", "source": {"type": "data", "value": PNG_B64, "mimeType": "audio/wav"}}]
    body = {"threadId": uuid.uuid4().hex, "runId": "r1", "state": {}, "messages": [agui_user(audio)], "tools": []}
    answer = app.test_client().post("/agui/fake", json=body)
    assert answer.status_code == 422 and "audio part" in answer.json["detail"], answer.text


def test_the_input_and_its_parts_are_read_back_with_the_access_check(app: Flask, script: Any) -> None:
    script("Seen.")
    client = app.test_client()
    answer = client.post("/agents/fake/runs", json={"message": parts(), "stream": False})
    run_id = answer.json["run_id"]
    (message,) = client.get(f"/runs/{run_id}/input").json["messages"]
    text, web, image, pdf = message["content"]
    assert text == {"type": "text", "text": "What is in these?"} and web["image_url"]["url"].startswith("https://")
    assert image["url"] == f"/runs/{run_id}/parts/0" and image["media_type"] == "image/png"
    assert (pdf["filename"], pdf["bytes"]) == ("report.pdf", len(PDF))
    got = client.get(image["url"])
    assert got.status_code == 200 and got.data == PNG and got.mimetype == "image/png"
    assert "sandbox" in got.headers["Content-Security-Policy"] and got.headers["X-Content-Type-Options"] == "nosniff"
    got = client.get(pdf["url"])
    assert got.data == PDF and 'filename="report.pdf"' in got.headers["Content-Disposition"]
    for missing in (f"/runs/{run_id}/parts/9", f"/runs/{run_id}/parts/x", "/runs/nope/parts/0", "/runs/nope/input"):
        assert client.get(missing).status_code == 404, missing


def test_another_user_gets_404_for_the_input_and_parts(fast_settings: Settings, worker: Any, script: Any) -> None:
    script("Seen.")
    app = Flask("host")
    init_app(
        app,
        Runtime(settings=fast_settings),
        authorize=lambda action, user, resource, agent: resource is None or resource.user_id == user,
        user_id=lambda: request.headers.get("X-User"),
    )
    app.register_blueprint(make_blueprint(), url_prefix="/ai")
    try:
        client = app.test_client()
        ann, bob = {"X-User": "ann"}, {"X-User": "bob"}
        started = client.post("/ai/agents/fake/runs", json={"message": parts(), "stream": False}, headers=ann)
        run_id = started.json["run_id"]
        for path in (f"/ai/runs/{run_id}/input", f"/ai/runs/{run_id}/parts/0"):
            assert client.get(path, headers=ann).status_code == 200, path  # ann's own
            answer = client.get(path, headers=bob)  # bob: as if it did not exist
            assert answer.status_code == 404 and answer.json["code"] == "run_not_found", path
    finally:
        close_app(app)


def test_a_message_with_files_steers_a_live_run_over_http(app: Flask, script: Any, fake_openai: Any) -> None:
    from .conftest import wait_for

    script(" ".join(f"w{i}" for i in range(30)), token_delay=0.02)
    client = app.test_client()
    started = client.post("/agents/fake/runs", json={"message": "a story", "stream": False, "background": True})
    run_id = started.json["run_id"]
    wait_for(lambda: client.get(f"/runs/{run_id}").json["last_offset"] > 3, timeout=30, what="the run to stream")
    data = MultiDict([("message", "and this file")])
    data.add("files", FileStorage(io.BytesIO(PDF), "report.pdf", content_type="application/pdf"))
    boundary, body = encode_multipart(data)
    sent = client.post(f"/runs/{run_id}/messages", data=body, content_type=f"multipart/form-data; boundary={boundary}")
    assert sent.status_code == 202, sent.text
    wait_for(lambda: client.get(f"/runs/{run_id}").json["status"] == "completed", timeout=30, what="the run to end")
    assert user_parts(fake_openai.requests[-1])[-1] == [
        {"type": "text", "text": "and this file"},
        {"type": "file", "file": {"filename": "report.pdf", "file_data": PDF_URL}},
    ]
    (first, second) = client.get(f"/runs/{run_id}/input").json["messages"]
    assert first["content"] == "a story" and second["content"][1]["url"].endswith("/parts/0")


def test_a_responses_request_with_a_big_image_reaches_the_model(app: Flask, script: Any, fake_openai: Any) -> None:
    script("A big image.")
    big_url = "data:image/png;base64," + __import__("base64").b64encode(BIG_PNG).decode()
    content = [{"type": "input_text", "text": "What is it?"}, {"type": "input_image", "image_url": big_url}]
    body = {"model": "fake", "input": [{"role": "user", "content": content}]}
    answer = app.test_client().post("/v1/responses", json=body)  # over the 1 MiB body limit of other routes
    assert answer.status_code == 200, answer.text[:500]
    assert answer.json["status"] == "completed"
    assert user_parts(fake_openai.requests[-1]) == [
        [{"type": "text", "text": "What is it?"}, {"type": "image_url", "image_url": {"url": big_url}}]
    ]

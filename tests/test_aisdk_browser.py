"""The AI SDK's ``useChat`` in a real browser: the example page (examples/aisdk_chat: ``@ai-sdk/react`` with
``DefaultChatTransport`` and ``resume: true``, bundled by scripts/ensure-aisdk-page) served by the example Flask
app (examples/flask_app) and by the example Django project (examples/django_app under uvicorn, as an anonymous
caller), each with the agents API under ``/ai``, in headless Chromium (Debian's ``chromium``) driven by
Playwright, against a real worker, real Redis and the scripted fake OpenAI server. What the SDK's own chat client
does in node (tests/test_aisdk_client.py), done by React in a page: stream, reload mid-answer, approve, stop."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from agents_celery import ScriptedToolCall, ScriptedTurn

from .conftest import TEST_REDIS_URL, wait_for
from .support.apis import ApiServer
from .support.invariants import counter_of
from .support.workers import ROOT

pytestmark = [pytest.mark.timeout(120), pytest.mark.browser]

CHROMIUM = os.environ.get("AGENTS_CELERY_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
BUNDLE = ROOT / "examples" / "aisdk_chat" / "dist" / "chat.js"
WAIT_MS = 30_000


@pytest.fixture(scope="module", autouse=True)
def _expect_timeout() -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium (.ci/run does)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    pg = context.new_page()
    pg.set_default_timeout(WAIT_MS)
    yield pg
    context.close()


@pytest.fixture(scope="module", params=["flask", "django"])
def app(request: pytest.FixtureRequest, worker: Any, worker_env: dict[str, str]) -> Iterator[ApiServer]:
    """An example app with the page at ``/chat/`` and the agents API at ``/ai``: the Flask app (its own routes),
    or the Django project (its own views; the page's POSTs carry no session cookie: an anonymous caller's)."""
    if not BUNDLE.is_file():
        pytest.fail(f"the chat page is not bundled ({BUNDLE}): run scripts/ensure-aisdk-page (make test does)")
    if request.param == "django":
        server = ApiServer(worker_env, django=True).wait_ready()
    else:
        server = ApiServer(worker_env, flask_app="examples.flask_app").wait_ready()
    yield server
    server.stop()


@pytest.fixture
def rdb() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(TEST_REDIS_URL)
    yield client
    client.close()


def is_resume(response: Any) -> bool:
    return bool(response.request.method == "GET" and response.url.endswith("/stream"))


def open_chat(page: Any, app: ApiServer) -> Any:
    """A new chat on the page, for the test agents' ``fake`` agent; the assistant's messages."""
    with page.expect_response(is_resume) as resumed:
        page.goto(f"{app.root}/chat/?agent=fake")
    assert resumed.value.status == 204  # resume: true asked at once; a new chat has nothing live
    expect(page.locator("#status")).to_have_text("ready")
    return page.locator("li.message.assistant")


def send(page: Any, text: str) -> None:
    page.get_by_label("Message").fill(text)
    page.get_by_role("button", name="Send").click()


def text_of(message: Any) -> str:
    return "".join(message.locator(".text").all_text_contents())


def run_id_of(message: Any) -> str:
    message_id: str = message.get_attribute("data-message-id")
    assert message_id.startswith("msg-"), message_id
    return message_id.removeprefix("msg-")


def test_a_message_streams_and_a_reload_mid_answer_resumes_it_whole_once(
    page: Any, app: ApiServer, script: Any, runtime: Any
) -> None:
    words = " ".join(f"w{i}" for i in range(120))
    script(words, token_delay=0.05)
    answer = open_chat(page, app)
    chat = page.url.split("chat=")[1]
    send(page, "count")
    expect(page.locator("li.message.user")).to_have_text("count")
    expect(answer).to_contain_text("w5 ")
    expect(page.locator("#status")).to_have_text("streaming")
    seen = text_of(answer)
    assert 0 < len(seen) < len(words) and words.startswith(seen)  # it streams: part of it is on the page
    run_id = run_id_of(answer)

    with page.expect_response(is_resume) as resumed:
        page.reload()  # mid-answer: the fetch is aborted, the run goes on, the page asks GET .../<chat>/stream
    assert resumed.value.status == 200 and resumed.value.url.endswith(f"/aisdk/fake/{chat}/stream")  # it was live
    assert page.url.split("chat=")[1] == chat  # the chat id survived the reload
    expect(answer).to_have_count(1)
    expect(answer).to_contain_text("w119")
    expect(page.locator("#status")).to_have_text("ready")
    assert text_of(answer) == words  # the whole answer once: replayed from its start, then live
    assert page.locator("li.message").count() == 1  # the page keeps no history of its own: the answer only
    assert run_id_of(answer) == run_id and runtime.get(run_id).status == "completed"
    assert runtime.get(run_id).session_id == chat


def test_a_tool_approved_on_the_page_runs_once_and_the_answer_shows(
    page: Any, app: ApiServer, script: Any, rdb: redis.Redis, key_prefix: str, runtime: Any
) -> None:
    path = f"/tmp/{uuid.uuid4().hex}"
    script(ScriptedTurn("Deleting.", [ScriptedToolCall("delete_file", {"path": path})]), "Done, it is gone.")
    answer = open_chat(page, app)
    send(page, "delete it")
    tool = answer.locator(".tool")
    expect(tool).to_have_attribute("data-state", "approval-requested")
    expect(tool.locator("code")).to_have_text(f'delete_file({{"path":"{path}"}})')
    run_id = run_id_of(answer)
    wait_for(lambda: runtime.get(run_id).status == "paused", what="the run to pause for the approval")
    assert counter_of(rdb, key_prefix)(f"delete_file:{path}") == 0

    tool.get_by_role("button", name="Approve").click()  # sendAutomaticallyWhen sends the approval by itself
    expect(tool).to_have_attribute("data-state", "output-available")
    expect(tool.locator(".output")).to_have_text(f'"deleted {path}"')
    expect(answer).to_contain_text("Done, it is gone.")
    expect(page.locator("#status")).to_have_text("ready")
    assert text_of(answer) == "Deleting.Done, it is gone."  # one assistant message, continued after the approval
    expect(answer).to_have_count(1)
    assert runtime.get(run_id).status == "completed"
    assert counter_of(rdb, key_prefix)(f"delete_file:{path}") == 1


def test_stop_on_the_page_stops_the_run_within_5s(page: Any, app: ApiServer, script: Any, runtime: Any) -> None:
    words = " ".join(f"w{i}" for i in range(400))
    script(words, token_delay=0.02)
    answer = open_chat(page, app)
    chat = page.url.split("chat=")[1]
    send(page, "count")
    expect(answer).to_contain_text("w5 ")
    run_id = run_id_of(answer)

    pressed = time.monotonic()
    # The page asks the stop route (an aborted fetch alone is a closed tab and stops nothing), then stop().
    with page.expect_response(lambda r: r.request.method == "POST" and r.url.endswith(f"/{chat}/stop")) as stopped:
        page.get_by_role("button", name="Stop").click()
    assert stopped.value.status == 200
    wait_for(lambda: runtime.get(run_id).status == "cancelled", timeout=5, what="the run to be cancelled")
    assert time.monotonic() - pressed < 5
    expect(page.locator("#status")).to_have_text("ready")
    shown = text_of(answer)
    assert 0 < len(shown) < len(words) and words.startswith(shown)
    assert page.locator("#error").count() == 0


def test_the_page_is_served_beside_the_api(app: ApiServer) -> None:
    index = httpx.get(f"{app.root}/chat/")
    assert index.status_code == 200 and '<script src="chat.js">' in index.text
    assert 'data-api-prefix="/ai"' in index.text and app.url == f"{app.root}/ai"  # the page calls the API's prefix
    bundle = httpx.get(f"{app.root}/chat/chat.js")
    assert bundle.status_code == 200 and bundle.content == BUNDLE.read_bytes()

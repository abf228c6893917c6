"""The run inspector (``/ui/``) in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright,
against a live API process and a real worker. The page reads the API like any client: replay, live, and a
resume from the last offset it rendered when its connection drops."""

from __future__ import annotations

import os
import shutil
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from agents_celery import ScriptedToolCall, ScriptedTurn
from agents_celery.testing.openai_server import ScriptResponder

from .conftest import TEST_REDIS_URL, wait_for
from .support.apis import ApiServer, SharedApis

pytestmark = [pytest.mark.timeout(120), pytest.mark.browser]

CHROMIUM = os.environ.get("AGENTS_CELERY_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
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
    context = browser.new_context(viewport={"width": 390, "height": 844})  # a phone-sized screen
    pg = context.new_page()
    pg.set_default_timeout(WAIT_MS)
    yield pg
    context.close()


@pytest.fixture(scope="module", params=["flask", "django"])
def front(request: pytest.FixtureRequest) -> str:
    """Every test runs against the Flask API and against the Django app (under uvicorn, at /ai)."""
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def api(apis: SharedApis, front: str) -> ApiServer:
    return apis.get(front)


def start(api: ApiServer, message: str = "hi") -> str:
    resp = httpx.post(f"{api.url}/agents/fake/runs", data={"message": message, "stream": "false", "background": "true"})
    assert resp.status_code == 202, resp.text
    run_id: str = resp.json()["run_id"]
    return run_id


def run_json(api: ApiServer, run_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{api.url}/runs/{run_id}").json()
    return body


def page_text(page: Any) -> str:
    return "".join(page.locator("#timeline li.message").all_text_contents())


def test_a_streamed_run_renders_once_and_catches_up_after_the_api_restarts(
    page: Any, worker: Any, worker_env: dict[str, str], fake_openai: Any, front: str
) -> None:
    words = " ".join(f"word{i}" for i in range(150))
    fake_openai.responder = ScriptResponder([words], token_delay=0.04)
    env = {**worker_env, "AGENTS_CELERY_KEEPALIVE_SECONDS": "0.3"}
    server = ApiServer(env, django=front == "django").wait_ready()
    try:
        run_id = start(server)
        page.goto(f"{server.url}/ui/runs/{run_id}")
        wait_for(lambda: len(page_text(page)) > 40, timeout=30, what="some text on the page")
        assert page.locator("#connection").text_content() == "live"
        server.proc.send_signal(signal.SIGKILL)  # the API process dies mid-run; the page keeps what it has
        server.stop()
        expect(page.locator("#connection")).to_have_text("reconnecting")
        rendered_before = len(page_text(page))
        server = ApiServer(env, django=front == "django", port=server.port).wait_ready()  # the same address
        expect(page.locator("#status")).to_have_text("completed")
        expect(page.locator("#connection")).to_have_text("ended")
        assert page_text(page) == words  # every word once: no gap, no duplicate
        assert 0 < rendered_before < len(words)
        last = run_json(server, run_id)["last_offset"]
        assert page.locator("#timeline").get_attribute("data-last-offset") == str(last)
        assert page.locator("#timeline li.end").all_text_contents() == ["run finished: success"]
        assert page.locator("#stop").is_hidden()
    finally:
        server.stop()


def test_a_paused_run_is_approved_with_edited_arguments_from_the_page(
    page: Any, api: ApiServer, script: Any, key_prefix: str, front: str
) -> None:
    asked, edited = f"/tmp/{uuid.uuid4().hex}", f"/tmp/{uuid.uuid4().hex}"
    script(
        ScriptedTurn("I will delete the file you named.", [ScriptedToolCall("delete_file", {"path": asked})]),
        "Done, the file is gone.",
    )
    run_id = start(api, "delete it")
    page.goto(f"{api.url}/ui/runs/{run_id}")
    form = page.locator("#approvals form.approval")
    field = form.get_by_label("path")
    field.wait_for()
    assert field.input_value() == asked
    if os.environ.get("AGENTS_CELERY_SCREENSHOT") and front == "flask":  # the README's picture: make screenshot
        page.screenshot(path=os.environ["AGENTS_CELERY_SCREENSHOT"], full_page=True)
    field.fill(edited)
    form.get_by_role("button", name="Approve").click()
    expect(page.locator("#status")).to_have_text("completed")
    page.locator("#timeline li.tool .result", has_text=f"deleted {edited}").wait_for()
    assert "Done, the file is gone." in page_text(page)
    shown = "i => i.classList.contains('end') ? i.textContent : (i.querySelector('.result') || {}).textContent || ''"
    order = page.locator("#timeline > li").evaluate_all(f"items => items.map({shown})")
    pause, result = order.index("paused: waiting for a decision"), order.index(f"→ deleted {edited}")
    assert pause < result, order  # the approved call's result is shown where it happened: after the pause
    assert deletions(key_prefix, edited) == 1 and deletions(key_prefix, asked) == 0  # ran once, as edited
    assert page.locator("#approvals").is_hidden()


def deletions(key_prefix: str, path: str) -> int:
    """How many times delete_file ran for ``path`` (the test agents count each execution in Redis)."""
    r = redis.Redis.from_url(TEST_REDIS_URL)
    try:
        return int(r.get(f"{key_prefix}:test:count:delete_file:{path}") or 0)
    finally:
        r.close()


def test_a_rejection_with_a_note(page: Any, api: ApiServer, script: Any, key_prefix: str) -> None:
    kept = f"/tmp/{uuid.uuid4().hex}"
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": kept})]), "Understood, I kept it.")
    run_id = start(api, "delete it")
    page.goto(f"{api.url}/ui/runs/{run_id}")
    form = page.locator("#approvals form.approval")
    form.get_by_label("Note").fill("keep that file")
    form.get_by_role("button", name="Reject").click()
    expect(page.locator("#status")).to_have_text("completed")
    call = run_json(api, run_id)
    assert call["status"] == "completed"
    view = httpx.get(f"{api.url}/runs/{run_id}/events", params={"until": "end"}).text
    assert "keep that file" in view
    assert deletions(key_prefix, kept) == 0  # rejected: the tool never ran


def test_two_pending_calls_are_decided_one_by_one_and_sent_together(
    page: Any, api: ApiServer, script: Any, key_prefix: str
) -> None:
    kept, gone = f"/tmp/{uuid.uuid4().hex}", f"/tmp/{uuid.uuid4().hex}"
    calls = [ScriptedToolCall("delete_file", {"path": kept}), ScriptedToolCall("delete_file", {"path": gone})]
    script(ScriptedTurn("I will delete both.", calls), "Deleted one, kept the other.")
    run_id = start(api, "delete both")
    sent: list[Any] = []
    page.on("request", lambda req: sent.append(req.post_data_json) if req.url.endswith("/continue") else None)
    page.goto(f"{api.url}/ui/runs/{run_id}")
    forms = page.locator("#approvals form.approval")
    expect(forms).to_have_count(2)
    keep_form = forms.filter(has=page.locator(f"input[value='{kept}']"))
    delete_form = forms.filter(has=page.locator(f"input[value='{gone}']"))
    awaiting = page.locator("#approvals .awaiting")
    expect(awaiting).to_contain_text("2 of 2")

    keep_form.get_by_label("Note").fill("keep this one")
    keep_form.get_by_role("button", name="Reject").click()
    expect(keep_form.locator(".decision")).to_have_text("Rejected.")
    expect(awaiting).to_contain_text("1 of 2")  # the other call still awaits its own decision
    expect(delete_form.locator(".decision")).to_have_text("Awaiting your decision.")
    assert sent == []  # nothing sent for a call nobody decided
    assert run_json(api, run_id)["status"] == "paused"

    delete_form.get_by_role("button", name="Approve").click()
    expect(page.locator("#status")).to_have_text("completed")
    assert len(sent) == 1
    decisions = {d["tool_call_id"]: d for d in sent[0]["tools"]}
    assert sorted(d["confirmed"] for d in decisions.values()) == [False, True]
    assert [d["confirmation_note"] for d in decisions.values() if not d["confirmed"]] == ["keep this one"]
    assert deletions(key_prefix, kept) == 0 and deletions(key_prefix, gone) == 1
    assert page.locator("#approvals").is_hidden()


def test_stop_cancels_a_running_run(page: Any, api: ApiServer, fake_openai: Any) -> None:
    fake_openai.responder = ScriptResponder([" ".join(["slow"] * 400)], token_delay=0.05)
    run_id = start(api)
    page.goto(f"{api.url}/ui/runs/{run_id}")
    wait_for(lambda: len(page_text(page)) > 10, timeout=30, what="some text on the page")
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("#status")).to_have_text("cancelled")
    assert run_json(api, run_id)["status"] == "cancelled"
    page.locator("#timeline li.end", has_text="cancelled").wait_for()


def test_the_runs_list_filters_and_updates_live(page: Any, api: ApiServer, script: Any) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/listed"})]), "ok")
    paused = start(api, "delete it")
    wait_for(lambda: run_json(api, paused)["status"] == "paused", what="the run to pause")
    page.goto(f"{api.url}/ui/")
    page.get_by_label("Status").select_option("paused")
    page.get_by_role("button", name="Filter").click()
    # The unfiltered first page may still show the row as it was; the filtered one replaces it.
    expect(page.locator(f"tr[data-run='{paused}'] td").nth(6)).to_have_text("delete_file")
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/listed2"})]), "ok")
    later = start(api, "delete that too")
    page.locator(f"tr[data-run='{later}']").wait_for()  # no reload: the list updates by itself
    page.locator(f"tr[data-run='{later}'] a").click()
    page.wait_for_url(f"**/ui/runs/{later}")
    page.locator("#approvals form.approval").wait_for()
    for run_id in (paused, later):
        httpx.post(f"{api.url}/agents/fake/runs/{run_id}/cancel")


def test_with_the_api_key_set_a_page_without_it_sees_nothing(
    page: Any, worker: Any, worker_env: dict[str, str], script: Any, front: str
) -> None:
    env = {**worker_env, "AGENTS_CELERY_API_KEY": "inspector-key", "AGENTS_CELERY_ALLOW_ANONYMOUS": ""}
    server = ApiServer(env, django=front == "django").wait_ready()
    seen: list[str] = []
    page.on("request", lambda request: seen.append(request.url))
    try:
        script("Hello.")
        resp = httpx.post(
            f"{server.url}/agents/fake/runs",
            data={"message": "hi", "stream": "false"},
            headers={"Authorization": "Bearer inspector-key"},
        )
        run_id = resp.json()["run_id"]
        page.goto(f"{server.url}/ui/")  # the page itself is open: it holds no data
        page.locator("#notice", has_text="needs a key").wait_for()
        assert page.locator("#runs tbody tr").count() == 0
        page.goto(f"{server.url}/ui/runs/{run_id}")
        page.locator("#notice", has_text="needs a key").wait_for()
        assert page.locator("#timeline li").count() == 0
        page.get_by_label("API key").fill("inspector-key")
        page.get_by_role("button", name="Use key").click()
        expect(page.locator("#status")).to_have_text("completed")  # (its refresh may come before the events)
        wait_for(lambda: page_text(page) == "Hello.", timeout=30, what="the run's text on the page")
        page.goto(f"{server.url}/ui/")
        page.locator(f"tr[data-run='{run_id}']").wait_for()  # the key stays in this tab's session storage
        assert all("inspector-key" not in url for url in seen)  # never in a URL
        assert "inspector-key" not in server.output()  # nor in the server's log
    finally:
        server.stop()


def test_retried_attempts_are_marked(page: Any, api: ApiServer, fast_settings: Any, front: str) -> None:
    """A model turn retried after its worker died shows as such (the events a retry writes, appended by hand to
    a run whose queue nobody consumes)."""
    from agents_celery import Runtime
    from agents_celery.events import EventType, make_event

    # The page calls as an anonymous client: Django's own what they start together (user "(anonymous)").
    user = "(anonymous)" if front == "django" else None
    runtime = Runtime(settings=fast_settings.model_copy(update={"queue": f"nobody-{uuid.uuid4().hex[:6]}"}))
    try:
        run_id = runtime.stream("fake", "hi", user_id=user).run_id
        token = runtime.leases.acquire(run_id, 60_000)
        assert token is not None
        retry = [
            make_event(EventType.STEP_STARTED, step_name="model", metadata={"attempt": 1}),
            make_event(EventType.TEXT_MESSAGE_START, message_id="m1", role="assistant"),
            make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="m1", delta="Half an ans"),
            make_event(EventType.TEXT_MESSAGE_END, message_id="m1"),
            make_event(EventType.CUSTOM, name="attempt_abandoned", value={"step": 0, "attempt": 1, "next_attempt": 2}),
            make_event(EventType.STEP_STARTED, step_name="model", metadata={"attempt": 2}),
        ]
        runtime.store.log.append(run_id, retry, token)
        page.goto(f"{api.url}/ui/runs/{run_id}")
        expect(page.locator("#timeline li.retry")).to_have_text(
            ["an attempt of this step was abandoned (its worker stopped)", "retried: model step, attempt 2"]
        )
        runtime.leases.release(run_id, token)
    finally:
        runtime.stop(run_id)
        runtime.close()


def _png(width: int, height: int) -> bytes:
    """A real PNG (grey pixels), so the browser can decode the thumbnail."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def test_the_input_shows_image_thumbnails_and_file_names(page: Any, api: ApiServer, script: Any) -> None:
    script("A grey square and a report.")
    pdf = b"%PDF-1.4\n" + b"x" * 5000
    files = [("files", ("square.png", _png(40, 30), "image/png")), ("files", ("report.pdf", pdf, "application/pdf"))]
    resp = httpx.post(
        f"{api.url}/agents/fake/runs", data={"message": "What are these?", "stream": "false"}, files=files, timeout=30
    )
    assert resp.status_code == 200, resp.text  # multipart uploads through the front end (Flask or Django)
    page.goto(f"{api.url}/ui/runs/{resp.json()['run_id']}")
    expect(page.locator("#input li.message.user p")).to_have_text("What are these?")
    expect(page.locator("#input figure.image img.thumb")).to_have_count(1)
    thumb = page.locator("#input img.thumb")
    wait_for(lambda: thumb.evaluate("img => img.naturalWidth") == 40, timeout=30, what="the thumbnail decoded")
    expect(page.locator("#input figure.attachment a.name")).to_have_text(["square.png", "report.pdf"])
    expect(page.locator("#input figure.attachment").nth(1)).to_contain_text("application/pdf, 5 KB")


def test_a_workflow_run_shows_its_steps_as_a_tree(page: Any, api: ApiServer, fake_openai: Any) -> None:
    fake_openai.responder = ScriptResponder(["found five words about reefs"])
    resp = httpx.post(
        f"{api.url}/workflows/two-researchers/runs", data={"message": "reefs", "stream": "false", "background": "true"}
    )
    assert resp.status_code == 202, resp.text
    page.goto(f"{api.url}/ui/runs/{resp.json()['run_id']}")
    expect(page.locator("#status")).to_have_text("completed")
    top = page.locator("#steps > li")
    expect(top).to_have_count(3)
    assert top.evaluate_all("items => items.map(i => i.dataset.path)") == ["gather", "dig", "write"]
    inner = page.locator("#steps > li[data-path='dig'] > ol > li")
    assert sorted(inner.evaluate_all("items => items.map(i => i.dataset.path)")) == ["analyst", "scout", "tally"]
    assert set(page.locator("#steps li").evaluate_all("items => items.map(i => i.dataset.state)")) == {"done"}
    expect(page.locator("#steps li[data-path='tally'] > .output")).to_have_text("→ tallied reefs")
    link = page.locator("#steps li[data-path='write'] > a")
    expect(link).to_have_text("its run")
    link.click()
    expect(page.locator("#agent")).to_have_text("wf-author")  # the step's own run, in the inspector

"""Bad input gets a JSON 4xx and costs no more than it must: numbers in ASCII digits only (cursors, limits),
offsets Redis can take, chunked bodies capped while they are read (Flask and Django, WSGI and ASGI); and a client
resuming deep in a long run reads the earlier log page by page instead of holding it."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from werkzeug.test import EnvironBuilder

from agents_celery import Runtime, ScriptedToolCall, ScriptedTurn
from agents_celery.contrib.flask import close_app, create_app
from agents_celery.contrib.flask.routes import PROTOCOL
from agents_celery.http.sse import PREFIX_PAGE, LogStream
from agents_celery.storage.connections import connect_async
from agents_celery.storage.eventlog import AsyncEventLog

from .support.apis import django_env
from .support.workers import ROOT

pytestmark = pytest.mark.timeout(90)

FIVE_MB = 5 * 1024 * 1024


@pytest.fixture
def app(fast_settings: Any, worker: Any) -> Iterator[Flask]:
    app = create_app(Runtime(settings=fast_settings))
    yield app
    close_app(app)


@pytest.mark.parametrize("path", ["/runs", "/sessions"])
@pytest.mark.parametrize("params", [{"cursor": "².x"}, {"cursor": "١٢.x"}, {"limit": "²"}, {"limit": "١٢"}])
def test_other_scripts_digits_are_a_json_400(app: Flask, path: str, params: dict[str, str]) -> None:
    answer = app.test_client().get(path, query_string=params)
    assert answer.status_code == 400 and answer.json is not None, answer.text
    assert answer.json["code"] == "bad_request" and next(iter(params)) in answer.json["detail"]


def test_an_offset_redis_cannot_take_is_a_422_not_an_error_frame(app: Flask) -> None:
    client = app.test_client()
    run_id = client.post("/agents/offline/runs", data={"message": "hi", "stream": "false"}).json["run_id"]
    for index in (2**63, 2**63 - 1, 2**64, 10**30):
        answer = client.post(f"/agents/offline/runs/{run_id}/resume", json={"last_event_index": index})
        assert answer.status_code == 422 and answer.json["code"] == "invalid_body", (index, answer.text)
        assert "last_event_index" in answer.json["detail"]
    replay = client.post(f"/agents/offline/runs/{run_id}/resume", json={"last_event_index": 2})
    assert replay.status_code == 200 and '"event":"error"' not in replay.text and "RunCompleted" in replay.text
    for after in (str(2**63), str(2**64)):  # the events route takes 18 digits at most
        for answer in (
            client.get(f"/runs/{run_id}/events", query_string={"after": after}),
            client.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": after}),
        ):
            assert answer.status_code == 400 and answer.json["code"] == "bad_request", answer.text
    far = client.get(f"/runs/{run_id}/events", query_string={"after": "9" * 18})
    assert far.status_code == 204  # the run ended: nothing more comes


class Counting(io.RawIOBase):
    """A request body of ``total`` bytes made as it is read, counting what the server pulled."""

    def __init__(self, total: int, data: bytes = b"") -> None:
        self.data, self.total, self.pulled = data, total or len(data), 0

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        n = self.total - self.pulled if n is None or n < 0 else min(n, self.total - self.pulled)
        part = self.data[self.pulled : self.pulled + n] if self.data else b"{" * n
        self.pulled += n
        return part


def post_chunked(app: Flask, path: str, body: Counting, kind: str = "application/json") -> tuple[int, Any]:
    """POST ``body`` as a WSGI server hands a chunked request on: no CONTENT_LENGTH, the input ends by itself."""
    env = EnvironBuilder(path=path, method="POST", headers={"Content-Type": kind}).get_environ()
    env.pop("CONTENT_LENGTH", None)
    env.update({"wsgi.input": body, "wsgi.input_terminated": True, "HTTP_TRANSFER_ENCODING": "chunked"})
    status: list[str] = []
    out = b"".join(app.wsgi_app(env, lambda s, h, e=None: status.append(s)))  # type: ignore[arg-type,misc]
    return int(status[0].split()[0]), json.loads(out)


def test_a_chunked_body_is_capped_while_it_is_read_flask(app: Flask) -> None:
    body = Counting(FIVE_MB)  # (a route that takes no images or files: its body's limit is max_body_bytes)
    status, answer = post_chunked(app, "/schedules", body)
    assert status == 413 and answer["code"] == "payload_too_large", answer
    assert body.pulled < 2 * 1024 * 1024, f"read {body.pulled} bytes of a body refused at 1 MB"
    form = Counting(0, b"message=hi&background=true&stream=false")  # a chunked form and JSON still work
    status, answer = post_chunked(app, "/agents/offline/runs", form, "application/x-www-form-urlencoded")
    assert status == 202 and answer["status"] in ("queued", "running", "completed"), answer
    chunked_json = Counting(0, b'{"message": "hi", "background": true, "stream": false}')
    status, answer = post_chunked(app, "/agents/offline/runs", chunked_json)
    assert status == 202, answer


DJANGO_SCRIPT = r"""
import asyncio, io, json, sys
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth.models import User
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from django.test import Client

FIVE_MB = 5 * 1024 * 1024
out = {}

class Counting(io.RawIOBase):
    def __init__(self, total, data=b""):
        self.data, self.total, self.pulled = data, total or len(data), 0
    def readable(self):
        return True
    def read(self, n=-1):
        n = self.total - self.pulled if n is None or n < 0 else min(n, self.total - self.pulled)
        part = self.data[self.pulled:self.pulled + n] if self.data else b"{" * n
        self.pulled += n
        return part

def wsgi(body, kind="application/json"):
    env = {"REQUEST_METHOD": "POST", "PATH_INFO": "/ai/schedules", "SCRIPT_NAME": "", "SERVER_NAME": "127.0.0.1",
           "SERVER_PORT": "80", "wsgi.url_scheme": "http", "wsgi.input": body, "wsgi.input_terminated": True,
           "wsgi.errors": sys.stderr, "wsgi.version": (1, 0), "wsgi.multithread": False,
           "wsgi.multiprocess": False, "wsgi.run_once": False, "CONTENT_TYPE": kind,
           "HTTP_TRANSFER_ENCODING": "chunked", "HTTP_AUTHORIZATION": "Bearer machine-key"}
    status = []
    text = b"".join(WSGIHandler()(env, lambda s, h, e=None: status.append(s)))
    return [int(status[0].split()[0]), json.loads(text), body.pulled]

big = Counting(FIVE_MB)
out["wsgi_big"] = wsgi(big)
schedule = b'{"agent_id": "nope", "message": "hi", "every_seconds": 60}'
out["wsgi_json"] = wsgi(Counting(0, schedule))
out["wsgi_form"] = wsgi(Counting(0, b"agent_id=nope&message=hi&every_seconds=60"), "application/x-www-form-urlencoded")

async def asgi():
    sent, replies, answered = [0], [], asyncio.Event()
    async def receive():
        if sent[0] > FIVE_MB:  # the body went: the client waits for its answer, then hangs up
            await answered.wait()
            return {"type": "http.disconnect"}
        sent[0] += 65536
        return {"type": "http.request", "body": b"{" * 65536, "more_body": sent[0] <= FIVE_MB}
    async def send(message):
        replies.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            answered.set()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "path": "/ai/schedules", "raw_path": b"/ai/schedules", "query_string": b"", "root_path": "",
             "scheme": "http", "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 5000),
             "headers": [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked"),
                         (b"authorization", b"Bearer machine-key")]}
    await ASGIHandler()(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in replies if m["type"] == "http.response.body")
    return [replies[0]["status"], json.loads(body)]

out["asgi_big"] = asyncio.run(asgi())
staff = User.objects.create_user("ada", password="pw", is_staff=True)
c = Client()
c.force_login(staff)
admin = c.get("/ai/admin/runs/", {"limit": "²"})
out["admin"] = [admin.status_code, json.loads(admin.content)]
listing = Client().get("/ai/runs", {"cursor": "².x"}, HTTP_AUTHORIZATION="Bearer machine-key")
out["runs"] = [listing.status_code, json.loads(listing.content)]
print("RESULT " + json.dumps(out))
"""


def test_django_caps_chunked_bodies_and_refuses_other_digits(worker_env: dict[str, str], tmp_path: Any) -> None:
    """Django in a process of its own (the example project), so its settings do not meet tests/test_django.py's."""
    env = django_env({**worker_env, "AGENTS_CELERY_API_KEY": "machine-key"}, str(tmp_path / "db.sqlite3"))
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", DJANGO_SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=80
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(line.removeprefix("RESULT "))
    status, answer, pulled = out["wsgi_big"]
    assert status == 413 and answer["code"] == "payload_too_large", out
    assert pulled < 2 * 1024 * 1024, f"read {pulled} bytes of a body refused at 1 MB"
    for name in ("wsgi_json", "wsgi_form"):  # the chunked body was read: its unknown agent is named
        assert out[name][0] == 404 and "'nope'" in out[name][1]["detail"], out
    assert out["asgi_big"][0] == 413 and out["asgi_big"][1]["code"] == "payload_too_large", out
    for name in ("admin", "runs"):
        assert out[name][0] == 400 and out[name][1]["code"] == "bad_request", out


def test_a_deep_resume_folds_the_log_before_it_page_by_page(
    app: Flask, script: Any, monkeypatch: pytest.MonkeyPatch, fast_settings: Any
) -> None:
    """A client resuming deep in a long run holds one page of the earlier log at a time, never all of it."""
    script(ScriptedTurn("word " * 1500, [ScriptedToolCall("get_time", {"timezone": "UTC"})]), "Done " * 400)
    client = app.test_client()
    run_id = client.post("/agents/fake/runs", data={"message": "hi", "stream": "false"}).json["run_id"]
    log = app.extensions[PROTOCOL].streams.log
    events = log.read(run_id)
    called = next(e.offset for e in events if e.type.value == "TOOL_CALL_END")
    mid_text = next(e.offset for e in events[1200:] if e.type.value == "TEXT_MESSAGE_CONTENT")
    assert called > 3 * PREFIX_PAGE and events[-1].type.value == "RUN_FINISHED"
    reads: list[tuple[int | None, int]] = []
    real_read = log.read

    def counting_read(run_id: str, after: int = -1, limit: int | None = None) -> list[Any]:
        page = real_read(run_id, after, limit)
        reads.append((limit, len(page)))
        return page

    monkeypatch.setattr(log, "read", counting_read)
    resumed = client.post(f"/agents/fake/runs/{run_id}/resume", json={"last_event_index": called})
    completed = [json.loads(line[6:]) for line in resumed.text.splitlines() if '"ToolCallCompleted"' in line]
    assert completed and completed[0]["tool"]["tool_name"] == "get_time"  # known from the folded earlier log
    assert completed[0]["tool"]["tool_args"] == {"timezone": "UTC"} and "RunCompleted" in resumed.text
    assert reads and all(limit is not None and limit <= PREFIX_PAGE for limit, _ in reads), reads
    assert sum(n for _, n in reads) == called + 1  # each earlier event read once
    reads.clear()
    joined = client.get(f"/runs/{run_id}/events", query_string={"format": "agui", "after": str(mid_text)})
    types = [json.loads(line[6:])["type"] for line in joined.text.splitlines() if line.startswith("data: ")]
    assert types[:4] == ["RUN_STARTED", "STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"], types[:6]
    assert max(n for _, n in reads) <= PREFIX_PAGE and sum(n for _, n in reads) == mid_text + 1, reads

    async def through_asyncio() -> tuple[list[str], list[int]]:  # the ASGI path (Django under uvicorn)
        client = connect_async(fast_settings.redis_url)
        alog, sizes = AsyncEventLog(client, log.keys), []
        real_aread = alog.read

        async def counting_aread(run_id: str, after: int = -1, limit: int | None = None) -> list[Any]:
            page = await real_aread(run_id, after, limit)
            sizes.append(len(page))
            return page

        alog.read = counting_aread  # type: ignore[method-assign]
        text = "".join([chunk async for chunk in LogStream(run_id, mid_text, "agui", until_pause=False).aframes(alog)])
        await client.aclose()
        return [json.loads(line[6:])["type"] for line in text.splitlines() if line.startswith("data: ")], sizes

    atypes, sizes = asyncio.run(through_asyncio())
    assert atypes == types and max(sizes) <= PREFIX_PAGE and sum(sizes) == mid_text + 1, sizes

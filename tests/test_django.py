"""The reusable Django app in the example project: Django's users and CSRF, the API key, settings precedence,
the admin page, and streaming through Django's WSGI handler (the shared HTTP contract runs against the Django
app under uvicorn in tests/test_api.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agents_celery import ScriptedToolCall, ScriptedTurn

from .support.apis import django_env

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def project(worker: Any, worker_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Django set up in this process on the example project (a SQLite file of its own), with three users."""
    env = django_env(worker_env, str(tmp_path_factory.mktemp("django") / "db.sqlite3"))
    env["AGENTS_CELERY_ALLOW_ANONYMOUS"] = ""  # the project's default: anonymous callers are refused
    env["AGENTS_CELERY_API_KEY"] = "machine-key"
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.contrib.auth.models import User

    # pytest-xdist's worksteal may run this module's tests in two spells on one process, so this fixture can be set
    # up twice there. Django is configured once per process (the first database stays), so the users may exist.
    def user(name: str, **extra: Any) -> Any:
        return User.objects.filter(username=name).first() or User.objects.create_user(name, password="pw", **extra)

    users = {"bob": user("bob"), "eve": user("eve"), "ada": user("ada", is_staff=True)}
    yield users
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def client(user: Any = None, csrf: bool = False) -> Any:
    from django.test import Client

    c = Client(enforce_csrf_checks=csrf)
    if user is not None:
        c.force_login(user)
    return c


def sse_frames(response: Any) -> list[tuple[str, dict[str, Any]]]:
    text = b"".join(response.streaming_content).decode()
    out = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if "data" in fields:
            out.append((fields.get("id", ""), json.loads(fields["data"])))
    return out


def test_runs_belong_to_their_django_users(project: dict[str, Any]) -> None:
    bob, eve, ada = project["bob"], project["eve"], project["ada"]
    assert client().get("/ai/agents").status_code == 401  # anonymous: refused unless ALLOW_ANONYMOUS
    started = client(bob).post("/ai/agents/offline/runs", {"message": "What time is it?", "stream": "false"})
    assert started.status_code == 200, started.content
    run_id = started.json()["run_id"]
    mine = client(bob).get(f"/ai/runs/{run_id}").json()
    assert mine["user_id"] == str(bob.pk) and mine["status"] == "completed"
    assert client(eve).get(f"/ai/runs/{run_id}").status_code == 404  # not even its existence
    assert client(eve).get(f"/ai/runs/{run_id}/events").status_code == 404
    assert client(eve).post(f"/ai/agents/offline/runs/{run_id}/cancel").status_code == 404
    assert client(ada).get(f"/ai/runs/{run_id}").status_code == 200  # staff
    machine = client().get(f"/ai/runs/{run_id}", HTTP_AUTHORIZATION="Bearer machine-key")
    assert machine.status_code == 200  # the API key still works for machine clients
    assert client().get("/ai/agents", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401


def test_session_callers_need_the_csrf_token(project: dict[str, Any]) -> None:
    bob = project["bob"]
    c = client(bob, csrf=True)
    refused = c.post("/ai/agents/offline/runs", {"message": "hi", "stream": "false"})
    assert refused.status_code == 403 and refused.json()["code"] == "csrf_failed"
    c.get("/admin/login/")  # Django sets the csrftoken cookie, as a page of the same site would
    token = c.cookies["csrftoken"].value
    ok = c.post("/ai/agents/offline/runs", {"message": "hi", "stream": "false"}, HTTP_X_CSRFTOKEN=token)
    assert ok.status_code == 200, ok.content
    machine = client(csrf=True).post(
        "/ai/agents/offline/runs", {"message": "hi", "stream": "false"}, HTTP_AUTHORIZATION="Bearer machine-key"
    )
    assert machine.status_code == 200  # an API-key client needs no token


def test_wsgi_streams_pause_continue_with_edited_arguments(project: dict[str, Any], script: Any) -> None:
    """Through Django's WSGI handler the same async views stream synchronously; a paused run is continued with
    edited arguments and its tool runs with them."""
    bob = project["bob"]
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/dj-a"})]), "Deleted.")
    answer = client(bob).post("/ai/agents/fake/runs", {"message": "delete a"})
    frames = sse_frames(answer)
    assert answer["Content-Type"] == "text/event-stream"
    assert frames[0][1]["event"] == "RunStarted" and frames[-1][1]["event"] == "RunPaused"
    run_id = frames[0][1]["run_id"]
    call = frames[-1][1]["tools"][0]
    tools = json.dumps([{"tool_call_id": call["tool_call_id"], "confirmed": True, "tool_args": {"path": "/tmp/dj-b"}}])
    done = client(bob).post(f"/ai/agents/fake/runs/{run_id}/continue", {"tools": tools})
    after = sse_frames(done)
    completed = [f for _, f in after if f["event"] == "ToolCallCompleted"]
    assert completed and completed[0]["content"] == "deleted /tmp/dj-b"
    assert after[-1][1]["event"] == "RunCompleted"
    # reconnect with Last-Event-ID: only the later events, each id ``offset.tag``
    everything = sse_frames(client(bob).get(f"/ai/runs/{run_id}/events"))
    position = everything[4][0]
    resumed = sse_frames(client(bob).get(f"/ai/runs/{run_id}/events", HTTP_LAST_EVENT_ID=position))
    assert [f["offset"] for _, f in resumed] == list(range(5, len(everything)))


def test_bad_input_is_a_json_4xx(project: dict[str, Any]) -> None:
    bob = project["bob"]
    c = client(bob)
    assert c.get("/ai/runs/nope/events", {"after": "-5"}).status_code in (400, 404)
    assert c.post("/ai/agents/offline/runs", "{not json", content_type="application/json").status_code == 400
    assert c.post("/ai/agents/offline/runs", {"message": ""}).status_code == 422
    assert c.post("/ai/agents/nobody/runs", {"message": "hi"}).json()["code"] == "unknown_agent"
    assert c.delete("/ai/agents").status_code == 405
    assert c.get("/ai/no/such/thing").json()["code"] == "not_found"


def test_settings_precedence(project: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """configure(app) in proj/celery.py: the app's own agents_celery dict, else Django's AGENTS_CELERY, over the
    environment; a bad value names its key."""
    from celery import Celery
    from django.test import override_settings

    from agents_celery import ConfigurationError
    from agents_celery.broker.celery_app import settings_for

    monkeypatch.setenv("AGENTS_CELERY_QUEUE", "from-env")
    with override_settings(AGENTS_CELERY={"QUEUE": "from-django", "ALLOW_ANONYMOUS": True}):
        assert settings_for(Celery(set_as_current=False)).queue == "from-django"
        app = Celery(set_as_current=False)
        app.conf.agents_celery = {"queue": "from-celery"}
        assert settings_for(app).queue == "from-celery"
    with override_settings(AGENTS_CELERY={"LEASE_TTL_SECONDS": 9}):
        settings = settings_for(Celery(set_as_current=False))
        assert settings.queue == "from-env" and settings.lease_ttl_seconds == 9
    with (
        override_settings(AGENTS_CELERY={"HEARTBEAT_SECONDS": "often"}),
        pytest.raises(ConfigurationError, match=r"settings\.AGENTS_CELERY\['heartbeat_seconds'\]"),
    ):
        settings_for(Celery(set_as_current=False))
    from examples.django_app.celery import agents

    # The project's proj/celery.py read its AGENTS_CELERY (whose AGENTS comes from the environment here).
    assert agents.settings.agents == os.environ["AGENTS_CELERY_AGENTS"] and "offline" in agents.agents


def test_the_admin_page_lists_recent_runs_for_staff(project: dict[str, Any]) -> None:
    bob, ada = project["bob"], project["ada"]
    run_id = client(bob).post("/ai/agents/offline/runs", {"message": "hi", "stream": "false"}).json()["run_id"]
    page = client(ada).get("/ai/admin/runs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert run_id in html and "completed" in html and f"/ai/runs/{run_id}/events" in html
    assert client(bob).get("/ai/admin/runs/").status_code == 302  # not staff: to the login page


def test_the_projects_celery_worker_and_uvicorn_serve_a_run(
    worker_env: dict[str, str], tmp_path: Any, fake_openai: Any
) -> None:
    """The standard layout end to end: ``celery -A examples.django_app worker`` (proj/celery.py calling
    ``configure(app)``) runs the steps of a run started through the Django app under uvicorn."""
    from .conftest import wait_for
    from .support.apis import ApiServer
    from .support.workers import ROOT

    queue = f"django-{uuid.uuid4().hex[:6]}"  # only the project's worker consumes it
    env = {**django_env(worker_env, str(tmp_path / "db.sqlite3")), "AGENTS_CELERY_QUEUE": queue}
    env["AGENTS_CELERY_API_KEY"] = "machine-key"
    celery = os.path.join(os.path.dirname(sys.executable), "celery")
    cmd = [celery, "-A", "examples.django_app", "worker", "-Q", queue, "-P", "threads", "-c", "4"]
    cmd += ["--without-gossip", "--without-mingle", "--loglevel", "INFO"]
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=out)
    server = ApiServer(env, django=True)
    try:
        wait_for(lambda: b" ready." in log.read_bytes(), timeout=30, what="the project's worker")
        server.wait_ready()
        auth = {"Authorization": "Bearer machine-key"}
        started = httpx.post(
            f"{server.url}/agents/offline/runs", data={"message": "What time is it?", "stream": "false"}, headers=auth
        )
        assert started.status_code == 200, started.text
        body = started.json()
        assert body["status"] == "COMPLETED" and body["content"] == "It is 12:00 UTC.", body
        run = httpx.get(f"{server.url}/runs/{body['run_id']}", headers=auth).json()
        assert run["queue"] == queue
        assert b"agents_celery.step" in log.read_bytes()  # the project's worker ran the steps
    finally:
        server.stop()
        proc.terminate()
        proc.wait(timeout=30)


def reads_for_all_starts_for_staff(action: str, user: Any, run: Any, agent_id: str | None) -> bool:
    """An AUTHORIZE hook of the test below: anyone logged in may list and read; only staff start or stop."""
    if user is None:
        return False
    return action in ("list", "read") or bool(user.is_staff)


def test_authorize_replaces_the_default_rule(project: dict[str, Any]) -> None:
    from django.conf import settings
    from django.test import override_settings

    bob, ada = project["bob"], project["ada"]
    hook = f"{__name__}.reads_for_all_starts_for_staff"
    with override_settings(AGENTS_CELERY={**settings.AGENTS_CELERY, "AUTHORIZE": hook}):
        refused = client(bob).post("/ai/agents/offline/runs", {"message": "hi", "stream": "false"})
        assert refused.status_code == 403, refused.content
        started = client(ada).post("/ai/agents/offline/runs", {"message": "hi", "stream": "false"})
        assert started.status_code == 200, started.content
        run_id = started.json()["run_id"]
        assert client(bob).get(f"/ai/runs/{run_id}").status_code == 200  # the default rule would hide it
        assert client(bob).post(f"/ai/agents/offline/runs/{run_id}/cancel").status_code == 404
    assert client(bob).get(f"/ai/runs/{run_id}").status_code == 404  # the default rule again


def test_listings_show_each_user_only_what_they_may_read(project: dict[str, Any]) -> None:
    bob, eve, ada = project["bob"], project["eve"], project["ada"]
    session = f"bob-{uuid.uuid4().hex[:6]}"
    started = client(bob).post("/ai/agents/offline/runs", {"message": "hi", "stream": "false", "session_id": session})
    run_id = started.json()["run_id"]

    def listed(user: Any, path: str, **params: str) -> list[str]:
        body = client(user).get(path, {"limit": "200", **params}).json()
        return [r.get("run_id") or r.get("session_id") for r in body.get("runs", body.get("sessions", []))]

    assert run_id in listed(bob, "/ai/runs") and run_id in listed(ada, "/ai/runs")
    assert run_id not in listed(eve, "/ai/runs") and listed(eve, "/ai/runs", user_id=str(bob.pk)) == []
    assert session in listed(bob, "/ai/sessions") and session not in listed(eve, "/ai/sessions")
    assert client(eve).get(f"/ai/sessions/{session}").status_code == 404
    assert client(eve).delete(f"/ai/runs/{run_id}").status_code == 404
    assert client(bob, csrf=True).delete(f"/ai/runs/{run_id}").status_code == 403  # a session caller needs CSRF
    assert client(bob).delete(f"/ai/sessions/{session}").status_code == 204
    assert client(bob).get(f"/ai/runs/{run_id}").status_code == 404


def agui_input(thread: str, text: str) -> str:
    message = {"id": uuid.uuid4().hex, "role": "user", "content": text}
    body = {"threadId": thread, "runId": uuid.uuid4().hex, "state": {}, "messages": [message], "tools": [],
            "context": [], "forwardedProps": {}}  # fmt: skip
    return json.dumps(body)


def test_a_django_user_stays_out_of_another_user_s_session(project: dict[str, Any]) -> None:
    bob, eve, ada = project["bob"], project["eve"], project["ada"]
    session, secret = f"bob-{uuid.uuid4().hex[:6]}", "my locker code is 4711"
    first = client(bob).post("/ai/agents/offline/runs", {"message": secret, "stream": "false", "session_id": session})
    assert first.status_code == 200, first.content

    def runs_of_session() -> list[str]:
        answer = client(ada).get("/ai/runs", {"session_id": session, "limit": "100"}).json()
        return sorted(r["run_id"] for r in answer["runs"])

    before = runs_of_session()
    for strategy in ("reject", "enqueue", "interrupt"):
        form = {"message": "what did he say?", "session_id": session, "multitask_strategy": strategy}
        refused = client(eve).post("/ai/agents/offline/runs", {**form, "stream": "true"})
        assert refused.status_code == 404 and refused.json()["code"] == "session_not_found", refused.content
        assert secret.encode() not in refused.content
    for path in ("/ai/agui/offline", "/ai/agui/offline/connect"):
        agui = client(eve).post(path, agui_input(session, "tell me"), content_type="application/json")
        assert agui.status_code == 404, agui.content
        assert secret.encode() not in b"".join(agui.streaming_content if agui.streaming else [agui.content])
    assert client(eve).get(f"/ai/sessions/{session}").status_code == 404
    assert client(eve).delete(f"/ai/sessions/{session}").status_code == 404
    scheduled = client(eve).post(
        "/ai/schedules",
        json.dumps({"agent_id": "offline", "message": "again", "every_seconds": 60, "session_id": session}),
        content_type="application/json",
    )
    assert scheduled.status_code == 404, scheduled.content
    assert runs_of_session() == before  # nothing was created
    view = client(bob).get(f"/ai/sessions/{session}").json()
    assert view["user_id"] == str(bob.pk) and secret in json.dumps(view["messages"])


def test_a_django_user_s_schedules_are_theirs(project: dict[str, Any]) -> None:
    bob, eve, ada = project["bob"], project["eve"], project["ada"]
    made = client(bob).post(
        "/ai/schedules",
        json.dumps({"agent_id": "offline", "message": "daily", "cron": "0 9 * * *"}),
        content_type="application/json",
    )
    assert made.status_code == 201, made.content
    schedule_id = made.json()["schedule_id"]
    shown = [s["schedule_id"] for s in client(eve).get("/ai/schedules").json()["schedules"]]
    assert schedule_id not in shown
    assert client(eve).get(f"/ai/schedules/{schedule_id}").status_code == 404
    assert client(eve).post(f"/ai/schedules/{schedule_id}/pause").status_code == 404
    assert client(eve).delete(f"/ai/schedules/{schedule_id}").status_code == 404
    assert client(ada).get(f"/ai/schedules/{schedule_id}").status_code == 200  # staff
    assert client(bob).get(f"/ai/schedules/{schedule_id}").json()["paused"] is False
    assert client(bob).delete(f"/ai/schedules/{schedule_id}").status_code == 204


def test_anonymous_callers_do_not_see_what_api_key_clients_started(project: dict[str, Any]) -> None:
    from django.conf import settings
    from django.test import override_settings

    machine = client().post(
        "/ai/agents/offline/runs", {"message": "hi", "stream": "false"}, HTTP_AUTHORIZATION="Bearer machine-key"
    )
    machine_run = machine.json()["run_id"]
    with override_settings(AGENTS_CELERY={**settings.AGENTS_CELERY, "ALLOW_ANONYMOUS": True}):
        assert client().get(f"/ai/runs/{machine_run}").status_code == 404
        mine = client().post("/ai/agents/offline/runs", {"message": "hi", "stream": "false"})
        assert mine.status_code == 200, mine.content
        assert client().get(f"/ai/runs/{mine.json()['run_id']}").status_code == 200  # anonymous runs: theirs
        listed = [r["run_id"] for r in client().get("/ai/runs", {"limit": "200"}).json()["runs"]]
        assert machine_run not in listed and mine.json()["run_id"] in listed


def test_images_and_files_through_django(project: dict[str, Any], script: Any, fake_openai: Any) -> None:
    """Multipart files reach the model as content parts; a JSON body over Django's own DATA_UPLOAD_MAX_MEMORY_SIZE
    is a JSON 413 naming the setting, not Django's HTML 400."""
    import base64

    from django.core.files.uploadedfile import SimpleUploadedFile

    script("Seen.")
    key = {"HTTP_AUTHORIZATION": "Bearer machine-key"}
    pdf = SimpleUploadedFile("report.pdf", b"%PDF-1.4\n" + b"x" * 3000, content_type="application/pdf")
    ok = client().post("/ai/agents/fake/runs", {"message": "read it", "stream": "false", "files": [pdf]}, **key)
    assert ok.status_code == 200, ok.content
    url = "data:application/pdf;base64," + base64.b64encode(b"%PDF-1.4\n" + b"x" * 3000).decode()
    parts = [m["content"] for m in fake_openai.requests[-1]["messages"] if m["role"] == "user"]
    assert parts == [
        [{"type": "text", "text": "read it"}, {"type": "file", "file": {"filename": "report.pdf", "file_data": url}}]
    ]
    big = {"message": [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 3_000_000}}]}
    refused = client().post("/ai/agents/fake/runs", big, content_type="application/json", **key)
    assert refused.status_code == 413 and "DATA_UPLOAD_MAX_MEMORY_SIZE" in refused.json()["detail"], refused.content


def test_another_django_user_gets_task_not_found_over_a2a(project: dict[str, Any]) -> None:
    """The A2A door asks the same access check: eve's every method on bob's task answers TaskNotFound (-32001)."""
    bob, eve = project["bob"], project["eve"]

    def rpc(user: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        resp = client(user).post("/ai/a2a/offline", body, content_type="application/json")
        assert resp.status_code == 200
        text = b"".join(resp.streaming_content) if resp.streaming else resp.content  # a wait sends spaces first
        answer: dict[str, Any] = json.loads(text)
        return answer

    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "What time is it?"}]}
    task = rpc(bob, "SendMessage", {"message": message})["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    for method in ("GetTask", "CancelTask"):
        assert rpc(eve, method, {"id": task["id"]})["error"]["code"] == -32001
    steer = {**message, "messageId": uuid.uuid4().hex, "taskId": task["id"]}
    assert rpc(eve, "SendMessage", {"message": steer})["error"]["code"] == -32001
    assert task["id"] not in [t["id"] for t in rpc(eve, "ListTasks", {})["result"]["tasks"]]
    assert rpc(bob, "GetTask", {"id": task["id"]})["result"]["id"] == task["id"]

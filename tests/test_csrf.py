"""CSRF in the Flask front end, set up as the README does (cookie login, ``init_app(user_id=..., authorize=...)``):
a page of another site cannot make a logged-in browser approve a paused run; this site's pages, API-key clients
and cookie-less callers go on as before."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask, request

from agents_celery import Runtime, ScriptedToolCall, ScriptedTurn
from agents_celery.contrib.flask import close_app, init_app, make_blueprint
from agents_celery.contrib.flask.csrf import refusal

from .conftest import TEST_REDIS_URL

pytestmark = pytest.mark.timeout(90)

FORM = "application/x-www-form-urlencoded"
SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin", "Origin": "http://localhost"}
#: What a browser sends with a <form method=post action="http://localhost/ai/..."> on another site.
FORGERIES = {
    "another site": {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
    "a sibling subdomain": {"Origin": "http://evil.localhost", "Sec-Fetch-Site": "same-site"},
    "an opaque origin": {"Origin": "null"},
    "an older browser": {"Origin": "https://evil.example"},
    "no proof at all": {},
}


def authorize(action: str, user: str | None, resource: Any, agent_id: str | None) -> bool:
    """The README's rule."""
    return user is not None and (resource is None or resource.user_id == user)


def host_app(settings: Any, **options: Any) -> Flask:
    app = Flask("host")
    init_app(
        app,
        Runtime(settings=settings),
        user_id=lambda: request.cookies.get("login"),  # the host's cookie login, as a test stands for it
        authorize=authorize,  # type: ignore[arg-type]
        **options,
    )
    app.register_blueprint(make_blueprint(), url_prefix="/ai")
    return app


@pytest.fixture
def app(fast_settings: Any, worker: Any) -> Iterator[Flask]:
    app = host_app(fast_settings, trusted_origins=["https://app.example.com"])
    yield app
    close_app(app)


@pytest.fixture
def r() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(TEST_REDIS_URL)
    yield client
    client.close()


def paused_run(client: Any, script: Any) -> tuple[str, str]:
    """A run of the logged-in user paused on a call of delete_file (a path of its own); (run id, path)."""
    path = f"/tmp/{uuid.uuid4().hex}"
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": path})]), "Deleted.")
    started = client.post("/ai/agents/fake/runs", data={"message": "delete it", "stream": "false"}, headers=SAME_ORIGIN)
    assert started.status_code == 200 and started.json["status"] == "PAUSED", started.text
    return started.json["run_id"], path


def runs_of_tool(r: redis.Redis, worker_env: dict[str, str], path: str) -> int:
    return int(r.get(f"{worker_env['AGENTS_CELERY_KEY_PREFIX']}:test:count:delete_file:{path}") or 0)


def test_a_cross_site_form_post_cannot_approve_a_paused_run(
    app: Flask, script: Any, r: redis.Redis, worker_env: dict[str, str]
) -> None:
    client = app.test_client()
    client.set_cookie("login", "bob")
    run_id, path = paused_run(client, script)
    for what, headers in FORGERIES.items():  # no body: "approve every pending call", were it accepted
        forged = client.post(f"/ai/agents/fake/runs/{run_id}/continue", data="", content_type=FORM, headers=headers)
        assert forged.status_code == 403, (what, forged.text)
        assert forged.json["code"] == "csrf_failed" and "cross-site request refused" in forged.json["detail"]
    forged_stop = client.post(f"/ai/agents/fake/runs/{run_id}/cancel", headers=FORGERIES["another site"])
    forged_delete = client.delete(f"/ai/runs/{run_id}", headers=FORGERIES["another site"])
    assert forged_stop.status_code == forged_delete.status_code == 403
    state = client.get(f"/ai/runs/{run_id}")  # reading needs no proof
    assert state.status_code == 200 and state.json["status"] == "paused"
    assert [p["name"] for p in state.json["pending"]] == ["delete_file"]
    log = client.get(f"/ai/runs/{run_id}/events", query_string={"until": "pause"}).text
    assert "TOOL_CALL_RESULT" not in log and "Deleted." not in log
    assert runs_of_tool(r, worker_env, path) == 0
    approved = client.post(  # the site's own page (what the browser sends with a same-origin fetch)
        f"/ai/agents/fake/runs/{run_id}/continue", data={"stream": "false"}, content_type=FORM, headers=SAME_ORIGIN
    )
    assert approved.status_code == 200 and approved.json["status"] == "COMPLETED", approved.text
    assert runs_of_tool(r, worker_env, path) == 1


@pytest.mark.parametrize(
    "proof",
    [
        {"Sec-Fetch-Site": "same-origin"},
        {"Sec-Fetch-Site": "none"},  # typed in the address bar
        {"Origin": "http://localhost"},  # a browser without Sec-Fetch-* (plain http off localhost)
        {"Origin": "https://app.example.com", "Sec-Fetch-Site": "cross-site"},  # trusted_origins
    ],
)
def test_the_site_s_own_pages_may_post_with_the_cookie(app: Flask, script: Any, proof: dict[str, str]) -> None:
    client = app.test_client()
    client.set_cookie("login", "bob")
    run_id, _ = paused_run(client, script)
    answer = client.post(f"/ai/agents/fake/runs/{run_id}/continue", json={"stream": False}, headers=proof)
    assert answer.status_code == 200 and answer.json["status"] == "COMPLETED", answer.text


def test_api_key_clients_and_cookie_less_callers_need_no_proof(fast_settings: Any, worker: Any, script: Any) -> None:
    keyed = host_app(fast_settings.model_copy(update={"api_key": "machine-key"}))
    open_app = host_app(fast_settings, csrf_header="X-Requested-With")
    try:
        bearer = {"Authorization": "Bearer machine-key", **FORGERIES["another site"]}
        client = keyed.test_client()
        client.set_cookie("login", "bob")  # a cookie of the site does not matter next to the key
        script("Hello.")
        started = client.post("/ai/agents/fake/runs", data={"message": "hi", "stream": "false"}, headers=bearer)
        assert started.status_code == 200 and started.json["status"] == "COMPLETED", started.text
        plain = open_app.test_client()  # no cookie: a script, curl, the Python client
        anonymous = plain.post("/ai/agents/fake/runs", data={"message": "hi", "stream": "false"})
        assert anonymous.status_code == 403 and anonymous.json["code"] != "csrf_failed"  # the rule, not CSRF
        plain.set_cookie("login", "bob")
        run_id, _ = paused_run(plain, script)
        header = {"X-Requested-With": "XMLHttpRequest"}  # the host's token header
        answer = plain.post(f"/ai/agents/fake/runs/{run_id}/continue", json={"stream": False}, headers=header)
        assert answer.status_code == 200 and answer.json["status"] == "COMPLETED", answer.text
    finally:
        close_app(keyed)
        close_app(open_app)


def test_the_rule_by_itself() -> None:
    own = "http://api.example.com"
    cookie = {"cookie": "login=bob"}
    assert refusal("POST", {**cookie, "origin": "http://API.example.com/"}, own) is None
    assert refusal("POST", {**cookie, "authorization": "bearer k"}, own) is None
    assert refusal("GET", cookie, own) is None
    assert refusal("POST", {"origin": "https://evil.example"}, own) is None  # no cookie: nothing to forge with
    # ... unless the browser says another site sent it: a web page posting to an open API on this machine.
    assert refusal("POST", {"origin": "https://evil.example", "sec-fetch-site": "cross-site"}, own) is not None
    assert refusal("POST", {"sec-fetch-site": "same-site"}, own) is None
    assert refusal("POST", {"authorization": "Bearer k", "sec-fetch-site": "cross-site"}, own) is None
    assert refusal("POST", {**cookie, "origin": "https://api.example.com"}, own) is not None  # other scheme
    assert refusal("PATCH", {**cookie, "x-csrf": ""}, own, csrf_header="X-CSRF") is not None  # empty: not sent
    why = refusal("DELETE", {**cookie, "origin": "https://evil.example", "sec-fetch-site": "cross-site"}, own)
    assert why is not None and "'https://evil.example'" in why and "'cross-site'" in why

"""Errors on ``/v1`` in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, read with the official
``openai`` SDK (``e.message``, ``e.code``, ``e.param``), on the Flask blueprint (in a thread) and on the Django app
(under uvicorn); our other routes keep ``{"detail", "code"}``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from agents_celery import Runtime

from .test_responses import Server

pytestmark = pytest.mark.timeout(90)

KEY = "sk-test-key"


@pytest.fixture
def django_front(apis: Any) -> Any:
    """The session's shared Django front end asking the API key ``KEY``."""
    return apis.get("django", api_key=KEY)


@pytest.fixture(params=["flask", "django"])
def front(request: pytest.FixtureRequest, fast_settings: Any, worker: Any) -> Iterator[str]:
    """The root URL of one front end, asking the API key ``KEY``."""
    if request.param == "django":
        yield request.getfixturevalue("django_front").url
        return
    server = Server(Runtime(settings=fast_settings.model_copy(update={"api_key": KEY})))
    yield server.url
    server.close()


def openai_error(answer: httpx.Response) -> dict[str, Any]:
    """The error object of an answer, checked to be in OpenAI's shape (nothing else in the body)."""
    body = answer.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
    return dict(body["error"])


def test_the_sdk_reads_message_code_and_param(front: str) -> None:
    with openai.OpenAI(base_url=front + "/v1", api_key=KEY, max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as invalid:  # a body whose fields are invalid: 400, as OpenAI
            client.responses.create(model="fake", input="hi", background="often")  # type: ignore[arg-type]
        assert invalid.value.status_code == 400 and invalid.value.code == "invalid_body"
        assert invalid.value.type == "invalid_request_error" and invalid.value.param == "background"
        assert invalid.value.message.startswith("Error code: 400 - invalid request body: background:")
        with pytest.raises(openai.BadRequestError) as unsupported:
            client.responses.create(model="fake", input="hi", tools=[{"type": "web_search"}])  # type: ignore[list-item]
        assert unsupported.value.code == "unsupported" and "web_search" in unsupported.value.message
        with pytest.raises(openai.NotFoundError) as missing:
            client.responses.retrieve("resp_" + "0" * 32 + "_0")
        assert missing.value.code == "response_not_found" and "does not exist" in missing.value.message
        not_a_schema = {"type": "json_schema", "name": "x", "schema": {"type": "no-such-type"}}
        with pytest.raises(openai.BadRequestError) as schema:  # ours is a 422: /v1 answers 400
            client.responses.create(model="fake", input="hi", text={"format": not_a_schema})  # type: ignore[typeddict-item]
        assert schema.value.code == "invalid_output_schema"
    with openai.OpenAI(base_url=front + "/v1", api_key="sk-wrong", max_retries=0) as stranger:
        with pytest.raises(openai.AuthenticationError) as refused:
            stranger.models.list()
        assert refused.value.code == "unauthorized" and "API key" in refused.value.message


def test_every_error_under_v1_has_openai_s_shape_and_the_others_keep_ours(front: str) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=front, headers=auth, timeout=30) as http:
        not_json = http.post("/v1/responses", content=b"{not json", headers={"Content-Type": "application/json"})
        assert not_json.status_code == 400 and openai_error(not_json)["code"] == "bad_request"
        missing = http.post("/v1/responses", json={"model": "fake"})
        assert missing.status_code == 400 and openai_error(missing)["param"] == "input"
        assert openai_error(http.get("/v1/models/no-such-agent"))["code"] == "unknown_agent"
        unauthorized = httpx.get(front + "/v1/models", headers={"Authorization": "Bearer sk-wrong"}, timeout=30)
        assert unauthorized.status_code == 401 and openai_error(unauthorized)["code"] == "unauthorized"
        assert unauthorized.headers["WWW-Authenticate"] == "Bearer"
        ours = http.get("/runs/no-such-run")
        assert ours.status_code == 404 and set(ours.json()) == {"detail", "code"}
        assert http.post("/agents/fake/runs", json={"stream": "sometimes"}).status_code == 422  # ours stays 422


def test_unknown_paths_and_methods_under_v1(django_front: Any, fast_settings: Any) -> None:
    """What no route takes: the Django app's own 404 and 405, and the standalone Flask app's (``create_app``; a host
    app's Flask answers its own pages for paths that are not its routes)."""
    from agents_celery.contrib.flask import close_app, create_app

    app = create_app(Runtime(settings=fast_settings))
    try:
        flask = app.test_client()
        answers = [flask.put("/v1/responses"), flask.get("/v1/no-such-route")]
        flask_errors = [(a.status_code, a.get_json()) for a in answers]
    finally:
        close_app(app)
    auth = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=django_front.url, headers=auth, timeout=30) as http:
        answers_ = [http.put("/v1/responses"), http.get("/v1/no-such-route")]
        django_errors = [(a.status_code, a.json()) for a in answers_]
        assert set(http.get("/no-such-route").json()) == {"detail", "code"}
    for errors in (flask_errors, django_errors):
        assert [(status, body["error"]["code"]) for status, body in errors] == [
            (405, "method_not_allowed"),
            (404, "not_found"),
        ], errors
        assert all(set(body) == {"error"} and body["error"]["type"] == "invalid_request_error" for _, body in errors)


def test_the_openapi_document_says_which_shape() -> None:
    from agents_celery.http.openapi import spec

    document = spec()
    create = document["paths"]["/v1/responses"]["post"]["responses"]
    ours = document["paths"]["/runs/{run_id}"]["get"]["responses"]
    assert create["400"]["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/OpenAIError"
    assert "422" not in create
    assert ours["404"]["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/Error"
    assert "OpenAIError" in document["components"]["schemas"]

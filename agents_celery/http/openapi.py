"""The OpenAPI 3.1 description of the API (``GET /openapi.json``): its paths from the route table
(:mod:`.routes`), its bodies from the body models (:mod:`.bodies`); ``/health`` and this document are written here."""

from __future__ import annotations

from typing import Any

import ag_ui.core as agui
from pydantic import BaseModel

from .. import __version__
from ..runs import RunStatus
from ..storage.index import MAX_LIMIT
from .bodies import ContinueBody, MessageBody, ResumeBody, RunBody, ScheduleBody
from .routes import COMMON_ERRORS, ROUTES, Route, paths, template

_ERROR = {
    "type": "object",
    "properties": {"detail": {"type": "string"}, "code": {"type": "string"}},
    "required": ["detail", "code"],
}
#: The errors of the ``/v1`` routes, in OpenAI's shape (docs/responses.md, "Errors").
_OPENAI_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": "string"},
            },
            "required": ["message", "type", "param", "code"],
        }
    },
    "required": ["error"],
}
_SSE = {"text/event-stream": {"schema": {"type": "string"}}}
_JSON_OBJECT = {"application/json": {"schema": {"type": "object"}}}
_JSON_ANY: dict[str, Any] = {"application/json": {"schema": {}}}
_BYTES = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
_REASONS = {
    "400": "malformed request",
    "401": "missing or wrong API key",
    "404": "unknown agent, run or session",
    "409": "the run (or session) is not in a state that allows this",
    "410": "the run expired",
    "422": "invalid fields",
    "413": "the body, a part or the input is too large",
    "503": "Redis does not answer",
}


def _errors(*codes: int, openai: bool = False) -> dict[str, Any]:
    name = "OpenAIError" if openai else "Error"
    ref = {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}
    return {str(c): {"description": _REASONS[str(c)], "content": ref} for c in (*COMMON_ERRORS, *codes)}


def _query(name: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema or {"type": "string"}}


def _form_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The form variant of a JSON body schema: ``tools`` is a JSON string there."""
    props = dict(schema.get("properties", {}))
    if "tools" in props:
        props["tools"] = {"type": "string", "description": "JSON list of tool objects"}
    if schema.get("title") in (
        "RunBody",
        "MessageBody",
    ):  # images and files, as Agno's AgentOS takes them (docs/input.md)
        props["message"] = {"type": "string"}
        props["files"] = {"type": "array", "items": {"type": "string", "format": "binary"}}
    return {**schema, "properties": props}


def _body(model: type[BaseModel]) -> dict[str, Any]:
    """A route's request body: JSON or a form for ours, JSON for AG-UI's RunAgentInput."""
    name = model.__name__
    required = any(field.is_required() for field in model.model_fields.values())
    content: dict[str, Any] = {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}
    if model in _FORM_BODIES:
        form = {"schema": {"$ref": f"#/components/schemas/{name}Form"}}
        content.update({"application/x-www-form-urlencoded": form, "multipart/form-data": form})
    return {"required": required, "content": content}


_FORM_BODIES = (RunBody, ContinueBody, ResumeBody, ScheduleBody, MessageBody)
_TYPES = {"str": "string", "int": "integer"}

#: The query and header parameters of the routes that take some (by route name).
_PAGE = [
    _query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
    _query("cursor", {"type": "string", "description": "next_cursor of the previous page"}),
]
_INPUTS: dict[str, list[dict[str, Any]]] = {
    "create_run": [{"name": "Idempotency-Key", "in": "header", "required": False, "schema": {"type": "string"}}],
    "list_runs": [
        _query("status", {"enum": [s.value for s in RunStatus]}),
        _query("agent_id"),
        _query("session_id"),
        _query("user_id"),
    ],
    "list_sessions": [_query("user_id")],
    "run_events": [
        {"name": "after", "in": "query", "required": False, "schema": {"type": "integer", "minimum": -1}},
        {"name": "format", "in": "query", "required": False, "schema": {"enum": ["canonical", "agui"]}},
        {"name": "until", "in": "query", "required": False, "schema": {"enum": ["pause", "end"]}},
        {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "integer", "minimum": -1}},
    ],
    "agui_connect": [{"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"}}],
    "create_response": [{"name": "Idempotency-Key", "in": "header", "required": False, "schema": {"type": "string"}}],
    "get_response": [
        _query("stream", {"type": "boolean", "description": "SSE of the response's events"}),
        _query("starting_after", {"type": "integer", "minimum": 0, "description": "the last sequence number seen"}),
    ],
    "response_input_items": [_query("order", {"enum": ["asc", "desc"]})],
    "conversation_items": [
        _query("order", {"enum": ["asc", "desc"]}),
        _query("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
        _query("after", {"type": "string", "description": "an item id: the items after it"}),
        _query("before", {"type": "string", "description": "an item id: the items before it"}),
    ],
}
assert set(_INPUTS) <= {r.name for r in ROUTES}, "parameters of a route the table does not have"


def _answers(route: Route) -> dict[str, Any]:
    """The success answers of a route, by what it answers."""
    if route.answer == "wait":
        return {
            "200": {"description": "SSE (stream=true) or the run as JSON", "content": {**_SSE, **_JSON_OBJECT}},
            "202": {"description": "background=true: accepted", "content": _JSON_OBJECT},
        }
    if route.status == 204:
        return {"204": {"description": route.returns}}
    content = {"sse": _SSE, "list": _JSON_ANY, "bytes": _BYTES}.get(route.answer, _JSON_OBJECT)
    ok = {str(route.status): {"description": route.returns, "content": content}}
    if route.name == "run_events":  # an EventSource stops reconnecting on a 204
        ok["204"] = {"description": "nothing more will come"}
    return ok


def _operation(route: Route) -> dict[str, Any]:
    errors = _errors(*route.errors, openai=route.openai)
    op: dict[str, Any] = {"summary": route.summary, "responses": {**_answers(route), **errors}}
    if route.body is not None:
        op["requestBody"] = _body(route.body)
    inputs = _INPUTS.get(route.name, []) + (_PAGE if route.answer == "page" else [])
    if inputs:
        op["parameters"] = inputs
    return op


def _openapi_path(path: str) -> str:
    return template(path, lambda name, kind: "{" + name + "}")


def _paths() -> dict[str, Any]:
    found: dict[str, Any] = {
        "/health": {  # special: no API key
            "get": {
                "summary": "Redis reachable?",
                "responses": {
                    "200": {"description": "ok", "content": _JSON_OBJECT},
                    "503": {"description": "Redis down", "content": _JSON_OBJECT},
                },
                "security": [],
            }
        },
        "/openapi.json": {"get": _op("this document", {"200": {"description": "spec", "content": _JSON_OBJECT}})},
    }
    for path, routes in paths().items():
        item: dict[str, Any] = {r.method.lower(): _operation(r) for r in routes}
        params = routes[0].params
        if params:
            item["parameters"] = [
                {"name": n, "in": "path", "required": True, "schema": {"type": _TYPES[kind]}} for n, kind in params
            ]
        found[_openapi_path(path)] = item
    return found


def _op(summary: str, ok: dict[str, Any], *errors: int) -> dict[str, Any]:
    return {"summary": summary, "responses": {**ok, **_errors(*errors)}}


def spec(prefix: str = "") -> dict[str, Any]:
    """The OpenAPI document; ``prefix`` is where the blueprint is mounted."""
    schemas: dict[str, Any] = {"Error": _ERROR, "OpenAIError": _OPENAI_ERROR}
    for model in _FORM_BODIES:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in schema.pop("$defs", {}).items():
            schemas[name] = sub
        schemas[model.__name__] = schema
        schemas[f"{model.__name__}Form"] = _form_schema(schema)
    agui_input = agui.RunAgentInput.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
    schemas.update(agui_input.pop("$defs", {}))
    schemas["RunAgentInput"] = agui_input
    for body in {route.body for route in ROUTES if route.body is not None} - {*_FORM_BODIES, agui.RunAgentInput}:
        schema = body.model_json_schema(ref_template="#/components/schemas/{model}")  # the JSON-only bodies (/v1)
        schemas.update(schema.pop("$defs", {}))
        schemas[body.__name__] = schema
    return {
        "openapi": "3.1.0",
        "info": {"title": "agents-celery", "version": __version__, "description": "Durable AI-agent runs."},
        "servers": [{"url": prefix or "/"}],
        "paths": _paths(),
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }

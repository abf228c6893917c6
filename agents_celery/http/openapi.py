"""The OpenAPI 3.1 description of the API (``GET /openapi.json``), written out by hand from the body models."""

from __future__ import annotations

from typing import Any

import ag_ui.core as agui

from .. import __version__
from ..runs import RunStatus
from ..storage.index import MAX_LIMIT
from .bodies import ContinueBody, MessageBody, ResumeBody, RunBody, ScheduleBody

_ERROR = {
    "type": "object",
    "properties": {"detail": {"type": "string"}, "code": {"type": "string"}},
    "required": ["detail", "code"],
}
_SSE = {"text/event-stream": {"schema": {"type": "string"}}}
_JSON_OBJECT = {"application/json": {"schema": {"type": "object"}}}
_JSON_ANY: dict[str, Any] = {"application/json": {"schema": {}}}
_REASONS = {
    "400": "malformed request",
    "401": "missing or wrong API key",
    "404": "unknown agent, run or session",
    "409": "the run (or session) is not in a state that allows this",
    "410": "the run expired",
    "422": "invalid fields",
    "503": "Redis does not answer",
}


def _errors(*codes: str) -> dict[str, Any]:
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    return {c: {"description": _REASONS[c], "content": ref} for c in ("401", "503", *codes)}


def _path(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}} for n in names]


def _query(name: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema or {"type": "string"}}


def _form_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The form variant of a JSON body schema: ``tools`` is a JSON string there."""
    props = dict(schema.get("properties", {}))
    if "tools" in props:
        props["tools"] = {"type": "string", "description": "JSON list of tool objects"}
    return {**schema, "properties": props}


def _body(name: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{name}"}
    form = {"$ref": f"#/components/schemas/{name}Form"}
    return {
        "required": name != "ResumeBody" and name != "ContinueBody",
        "content": {
            "application/json": {"schema": ref},
            "application/x-www-form-urlencoded": {"schema": form},
            "multipart/form-data": {"schema": form},
        },
    }


def _agui_body() -> dict[str, Any]:
    return {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RunAgentInput"}}},
    }


def _op(summary: str, ok: dict[str, Any], *errors: str, **extra: Any) -> dict[str, Any]:
    return {"summary": summary, "responses": {**ok, **_errors(*errors)}, **extra}


def _paths() -> dict[str, Any]:
    run = _path("agent_id", "run_id")
    stream_or_json = {
        "200": {"description": "SSE (stream=true) or the run as JSON", "content": {**_SSE, **_JSON_OBJECT}},
        "202": {"description": "background=true: accepted", "content": _JSON_OBJECT},
    }
    idem = {"name": "Idempotency-Key", "in": "header", "required": False, "schema": {"type": "string"}}
    events_params = [
        {"name": "after", "in": "query", "required": False, "schema": {"type": "integer", "minimum": -1}},
        {"name": "format", "in": "query", "required": False, "schema": {"enum": ["canonical", "agui"]}},
        {"name": "until", "in": "query", "required": False, "schema": {"enum": ["pause", "end"]}},
        {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "integer", "minimum": -1}},
    ]
    page_params = [
        _query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
        _query("cursor", {"type": "string", "description": "next_cursor of the previous page"}),
    ]
    return {
        "/health": {
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
        "/agents": {"get": _op("agent manifests", {"200": {"description": "list", "content": _JSON_ANY}})},
        "/agents/{agent_id}": {
            "get": _op("one agent", {"200": {"description": "manifest", "content": _JSON_OBJECT}}, "404"),
            "parameters": _path("agent_id"),
        },
        "/agents/{agent_id}/runs": {
            "post": _op(
                "start a run",
                stream_or_json,
                "400",
                "404",
                "409",
                "422",
                requestBody=_body("RunBody"),
                parameters=[idem],
            ),
            "parameters": _path("agent_id"),
        },
        "/agents/{agent_id}/runs/{run_id}/continue": {
            "post": _op(
                "answer a paused run",
                stream_or_json,
                "400",
                "404",
                "409",
                "410",
                "422",
                requestBody=_body("ContinueBody"),
            ),
            "parameters": run,
        },
        "/agents/{agent_id}/runs/{run_id}/resume": {
            "post": _op(
                "reconnect to a run's events",
                {"200": {"description": "SSE", "content": _SSE}},
                "400",
                "404",
                "410",
                "422",
                requestBody=_body("ResumeBody"),
            ),
            "parameters": run,
        },
        "/agents/{agent_id}/runs/{run_id}/cancel": {
            "post": _op(
                "stop a run", {"200": {"description": "stopping", "content": _JSON_OBJECT}}, "404", "409", "410"
            ),
            "parameters": run,
        },
        "/agents/{agent_id}/runs/{run_id}/stop": {
            "post": _op(
                "alias of cancel", {"200": {"description": "stopping", "content": _JSON_OBJECT}}, "404", "409", "410"
            ),
            "parameters": run,
        },
        "/runs": {
            "get": _op(
                "runs, newest first: {runs, next_cursor}",
                {"200": {"description": "a page of runs", "content": _JSON_OBJECT}},
                "400",
                parameters=[
                    _query("status", {"enum": [s.value for s in RunStatus]}),
                    _query("agent_id"),
                    _query("session_id"),
                    _query("user_id"),
                    *page_params,
                ],
            )
        },
        "/runs/{run_id}": {
            "get": _op("run state", {"200": {"description": "state", "content": _JSON_OBJECT}}, "404", "410"),
            "delete": _op("delete an ended run", {"204": {"description": "deleted"}}, "404", "409", "410"),
            "parameters": _path("run_id"),
        },
        "/sessions": {
            "get": _op(
                "sessions, most recently active first: {sessions, next_cursor}",
                {"200": {"description": "a page of sessions", "content": _JSON_OBJECT}},
                "400",
                parameters=[_query("user_id"), *page_params],
            )
        },
        "/sessions/{session_id}": {
            "get": _op(
                "a session: its conversation and runs",
                {"200": {"description": "session", "content": _JSON_OBJECT}},
                "404",
            ),
            "delete": _op("delete a session and its runs", {"204": {"description": "deleted"}}, "404", "409"),
            "parameters": _path("session_id"),
        },
        "/runs/{run_id}/messages": {
            "post": _op(
                "steer a live run: a user message taken in at its next model turn",
                {"202": {"description": "accepted", "content": _JSON_OBJECT}},
                "400",
                "404",
                "409",
                "410",
                "422",
                requestBody=_body("MessageBody"),
            ),
            "parameters": _path("run_id"),
        },
        "/schedules": {
            "post": _op(
                "schedule runs: cron (UTC) or every_seconds",
                {"201": {"description": "the schedule", "content": _JSON_OBJECT}},
                "400",
                "404",
                "422",
                requestBody=_body("ScheduleBody"),
            ),
            "get": _op("every schedule", {"200": {"description": "{schedules}", "content": _JSON_OBJECT}}),
        },
        "/schedules/{schedule_id}": {
            "get": _op("one schedule", {"200": {"description": "the schedule", "content": _JSON_OBJECT}}, "404"),
            "delete": _op("delete a schedule", {"204": {"description": "deleted"}}, "404"),
            "parameters": _path("schedule_id"),
        },
        "/schedules/{schedule_id}/pause": {
            "post": _op("pause a schedule", {"200": {"description": "the schedule", "content": _JSON_OBJECT}}, "404"),
            "parameters": _path("schedule_id"),
        },
        "/schedules/{schedule_id}/resume": {
            "post": _op("resume a schedule", {"200": {"description": "the schedule", "content": _JSON_OBJECT}}, "404"),
            "parameters": _path("schedule_id"),
        },
        "/agui/{agent_id}": {
            "post": _op(
                "run, resume or attach to a run in AG-UI's protocol (RunAgentInput in, AG-UI events out)",
                {"200": {"description": "AG-UI 1.0 events (SSE)", "content": _SSE}},
                "400",
                "404",
                "409",
                "422",
                requestBody=_agui_body(),
            ),
            "parameters": _path("agent_id"),
        },
        "/agui/{agent_id}/connect": {
            "post": _op(
                "attach to the thread's run where it stands (AG-UI events)",
                {"200": {"description": "AG-UI 1.0 events (SSE)", "content": _SSE}},
                "400",
                "404",
                "422",
                requestBody=_agui_body(),
                parameters=[{"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"}}],
            ),
            "parameters": _path("agent_id"),
        },
        "/runs/{run_id}/events": {
            "get": _op(
                "the run's events (SSE)",
                {"200": {"description": "SSE", "content": _SSE}, "204": {"description": "nothing more will come"}},
                "400",
                "404",
                "410",
                parameters=events_params,
            ),
            "parameters": _path("run_id"),
        },
    }


def spec(prefix: str = "") -> dict[str, Any]:
    """The OpenAPI document; ``prefix`` is where the blueprint is mounted."""
    schemas: dict[str, Any] = {"Error": _ERROR}
    for model in (RunBody, ContinueBody, ResumeBody, ScheduleBody, MessageBody):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in schema.pop("$defs", {}).items():
            schemas[name] = sub
        schemas[model.__name__] = schema
        schemas[f"{model.__name__}Form"] = _form_schema(schema)
    agui_input = agui.RunAgentInput.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
    schemas.update(agui_input.pop("$defs", {}))
    schemas["RunAgentInput"] = agui_input
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

"""The route table: every route of the HTTP API, written once.

Each :class:`Route` is one operation: a method and a path template, the :class:`~.protocol.API` method it calls
(with the request and the path's parameters, by name), its name (the Flask endpoint and, for the first route of
a path, the Django URL name), what it answers, a summary, and what OpenAPI says of it. Three readers:

- the Flask blueprint (:mod:`agents_celery.contrib.flask.routes`) registers one rule per route, one generic view;
- the Django URLconf (:mod:`agents_celery.contrib.django.urls`) makes one ``path()`` per path template, one
  generic async view that picks the route by method (405 with ``Allow`` for the others);
- the OpenAPI document (:mod:`.openapi`) takes its paths, methods, summaries and bodies from here.

A path template names its parameters in braces, typed: ``{run_id}`` is a string without ``/`` (``{n:int}`` an
integer); :func:`template` spells it the way a framework wants. :data:`SPECIAL` lists the few routes each front
end writes by hand beside the table (they ask no API key, or call no API method); ``tests/test_routes.py``
checks that the Flask ``url_map``, the Django ``urlpatterns`` and the OpenAPI ``paths`` are exactly these.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ag_ui.core import RunAgentInput
from pydantic import BaseModel

from .a2a.wire import RpcRequest
from .aisdk.input import ChatBody
from .bodies import (
    ContinueBody,
    ConversationBody,
    ConversationItemsBody,
    CreateBody,
    MessageBody,
    ResumeBody,
    RunBody,
    ScheduleBody,
    WorkflowContinueBody,
)

#: What a route answers: ``json`` (an object; a 204 has no body), ``list`` (a JSON array), ``page`` (a page of a
#: listing, ``{<items>, next_cursor}``, asked with ``limit`` and ``cursor``), ``sse`` (an event stream), ``wait``
#: (``stream=true``: SSE; ``background=true``: 202; otherwise the run's JSON once it ends or pauses), ``bytes``
#: (a body of its own media type).
Answer = Literal["json", "list", "page", "sse", "wait", "bytes"]

#: The error statuses every route may answer (besides its own): no or a wrong API key, Redis down.
COMMON_ERRORS = (401, 503)


@dataclass(frozen=True)
class Route:
    """One operation of the API (see the module docs)."""

    method: str
    path: str
    name: str
    answer: Answer
    summary: str
    #: The success status and what it carries.
    status: int = 200
    returns: str = ""
    #: The error statuses it answers besides :data:`COMMON_ERRORS`.
    errors: tuple[int, ...] = ()
    #: The body model it reads (a form or JSON; AG-UI's RunAgentInput: JSON only).
    body: type[BaseModel] | None = None
    #: What it calls: an :class:`~.protocol.API` method (the route's name, when not given), or a dialect
    #: endpoint's method as ``endpoint.method`` (``"responses.create"``: the API's ``responses`` endpoint).
    call: str = ""

    @property
    def openai(self) -> bool:
        """One of the OpenAI Responses API's routes (``/v1``): its errors take OpenAI's shape."""
        return self.path.startswith("/v1/")

    @property
    def target(self) -> str:
        return self.call or self.name

    @property
    def params(self) -> list[tuple[str, str]]:
        """The path's parameters: (name, type) in order."""
        return [(name, kind or "str") for name, kind in _PARAM.findall(self.path)]


@dataclass(frozen=True)
class Special:
    """A route a front end writes by hand, beside the table: ``open`` asks no API key, ``documented`` is in the
    OpenAPI document."""

    method: str
    path: str
    name: str
    why: str
    open: bool = False
    documented: bool = False


_PARAM = re.compile(r"\{(\w+)(?::(\w+))?\}")
_RUN = "/agents/{agent_id}/runs/{run_id}"
_WORKFLOW_RUN = "/workflows/{workflow_id}/runs/{run_id}"
_RESPONSE = "/v1/responses/{response_id}"
_CONVERSATION = "/v1/conversations/{conversation_id}"

ROUTES: tuple[Route, ...] = (
    Route("GET", "/agents", "list_agents", "list", "agent manifests", returns="list"),
    Route("GET", "/agents/{agent_id}", "get_agent", "json", "one agent", returns="manifest", errors=(404,)),
    Route(
        "POST",
        "/agents/{agent_id}/runs",
        "create_run",
        "wait",
        "start a run",
        errors=(400, 404, 409, 422),
        body=RunBody,
    ),
    Route(
        "POST",
        f"{_RUN}/continue",
        "continue_run",
        "wait",
        "answer a paused run",
        errors=(400, 404, 409, 410, 422),
        body=ContinueBody,
    ),
    Route(
        "POST",
        f"{_RUN}/resume",
        "resume_run",
        "sse",
        "reconnect to a run's events",
        returns="SSE",
        errors=(400, 404, 410, 422),
        body=ResumeBody,
    ),
    Route("POST", f"{_RUN}/cancel", "cancel_run", "json", "stop a run", returns="stopping", errors=(404, 409, 410)),
    Route(
        "POST",
        f"{_RUN}/stop",
        "stop_run",
        "json",
        "alias of cancel",
        returns="stopping",
        errors=(404, 409, 410),
        call="cancel_run",
    ),
    Route(
        "GET",
        "/runs",
        "list_runs",
        "page",
        "runs, newest first: {runs, next_cursor}",
        returns="a page of runs",
        errors=(400,),
    ),
    # -- AgentOS's workflows (http/agentos/workflows.py) --
    Route(
        "GET", "/workflows", "list_workflows", "list", "the workflows served", returns="list", call="workflows.index"
    ),
    Route(
        "GET",
        "/workflows/{workflow_id}",
        "get_workflow",
        "json",
        "one workflow and its steps",
        returns="workflow",
        errors=(404,),
        call="workflows.get",
    ),
    Route(
        "POST",
        "/workflows/{workflow_id}/runs",
        "create_workflow_run",
        "wait",
        "start a workflow run (AgentOS's workflow events with stream=true; its WorkflowRunOutput otherwise)",
        errors=(400, 404, 409, 422),
        body=RunBody,
        call="workflows.create",
    ),
    Route(
        "POST",
        f"{_WORKFLOW_RUN}/continue",
        "continue_workflow_run",
        "wait",
        "answer a paused workflow run (tools decisions, or AgentOS's step_requirements)",
        errors=(400, 404, 409, 410, 422),
        body=WorkflowContinueBody,
        call="workflows.continue_",
    ),
    Route(
        "POST",
        f"{_WORKFLOW_RUN}/cancel",
        "cancel_workflow_run",
        "json",
        "stop a workflow run (its running steps stop with it)",
        returns="stopping",
        errors=(404, 409, 410),
        call="workflows.cancel",
    ),
    Route("GET", "/runs/{run_id}", "get_run", "json", "run state", returns="state", errors=(404, 410)),
    Route(
        "GET",
        "/runs/{run_id}/input",
        "run_input",
        "json",
        "the run's user messages: text, images and files (as reference parts with the url of their bytes)",
        returns="{run_id, messages}",
        errors=(404, 410),
    ),
    Route(
        "GET",
        "/runs/{run_id}/parts/{n}",
        "run_part",
        "bytes",
        "the bytes of an image or file of the run's message",
        returns="the part's data, as its media type",
        errors=(404, 410),
    ),
    Route(
        "DELETE",
        "/runs/{run_id}",
        "delete_run",
        "json",
        "delete an ended run",
        status=204,
        returns="deleted",
        errors=(404, 409, 410),
    ),
    Route(
        "GET",
        "/runs/{run_id}/events",
        "run_events",
        "sse",
        "the run's events (SSE)",
        returns="SSE",
        errors=(400, 404, 410),
    ),
    Route(
        "POST",
        "/runs/{run_id}/messages",
        "send_message",
        "json",
        "steer a live run: a user message taken in at its next model turn",
        status=202,
        returns="accepted",
        errors=(400, 404, 409, 410, 422),
        body=MessageBody,
    ),
    Route(
        "GET",
        "/sessions",
        "list_sessions",
        "page",
        "sessions, most recently active first: {sessions, next_cursor}",
        returns="a page of sessions",
        errors=(400,),
    ),
    Route(
        "GET",
        "/sessions/{session_id}",
        "get_session",
        "json",
        "a session: its conversation and runs",
        returns="session",
        errors=(404,),
    ),
    Route(
        "DELETE",
        "/sessions/{session_id}",
        "delete_session",
        "json",
        "delete a session and its runs",
        status=204,
        returns="deleted",
        errors=(404, 409),
    ),
    Route("GET", "/schedules", "list_schedules", "json", "every schedule", returns="{schedules}"),
    Route(
        "POST",
        "/schedules",
        "create_schedule",
        "json",
        "schedule runs: cron (UTC) or every_seconds",
        status=201,
        returns="the schedule",
        errors=(400, 404, 422),
        body=ScheduleBody,
    ),
    Route(
        "GET", "/schedules/{schedule_id}", "get_schedule", "json", "one schedule", returns="the schedule", errors=(404,)
    ),
    Route(
        "DELETE",
        "/schedules/{schedule_id}",
        "delete_schedule",
        "json",
        "delete a schedule",
        status=204,
        returns="deleted",
        errors=(404,),
    ),
    Route(
        "POST",
        "/schedules/{schedule_id}/pause",
        "pause_schedule",
        "json",
        "pause a schedule",
        returns="the schedule",
        errors=(404,),
    ),
    Route(
        "POST",
        "/schedules/{schedule_id}/resume",
        "resume_schedule",
        "json",
        "resume a schedule",
        returns="the schedule",
        errors=(404,),
    ),
    Route(
        "POST",
        "/agui/{agent_id}",
        "agui_run",
        "sse",
        "run, resume or attach to a run in AG-UI's protocol (RunAgentInput in, AG-UI events out)",
        returns="AG-UI 1.0 events (SSE)",
        errors=(400, 404, 409, 422),
        body=RunAgentInput,
        call="agui.run",
    ),
    Route(
        "POST",
        "/agui/{agent_id}/connect",
        "agui_connect",
        "sse",
        "attach to the thread's run where it stands (AG-UI events)",
        returns="AG-UI 1.0 events (SSE)",
        errors=(400, 404, 422),
        body=RunAgentInput,
        call="agui.connect",
    ),
    # -- the Vercel AI SDK's chat (http/aisdk/) --
    Route(
        "POST",
        "/aisdk/{agent_id}",
        "aisdk_chat",
        "sse",
        "a chat message (or answers to a paused run) from the AI SDK's useChat: the run's UI message stream",
        returns="UI message stream chunks (SSE), ending data: [DONE]",
        errors=(400, 404, 409, 413, 422),
        body=ChatBody,
        call="aisdk.chat",
    ),
    Route(
        "GET",
        "/aisdk/{agent_id}/{chat_id}/stream",
        "aisdk_stream",
        "sse",
        "resume a chat's live run (useChat resume): its message from the start; 204 when nothing is live; "
        "?startIndex=N (WorkflowChatTransport): the run's latest POST stream from chunk N",
        returns="UI message stream chunks (SSE)",
        errors=(400, 404),
        call="aisdk.resume",
    ),
    Route(
        "POST",
        "/aisdk/{agent_id}/{chat_id}/stop",
        "aisdk_stop",
        "json",
        "stop a chat's live run (the page's stop button; an aborted fetch does not stop it)",
        returns="{run_id, status}",
        errors=(404,),
        call="aisdk.stop",
    ),
    # -- A2A 1.0, JSON-RPC binding (http/a2a/) --
    Route(
        "GET",
        "/a2a/{agent_id}/.well-known/agent-card.json",
        "a2a_card",
        "json",
        "the agent's A2A agent card (skills, capabilities, its JSON-RPC interface)",
        returns="AgentCard",
        errors=(404,),
        call="a2a.card",
    ),
    Route(
        "POST",
        "/a2a/{agent_id}",
        "a2a_rpc",
        "sse",
        "one A2A JSON-RPC request: SendMessage, SendStreamingMessage (SSE), GetTask, ListTasks, CancelTask, "
        "SubscribeToTask (SSE); errors are JSON-RPC errors (HTTP 200)",
        returns="a JSON-RPC response, or SSE of JSON-RPC responses",
        errors=(404, 413),
        body=RpcRequest,
        call="a2a.rpc",
    ),
    # -- the OpenAI Responses API (http/responses/endpoint.py) --
    Route(
        "GET",
        "/v1/models",
        "list_models",
        "json",
        "the agents, as Responses API models",
        returns="{data}",
        call="responses.models",
    ),
    Route(
        "GET",
        "/v1/models/{model}",
        "get_model",
        "json",
        "one agent as a model",
        returns="model",
        errors=(404,),
        call="responses.model",
    ),
    Route(
        "POST",
        "/v1/responses",
        "create_response",
        "json",
        "start a response (a run, or the next segment of a paused one): the Response, or SSE with stream=true",
        returns="the Response object (or its SSE events)",
        errors=(400, 404, 409),
        body=CreateBody,
        call="responses.create",
    ),
    Route(
        "GET",
        _RESPONSE,
        "get_response",
        "json",
        "the Response; with stream=true its events after starting_after (SSE)",
        returns="the Response object (or its SSE events)",
        errors=(400, 404),
        call="responses.retrieve",
    ),
    Route(
        "DELETE",
        _RESPONSE,
        "delete_response",
        "json",
        "delete the response's run",
        returns="deleted",
        errors=(404, 409),
        call="responses.delete",
    ),
    Route(
        "POST",
        f"{_RESPONSE}/cancel",
        "cancel_response",
        "json",
        "stop the response",
        returns="the Response",
        errors=(404,),
        call="responses.cancel",
    ),
    Route(
        "GET",
        f"{_RESPONSE}/input_items",
        "response_input_items",
        "json",
        "what the response was asked",
        returns="{data}",
        errors=(404,),
        call="responses.input_items",
    ),
    Route(
        "POST",
        "/v1/conversations",
        "create_conversation",
        "json",
        "a conversation (a session of ours)",
        returns="the conversation",
        errors=(400,),
        body=ConversationBody,
        call="responses.create_conversation",
    ),
    Route(
        "GET",
        _CONVERSATION,
        "get_conversation",
        "json",
        "a conversation",
        returns="the conversation",
        errors=(404,),
        call="responses.get_conversation",
    ),
    Route(
        "DELETE",
        _CONVERSATION,
        "delete_conversation",
        "json",
        "delete a conversation and its runs",
        returns="deleted",
        errors=(404, 409),
        call="responses.delete_conversation",
    ),
    Route(
        "GET",
        f"{_CONVERSATION}/items",
        "conversation_items",
        "json",
        "the conversation's items (its completed turns and the items added), newest first",
        returns="{data}",
        errors=(400, 404),
        call="responses.conversation_items",
    ),
    Route(
        "POST",
        f"{_CONVERSATION}/items",
        "add_conversation_items",
        "json",
        "add items to the conversation (they join its history)",
        returns="{data}",
        errors=(400, 404),
        body=ConversationItemsBody,
        call="responses.add_conversation_items",
    ),
)

#: The routes each front end writes by hand: they ask no API key (``/health``, the inspector's static files, whose
#: data comes through the API), or are not the API's (this document). Django adds its admin page
#: (``admin/runs/``, staff only) and a last pattern that answers JSON 404 for any other path.
SPECIAL: tuple[Special, ...] = (
    Special("GET", "/health", "health", "is Redis reachable (a load balancer's probe)", open=True, documented=True),
    Special(
        "GET", "/openapi.json", "openapi", "this table as OpenAPI, at the prefix it is mounted at", documented=True
    ),
    Special("GET", "/ui", "ui_root", "a redirect to /ui/ (the inspector's pages link relative to it)", open=True),
    Special("GET", "/ui/", "ui_index", "the inspector's list of runs", open=True),
    Special("GET", "/ui/runs/{run_id}", "ui_run", "the inspector's page of one run", open=True),
    Special("GET", "/ui/{name}", "ui_file", "the inspector's script and style", open=True),
)


#: The routes (their names) of the OpenAI Responses API.
OPENAI = frozenset(route.name for route in ROUTES if route.openai)


def openai_path(path: str) -> bool:
    """Whether a request's path (under any mount prefix) is under ``/v1``: for a request no route matched (an
    unknown path, a method no route takes), whose error then takes OpenAI's shape too."""
    return "/v1/" in f"{path}/"


def paths() -> dict[str, list[Route]]:
    """The table by path template, in order (a path's routes in their order: GET first)."""
    found: dict[str, list[Route]] = {}
    for route in ROUTES:
        found.setdefault(route.path, []).append(route)
    return found


def template(path: str, param: Callable[[str, str], str]) -> str:
    """``path`` with each ``{name}`` / ``{name:type}`` spelled ``param(name, type)`` (``type`` defaults to str)."""
    return _PARAM.sub(lambda m: param(m.group(1), m.group(2) or "str"), path)

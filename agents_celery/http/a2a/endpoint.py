"""The A2A routes: an agent of ours as an A2A 1.0 agent (JSON-RPC binding), its runs as tasks.

- ``GET /a2a/<agent_id>/.well-known/agent-card.json``: the agent card (its tools as skills, streaming, the
  JSON-RPC interface at ``/a2a/<agent_id>``, the bearer scheme when the API key is set).
- ``POST /a2a/<agent_id>``: one JSON-RPC request. ``SendMessage`` starts a task (a run; ``contextId`` its
  session) or, with the message's ``taskId``, answers a paused one (a data part ``{"decisions": [...]}``) or steers
  a live one; it answers once the task ends or waits for input, or at once with ``returnImmediately``.
  ``SendStreamingMessage`` answers the same as SSE: the ``Task`` first, then its status and artifact updates, to
  the end or the next pause. ``GetTask``, ``ListTasks``, ``CancelTask``, and ``SubscribeToTask`` (the ``Task``,
  then every later update, from one read of the log: nothing falls between them, whichever worker died).

Every answer to a well-formed HTTP request is HTTP 200 with a JSON-RPC response, errors included (A2A's codes;
a task the caller may not see is ``TaskNotFound``, as one that does not exist). An unknown agent is a 404: no
A2A agent lives at that URL.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from ... import __version__
from ...a2a.task import TaskFold
from ...content import UserContent, check_parts
from ...errors import AgentsCeleryError, BadRequestError, PayloadTooLargeError, RunNotFoundError
from ...runs import RunStatus, RunView
from ...runtime import Runtime
from ...storage.pushes import PushConfigs
from ...webhook import check_url
from ..access import Access
from ..bodies import ToolDecisionBody
from ..messages import Reply, Request, Wait
from ..sse import LogStream
from . import compat, wire
from .render import TaskPresenter, frame

#: The idempotency key of the task a message started (scoped to the caller, as every key): a message sent again
#: with the same ``messageId`` (a retried request) is the same task.
KEY = "a2a:{agent}:{message}"
#: The longest a ``CancelTask`` waits for the run to end before it answers the task as it stands.
CANCEL_WAIT_SECONDS = 10.0
#: The longest an A2A answer goes without sending a byte: the SDK's default httpx client gives up on a read after
#: 5 s, so a stream's keep-alive comments, and the spaces before a blocking answer's JSON (JSON allows leading
#: whitespace), come at least this often, whatever the API's own keep-alive.
KEEPALIVE_SECONDS = 4.0


class A2AEndpoint:
    """The A2A routes over the API's Runtime and access checks (see the module docs)."""

    def __init__(
        self, runtime: Runtime, access: Access, keepalive_seconds: float = 15.0, block_seconds: float = 600.0
    ) -> None:
        self.runtime = runtime
        self.access = access
        self.store = runtime.store
        self.keepalive_seconds = min(keepalive_seconds, KEEPALIVE_SECONDS)
        self.block_seconds = block_seconds

    # -- the card -------------------------------------------------------------------------------------------

    def card(self, req: Request, agent_id: str) -> Reply:
        manifest = self.runtime.agent_manifest(agent_id)
        self.access.allow(req, "list", agent_id=agent_id)
        skills = [
            {"id": t["name"], "name": t["name"], "description": t.get("description") or t["name"], "tags": ["tool"]}
            for t in manifest.get("tools", [])
        ]
        card: dict[str, Any] = {
            "name": agent_id,
            "description": manifest.get("description") or f"the agent {agent_id!r}",
            "version": __version__,
            "supportedInterfaces": [
                {"url": _base_url(req, agent_id), "protocolBinding": "JSONRPC", "protocolVersion": wire.VERSION}
            ],
            "capabilities": {"streaming": True, "pushNotifications": True},
            "defaultInputModes": ["text/plain", "application/json"],
            "defaultOutputModes": ["text/plain", "application/json"],
            "skills": skills,
        }
        if self.runtime.settings.api_key:
            card["securitySchemes"] = {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}
            card["securityRequirements"] = [{"schemes": {"bearer": {"list": []}}}]
        return Reply(200, card)

    # -- JSON-RPC ---------------------------------------------------------------------------------------------

    def rpc(self, req: Request, agent_id: str) -> Reply:
        self.runtime.agent_manifest(agent_id)  # no agent: no A2A agent at this URL (404)
        try:
            body = req.body()
        except PayloadTooLargeError:
            raise
        except BadRequestError as exc:
            code = wire.PARSE_ERROR if "not valid JSON" in str(exc) else wire.INVALID_REQUEST
            return _error(None, wire.A2AError(code, str(exc)))
        rpc_id = body.get("id") if isinstance(body.get("id"), str | int) else None
        try:
            call = wire.params_of(wire.RpcRequest, body)
        except wire.A2AError as exc:
            return _error(rpc_id, wire.A2AError(wire.INVALID_REQUEST, f"not a JSON-RPC 2.0 request: {exc}"))
        if call.method in compat.METHODS and compat.speaks_0_3(req.headers.get("A2A-Version")):
            name = compat.METHODS[call.method]
            call = call.in_1_0_terms(name, compat.params(name, call.params))
        method = METHODS.get(call.method)
        if method is None:
            known = ", ".join(METHODS)
            return _error(call.id, wire.A2AError(wire.METHOD_NOT_FOUND, f"no method {call.method!r}; known: {known}"))
        try:
            reply: Reply = getattr(self, method)(req, agent_id, call)
        except AgentsCeleryError as exc:
            if type(exc).status in (401, 503):
                raise  # no key, Redis down: HTTP's answers, as on every route
            return _error(call.id, wire.rpc_error_of(exc))
        return reply

    def send(self, req: Request, agent_id: str, call: wire.RpcRequest, *, streaming: bool = False) -> Reply:
        params = wire.params_of(wire.SendParams, call.params)
        config = params.configuration or wire.SendConfiguration()
        if params.message.task_id:
            run_id, after = self._follow_up(req, agent_id, params.message)
        else:
            run_id, after = self._start(req, agent_id, params.message)
        if config.task_push_notification_config is not None:
            push = wire.params_of(wire.PushConfigParams, config.task_push_notification_config)
            self._push(run_id, push)
        if streaming:
            return self._stream(run_id, call, config.history_length)
        if config.return_immediately:
            return self._ok(call, {"task": self._fold(run_id).task(config.history_length)})
        answer = self._later(call, lambda: {"task": self._fold(run_id).task(config.history_length)})
        return Reply(200, wait=Wait(run_id, after, self.block_seconds, answer=answer, keepalive=self.keepalive_seconds))

    def send_streaming(self, req: Request, agent_id: str, call: wire.RpcRequest) -> Reply:
        return self.send(req, agent_id, call, streaming=True)

    def get_task(self, req: Request, agent_id: str, call: wire.RpcRequest) -> Reply:
        params = wire.params_of(wire.TaskParams, call.params)
        self.access.run(req, params.id, "read", agent_id)
        return self._ok(call, self._fold(params.id).task(params.history_length))

    def cancel(self, req: Request, agent_id: str, call: wire.RpcRequest) -> Reply:
        params = wire.params_of(wire.TaskParams, call.params)
        info = self.access.run(req, params.id, "stop", agent_id)
        view = self.runtime.get(params.id)
        if view.status.is_final:
            state = _state_of(view)
            raise wire.A2AError(wire.TASK_NOT_CANCELABLE, f"task {params.id!r} has ended ({state}): nothing to cancel")
        self.runtime.stop(params.id, "canceled by the A2A client")
        answer = self._later(call, lambda: self._fold(params.id).task())
        wait = Wait(params.id, info.last_offset, CANCEL_WAIT_SECONDS, answer=answer, keepalive=self.keepalive_seconds)
        return Reply(200, wait=wait)

    def subscribe(self, req: Request, agent_id: str, call: wire.RpcRequest) -> Reply:
        params = wire.params_of(wire.TaskParams, call.params)
        info = self.access.run(req, params.id, "read", agent_id)
        if info.status == "ended":
            raise wire.A2AError(
                wire.UNSUPPORTED_OPERATION,
                f"task {params.id!r} is in a terminal state ({_state_of(self.runtime.get(params.id))}): "
                "GetTask reads it",
            )
        return self._stream(params.id, call, params.history_length, info.session_id)

    def list_tasks(self, req: Request, agent_id: str, call: wire.RpcRequest) -> Reply:
        params = wire.params_of(wire.ListParams, call.params)
        self.access.allow(req, "list", agent_id=agent_id)
        status = None
        if params.status:
            status = wire.RUN_STATUSES.get(params.status)
            if status is None:
                raise wire.A2AError(wire.INVALID_PARAMS, f"params.status: no task state {params.status!r}")
        page = self.runtime.runs(
            status=status,
            agent_id=agent_id,
            session_id=params.context_id,
            limit=params.page_size or 50,
            cursor=params.page_token or None,
            keep=self.access.keep(req),
        )
        tasks = [
            self._fold(v.run_id).task(params.history_length, artifacts=params.include_artifacts) for v in page.runs
        ]
        result = {"tasks": tasks, "nextPageToken": page.next_cursor or "", "pageSize": len(tasks)}
        return self._ok(call, result)

    # -- push notifications ------------------------------------------------------------------------------------

    def push_create(self, req: Request, agent_id: str, call: wire.RpcRequest) -> Reply:
        params = wire.params_of(wire.PushConfigParams, call.params)
        if not params.task_id:
            raise wire.A2AError(wire.INVALID_PARAMS, "params.taskId: the task the config is for")
        self.access.run(req, params.task_id, "continue", agent_id)
        return self._ok(call, self._push(params.task_id, params))

    def push_get(self, req: Request, agent_id: str, call: wire.RpcRequest) -> Reply:
        params = wire.params_of(wire.PushConfigRef, call.params)
        self.access.run(req, params.task_id, "read", agent_id)
        pushes = self._pushes()
        found = pushes.get(params.task_id, params.id) if params.id else next(iter(pushes.all(params.task_id)), None)
        if found is None:
            raise wire.A2AError(wire.TASK_NOT_FOUND, f"task {params.task_id!r} has no push config {params.id!r}")
        return self._ok(call, _config_view(params.task_id, found))

    def push_list(self, req: Request, agent_id: str, call: wire.RpcRequest) -> Reply:
        params = wire.params_of(wire.PushConfigRef, call.params)
        self.access.run(req, params.task_id, "read", agent_id)
        configs = [_config_view(params.task_id, c) for c in self._pushes().all(params.task_id)]
        return self._ok(call, {"configs": configs, "nextPageToken": ""})

    def push_delete(self, req: Request, agent_id: str, call: wire.RpcRequest) -> Reply:
        params = wire.params_of(wire.PushConfigRef, call.params)
        self.access.run(req, params.task_id, "continue", agent_id)
        if not self._pushes().delete(params.task_id, params.id or ""):
            raise wire.A2AError(wire.TASK_NOT_FOUND, f"task {params.task_id!r} has no push config {params.id!r}")
        return self._ok(call, {})

    def _pushes(self) -> PushConfigs:
        return PushConfigs(self.runtime.redis, self.store.keys, self.runtime.settings.retention_ms)

    def _push(self, run_id: str, params: wire.PushConfigParams) -> dict[str, Any]:
        """Store a push config for the task and start its deliveries (a config replaced keeps its deliveries)."""
        check_url(params.url, self.runtime.settings.webhook_allow)
        config_id = params.id or uuid.uuid4().hex
        config: dict[str, Any] = {"id": config_id, "url": params.url, "token": params.token}
        if params.authentication is not None:
            config["authentication"] = params.authentication.model_dump(exclude_none=True)
        pushes = self._pushes()
        known = pushes.get(run_id, config_id) is not None
        pushes.put(run_id, config)
        if not known:  # one chain of deliveries per config: in order
            self.runtime.follow_push(run_id, config_id)
        return _config_view(run_id, config)

    def unsupported(self, req: Request, agent_id: str, call: wire.RpcRequest) -> Reply:
        raise wire.A2AError(wire.UNSUPPORTED_OPERATION, f"{call.method} is not supported by this agent")

    # -- helpers ----------------------------------------------------------------------------------------------

    def _later(self, call: wire.RpcRequest, result: Callable[[], Any]) -> Callable[[], Reply]:
        """The answer a :class:`Wait` gives once the run ended or paused (an error as a JSON-RPC error too)."""

        def answer() -> Reply:
            try:
                return self._ok(call, result())
            except AgentsCeleryError as exc:
                return _error(call.id, wire.rpc_error_of(exc))

        return answer

    def _ok(self, call: wire.RpcRequest, result: Any) -> Reply:
        """The JSON-RPC answer of ``call`` (in 0.3's shapes for a 0.3 request)."""
        return Reply(200, wire.response(call.id, compat.result(call.method, result) if call.legacy else result))

    def _start(self, req: Request, agent_id: str, message: wire.MessageIn) -> tuple[str, int]:
        """A new task for the message (the same one again for a message sent again): its run id, and -1."""
        self.access.allow(req, "start", agent_id=agent_id)
        content = _content_of(message)
        check_parts(content, self.runtime.settings)  # before the session check records an owner: a 413 makes nothing
        key = KEY.format(agent=agent_id, message=message.message_id)
        existing = self.runtime.idempotent_run(key, req.user_id)
        if existing is not None:  # the same message again: a retried request
            self.access.run(req, existing, "read", agent_id)
            return existing, -1
        self.access.session(req, message.context_id, "start", agent_id)
        stream = self.runtime.stream(
            agent_id, content, session_id=message.context_id, user_id=req.user_id, idempotency_key=key
        )
        return stream.run_id, -1

    def _follow_up(self, req: Request, agent_id: str, message: wire.MessageIn) -> tuple[str, int]:
        """A message on an existing task: decisions for a paused one, a user message for a live one."""
        run_id = str(message.task_id)
        self.access.run(req, run_id, "continue", agent_id)
        view = self.runtime.get(run_id)
        if message.context_id and message.context_id != view.session_id:
            raise RunNotFoundError(f"task {run_id!r} is not in context {message.context_id!r}")
        before = self.store.log.info(run_id).last_offset
        if view.status == RunStatus.PAUSED:
            self.runtime.continue_run(run_id, _decisions_of(message, view))
        elif view.status.is_final:
            raise wire.A2AError(
                wire.UNSUPPORTED_OPERATION,
                f"task {run_id!r} has ended ({_state_of(view)}): send the message without taskId, in its "
                f"context {view.session_id!r}, to start a new task",
            )
        else:
            self.runtime.send_message(run_id, _content_of(message))
        return run_id, before

    def _fold(self, run_id: str, session_id: str | None = None, *, history: bool = True) -> TaskFold:
        """The task as its whole log so far says; its history the run's messages (``history``: read them; a
        stream's Task has them only when asked, its first frame sooner for it)."""
        view = self.runtime.get(run_id) if history or session_id is None else None
        session = view.session_id if view is not None else str(session_id)
        fold = TaskFold(run_id, session, history=_history(view) if view is not None and history else [])
        for ev in self.store.log.read(run_id, -1):
            fold.feed(ev)
        if fold.offset < 0:
            fold.updated_at = view.created_at if view is not None else int(time.time() * 1000)
        return fold

    def _stream(
        self, run_id: str, call: wire.RpcRequest, history_length: int | None, session_id: str | None = None
    ) -> Reply:
        """The ``Task`` as it stands, then every update after it, to the end or the next pause."""
        fold = self._fold(run_id, session_id, history=bool(history_length))
        shape = compat.stream_result if call.legacy else None
        rpc_id = call.id
        prelude = frame(rpc_id, {"task": fold.task(history_length)}, shape)
        presenter = TaskPresenter(fold, rpc_id, ends_after=fold.offset, shape=shape)
        if fold.state in wire.TERMINAL:
            presenter.finished = True
        stream = LogStream(
            run_id,
            fold.offset,
            "a2a",
            until_pause=True,
            keepalive_seconds=self.keepalive_seconds,
            presenter=presenter,
            prelude=prelude,
        )
        return Reply(200, stream=stream)


#: JSON-RPC methods -> A2AEndpoint methods.
METHODS = {
    "SendMessage": "send",
    "SendStreamingMessage": "send_streaming",
    "GetTask": "get_task",
    "ListTasks": "list_tasks",
    "CancelTask": "cancel",
    "SubscribeToTask": "subscribe",
    "CreateTaskPushNotificationConfig": "push_create",
    "GetTaskPushNotificationConfig": "push_get",
    "ListTaskPushNotificationConfigs": "push_list",
    "DeleteTaskPushNotificationConfig": "push_delete",
    "GetExtendedAgentCard": "unsupported",
}


def _error(rpc_id: Any, err: wire.A2AError) -> Reply:
    return Reply(200, wire.error_response(rpc_id, err))


def _config_view(run_id: str, config: dict[str, Any]) -> dict[str, Any]:
    """A stored push config as ``TaskPushNotificationConfig``."""
    view = {"id": config["id"], "taskId": run_id, "url": config["url"]}
    if config.get("token"):
        view["token"] = config["token"]
    if config.get("authentication"):
        view["authentication"] = config["authentication"]
    return view


def _state_of(view: RunView) -> str:
    return {
        RunStatus.COMPLETED: "TASK_STATE_COMPLETED",
        RunStatus.CANCELLED: "TASK_STATE_CANCELED",
        RunStatus.FAILED: "TASK_STATE_FAILED",
    }.get(view.status, view.status.value)


def _content_of(message: wire.MessageIn) -> UserContent:
    """The message as our run takes it: its text parts (a data part as its JSON), or content parts when it carries
    files: an image by URL or inline (``raw``, as a data URL), another file inline only (the model cannot fetch a
    URL)."""
    texts, parts = [], []
    for n, part in enumerate(message.parts):
        if part.text is not None or part.data is not None:
            text = part.text if part.text is not None else json.dumps(part.data, ensure_ascii=False)
            texts.append(text)
            parts.append({"type": "text", "text": text})
        else:
            parts.append(_file(part, n))
    if all(p["type"] == "text" for p in parts):
        return "\n".join(texts)
    return parts


def _file(part: wire.PartIn, n: int) -> dict[str, Any]:
    where = f"params.message.parts.{n}"
    media = part.media_type or ""
    if part.raw is not None:
        if not media:
            raise wire.A2AError(wire.INVALID_PARAMS, f"{where}: an inline file needs its mediaType")
        url = f"data:{media};base64,{part.raw}"
    elif part.url is not None:
        url = part.url
        if not (media.startswith("image/") or url.startswith("data:image/")):
            raise wire.A2AError(
                wire.CONTENT_TYPE_NOT_SUPPORTED,
                f"{where}: a file by URL is taken for images only (the model cannot fetch {url[:60]!r}); send it raw",
            )
    else:
        raise wire.A2AError(wire.INVALID_PARAMS, f"{where}: a part needs text, data, url or raw")
    if media.startswith("image/") or url.startswith("data:image/"):
        return {"type": "image_url", "image_url": {"url": url}}
    return {"type": "file", "file": {"filename": part.filename or "file", "file_data": url}}


def _decisions_of(message: wire.MessageIn, view: RunView) -> list[dict[str, Any]]:
    """The decisions a message on a paused task carries: a data part ``{"decisions": [...]}`` (each as the AgentOS
    continue's ``tools`` entry: ``tool_call_id``, ``confirmed``, ``confirmation_note``, ``tool_args``)."""
    for part in message.parts:
        if isinstance(part.data, dict) and isinstance(part.data.get("decisions"), list):
            try:
                return [ToolDecisionBody.model_validate(d).decision() for d in part.data["decisions"]]
            except ValueError as exc:
                raise wire.A2AError(wire.INVALID_PARAMS, f"the decisions part: {exc}") from None
    ids = ", ".join(c.id for c in view.pending)
    raise wire.A2AError(
        wire.INVALID_PARAMS,
        f"task {view.run_id!r} waits for decisions on {ids}: send a data part "
        '{"decisions": [{"tool_call_id": ..., "confirmed": true}]}',
    )


def _history(view: RunView) -> list[dict[str, Any]]:
    """The run's conversation as A2A messages (its text turns; tool turns are in its status updates)."""
    out = []
    for n, m in enumerate(view.messages):
        content = m.get("content")
        if m.get("role") == "user":
            parts = content if isinstance(content, list) else []
            texts = (
                [content] if isinstance(content, str) else [p.get("text", "") for p in parts if p.get("type") == "text"]
            )
            role = "ROLE_USER"
        elif m.get("role") == "assistant" and isinstance(content, str) and content:
            texts, role = [content], "ROLE_AGENT"
        else:
            continue
        parts = [wire.text_part(t) for t in texts if t]
        if parts:
            out.append(wire.message(f"{view.run_id}-m{n}", role, parts, view.run_id, view.session_id))
    return out


def _base_url(req: Request, agent_id: str) -> str:
    """The agent's JSON-RPC URL, absolute (a card names where to call): this request's host, under its prefix."""
    host = req.headers.get("X-Forwarded-Host") or req.headers.get("Host") or "localhost"
    scheme = req.headers.get("X-Forwarded-Proto") or "http"
    prefix = req.run_url("_").removesuffix("/runs/_")
    return f"{scheme}://{host}{prefix}/a2a/{agent_id}"

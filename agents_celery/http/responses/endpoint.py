"""The OpenAI Responses API under ``/v1``: ``POST /v1/responses`` and its retrieve, stream, cancel, delete and
input items, ``/v1/models`` (the agents) and ``/v1/conversations`` (our sessions), so the official ``openai``
SDK (or anything speaking the Responses API) is a client of our durable runs. See docs/responses.md.

How the Responses words map onto ours:

- ``model`` names an agent; a response is one *segment* of a run (:mod:`.render`): a run that pauses for
  approvals or for the client's function calls goes on, after the next request answers them, as a new response
  of the same run (its log, ledger and lease are one).
- ``input``: a string, or items. The last user message is the run's message; ``system``/``developer`` messages
  and ``instructions`` are added to the agent's instructions (as client context), earlier user/assistant
  messages of a history we do not hold are given to the model the same way. ``function_call_output`` and
  ``mcp_approval_response`` items answer the paused run; an approval may carry edited ``arguments`` (JSON text,
  our extension). What a create is (a new run, the next turn, answers; a resent history's old answers skipped)
  is decided once, by :func:`.turn.classify`.
- ``previous_response_id`` continues its run (answers) or starts a new run in its session; ``conversation`` is a
  session (``POST .../items`` adds to its history). ``tools`` of type ``function`` are the client's own tools; one
  of type ``mcp`` naming the agent stands for the agent's own (the Agents SDK's ``HostedMCPTool``).
- ``Idempotency-Key``: a retried create returns the same response; so does an identical retry without one, within
  the retry window (:mod:`.retry`). A foreground create keeps its connection alive with spaces
  (:mod:`.waiting`).

Every route asks the access check with the run or session it names: what a caller may not see answers 404.
A response whose run's retention passed answers 404, as OpenAI's API does (our ``/runs`` routes answer 410).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
import uuid
from typing import Any

import redis

from ...decisions import Decision
from ...errors import (
    BadRequestError,
    NotFoundError,
    ResponseNotFoundError,
    RunExpiredError,
    RunFinishedError,
    RunNotFoundError,
    RunNotPausedError,
    SessionNotFoundError,
    StateError,
    UnsupportedError,
)
from ...events import Event, EventType
from ...runs import RunState
from ...runtime import Runtime
from ...storage.follow import LogInfo
from ..access import Access
from ..bodies import ConversationBody, ConversationItemsBody, CreateBody, Limits, parse
from ..messages import Reply, Request, Wait
from ..sse import LogStream
from .input import (
    Input,
    approval,
    check_create,
    check_item,
    compact,
    conversation_of,
    expand,
    function_tools,
    output_schema_of,
    parse_input,
)
from .items import items_of, messages_of, page
from .presenter import CHECKPOINTS_KEPT, Presenter
from .render import (
    ResponseFold,
    ResponseSegment,
    approval_request_id,
    client_call_id,
    parse_response_id,
    response_id,
    starts_segment,
)
from .retry import Retries, fingerprint
from .turn import Anchor, Turn, anchor_runs, classify

#: How long a cancel waits for the response to end before it answers (it ends within the stop's bound).
CANCEL_WAIT_SECONDS = 10.0
#: How many events after a segment's end are looked at for the next segment's start (it is the next event).
_NEXT_START_WITHIN = 8
#: The renderer's name in the run's checkpoints (:mod:`agents_celery.storage.renders`).
RENDERER = "responses"

log = logging.getLogger(__name__)


def _listing(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "object": "list",
        "data": items,
        "first_id": items[0].get("id") if items else None,
        "last_id": items[-1].get("id") if items else None,
        "has_more": False,
    }


class ResponsesEndpoint:
    """The ``/v1`` routes over the API's Runtime and access checks (see the module docs)."""

    def __init__(self, runtime: Runtime, access: Access, limits: Limits, keepalive: float, block: float) -> None:
        self.runtime = runtime
        self.access = access
        self.store = runtime.store
        self.limits = limits
        self.keepalive = keepalive
        self.block = block
        self.retries = Retries(runtime.redis, self.store.keys)

    # -- create ----------------------------------------------------------------------------------------------

    def create(self, req: Request) -> Reply:
        """Decide once what the request is (:func:`.turn.classify`), then start or continue a run. An
        identical retry (same caller, same body, within the retry window) joins the response the first request
        made (:mod:`.retry`)."""
        fields = req.body()
        body = parse(fields, CreateBody, limits=self.limits)
        check_create(fields, max_chars=self.runtime.settings.max_message_chars, max_bytes=self.limits.max_body_bytes)
        known = fingerprint(req.user_id, fields)
        joined = self.retries.join(known, first=req.headers.get("x-stainless-retry-count") == "0")
        if joined is not None and (parsed := parse_response_id(joined)) is not None:
            return self._answer(body, *parsed)
        try:
            run_id, base = self._create(req, body)
        except BaseException:
            self.retries.forget(known)
            raise
        self.retries.made(known, response_id(run_id, base))
        return self._answer(body, run_id, base)

    def _create(self, req: Request, body: CreateBody) -> tuple[str, int]:
        """(run id, base) of the response the request makes."""
        self.runtime.agent_manifest(body.model)
        self.access.allow(req, "start", agent_id=body.model)
        if body.background and not body.store:
            raise BadRequestError("background responses are stored: store=false cannot be background")
        conversation = conversation_of(body.conversation)
        if conversation and body.previous_response_id:
            raise BadRequestError("give previous_response_id or conversation, not both")
        got = parse_input(body.input, body.instructions)
        tools = function_tools(body.tools, agent=body.model)
        anchor, named = self._anchor(req, body, got)
        turn = classify(got, anchor)
        if turn.kind == "answer":
            assert anchor is not None
            return self._continue(req, body, anchor.run_id, named, turn)
        session_id = conversation
        if turn.kind == "next":
            assert anchor is not None
            session_id = self._after(anchor.run_id, named)
            if conversation and conversation != session_id:
                raise BadRequestError(f"the calls in the input are of another conversation than {conversation!r}")
            got.items = [got.items[-1]]  # the new message: the session holds the history before it
        else:
            got.context += got.earlier  # a history we do not hold: the model gets it as context
            if conversation:
                self._conversation(req, conversation, "read")
        return self._start(req, body, got, tools, session_id)

    def _start(
        self, req: Request, body: CreateBody, got: Input, tools: list[dict[str, Any]], session_id: str | None
    ) -> tuple[str, int]:
        """A new run: in ``session_id`` (a conversation, or the session a next turn goes on), else a new one."""
        manifest = self.runtime.agent_manifest(body.model)
        if body.model != manifest["name"]:
            raise NotFoundError(f"no model {body.model!r}")
        self.access.session(req, session_id, "start", body.model)
        output_schema = output_schema_of(body.text)
        conversation = conversation_of(body.conversation)
        record = {
            "instructions": body.instructions,
            "metadata": body.metadata or {},
            "tools": body.tools,
            "input": got.items,
            "previous_response_id": body.previous_response_id,
            "conversation": conversation,
            "background": body.background,
            "text": body.text if output_schema is not None else None,
            # Which tools show as approval requests: recorded with the run, so a deploy that changes the agent's
            # confirmations renders its responses as before (the same sequence numbers for starting_after).
            "confirm": sorted(_confirmations(manifest)),
        }
        stream = self.runtime.stream(
            body.model,
            got.parts or got.text or "",
            session_id=session_id,
            user_id=req.user_id,
            idempotency_key=req.headers.get("Idempotency-Key") or None,
            client_tools=tools,
            client={"context": got.context, "responses": compact(record, got.context)},
            output_schema=output_schema,
        )
        return stream.run_id, 0

    def _anchor(self, req: Request, body: CreateBody, got: Input) -> tuple[Anchor | None, str]:
        """The run the request is about, and the response of it that is named (``previous_response_id``, else the
        newest of the run the items' last call id names): None when it names none."""
        if body.previous_response_id:
            run_id, base = self._segment(req, body.previous_response_id, "read")
        else:
            runs = anchor_runs(got)
            if not runs:
                return None, ""
            try:
                run_id, _ = self._segment(req, response_id(runs[-1], 0), "read")  # 404 unless the caller may see it
            except ResponseNotFoundError:
                if got.text is None:
                    raise
                return None, ""  # a history whose run expired (or is not the caller's): one we do not hold
            base = -1
        state, _ = self.store.load(run_id)
        answered: dict[str, str | None] = {
            c.id: c.result for c in state.tool_calls if c.pause_reason == "client_tool" and c.decision != "pending"
        }
        latest = 0
        for ev in self.store.log.read(run_id, -1):
            if starts_segment(ev):
                latest = ev.offset
                for d in (ev.data.get("metadata") or {}).get("decisions") or []:
                    answered.setdefault(str(d.get("tool_call_id", "")), None)
            elif ev.type is EventType.TOOL_CALL_RESULT:
                content = ev.data.get("content")
                answered[str(ev.data.get("tool_call_id", ""))] = (
                    content if isinstance(content, str) else json.dumps(content)
                )
        pending = frozenset(c.id for c in state.pending)
        paused = state.status.value == "paused" and bool(pending)
        if base >= 0 and paused and base != latest and (got.outputs or got.approvals):
            raise RunNotPausedError(f"response {body.previous_response_id!r} is not waiting for answers")
        for ident in pending:
            answered.pop(ident, None)
        anchor = Anchor(state.run_id, state.session_id, paused, pending, answered)
        return anchor, response_id(run_id, latest if base < 0 else base)

    def _after(self, run_id: str, named: str) -> str:
        """The session a new run after response ``named`` goes in (409 unless it is the newest of its run and the
        run ended, and its run the newest of its session)."""
        view = self.runtime.get(run_id)
        parsed = parse_response_id(named)
        if parsed is not None and parsed[1] != self._latest(run_id):
            raise StateError(f"response {named!r} is not the newest of its run; continue from the newest")
        if not view.status.is_final:
            raise StateError(
                f"response {named!r} is {view.status.value}: answer its approval requests or function calls "
                "(or cancel it) before starting another"
            )
        newest = self.runtime.runs(session_id=view.session_id, limit=1).runs
        if newest and newest[0].run_id != run_id:
            raise StateError(f"response {named!r} is not the newest of its conversation; continue from the newest")
        return view.session_id

    def _continue(self, req: Request, body: CreateBody, run_id: str, named: str, turn: Turn) -> tuple[str, int]:
        view = self.runtime.get(run_id)
        self.access.allow(req, "continue", view, view.agent_id)
        if body.model != view.agent_id:
            raise BadRequestError(f"response {named!r} is of model {view.agent_id!r}")
        if view.status.value != "paused":
            raise RunNotPausedError(f"response {named!r} is not waiting for answers (its run is {view.status.value})")
        decisions = [Decision(o["call_id"], result=o["output"]) for o in turn.outputs]
        decisions += [approval(a) for a in turn.approvals]
        before = self.store.log.info(run_id).last_offset  # the continue's RUN_STARTED comes right after
        self.runtime.continue_run(run_id, decisions)
        return run_id, before + 1

    def _latest(self, run_id: str) -> int:
        """The base of the run's newest response."""
        latest = 0
        for ev in self.store.log.read(run_id, -1):
            if starts_segment(ev):
                latest = ev.offset
        return latest

    # -- answers ---------------------------------------------------------------------------------------------

    def _answer(self, body: CreateBody, run_id: str, base: int) -> Reply:
        if body.stream:
            return Reply(200, stream=self._stream(run_id, base, -1))
        if body.background:
            return Reply(200, self._object(run_id, base))
        answer = lambda: Reply(200, self._object(run_id, base))  # noqa: E731
        return Reply(200, wait=Wait(run_id, base - 1, self.block, answer=answer, keepalive=self.keepalive))

    def _fold(self, run_id: str, base: int, info: LogInfo | None = None) -> ResponseFold:
        """A fold of the segment at ``base``. ``info``: the log's, read before; when it had ended, the last segment's
        usage is the state's, with nothing to read when the fold gets there (a resume near the end of a finished
        response renders its terminal event in its first page)."""
        state, _ = self.store.load(run_id)
        record = state.client.get("responses")
        if isinstance(record, dict) and isinstance(record.get("confirm"), list):
            confirm = frozenset(str(name) for name in record["confirm"])
        else:  # a run started on another route (or before the set was recorded): the agent as deployed now
            confirm = _confirmations(self.runtime.agent_manifest(state.agent_id))
        segment = _segment_of(state, base, confirm)
        ended = info.last_offset if info is not None and info.status == "ended" else None
        final = dict(state.usage)
        segment.end_usage = lambda at: final if at == ended else self._end_usage(run_id, at)
        return ResponseFold(segment)

    def _end_usage(self, run_id: str, at: int) -> dict[str, int]:
        """The run's running total of usage where the segment whose terminal event is at offset ``at`` ended: what
        the next segment's RUN_STARTED recorded (it comes right after the pause that ended this one), else the
        state's. The state is read first: a continue commits its state and its RUN_STARTED together, so a state
        that counts the next segment's usage comes with that RUN_STARTED."""
        state, _ = self.store.load(run_id)
        for ev in self.store.log.read(run_id, at, limit=_NEXT_START_WITHIN):
            if ev.type is EventType.RUN_STARTED:  # a continue's, or a stop's (no segment: the run's total)
                return dict((ev.data.get("metadata") or {}).get("usage") or {}) if starts_segment(ev) else state.usage
        return dict(state.usage)

    def _object(self, run_id: str, base: int) -> dict[str, Any]:
        fold = self._fold(run_id, base)
        for ev in self.store.log.read(run_id, -1):
            fold.feed(ev)
            if fold.ended:
                break
        if not fold.started:
            raise _not_found(response_id(run_id, base))
        return fold.response(usage=True)

    def _stream(self, run_id: str, base: int, starting_after: int, info: LogInfo | None = None) -> LogStream:
        """The response's SSE. The fold takes in the earlier segments here, and the stream tails from the
        response's start: a pause for the client's function calls ends its segment with a RUN_FINISHED that a
        tail from the log's start would take for the run's end (the stream of a continue was empty). A resume
        starts from the latest checkpoint at or before ``starting_after`` instead, when the log still holds the
        event it was made at."""
        fold, after = self._fold(run_id, base, info), base - 1
        restored = self._restored(run_id, base, starting_after, fold) if starting_after >= 0 else None
        if restored is not None:
            fold, after = restored
        elif base > 0:
            for ev in self.store.log.read(run_id, -1, limit=base):
                fold.feed(ev)
        save = functools.partial(self._checkpoint, run_id, base)
        presenter = Presenter(fold, starting_after, save)
        return LogStream(
            run_id,
            after,
            "responses",
            until_pause=True,
            keepalive_seconds=self.keepalive,
            presenter=presenter,
            info=info,
        )

    def _restored(
        self, run_id: str, base: int, starting_after: int, fresh: ResponseFold
    ) -> tuple[ResponseFold, int] | None:
        """The fold of the latest checkpoint at or before ``starting_after`` and the offset it was made at; None
        when there is none, or the log holds another event at that offset now (Redis lost writes)."""
        found = self.store.renders.find(run_id, RENDERER, base, starting_after)
        if found is None:
            return None
        fold = ResponseFold.restore(fresh.segment, found.state)
        return None if fold is None else (fold, found.offset)

    def _checkpoint(self, run_id: str, base: int, fold: ResponseFold, ev: Event) -> None:
        """Save ``fold``'s state, made at ``ev``; a failed save only costs a later resume its shortcut."""
        try:
            self.store.renders.save(run_id, RENDERER, base, fold.seq, ev.position, fold.snapshot(), CHECKPOINTS_KEPT)
        except redis.RedisError as exc:
            log.info("run=%s: a checkpoint of response %s was not saved: %s", run_id, response_id(run_id, base), exc)

    def _segment(self, req: Request, named: str, action: str) -> tuple[str, int]:
        """(run id, base) of a response the caller may ``action`` (404 for one that does not exist, has expired
        or is another user's)."""
        run_id, base, _ = self._located(req, named, action)
        return run_id, base

    def _located(self, req: Request, named: str, action: str) -> tuple[str, int, LogInfo]:
        """:meth:`_segment`, and the run's log as it stood."""
        parsed = parse_response_id(named)
        if parsed is None:
            raise _not_found(named)
        run_id, base = parsed
        try:
            info = self.access.run(req, run_id, action)  # type: ignore[arg-type]
            first = self.store.log.read(run_id, base - 1, limit=1, info=info)
        except (RunNotFoundError, RunExpiredError):
            raise _not_found(named) from None
        if not first or first[0].offset != base or not starts_segment(first[0]):
            raise _not_found(named)
        return run_id, base, info

    # -- the other routes ------------------------------------------------------------------------------------

    def retrieve(self, req: Request, response_id: str) -> Reply:
        run_id, base, info = self._located(req, response_id, "read")
        if req.query.get("stream", "").lower() in ("true", "1"):
            # An EventSource reconnecting sends the last id: line it saw (the frames' ids are sequence numbers).
            after = req.query.get("starting_after") or req.headers.get("Last-Event-ID")
            starting_after = -1
            if after not in (None, ""):
                if not after.isascii() or not after.isdigit() or len(after) > 18:
                    raise BadRequestError(f"starting_after must be a sequence number, got {after[:40]!r}")
                starting_after = int(after)
            return Reply(200, stream=self._stream(run_id, base, starting_after, info))
        return Reply(200, self._object(run_id, base))

    def cancel(self, req: Request, response_id: str) -> Reply:
        """Stop the response's run (idempotent: a response that ended is answered as it is); answers the response
        once it ended (or after a few seconds)."""
        run_id, base = self._segment(req, response_id, "stop")
        state, _ = self.store.load(run_id)
        if not state.status.is_final and self._latest(run_id) == base:
            with contextlib.suppress(RunFinishedError):  # it ended meanwhile
                self.runtime.stop(run_id, "cancelled by request")
        answer = lambda: Reply(200, self._object(run_id, base))  # noqa: E731
        return Reply(200, wait=Wait(run_id, base - 1, CANCEL_WAIT_SECONDS, answer=answer))

    def delete(self, req: Request, response_id: str) -> Reply:
        """Delete the response's run (all its responses: the run is one); 409 while it is live."""
        run_id, _ = self._segment(req, response_id, "delete")
        self.runtime.delete_run(run_id)
        return Reply(200, {"id": response_id, "object": "response.deleted", "deleted": True})

    def input_items(self, req: Request, response_id: str) -> Reply:
        run_id, base = self._segment(req, response_id, "read")
        fold = self._fold(run_id, base)
        for ev in self.store.log.read(run_id, -1):
            fold.feed(ev)
            if fold.ended:
                break
        items = list(fold.segment.record.get("input") or []) if base == 0 else _answers(fold)
        items = [{"id": f"in_{base}_{i}", **item} for i, item in enumerate(items)]
        return Reply(200, page(items, req.query, default_order="desc"))

    def models(self, req: Request) -> Reply:
        self.access.allow(req, "list")
        return Reply(200, {"object": "list", "data": [_model(m) for m in self.runtime.agents()]})

    def model(self, req: Request, model: str) -> Reply:
        self.access.allow(req, "list", agent_id=model)
        return Reply(200, _model(self.runtime.agent_manifest(model)))

    # -- conversations (our sessions) ------------------------------------------------------------------------

    def create_conversation(self, req: Request) -> Reply:
        body = parse(req.body(), ConversationBody, limits=self.limits)
        if body.items:
            raise UnsupportedError("a conversation starts empty here: send its first items with a response")
        self.access.allow(req, "start")
        conversation = f"conv_{uuid.uuid4().hex}"
        self.runtime.claim_session(conversation, req.user_id)
        return Reply(200, _conversation(conversation, int(time.time()), body.metadata or {}))

    def _conversation(self, req: Request, conversation: str, action: str) -> None:
        known, _ = self.runtime.session_owner(conversation)
        if not known:
            raise SessionNotFoundError(f"conversation {conversation!r} does not exist (or has expired)")
        self.access.session(req, conversation, action, None)  # type: ignore[arg-type]

    def get_conversation(self, req: Request, conversation_id: str) -> Reply:
        self._conversation(req, conversation_id, "read")
        return Reply(200, _conversation(conversation_id, 0, {}))

    def delete_conversation(self, req: Request, conversation_id: str) -> Reply:
        self._conversation(req, conversation_id, "delete")
        with contextlib.suppress(SessionNotFoundError):  # claimed, but no run ever used it
            self.runtime.delete_session(conversation_id)
        return Reply(200, {"id": conversation_id, "object": "conversation.deleted", "deleted": True})

    def conversation_items(self, req: Request, conversation_id: str) -> Reply:
        """The session's history as items, newest first unless ``order=asc`` (``limit``, ``after``, ``before``)."""
        self._conversation(req, conversation_id, "read")
        self._synced(conversation_id)
        history = self.store.sessions.history(conversation_id)
        items = [
            {"id": f"item_{i}_{n}", **item}
            for i, message in enumerate(history)
            for n, item in enumerate(items_of(message))
        ]
        return Reply(200, page(items, req.query, default_order="desc"))

    def _synced(self, session_id: str) -> None:
        """The session's history with its newest run in it once that run ended: a worker appends a run's messages
        just after its end is committed, and a client that read the end lists the items next (read your writes).
        Appending is once per run, so doing it here too is harmless."""
        run_id = self.store.sessions.active(session_id)
        if run_id is None:
            return
        try:
            state, _ = self.store.load(run_id)
        except (RunNotFoundError, RunExpiredError):
            return
        if state.status.is_final:
            self.store.sessions.sync(state)

    def add_conversation_items(self, req: Request, conversation_id: str) -> Reply:
        """Items a client adds to its conversation (the Agents SDK's ``OpenAIConversationsSession`` adds each
        turn's): they join the session's history, so the next response in the conversation sees them."""
        body = parse(req.body(), ConversationItemsBody, limits=self.limits)
        for i, item in enumerate(body.items):
            check_item(item, f"items[{i}]", self.runtime.settings.max_message_chars)
        self._conversation(req, conversation_id, "continue")
        self._synced(conversation_id)  # after the run that just ended, not before it
        messages = messages_of(body.items)
        start = len(self.store.sessions.history(conversation_id))
        token = req.headers.get("Idempotency-Key") or uuid.uuid4().hex
        self.store.sessions.append(conversation_id, f"items:{token}", messages)
        items = [
            {"id": f"item_{start + i}_{n}", **item}
            for i, message in enumerate(messages)
            for n, item in enumerate(items_of(message))
        ]
        return Reply(200, _listing(items))


def _not_found(named: str) -> ResponseNotFoundError:
    """The 404 of a response that does not exist, has expired or is another user's: one wording for all."""
    return ResponseNotFoundError(f"no response {named!r} (it does not exist or has expired)")


def _confirmations(manifest: dict[str, Any]) -> frozenset[str]:
    """The names of the agent's tools that need a confirmation, from its manifest."""
    return frozenset(t["name"] for t in manifest.get("tools", []) if t.get("requires_confirmation"))


def _segment_of(state: RunState, base: int, confirm: frozenset[str]) -> ResponseSegment:
    stored = state.client.get("responses")
    record = expand(stored, state.client.get("context")) if isinstance(stored, dict) else {}
    functions = frozenset(t["name"] for t in state.client_tools if t.get("name"))
    return ResponseSegment(
        state.run_id, base, state.agent_id, dict(record or {}), functions, confirm, dict(state.usage)
    )


def _answers(fold: ResponseFold) -> list[dict[str, Any]]:
    """The input of a continued response: the decisions its continue carried."""
    items: list[dict[str, Any]] = []
    for d in fold.decisions:
        ident = d.get("tool_call_id", "")
        if fold.segment.functions and ident in fold.function_outputs:
            call_id = client_call_id(fold.segment.run_id, ident)
            items.append({"type": "function_call_output", "call_id": call_id, "output": fold.function_outputs[ident]})
        else:
            approve = d.get("decision") == "approved"
            ident = approval_request_id(fold.segment.run_id, ident)
            items.append({"type": "mcp_approval_response", "approval_request_id": ident, "approve": approve})
    return items


def _model(manifest: dict[str, Any]) -> dict[str, Any]:
    return {"id": manifest["name"], "object": "model", "created": 0, "owned_by": "agents-celery"}


def _conversation(ident: str, created: int, metadata: dict[str, str]) -> dict[str, Any]:
    return {"id": ident, "object": "conversation", "created_at": created, "metadata": metadata}

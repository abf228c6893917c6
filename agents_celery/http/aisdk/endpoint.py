"""The Vercel AI SDK's chat routes: ``useChat`` (npm ``ai``) runs, resumes, approves and stops our runs.

- ``POST /aisdk/<agent_id>``: the body ``DefaultChatTransport`` sends (:mod:`.input`). The chat ``id`` is our
  session (the first caller owns it, as everywhere). A last user message starts a run with it (its files as
  content parts); the same message again (a retried POST) attaches to the run it started, from its start. A last
  assistant message that carries answers (``approval-responded`` tool parts, outputs of the page's own tools)
  continues the chat's paused run with them. ``trigger: "regenerate-message"`` answers the last user message
  again in a new run. The answer is the run's UI message stream (:mod:`.render`) with ``x-workflow-run-id``.
- ``GET /aisdk/<agent_id>/<id>/stream`` (``id`` a chat or a run): 204 when nothing is live (the run ended or
  waits for a decision); else the live run's message replayed from its ``start`` (the SDK starts a resumed
  message from empty) and followed to its end or pause.
- ``POST /aisdk/<agent_id>/<id>/stop``: stop the chat's live run; its open streams end with ``abort`` and
  ``finish``. A fetch the page aborts (its tab closed) does not stop the run: only this route does.

Errors found before the stream starts are HTTP 4xx JSON, as on every route; after, an ``error`` chunk.
"""

from __future__ import annotations

from ...errors import RunNotFoundError, RunNotPausedError, SessionBusyError, ValidationError
from ...runs import RunStatus, RunView
from ...runtime import Runtime
from ..access import Access
from ..bodies import int_param
from ..messages import Reply, Request
from ..responses.render import starts_segment
from ..sse import LogStream
from .input import ChatBody, answers, parse_body, user_content
from .render import HEADER, ChatFold, ChatPresenter, chunk_frame

#: The idempotency key of the run a chat's user message started (scoped to the caller, as every key).
KEY = "aisdk:{chat}:{message}"


class ChatEndpoint:
    """The AI SDK routes over the API's Runtime and access checks (see the module docs)."""

    def __init__(self, runtime: Runtime, access: Access, keepalive_seconds: float = 15.0) -> None:
        self.runtime = runtime
        self.access = access
        self.store = runtime.store
        self.keepalive_seconds = keepalive_seconds

    # -- POST: a message, or answers ---------------------------------------------------------------------

    def chat(self, req: Request, agent_id: str) -> Reply:
        self.runtime.agent_manifest(agent_id)  # 404 before looking at the body
        self.access.allow(req, "start", agent_id=agent_id)
        body = parse_body(req.body())
        last = body.messages[-1]
        if last.role == "assistant":
            return self._answer(req, agent_id, body)
        if last.role != "user":
            raise ValidationError("messages must end with the new user message (or an assistant message with answers)")
        message = user_content(last)
        chat = body.id or self._chat_of(body)
        if chat is not None:
            self.access.session(req, chat, "start", agent_id)  # another user's chat: 404, as a hidden run
        name = last.id if body.trigger == "submit-message" else f"regenerate:{body.messageId or last.id}"
        key = KEY.format(chat=chat or "new", message=name)
        existing = self.runtime.idempotent_run(key, req.user_id)
        if existing is not None:  # the same message again: a retried POST
            view = self.access.run(req, existing, "read")
            return self._reply(view.run_id, view.session_id, -1)
        active = self.runtime.live_run(chat) if chat is not None else None
        if active is not None and active.status == RunStatus.PAUSED:
            ids = ", ".join(c.id for c in active.pending)
            raise SessionBusyError(
                f"chat {chat!r} waits for answers to its tool calls ({ids}): answer them (addToolApprovalResponse, "
                "addToolOutput) or stop the run before sending a new message"
            )
        stream = self.runtime.stream(
            agent_id,
            message,
            session_id=chat,
            user_id=req.user_id,
            idempotency_key=key,
            client_tools=[t.model_dump() for t in body.tools or []],
        )
        return self._reply(stream.run_id, stream.session_id, -1)

    def _chat_of(self, body: ChatBody) -> str | None:
        """A body without the chat's id (``WorkflowChatTransport`` sends only the messages): the session of the
        history's last assistant message that names one of our runs, else None (a new chat)."""
        for message in reversed(body.messages):
            if message.role == "assistant" and message.id.startswith("msg-"):
                try:
                    return self.store.log.info(message.id[4:]).session_id
                except RunNotFoundError:
                    continue
        return None

    def _answer(self, req: Request, agent_id: str, body: ChatBody) -> Reply:
        chat = body.id or self._chat_of(body)
        if chat is None:
            raise RunNotFoundError("the last message answers no run of ours: send the chat's id")
        self.access.session(req, chat, "continue", agent_id)
        run_id = self._run_of_message(chat, body.messages[-1].id)
        view = self.runtime.get(run_id)
        self.access.allow(req, "continue", view, view.agent_id)
        if view.agent_id != agent_id:
            raise RunNotFoundError(f"agent {agent_id!r} has no run {run_id!r}")
        decisions = answers(body.messages[-1], view.pending) if view.status == RunStatus.PAUSED else None
        if decisions is None:
            if not view.status.is_final and view.status != RunStatus.PAUSED:  # answered already: a retry
                return self._reply(run_id, chat, self._segment_base(run_id) - 1, fold_before=True)
            raise RunNotPausedError(
                f"the chat's run {run_id!r} is {view.status.value}: the last message answers none of its calls"
            )
        before = self.store.log.info(run_id).last_offset  # the continue's RUN_STARTED comes right after
        try:
            self.runtime.continue_run(run_id, decisions)
        except RunNotPausedError:  # the same answers, racing this request, went first
            return self._reply(run_id, chat, self._segment_base(run_id) - 1, fold_before=True)
        return self._reply(run_id, chat, before, fold_before=True)

    def _run_of_message(self, chat: str, message_id: str) -> str:
        """The run an assistant message is (its id names it), else the chat's newest run."""
        if message_id.startswith("msg-"):
            run_id = message_id[4:]
            try:
                if self.store.log.info(run_id).session_id == chat:
                    return run_id
            except RunNotFoundError:
                pass
        newest = self.runtime.runs(session_id=chat, limit=1).runs
        if not newest:
            raise RunNotFoundError(f"chat {chat!r} has no run to answer")
        return newest[0].run_id

    # -- GET: resume ----------------------------------------------------------------------------------------

    def resume(self, req: Request, agent_id: str, chat_id: str) -> Reply:
        start_index = int_param(req.query.get("startIndex"), "startIndex")
        view = self._find(req, agent_id, chat_id, "read")
        if start_index is not None:
            if view is None:
                raise RunNotFoundError(f"chat or run {chat_id!r} has no run of agent {agent_id!r}")
            return self._by_index(view, start_index)
        if view is None or view.status.is_final or view.status == RunStatus.PAUSED:
            return Reply(204)
        base = self._segment_base(view.run_id)
        fold = ChatFold(view.run_id, view.session_id, ends_after=base - 1)
        prefix = ""
        if base > 0:  # the earlier segments of the message, rendered: the page starts it from empty
            for ev in self.store.log.read(view.run_id, -1, limit=base):
                prefix += "".join(chunk_frame(c) for c in fold.feed(ev))
        presenter = ChatPresenter(fold, prefix)
        stream = LogStream(
            view.run_id,
            base - 1,
            "aisdk",
            until_pause=True,
            keepalive_seconds=self.keepalive_seconds,
            presenter=presenter,
        )
        return Reply(200, stream=stream, headers=_headers(view.run_id))

    def _by_index(self, view: RunView, start_index: int) -> Reply:
        """``@ai-sdk/workflow``'s reconnect: the chunks of the run's latest POST stream (its newest segment: the
        message's start, or the continue's) from chunk ``start_index`` on, live or replayed; a negative index counts
        from the end, and ``x-workflow-stream-tail-index`` names the last chunk so far."""
        base = self._segment_base(view.run_id)
        after = base - 1 if base > 0 else -1
        skip = start_index
        headers = _headers(view.run_id)
        if start_index < 0:  # the chunks so far, counted: a pure fold of the log, as the stream renders it
            sofar = self._fold(view.run_id, view.session_id, after)
            total = sum(len(sofar.feed(ev)) for ev in self.store.log.read(view.run_id, after))
            headers["x-workflow-stream-tail-index"] = str(total - 1)
            skip = max(0, total + start_index)
        presenter = ChatPresenter(self._fold(view.run_id, view.session_id, after), skip=skip)
        stream = LogStream(
            view.run_id, after, "aisdk", until_pause=True, keepalive_seconds=self.keepalive_seconds, presenter=presenter
        )
        return Reply(200, stream=stream, headers=headers)

    # -- POST: stop -----------------------------------------------------------------------------------------

    def stop(self, req: Request, agent_id: str, chat_id: str) -> Reply:
        view = self._find(req, agent_id, chat_id, "stop")
        if view is None or view.status.is_final:
            return Reply(200, {"run_id": view.run_id if view else None, "status": view.status.value if view else None})
        self.access.allow(req, "stop", view, view.agent_id)
        stopped = self.runtime.stop(view.run_id, "stopped from the chat")
        return Reply(200, {"run_id": stopped.run_id, "status": stopped.status.value})

    # -- helpers ------------------------------------------------------------------------------------------

    def _find(self, req: Request, agent_id: str, ident: str, action: str) -> RunView | None:
        """The run ``ident`` names (a run of the caller's), else the live (or newest) run of the chat ``ident``."""
        self.runtime.agent_manifest(agent_id)
        try:
            info = self.store.log.info(ident)
        except RunNotFoundError:
            info = None
        if info is not None and info.agent_id == agent_id:
            self.access.run(req, ident, "read", agent_id)
            return self.runtime.get(ident)
        self.access.session(req, ident, "read", agent_id)
        view = self.runtime.live_run(ident)
        if view is None:
            newest = self.runtime.runs(session_id=ident, agent_id=agent_id, limit=1).runs
            view = self.runtime.get(newest[0].run_id) if newest else None
        if view is not None:
            self.access.allow(req, "read", view, view.agent_id)
        return view

    def _segment_base(self, run_id: str) -> int:
        """The offset of the run's current segment's RUN_STARTED (0 for a run never paused)."""
        base = 0
        for ev in self.store.log.read(run_id, -1):
            if starts_segment(ev):
                base = ev.offset
        return base

    def _fold(self, run_id: str, chat: str, after: int) -> ChatFold:
        """A fold for a stream after ``after``: the message's earlier segments taken in (the page has them), so
        the results of the calls they made show."""
        fold = ChatFold(run_id, chat)
        if after >= 0:
            for ev in self.store.log.read(run_id, -1, limit=after + 1):
                fold.take_in(ev)
        return fold

    def _reply(self, run_id: str, chat: str, after: int, fold_before: bool = False) -> Reply:
        """The run's stream after ``after`` (``fold_before``: see :meth:`_fold`)."""
        fold = self._fold(run_id, chat, after) if fold_before else ChatFold(run_id, chat)
        stream = LogStream(
            run_id,
            after,
            "aisdk",
            until_pause=True,
            keepalive_seconds=self.keepalive_seconds,
            presenter=ChatPresenter(fold),
        )
        return Reply(200, stream=stream, headers=_headers(run_id))


def _headers(run_id: str) -> dict[str, str]:
    return {HEADER[0]: HEADER[1], "x-workflow-run-id": run_id}

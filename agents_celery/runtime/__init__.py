"""Runtime: the caller side. Start, follow, continue, stop and inspect runs; no Flask, no agent code.

``Runtime()`` reads the environment; ``Runtime(redis_url=..., celery_app=...)`` overrides. It writes to
Redis and sends step tasks by name, so it works from any process that can reach Redis and the broker.

The package holds the Runtime's parts: :mod:`.admission` (what a new run passes before it is created),
:mod:`.reads` (reads and deletes of agents, runs and sessions) and :mod:`.schedules` (stored schedules).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import redis

from ..agent import Agent
from ..broker.extension import host_app
from ..broker.fastpaths import FastPaths
from ..broker.publisher import StepPublisher, sender_app
from ..content import UserContent, check_for_framework, check_parts, inline_count, stored_form
from ..decisions import Decision, as_decision, decide, route, with_edited_args
from ..engine.children import reopened
from ..engine.lifecycle import Lifecycle
from ..engine.waiting import start_next
from ..errors import (
    OutputValidationError,
    PayloadTooLargeError,
    RedisUnavailableError,
    RunBusyError,
    RunExpiredError,
    RunFinishedError,
    RunNotFoundError,
    RunNotPausedError,
    RunTimeoutError,
    StateError,
    UnsupportedError,
)
from ..events import EventType, make_event
from ..output import check_schema
from ..runs import RunState, RunStatus, RunView
from ..settings import Settings, load_settings
from ..storage.connections import connect
from ..storage.leases import Leases
from ..storage.parts import record_fields
from ..storage.schedules import ScheduleStore
from ..storage.store import RunStore
from .admission import (
    Admission,
    check_strategy,
    check_webhook,
    fingerprint,
    idempotent_run_id,
    start_ms,
)
from .admission import client_tools as check_client_tools
from .schedules import Scheduling
from .stream import RunStream

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["RunStream", "Runtime", "Send"]

log = logging.getLogger(__name__)

#: Sends a step: ``send(run_id, step, agent_id, queue, task_id=..., root_id=..., parent_id=...)``.
Send = Callable[..., None]


class Runtime(Scheduling):
    """Start and follow durable agent runs (reads and deletes: :class:`.reads.Inspection`; schedules:
    :class:`.schedules.Scheduling`).

    Args:
        redis_url: Overrides ``AGENTS_CELERY_REDIS_URL``.
        celery_app: The app to send step tasks with (default: one built from the settings).
        settings: Full settings (default: the environment).
        agents: Agents known locally (for manifests when no worker has published them yet).
        enqueue: How a step is sent, ``enqueue(run_id, step, agent_id, queue, **ids)`` (``task_id``,
            ``root_id``, ``parent_id``); default: as a Celery task by name (:meth:`StepPublisher.send`).
            :class:`agents_celery.testing.InlineRunner` passes its in-process queue.
    """

    def __init__(
        self,
        redis_url: str | None = None,
        celery_app: Celery | None = None,
        settings: Settings | None = None,
        agents: Sequence[Agent] = (),
        *,
        enqueue: Send | None = None,
    ) -> None:
        self.settings = settings or load_settings(redis_url=redis_url)
        self.redis = connect(self.settings.redis_url, socket_connect_timeout=2, health_check_interval=30)
        fast = FastPaths.decide(self.settings.fast_paths)
        # It never claims a step: no state cache. Its log readers look at their kept connection the fast way.
        self.store = RunStore(self.redis, self.settings, cached_states=0, idle_check=fast.idle_check)
        self.leases = Leases(self.redis, self.store.keys)
        self.schedule_store = ScheduleStore(self.redis, self.store.keys)
        # The host's app that configure() joined (its broker, not ours: a Django project on RabbitMQ), if any.
        celery_app = celery_app or host_app(self.settings)
        self._owns_celery_app = celery_app is None
        #: The app steps are sent with: the caller's or host's own, or a bare one that only sends (no worker wiring).
        self.celery_app = celery_app or sender_app(self.settings)
        self.local_agents = {a.name: a for a in agents}
        self._publisher = StepPublisher(self.celery_app, self.settings.queue, fast)
        self._send = enqueue or self._publisher.send
        self.admission = Admission(self.store)
        #: Where a run this Runtime stops ends, and where a paused run it continues goes on.
        self.lifecycle = Lifecycle(self.store, self._resend, self._publisher.notify, self._send_first)

    # -- starting ---------------------------------------------------------------------------------------

    def stream(
        self,
        agent: Agent | str,
        message: UserContent,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        idempotency_key: str | None = None,
        client_tools: Sequence[dict[str, Any]] = (),
        client: dict[str, Any] | None = None,
        check_history: Callable[[list[dict[str, Any]]], None] | None = None,
        start_after: float | None = None,
        start_at: datetime | float | None = None,
        schedule: tuple[str, int] | None = None,
        webhook_url: str | None = None,
        multitask_strategy: str = "reject",
        output_schema: dict[str, Any] | None = None,
        canvas: dict[str, Any] | None = None,
    ) -> RunStream:
        """Start a run and return its stream handle (the run executes on the workers).

        A delayed run (``start_after`` or ``start_at``) is ``scheduled`` until its time: it is listed, cancellable
        with :meth:`stop`, and holds its session. The sweeper of any worker then sends its first step. It lives in
        Redis, so it survives restarts of every process.

        With ``idempotency_key``, a retried call (even one racing the first) returns the same run. The run id is
        derived from the key (and the user), so the run is created exactly once. A call refused (the session is
        busy) created nothing, so a later retry starts the run once the session is free.

        A refused call creates nothing: every error below but RedisUnavailableError comes before the run is created.

        Args:
            agent: The agent, as an object or by name.
            message: Text, or a list of Chat Completions content parts (text, ``image_url`` by URL or data URL,
                ``file`` with ``file_data``; :mod:`agents_celery.content`). The model gets them as they are.
                Their data is stored once, beside the run, not in each checkpoint.
            session_id: The session the run joins. None starts a session of its own.
            user_id: The user the run is of. A new session's owner is the user of its first run.
            idempotency_key: Makes a retried call return the run the first call created (see above).
            client_tools: Tools the caller runs itself (``name``, ``description``, ``parameters``). When the model
                calls one, the run pauses until :meth:`continue_run` brings the result (a decision with
                ``result``).
            client: AG-UI's ``state``, ``context`` and ``forwarded_props``, passed to the tools.
            check_history: Called with the session's history as it stands once the session is taken. It may
                refuse it (HistoryMismatchError); the session is given back then.
            start_after: Seconds to delay the run by.
            start_at: When the run starts: an aware datetime, or Unix seconds.
            schedule: The schedule id and tick time (ms) of the schedule tick that starts the run
                (:meth:`fire_schedules`).
            webhook_url: Where to POST a signed summary when the run completes, fails, is cancelled or pauses
                (:mod:`agents_celery.webhook`). It needs ``AGENTS_CELERY_WEBHOOK_SECRET``.
            multitask_strategy: What happens when another run of ``session_id`` is queued, running or paused.
                ``reject`` raises SessionBusyError. With ``enqueue`` this run waits, ``queued``, and starts when
                the runs before it in the session ended, seeing the history as it is then. With ``interrupt`` the
                live run is stopped and ends ``cancelled`` with its final event; this one starts after it.
            output_schema: A JSON Schema dict that makes the run's final answer structured output, overriding the
                agent's ``output_type``. The model is asked with it and the answer is validated. A failed answer
                is sent back to the model, ``output_retries`` times. The run's ``output`` is the validated JSON
                value (docs/output.md).
            canvas: The Celery canvas that waits for the run's end (``run_signature`` passes it; not for callers).

        Returns:
            The run's stream handle; for a retried idempotent call, the handle of the run the first call created.

        Raises:
            UnknownAgentError: no worker published an agent of that name and this Runtime knows none.
            ValidationError: ``message`` is not text or a list of well-formed parts, or a client tool, the delay,
                ``webhook_url``, ``multitask_strategy`` or ``idempotency_key`` is invalid.
            PayloadTooLargeError: the text is over ``max_message_chars``, or ``output_schema`` is too large.
            InputTooLargeError: a part is over ``max_part_bytes``, or the run's parts over ``max_input_bytes``
                (HTTP 413).
            OutputSchemaError: ``output_schema`` is not a valid JSON Schema (HTTP 422).
            UnsupportedError: ``output_schema`` for an agent of another framework, or a video part for a
                pydantic-ai agent.
            IdempotencyKeyReusedError: the key was used with another agent, message, session, user, client tools,
                client or output schema.
            SessionBusyError: another run holds the session and ``multitask_strategy`` is ``reject``.
            HistoryMismatchError: ``check_history`` refused the session's history (whatever it raises passes).
            RedisUnavailableError: Redis did not answer while the run was created.
        """
        manifest = self.agent_manifest(agent)
        checked = check_parts(message, self.settings)
        check_for_framework(checked, manifest.get("framework"))
        if output_schema is not None:
            check_schema(output_schema)
            if manifest.get("framework"):  # an agent of another framework has output types of its own
                raise UnsupportedError(
                    f"output_schema is not supported for agent {manifest['name']!r} ({manifest['framework']}); "
                    "give that agent an output type of its own framework"
                )
        extra_tools = check_client_tools(client_tools, manifest)
        start = start_ms(start_after, start_at)
        check_webhook(webhook_url, self.settings)
        check_strategy(multitask_strategy)
        asked = fingerprint(manifest["name"], message, session_id, user_id, [list(client_tools), client, output_schema])
        own_session = session_id is None
        if idempotency_key:
            run_id = idempotent_run_id(idempotency_key, user_id)
            session_id = session_id or run_id  # every retry of the call names the same session
        else:
            run_id, session_id = uuid.uuid4().hex, session_id or uuid.uuid4().hex
        try:
            if idempotency_key and self.admission.existing(run_id, asked, idempotency_key):
                return self.get_stream(run_id)
            # One round trip: the session's owner (the user of its first run), the session, its history.
            history = self.admission.admit(
                session_id, run_id, user_id, multitask_strategy != "reject", check_history, own_session
            )
            now = int(time.time() * 1000)
            content, parts = stored_form(checked, run_id)
            state = RunState(
                run_id=run_id,
                agent_id=manifest["name"],
                session_id=session_id,
                user_id=user_id,
                own_session=own_session,
                messages=[*(history or []), {"role": "user", "content": content}],
                history_len=len(history or []),
                client_tools=extra_tools,
                client=dict(client or {}),
                webhook_url=webhook_url,
                output_schema=output_schema,
                canvas=canvas,
                schedule_id=schedule[0] if schedule else None,
                scheduled_for=schedule[1] if schedule else None,
                created_at=now,
                updated_at=now,
            )
            queue = manifest.get("queue") or self.settings.queue
            first_task = uuid.uuid4().hex
            fields = {"queue": queue, "root_task": first_task, "request": asked, **record_fields(parts, checked.size)}
            if user_id:
                fields["user_id"] = user_id
            if history is None:  # waits for its session: no step is sent, start_next sends it once it is free
                fields["waiting"] = "1"
                start = None
            delay = 0.0 if start is None else (start - now) / 1000
            if delay > 0:  # the sweeper sends its first step when the time comes
                state.status = RunStatus.SCHEDULED
                fields["start_at"] = str(start)
            started = make_event(EventType.RUN_STARTED, thread_id=session_id, run_id=run_id)
            try:
                self.store.create(state, [started], fields)
            except StateError:  # the same idempotent call, racing this one, created it first
                if not self.admission.existing(run_id, asked, idempotency_key or ""):
                    raise
                return self.get_stream(run_id)
            self.store.index_new_run(state, delay if delay > 0 else self.settings.enqueue_grace_seconds)
            if history is None:
                self._line_up(state, multitask_strategy)
            elif delay <= 0:
                self._send(run_id, 0, state.agent_id, queue, task_id=first_task)
        except redis.ConnectionError as exc:
            raise RedisUnavailableError(f"Redis does not answer at {self.settings.redis_url}: {exc}") from exc
        return RunStream(self, run_id, session_id, state.agent_id)

    def _line_up(self, state: RunState, strategy: str) -> None:
        """A run created while its session was busy: in the session's line; ``interrupt`` stops the live run."""
        live = self.admission.line_up(state, strategy)
        if live is not None:
            with contextlib.suppress(RunFinishedError, RunNotFoundError, RunExpiredError):
                self.stop(live, f"interrupted by run {state.run_id}")
        self._start_next(state.session_id)  # the session may have been freed meanwhile

    def _start_next(self, session_id: str) -> None:
        start_next(self.store, self._send_first, session_id)

    def _send_first(self, run_id: str, agent_id: str, queue: str) -> None:
        """Send the first step of a run that waited for its session."""
        self._send(run_id, 0, agent_id, queue)

    def _resend(self, run_id: str, step: int, agent_id: str) -> None:
        """Send a step of an existing run (a continue), to its queue and in its chain of tasks."""
        queue, root, parent = self.store.run_fields(run_id, "queue", "root_task", "last_task")
        self._send(run_id, step, agent_id, queue or self.settings.queue, root_id=root, parent_id=parent)

    def get_stream(self, run_id: str) -> RunStream:
        """A stream handle for an existing run.

        Args:
            run_id: The run's id.

        Returns:
            The run's stream handle.

        Raises:
            RunNotFoundError: no run has that id.
            RunExpiredError: the run existed and its retention passed.
        """
        info = self.store.log.info(run_id)
        return RunStream(self, run_id, info.session_id, info.agent_id)

    # -- continuing -------------------------------------------------------------------------------------

    def continue_run(self, run_id: str, decisions: Sequence[Decision | dict[str, Any]] | None = None) -> RunStream:
        """Answer a paused run.

        A decision that does not fit leaves the run paused, untouched.

        Args:
            run_id: The paused run's id.
            decisions: One decision for each pending call, as :class:`Decision` objects or their JSON form. None or
                empty approves every pending call; a client tool's call still needs its result.

        Returns:
            The run's stream handle.

        Raises:
            RunNotPausedError: the run is not paused.
            RunBusyError: another continue holds it right now.
            DecisionError: a decision names no pending call or is malformed, some pending calls are left
                undecided, or a client tool's call has no result.
            ToolArgumentsError: edited arguments fail the tool's parameter schema.
            PayloadTooLargeError: more decisions than ``max_decisions``.
            RunNotFoundError: no run has that id.
            RunExpiredError: the run existed and its retention passed.
        """
        state, step = self.store.load(run_id)
        if state.status != RunStatus.PAUSED:
            raise RunNotPausedError(f"run {run_id!r} is {state.status.value}, not paused; nothing to continue")
        if decisions and len(decisions) > self.settings.max_decisions:
            raise PayloadTooLargeError(
                f"{len(decisions)} decisions; at most {self.settings.max_decisions} are accepted"
            )
        manifest = self.agent_manifest(state.active_agent or state.agent_id)  # the agent the calls are of
        if state.child_pending:
            return self._continue_tree(state, step, [as_decision(d) for d in decisions or []], manifest)
        calls = decide(state, [as_decision(d) for d in decisions or []], manifest)
        with self.lifecycle.still_paused(run_id, step) as (state, token):
            messages = with_edited_args(state.messages, calls)
            new = state.model_copy(update={"tool_calls": calls, "messages": messages}).moved_to(RunStatus.RUNNING)
            decided = [
                {"tool_call_id": c.id, "decision": c.decision}
                for c in calls
                if c.requires_confirmation or c.rerun or c.pause_reason == "client_tool"
            ]
            self.lifecycle.resume(new, token, step, {"continued": True, "decisions": decided})
        return RunStream(self, run_id, state.session_id, state.agent_id)

    def _continue_tree(
        self, state: RunState, step: int, decisions: list[Decision], manifest: dict[str, Any]
    ) -> RunStream:
        """Answer a run paused for calls of its child runs (and maybe its own): each decision goes to the child
        holding the call (which passes it further down), checked there before anything is written; the run
        goes on waiting for its children, and its own decided calls run in its next tool step."""
        run_id = state.run_id
        waited = [c.child_run_id for c in state.tool_calls if c.child_run_id and not c.done]
        paused = {cid: child for cid in waited if (child := self.store.load(cid)[0]).status == RunStatus.PAUSED}
        routing = route(state, paused, decisions)
        for child_id, ds in routing.forwarded.items():  # refused here, before anything is written
            child = paused[child_id]
            decide(child, ds, self.agent_manifest(child.active_agent or child.agent_id))
        calls = state.tool_calls
        if routing.has_own:
            calls = decide(state.model_copy(update={"child_pending": []}), routing.own, manifest)
        with self.lifecycle.still_paused(run_id, step) as (now, token):
            new = now.model_copy(update={"tool_calls": calls, "child_pending": []}).moved_to(RunStatus.RUNNING)
            decided = [{"tool_call_id": d.tool_call_id, "confirmed": d.confirmed} for d in decisions]
            # the invocations it still waits for go on in this segment
            meta = {"continued": True, "decisions": decided}
            self.lifecycle.resume(
                new, token, step, meta, events=reopened(new), awaiting=list(routing.forwarded), send=False
            )
        for child_id, ds in routing.forwarded.items():  # their ends wake this run
            self.continue_run(child_id, ds)
        if routing.has_own or not routing.forwarded:  # after the children run again, or its tool step would find
            self._resend(run_id, step, state.agent_id)  # them paused still (none forwarded: a child ended meanwhile)
        return RunStream(self, run_id, state.session_id, state.agent_id)

    # -- steering ---------------------------------------------------------------------------------------

    def send_message(self, run_id: str, message: UserContent) -> int:
        """Add a user message to a run that has not ended.

        Its next model turn takes it in, after the tool results of the turn running now. The log shows it as a
        user message (ids ``usr_...``), once. A run whose last turn is answering when it arrives goes on with
        another turn instead of ending.

        Args:
            run_id: The run's id.
            message: Text, or content parts (images, files) stored once beside the run. Its parts count against
                the run's ``max_input_bytes`` with the parts the run holds already.

        Returns:
            How many messages were sent to the run so far.

        Raises:
            RunFinishedError: the run already ended.
            RunNotFoundError: no run has that id.
            RunExpiredError: the run existed and its retention passed.
            ValidationError: ``message`` is not text or a list of well-formed parts.
            PayloadTooLargeError: the text is over ``max_message_chars``.
            InputTooLargeError: a part, or the run's parts, over the limits.
            UnsupportedError: a video part for a pydantic-ai agent.
        """
        checked = check_parts(message, self.settings)
        info = self.store.log.info(run_id)  # 404 / 410 for an unknown or expired run
        if info.status == "ended":  # refused before its parts are stored and counted against the run
            raise RunFinishedError(f"run {run_id!r} has already ended")
        if checked.parts is not None:  # the parts its agent cannot be given are refused, as when it started
            state, _ = self.store.load(run_id)
            manifest = self.store.agents.get(state.agent_id) or {}
            check_for_framework(checked, manifest.get("framework"))
        content, count = checked.content, inline_count(checked)
        if checked.parts is not None and checked.size:
            first = self.store.parts.reserve(run_id, count, checked.size, self.settings.max_input_bytes)
            content, stored = stored_form(checked, run_id, first)
            self.store.parts.add(run_id, stored)
        return self.store.inbox_push(run_id, content)

    def follow_push(self, run_id: str, config_id: str) -> None:
        """Start delivering the status updates of the run (an A2A task) to one of its push configs.

        A worker follows the log and POSTs them in order, with retries.

        Args:
            run_id: The run's id.
            config_id: The id of the push config stored for the run (:mod:`agents_celery.storage.pushes`).
        """
        self._publisher.push(run_id, config_id)

    # -- stopping ---------------------------------------------------------------------------------------

    def stop(self, run_id: str, reason: str = "stopped by request") -> RunView:
        """Stop a run whatever state it is in.

        A worker holding it stops at its next check (sub-second). A run no worker holds ends here, ``cancelled``.
        Its child runs are stopped with it.

        Args:
            run_id: The run's id.
            reason: Why the run is stopped, stored with the stop request.

        Returns:
            The run as it stands after the stop request.

        Raises:
            RunFinishedError: the run already ended.
            RunNotFoundError: no run has that id.
            RunExpiredError: the run existed and its retention passed.
        """
        state, _ = self.store.load(run_id)
        if state.status.is_final:
            raise RunFinishedError(f"run {run_id!r} already ended ({state.status.value})")
        self.store.request_stop(run_id, reason)
        for child_id in state.children:  # its child runs stop with it
            with contextlib.suppress(RunFinishedError, RunNotFoundError, RunExpiredError):
                self.stop(child_id, f"its parent run {run_id} was stopped")
        cancelled = self.lifecycle.cancel_idle(run_id)  # nobody works on it: it ends here and now
        if cancelled is not None and cancelled.parent_run_id is not None:
            self._child_stopped(cancelled, cancelled.parent_run_id)
        return self.get(run_id)

    def _child_stopped(self, child: RunState, parent_id: str) -> None:
        """A child stopped alone (its end woke its parent): a parent paused for that child's calls only goes on."""
        try:
            parent, _ = self.store.load(parent_id)
        except (RunNotFoundError, RunExpiredError):
            return
        mine = f"{child.run_id}:"
        only_its = parent.child_pending and all(c.id.startswith(mine) for c in parent.child_pending)
        own = any(c.decision == "pending" for c in parent.tool_calls)
        if parent.status == RunStatus.PAUSED and only_its and not own and not self.store.stop_requested(parent_id):
            with contextlib.suppress(RunBusyError, RunNotPausedError):
                self.continue_run(parent_id)  # nothing to forward: its tool step collects the child's end

    # -- blocking ---------------------------------------------------------------------------------------

    def run(self, agent: Agent | str, message: UserContent, *, timeout: float | None = None, **kwargs: Any) -> Any:
        """Start a run and block until it ends or pauses.

        The run is bound to the caller: on Ctrl-C or timeout it is stopped. The timeout holds whether events come
        or not (it is checked at least every quarter second).

        Args:
            agent: The agent, as an object or by name.
            message: Text or content parts, as :meth:`stream` takes them.
            timeout: Seconds to wait at most (None: no limit).
            **kwargs: The other keyword arguments of :meth:`stream`.

        Returns:
            The run's :class:`RunView`. When the agent has a pydantic ``output_type`` (given as the ``Agent``, or
            known to this Runtime through ``agents``) and the run no ``output_schema`` of its own, a completed run
            returns the validated output as an instance of that model instead.

        Raises:
            RunTimeoutError: the run did not finish within ``timeout``; it was stopped.
            OutputValidationError: the run of such an agent failed for want of a valid answer.
            KeyboardInterrupt: the caller gave up (Ctrl-C); the run was stopped.
            AgentsCeleryError: what :meth:`stream` raises.
        """
        stream = self.stream(agent, message, **kwargs)
        deadline = None if timeout is None else time.monotonic() + timeout
        # Pages of events, and an idle tick when a quarter second brings none, until the run ends or pauses: the
        # deadline is checked on each, so a run that says nothing (no worker, a long tool) cannot outlast it.
        pages = self.store.log.tail(stream.id, -1, until_pause=True, block_ms=250, idle_seconds=0.25)
        try:
            for _page in pages:
                if deadline is not None and time.monotonic() > deadline:
                    raise RunTimeoutError(
                        f"run {stream.id!r} did not finish within {timeout}s; it was stopped", stream.id
                    )
        except (KeyboardInterrupt, TimeoutError):
            with contextlib.suppress(RunFinishedError):
                self.stop(stream.id, "caller gave up")
            raise
        view = self.get(stream.id)
        known = agent if isinstance(agent, Agent) else self.local_agents.get(agent)
        spec = known.output if known is not None and kwargs.get("output_schema") is None else None
        if spec is None or spec.model is None:
            return view
        if view.status == RunStatus.COMPLETED:
            return spec.instance(view.output)
        if view.status == RunStatus.FAILED and view.error and view.error.get("type") == "OutputValidationError":
            raise OutputValidationError(f"run {view.run_id!r}: {view.error.get('message')}")
        return view

    def close(self) -> None:
        """Close the Redis client, and the broker connections of the Celery app this Runtime made.

        A Celery app given to this Runtime, or the host's, is left open.
        """
        self.redis.close()
        self._publisher.close()
        if self._owns_celery_app:
            self.celery_app.close()

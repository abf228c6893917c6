"""Runtime: the caller side. Start, follow, continue, stop and inspect runs; no Flask, no agent code.

``Runtime()`` reads the environment; ``Runtime(redis_url=..., celery_app=...)`` overrides. It writes to
Redis and sends step tasks by name, so it works from any process that can reach Redis and the broker.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import redis

from .agent import Agent
from .broker.extension import host_app
from .broker.fastpaths import FastPaths
from .broker.publisher import StepPublisher, sender_app
from .decisions import Decision, as_decision, decide, with_edited_args
from .engine.children import reopened, unfinished, wake_parent
from .engine.waiting import start_next
from .errors import (
    DecisionError,
    IdempotencyKeyReusedError,
    PayloadTooLargeError,
    RedisUnavailableError,
    RunBusyError,
    RunExpiredError,
    RunFinishedError,
    RunLiveError,
    RunNotFoundError,
    RunNotPausedError,
    RunTimeoutError,
    ScheduleNotFoundError,
    SessionBusyError,
    SessionNotFoundError,
    StateError,
    UnknownAgentError,
    ValidationError,
)
from .events import Event, EventType, close_open, make_event, parse_position
from .runs import RunPage, RunState, RunStatus, RunView, SessionInfo, SessionPage, SessionView
from .schedule import Schedule
from .settings import Settings, load_settings
from .storage.connections import connect, connect_async
from .storage.eventlog import AsyncEventLog, check_offset
from .storage.index import Filters
from .storage.leases import Leases
from .storage.schedules import ScheduleStore
from .storage.store import RunStore
from .webhook import check_url

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger(__name__)

#: OpenAI's rule for function names (client tools are sent to the model as functions).
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


#: Sends a step: ``send(run_id, step, agent_id, queue, task_id=..., root_id=..., parent_id=...)``.
Send = Callable[..., None]


def _fingerprint(agent: str, message: str, session_id: str | None, user_id: str | None) -> str:
    """What an idempotent call asked for: two calls with one key must agree on it."""
    return hashlib.sha256(json.dumps([agent, message, session_id, user_id]).encode()).hexdigest()[:32]


def _idempotent_run_id(key: str, user_id: str | None) -> str:
    """The run id of the call with this Idempotency-Key (keys are scoped to their user)."""
    if not isinstance(key, str) or not key or len(key) > 255:
        raise ValidationError("Idempotency-Key must be 1 to 255 characters")
    return hashlib.sha256(json.dumps([key, user_id]).encode()).hexdigest()[:32]


def _position(offset: int | str | None) -> tuple[int, str | None]:
    """``None`` (from the start), an offset, or ``"<offset>.<tag>"``: the offset to read after, and the tag."""
    if offset is None:
        return -1, None
    if isinstance(offset, str):
        try:
            after, tag = parse_position(offset)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None
        return check_offset(after, "offset"), tag
    return check_offset(offset, "offset"), None


def _start_ms(start_after: float | None, start_at: datetime | float | None) -> int | None:
    """When a delayed run starts, in Unix ms (None: now)."""
    if start_after is not None and start_at is not None:
        raise ValidationError("give start_after or start_at, not both")
    if start_after is not None:
        if not isinstance(start_after, int | float) or not math.isfinite(start_after) or start_after < 0:
            raise ValidationError(f"start_after must be a number of seconds, 0 or more; got {start_after!r}")
        return int((time.time() + start_after) * 1000)
    if start_at is None:
        return None
    if isinstance(start_at, datetime):
        if start_at.tzinfo is None:
            raise ValidationError("start_at must carry a time zone (an aware datetime)")
        return int(start_at.timestamp() * 1000)
    if not isinstance(start_at, int | float) or not math.isfinite(start_at) or isinstance(start_at, bool):
        raise ValidationError(f"start_at must be a datetime or Unix seconds; got {start_at!r}")
    return int(start_at * 1000)


def _client_tools(specs: Sequence[dict[str, Any]], manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The caller's own tools, checked: OpenAI function names, unique, none shadowing one of the agent's."""
    own = {t["name"] for t in manifest.get("tools", [])}
    out: list[dict[str, Any]] = []
    for spec in specs:
        name = spec.get("name") if isinstance(spec, dict) else None
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise ValidationError(f"a client tool needs a name of 1-64 letters, digits, '_' or '-'; got {name!r}")
        if name in own or any(t["name"] == name for t in out):
            raise ValidationError(f"client tool {name!r} is named twice (or like one of the agent's tools)")
        params = spec.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise ValidationError(f"the parameters of client tool {name!r} must be a JSON schema object")
        out.append({"name": name, "description": str(spec.get("description") or ""), "parameters": params})
    return out


class RunStream:
    """A handle on one run's event log. Persist ``run_id`` and the last offset you saw to reconnect later.

    The HTTP client's :class:`agents_celery.client.RunStream` has the same names: ``run_id`` (``id``),
    ``session_id``, ``agent_id``, ``events(offset)`` and ``get()``.
    """

    def __init__(self, runtime: Runtime, run_id: str, session_id: str, agent_id: str) -> None:
        self.runtime = runtime
        self.run_id = run_id
        self.session_id = session_id
        self.agent_id = agent_id

    @property
    def id(self) -> str:
        """The run id (``run_id``)."""
        return self.run_id

    def events(self, offset: int | str | None = None, *, until_pause: bool = True) -> Iterator[Event]:
        """The events after ``offset`` (all when None), then live ones, until the run ends or pauses.

        ``offset`` may be a position, ``"140.1a2b3c4d"`` (an event's :attr:`~agents_celery.events.Event.position`):
        LogRewoundError then says when the log no longer holds that event at 140 (Redis lost writes).
        """
        after, tag = _position(offset)
        if tag is not None:
            self.runtime.store.log.verify(self.run_id, after, tag)
        return self.runtime.store.log.events(self.run_id, after, until_pause=until_pause)

    async def aevents(self, offset: int | str | None = None, *, until_pause: bool = True) -> AsyncIterator[Event]:
        """Async version of :meth:`events`."""
        after, tag = _position(offset)
        # A client per call: an asyncio Redis client belongs to the event loop that created it.
        client = connect_async(self.runtime.settings.redis_url, socket_connect_timeout=2)
        try:
            log = AsyncEventLog(client, self.runtime.store.keys)
            if tag is not None:
                await log.verify(self.run_id, after, tag)
            async for event in log.events(self.run_id, after, until_pause=until_pause):
                yield event
        finally:
            await client.aclose()

    def get(self) -> RunView:
        """The run as it stands (:meth:`Runtime.get`)."""
        return self.runtime.get(self.run_id)

    def __repr__(self) -> str:
        return f"RunStream(run_id={self.run_id!r}, agent={self.agent_id!r})"


#: What holds a session's active key while the session is being deleted (no run starts in it meanwhile).
_DELETING = "(deleting)"
#: What a new run does when its session is busy (``Runtime.stream``'s ``multitask_strategy``).
STRATEGIES = ("reject", "enqueue", "interrupt")


class Runtime:
    """Start and follow durable agent runs.

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

    # -- agents ----------------------------------------------------------------------------------------

    def agent_manifest(self, agent: Agent | str) -> dict[str, Any]:
        """The manifest of an agent given by object or name; UnknownAgentError when nobody serves it."""
        if isinstance(agent, Agent):
            return agent.manifest()
        if agent in self.local_agents:
            return self.local_agents[agent].manifest()
        manifest = self.store.manifest(agent)
        if manifest is None:
            known = [m["name"] for m in self.store.manifests()]
            raise UnknownAgentError(f"no agent named {agent!r}; known agents: {known}. Is a worker serving it?")
        return manifest

    def agents(self) -> list[dict[str, Any]]:
        """Manifests of every agent workers published (and local ones), in module order."""
        published = self.store.manifests()
        names = {m["name"] for m in published}
        return published + [a.manifest() for a in self.local_agents.values() if a.name not in names]

    # -- starting ---------------------------------------------------------------------------------------

    def stream(
        self,
        agent: Agent | str,
        message: str,
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
    ) -> RunStream:
        """Start a run and return its stream handle (the run executes on the workers).

        ``client_tools`` (``name``, ``description``, ``parameters``) are tools the caller runs itself: when the
        model calls one the run pauses until :meth:`continue_run` brings the result (a decision with
        ``result``). ``client`` (AG-UI's ``state``, ``context``, ``forwarded_props``) is passed to the tools.
        ``check_history(history)`` may refuse the session's history as it stands once the session is taken
        (HistoryMismatchError): nothing is created then.

        ``start_after`` (seconds) or ``start_at`` (an aware datetime, or Unix seconds) delay the run: it is
        ``scheduled`` (listed, cancellable with :meth:`stop`, holding its session) until then, when the sweeper
        of any worker sends its first step. It lives in Redis, so it survives restarts of every process.

        ``multitask_strategy``: what happens when another run of ``session_id`` is queued, running or paused:
        ``reject`` (SessionBusyError), ``enqueue`` (this run waits, ``queued``, and starts when the runs before
        it in the session ended, seeing the history as it is then) or ``interrupt`` (the live run is stopped,
        ends ``cancelled`` with its final event, and this one starts after it).

        ``webhook_url``: POST a signed summary there when the run completes, fails, is cancelled or pauses
        (:mod:`agents_celery.webhook`); needs ``AGENTS_CELERY_WEBHOOK_SECRET``.

        With ``idempotency_key``, a retried call (even one racing the first) returns the same run: the run id is
        derived from the key (and the user), so the run is created exactly once. A key reused with another
        agent, message, session or user is refused (IdempotencyKeyReusedError); a call refused (the session is
        busy) created nothing, so a later retry starts the run once the session is free.
        """
        manifest = self.agent_manifest(agent)
        self._check_message(message)
        extra_tools = _client_tools(client_tools, manifest)
        start_ms = _start_ms(start_after, start_at)
        self._check_webhook(webhook_url)
        if multitask_strategy not in STRATEGIES:
            raise ValidationError(f"multitask_strategy must be one of {list(STRATEGIES)}, got {multitask_strategy!r}")
        fingerprint = _fingerprint(manifest["name"], message, session_id, user_id)
        own_session = session_id is None
        if idempotency_key:
            run_id = _idempotent_run_id(idempotency_key, user_id)
            session_id = session_id or run_id  # every retry of the call names the same session
        else:
            run_id, session_id = uuid.uuid4().hex, session_id or uuid.uuid4().hex
        try:
            if idempotency_key and (existing := self._existing(run_id, fingerprint, idempotency_key)) is not None:
                return existing
            self.store.session_own(session_id, user_id)  # a session belongs to the user of its first run
            waits = not self._take_session(session_id, run_id, multitask_strategy != "reject")
            history = [] if waits else self._history(session_id, run_id, check_history)
            now = int(time.time() * 1000)
            state = RunState(
                run_id=run_id,
                agent_id=manifest["name"],
                session_id=session_id,
                user_id=user_id,
                own_session=own_session,
                messages=[*history, {"role": "user", "content": message}],
                history_len=len(history),
                client_tools=extra_tools,
                client=dict(client or {}),
                webhook_url=webhook_url,
                schedule_id=schedule[0] if schedule else None,
                scheduled_for=schedule[1] if schedule else None,
                created_at=now,
                updated_at=now,
            )
            queue = manifest.get("queue") or self.settings.queue
            first_task = uuid.uuid4().hex
            fields = {"queue": queue, "root_task": first_task, "request": fingerprint}
            if user_id:
                fields["user_id"] = user_id
            if waits:  # no step is sent: start_next sends it once the session is free
                fields["waiting"] = "1"
                start_ms = None
            delay = 0.0 if start_ms is None else (start_ms - now) / 1000
            if delay > 0:  # the sweeper sends its first step when the time comes
                state.status = RunStatus.SCHEDULED
                fields["start_at"] = str(start_ms)
            started = make_event(EventType.RUN_STARTED, thread_id=session_id, run_id=run_id)
            try:
                self.store.create(state, [started], fields)
            except StateError:  # the same idempotent call, racing this one, created it first
                existing = self._existing(run_id, fingerprint, idempotency_key or "")
                if existing is None:
                    raise
                return existing
            self.store.created(state, delay if delay > 0 else self.settings.enqueue_grace_seconds)
            if waits:
                self._line_up(state, multitask_strategy)
            elif delay <= 0:
                self._send(run_id, 0, state.agent_id, queue, task_id=first_task)
        except redis.ConnectionError as exc:
            raise RedisUnavailableError(f"Redis does not answer at {self.settings.redis_url}: {exc}") from exc
        return RunStream(self, run_id, session_id, state.agent_id)

    def _history(
        self, session_id: str, run_id: str, check: Callable[[list[dict[str, Any]]], None] | None
    ) -> list[dict[str, Any]]:
        """The session's history for a new run that took the session; a refused check gives the session back."""
        history = self.store.session_history(session_id)
        if check is not None:
            try:
                check(history)
            except Exception:
                self.store.session_release(session_id, run_id)
                raise
        return history

    def idempotent_run(self, idempotency_key: str, user_id: str | None = None) -> str | None:
        """The id of the run :meth:`stream` created for ``idempotency_key`` (and user), or None."""
        run_id = _idempotent_run_id(idempotency_key, user_id)
        (sent,) = self.store.run_fields(run_id, "request")
        return run_id if sent is not None else None

    def _check_message(self, message: str) -> None:
        if not isinstance(message, str) or not message.strip():
            raise ValidationError("message must be a non-empty string")
        if len(message) > self.settings.max_message_chars:
            most = self.settings.max_message_chars
            raise PayloadTooLargeError(f"the message has {len(message)} characters; at most {most} are accepted")

    def _check_webhook(self, url: str | None) -> None:
        if url is not None:
            check_url(url, self.settings.webhook_allow)
            if not self.settings.webhook_secret:
                raise ValidationError("webhook_url needs AGENTS_CELERY_WEBHOOK_SECRET (webhooks are signed with it)")

    def _existing(self, run_id: str, fingerprint: str, key: str) -> RunStream | None:
        """The run an idempotent call already created (None if none); refused if the call differs."""
        (sent,) = self.store.run_fields(run_id, "request")
        if sent is None:
            return None
        if sent != fingerprint:
            raise IdempotencyKeyReusedError(
                f"Idempotency-Key {key!r} was used for run {run_id!r} with another agent, message, session or "
                "user; use a new key for a new request"
            )
        return self.get_stream(run_id)

    def _line_up(self, state: RunState, strategy: str) -> None:
        """A run created while its session was busy: in the session's line; ``interrupt`` stops the live run."""
        self.store.wait_in_line(state.session_id, state.run_id)
        active = self.store.session_active(state.session_id)
        if strategy == "interrupt" and active not in (None, state.run_id, _DELETING):
            with contextlib.suppress(RunFinishedError, RunNotFoundError, RunExpiredError):
                self.stop(active, f"interrupted by run {state.run_id}")
        self._start_next(state.session_id)  # the session may have been freed meanwhile

    def _start_next(self, session_id: str) -> None:
        start_next(self.store, lambda rid, agent, queue: self._send(rid, 0, agent, queue), session_id)

    def _take_session(self, session_id: str, run_id: str, may_wait: bool = False) -> bool:
        """Take the session for ``run_id``; when another run holds it, False if ``may_wait``, else
        SessionBusyError."""
        try:
            self._take(session_id, run_id)
        except SessionBusyError:
            if not may_wait:
                raise
            return False
        return True

    def _take(self, session_id: str, run_id: str) -> None:
        previous = self.store.session_active(session_id)
        if previous == run_id:
            return  # an idempotent retry of the call that took it
        if previous is not None:
            try:
                prev_state, _ = self.store.load(previous)
            except (RunFinishedError, Exception):
                prev_state = None
            if prev_state is not None and not prev_state.status.is_final:
                # The holder may be another user's run: say only that the session is busy.
                raise SessionBusyError(
                    f"session {session_id!r} is busy: a run of it is {prev_state.status.value}; "
                    "wait for it to end, continue it, or stop it"
                )
            if prev_state is not None:
                self.store.session_sync(prev_state)  # heals a crash between its end and the sync
        if self.store.session_take(session_id, run_id, previous):
            return
        if self.store.session_active(session_id) == run_id:
            return  # a retry of this very call (one Idempotency-Key) took it first: same run, not busy
        raise SessionBusyError(f"session {session_id!r} was taken by another run just now; try again")

    def session_owner(self, session_id: str) -> tuple[bool, str | None]:
        """Whether the session exists with an owner, and who: the user of its first run (None: no user).

        A session kept from before owners were recorded is given the user of its newest run, once."""
        known, owner = self.store.session_owner(session_id)
        if known:
            return known, owner
        newest = self.runs(session_id=session_id, limit=1).runs
        if not newest:
            return False, None
        return True, self.store.session_own(session_id, newest[0].user_id)

    def claim_session(self, session_id: str, user_id: str | None) -> str | None:
        """The session's owner, recording ``user_id`` as it when the session has none yet (first caller wins)."""
        known, owner = self.session_owner(session_id)
        return owner if known else self.store.session_own(session_id, user_id)

    def _resend(self, run_id: str, step: int, agent_id: str) -> None:
        """Send a step of an existing run (a continue), to its queue and in its chain of tasks."""
        queue, root, parent = self.store.run_fields(run_id, "queue", "root_task", "last_task")
        self._send(run_id, step, agent_id, queue or self.settings.queue, root_id=root, parent_id=parent)

    # -- schedules (fired by Celery beat: agents_celery/beat.py) ------------------------------------------------

    def schedule(
        self,
        agent: Agent | str,
        message: str,
        *,
        cron: str | None = None,
        every: float | None = None,
        session_id: str | None = None,
        name: str | None = None,
        user_id: str | None = None,
    ) -> Schedule:
        """Run ``agent`` with ``message`` on a cron expression (UTC) or every ``every`` seconds, from now on.

        Each tick starts one run (its idempotency key is the schedule id and the tick's time, so two beats or
        a restarted one never start a tick twice). With ``session_id`` every run joins that session; a tick
        that finds the session's previous run still live is skipped.
        """
        manifest = self.agent_manifest(agent)
        now = int(time.time() * 1000)
        found = Schedule(
            uuid.uuid4().hex, manifest["name"], message, cron, every, session_id, name, user_id, created_at=now
        ).validate()
        if len(message) > self.settings.max_message_chars:
            raise PayloadTooLargeError(
                f"the message has {len(message)} characters; at most {self.settings.max_message_chars} are accepted"
            )
        found.next_at = found.due_after(now)
        self.schedule_store.save(found, found.next_at)
        return found

    def schedules(self) -> list[Schedule]:
        """Every schedule, oldest first."""
        return self.schedule_store.all()

    def get_schedule(self, schedule_id: str) -> Schedule:
        found = self.schedule_store.get(schedule_id)
        if found is None:
            raise ScheduleNotFoundError(f"no schedule {schedule_id!r}")
        return found

    def pause_schedule(self, schedule_id: str, paused: bool = True) -> Schedule:
        """Pause (no ticks fire) or resume a schedule; a resumed one goes on from its next tick after now."""
        found = self.get_schedule(schedule_id)
        found.paused = paused
        found.next_at = found.due_after(int(time.time() * 1000))
        self.schedule_store.save(found, found.next_at)
        return found

    def delete_schedule(self, schedule_id: str) -> None:
        if not self.schedule_store.delete(schedule_id):
            raise ScheduleNotFoundError(f"no schedule {schedule_id!r}")

    def fire_schedules(self, now_ms: int | None = None) -> float | None:
        """Start the runs of the ticks due now (Celery beat calls this); seconds until the next one (None: none).

        A tick missed while no beat ran (or while the schedule was paused) is not made up, but the last one
        due is fired once when beat comes back.
        """
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        for schedule_id, due in self.schedule_store.due(now):
            found = self.schedule_store.get(schedule_id)
            if found is None:
                self.schedule_store.delete(schedule_id)
                continue
            tick = found.latest_due(due, now)
            if not found.paused:
                self._fire(found, tick)
            self.schedule_store.advance(schedule_id, found.due_after(now))
        following = self.schedule_store.next_due()
        return None if following is None else max(0.0, (following - now) / 1000)

    def _fire(self, found: Schedule, tick: int) -> None:
        try:
            self.stream(
                found.agent_id,
                found.message,
                session_id=found.session_id,
                user_id=found.user_id,
                idempotency_key=f"schedule:{found.schedule_id}:{tick}",
                schedule=(found.schedule_id, tick),
            )
        except (SessionBusyError, UnknownAgentError, ValidationError) as exc:
            log.warning("schedule %s: tick %d not started: %s", found.schedule_id, tick, exc)

    # -- listing ----------------------------------------------------------------------------------------

    def runs(
        self,
        *,
        status: RunStatus | str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
        keep: Callable[[RunView], bool] | None = None,
    ) -> RunPage:
        """Runs matching every filter given, newest first; ``page.next_cursor`` asks for the next page (None:
        the last). A page may hold fewer than ``limit`` runs when few match; ``keep`` filters further (the
        API's authorization). Ended runs are listed until their retention is over."""
        if status is not None and not isinstance(status, RunStatus):
            try:
                status = RunStatus(status)
            except ValueError:
                known = ", ".join(s.value for s in RunStatus)
                raise ValidationError(f"status must be one of {known}, got {status!r}") from None
        filters = Filters(status, agent_id or None, session_id or None, user_id or None)
        return self.store.index.page(filters, limit, cursor, keep)

    def sessions(
        self,
        *,
        user_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
        keep: Callable[[str], bool] | None = None,
    ) -> SessionPage:
        """Sessions (of ``user_id``, or all), most recently active first."""
        found, next_cursor = self.store.index.sessions_page(user_id or None, limit, cursor, keep)
        infos = [SessionInfo(sid, ms, self.store.session_active(sid), self.session_owner(sid)[1]) for sid, ms in found]
        return SessionPage(infos, next_cursor)

    def session(self, session_id: str, limit: int = 100) -> SessionView:
        """A session's conversation (the history its next run sees) and its newest ``limit`` runs.

        Raises:
            SessionNotFoundError: nothing of the session is kept.
        """
        page = self.runs(session_id=session_id, limit=limit)
        messages = self.store.session_history(session_id)
        active = self.store.session_active(session_id)
        if not page.runs and not messages and active is None:
            raise SessionNotFoundError(f"session {session_id!r} does not exist (or has expired)")
        return SessionView(session_id, messages, page.runs, active, self.session_owner(session_id)[1])

    def delete_run(self, run_id: str) -> None:
        """Delete an ended run: its log, state and index entries (it is then unknown: 404).

        Raises:
            RunLiveError: the run has not ended (stop it first). RunNotFoundError / RunExpiredError.
        """
        state, _ = self.store.load(run_id)
        if not state.status.is_final:
            raise RunLiveError(f"run {run_id!r} is {state.status.value}; stop it before deleting it")
        for child_id in state.children:  # kept as long as their parent, deleted with it
            with contextlib.suppress(RunNotFoundError, RunExpiredError, RunLiveError):
                self.delete_run(child_id)
        self.store.delete_run(state)

    def delete_session(self, session_id: str) -> None:
        """Delete a session: its conversation and its runs.

        Raises:
            SessionBusyError: a run of it is queued, running or paused. SessionNotFoundError.
        """
        view = self.session(session_id, limit=1)
        if view.active_run_id is not None or not self.store.session_take(session_id, _DELETING, None):
            raise SessionBusyError(f"session {session_id!r} has a live run; stop it before deleting the session")
        users: list[str | None] = []
        try:
            while page := self.runs(session_id=session_id, limit=100).runs:
                for run in page:
                    if not run.status.is_final:  # started before this call took the session: keep it all
                        raise SessionBusyError(f"session {session_id!r} has a live run ({run.run_id})")
                    self.delete_run(run.run_id)
                    users.append(run.user_id)
            self.store.delete_session(session_id, users)
        finally:
            self.store.session_release(session_id, _DELETING)

    def get_stream(self, run_id: str) -> RunStream:
        """A stream handle for an existing run (RunNotFoundError / RunExpiredError otherwise)."""
        info = self.store.log.info(run_id)
        return RunStream(self, run_id, info.session_id, info.agent_id)

    # -- inspecting -------------------------------------------------------------------------------------

    def get(self, run_id: str) -> RunView:
        """The run's committed state and where its log stands."""
        state, _ = self.store.load(run_id)
        info = self.store.log.info(run_id)
        (queue,) = self.store.run_fields(run_id, "queue")
        return RunView(
            run_id=run_id,
            agent_id=state.agent_id,
            session_id=state.session_id,
            user_id=state.user_id,
            queue=queue or self.settings.queue,
            status=state.status,
            last_offset=info.last_offset,
            output=state.output,
            error=state.error.model_dump() if state.error else None,
            pending=state.pending,
            tool_calls=state.tool_calls,
            messages=state.new_messages,
            stop_requested=self.store.stop_requested(run_id),
            usage=state.usage,
            created_at=state.created_at,
            schedule_id=state.schedule_id,
            active_agent=state.active_agent,
            parent_run_id=state.parent_run_id,
            children=[self._child(child_id) for child_id in state.children],
        )

    def _child(self, run_id: str) -> dict[str, str]:
        """A child run as its parent's view lists it (``gone`` once it expired or was deleted)."""
        try:
            child, _ = self.store.load(run_id)
        except (RunNotFoundError, RunExpiredError):
            return {"run_id": run_id, "agent_id": "", "status": "gone"}
        return {"run_id": run_id, "agent_id": child.agent_id, "status": child.status.value}

    # -- continuing -------------------------------------------------------------------------------------

    def continue_run(self, run_id: str, decisions: Sequence[Decision | dict[str, Any]] | None = None) -> RunStream:
        """Answer a paused run. No decisions (None or empty) approves every pending call.

        Raises:
            RunNotPausedError: the run is not paused. RunBusyError: another continue holds it right now.
            DecisionError / ToolArgumentsError: a decision does not fit; the run stays paused, untouched.
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
        with self._still_paused(run_id, step) as (state, token):
            messages = with_edited_args(state.messages, calls)
            new = state.model_copy(update={"tool_calls": calls, "messages": messages}).moved_to(RunStatus.RUNNING)
            decided = [
                {"tool_call_id": c.id, "decision": c.decision}
                for c in calls
                if c.requires_confirmation or c.rerun or c.pause_reason == "client_tool"
            ]
            resumed = make_event(
                EventType.RUN_STARTED,
                thread_id=state.session_id,
                run_id=run_id,
                metadata={"continued": True, "decisions": decided},
            )
            self.store.commit(new, token, step, step, [resumed], "live")
            self.store.status_changed(new, watch_in=self.settings.enqueue_grace_seconds)
            self._resend(run_id, step, state.agent_id)
        return RunStream(self, run_id, state.session_id, state.agent_id)

    @contextlib.contextmanager
    def _still_paused(self, run_id: str, step: int) -> Iterator[tuple[RunState, str]]:
        """The run's state and lease, the run still paused at ``step``; the lease is released after.

        Raises:
            RunBusyError: another continue or a stop holds it. RunNotPausedError: it moved on meanwhile.
        """
        token = self._idle_lease(run_id)
        if token is None:
            raise RunBusyError(f"run {run_id!r} is being continued or stopped by another caller right now")
        try:
            state, now = self.store.load(run_id)
            if state.status != RunStatus.PAUSED or now != step:
                raise RunNotPausedError(f"run {run_id!r} is {state.status.value}, not paused; nothing to continue")
            yield state, token
        finally:
            self.leases.release(run_id, token)

    def _continue_tree(
        self, state: RunState, step: int, decisions: list[Decision], manifest: dict[str, Any]
    ) -> RunStream:
        """Answer a run paused for calls of its child runs (and maybe its own): each decision goes to the child
        holding the call (which passes it further down), checked there before anything is written; the run
        goes on waiting for its children, and its own decided calls run in its next tool step."""
        run_id = state.run_id
        own = {c.id for c in state.tool_calls if c.decision == "pending"}
        waited = [c.child_run_id for c in state.tool_calls if c.child_run_id and not c.done]
        paused = {cid: child for cid in waited if (child := self.store.load(cid)[0]).status == RunStatus.PAUSED}
        # call id -> the child run holding it (a grandchild's: through that child)
        holders = {f"{cid}:{c.id}": cid for cid, child in paused.items() for c in child.pending}
        given = {d.tool_call_id for d in decisions}
        pending = own | set(holders)
        if unknown := sorted(given - pending):
            raise DecisionError(f"tool calls {unknown} are not pending in run {run_id!r}; pending: {sorted(pending)}")
        if decisions and given != pending:
            raise DecisionError(
                f"decide every pending tool call or none (none approves all); missing: {sorted(pending - given)}"
            )
        forwarded = {  # the child's own name of each call: without the prefix its parent shows it with
            cid: [
                replace(d, tool_call_id=d.tool_call_id[len(cid) + 1 :])
                for d in decisions
                if holders.get(d.tool_call_id) == cid
            ]
            for cid in set(holders.values())
        }
        children = {cid: paused[cid] for cid in forwarded}
        for child_id, child in children.items():  # refused here, before anything is written
            decide(child, forwarded[child_id], self.agent_manifest(child.active_agent or child.agent_id))
        calls = state.tool_calls
        if own:
            mine = [d for d in decisions if d.tool_call_id in own]
            calls = decide(state.model_copy(update={"child_pending": []}), mine, manifest)
        with self._still_paused(run_id, step) as (now, token):
            new = now.model_copy(update={"tool_calls": calls, "child_pending": []}).moved_to(RunStatus.RUNNING)
            meta = {
                "continued": True,
                "decisions": [{"tool_call_id": d.tool_call_id, "confirmed": d.confirmed} for d in decisions],
            }
            events = [make_event(EventType.RUN_STARTED, thread_id=state.session_id, run_id=run_id, metadata=meta)]
            events += reopened(new)  # the invocations it still waits for go on in this segment
            self.store.await_children(run_id, list(children))
            self.store.commit(new, token, step, step, events, "live")
            self.store.status_changed(new, watch_in=self.settings.enqueue_grace_seconds)
        for child_id, ds in forwarded.items():  # their ends wake this run
            self.continue_run(child_id, ds)
        if own or not forwarded:  # after the children run again, or its tool step would find them paused still
            self._resend(run_id, step, state.agent_id)  # (none to forward: a child ended meanwhile, collect it)
        return RunStream(self, run_id, state.session_id, state.agent_id)

    # -- steering ---------------------------------------------------------------------------------------

    def send_message(self, run_id: str, message: str) -> int:
        """Add a user message to a run that has not ended: its next model turn takes it in (after the tool
        results of the turn running now), and the log shows it as a user message (ids ``usr_...``), once. A run
        whose last turn is answering when it arrives goes on with another turn instead of ending. Returns how
        many messages were sent to the run so far.

        Raises:
            RunFinishedError: the run already ended. RunNotFoundError / RunExpiredError. ValidationError.
        """
        self._check_message(message)
        self.store.log.info(run_id)  # 404 / 410 for an unknown or expired run
        return self.store.inbox_push(run_id, message)

    # -- stopping ---------------------------------------------------------------------------------------

    def stop(self, run_id: str, reason: str = "stopped by request") -> RunView:
        """Stop a run whatever state it is in. A worker holding it stops at its next check (sub-second).

        Raises:
            RunFinishedError: the run already ended. RunNotFoundError / RunExpiredError.
        """
        state, _ = self.store.load(run_id)
        if state.status.is_final:
            raise RunFinishedError(f"run {run_id!r} already ended ({state.status.value})")
        self.store.request_stop(run_id, reason)
        for child_id in state.children:  # its child runs stop with it
            with contextlib.suppress(RunFinishedError, RunNotFoundError, RunExpiredError):
                self.stop(child_id, f"its parent run {run_id} was stopped")
        token = self._idle_lease(run_id)
        if token is not None:  # nobody is working on it: end it here and now
            try:
                self._cancel_idle(run_id, token)
            finally:
                self.leases.release(run_id, token)
        return self.get(run_id)

    def _idle_lease(self, run_id: str) -> str | None:
        """The lease, if no worker is working on the run. A worker that just paused the run releases it
        within milliseconds, and nobody else would end a paused run, so for a paused run wait for it."""
        deadline = time.monotonic() + self.settings.lease_ttl_seconds
        while True:
            token = self.leases.acquire(run_id, self.settings.lease_ttl_ms)
            if token is not None or time.monotonic() > deadline:
                return token
            state, _ = self.store.load(run_id)
            if state.status != RunStatus.PAUSED:
                return None  # a working step holds it and honours the stop request at its next check
            time.sleep(0.01)

    def _cancel_idle(self, run_id: str, token: str) -> None:
        state, step = self.store.load(run_id)
        if state.status.is_final:
            return
        row = self.redis.hmget(self.store.keys.run(run_id).run, "attempt", "step_offset")
        closers = []
        if row[0] and int(row[0]) > 0 and row[1] is not None:  # a crashed attempt may have left things open
            closers = close_open(self.store.log.read(run_id, after=int(row[1]) - 1))
        closers += unfinished(state)  # the children it waited for (stopped before it) end with it
        done = make_event(
            EventType.RUN_FINISHED, thread_id=state.session_id, run_id=run_id, outcome={"type": "cancelled"}
        )
        if state.status == RunStatus.PAUSED:
            # A paused run's log ends with RUN_FINISHED (interrupt); AG-UI clients accept only a new
            # RUN_STARTED after it, so the cancellation opens a segment of its own.
            meta = {"continued": True, "stopping": True}
            closers.append(make_event(EventType.RUN_STARTED, thread_id=state.session_id, run_id=run_id, metadata=meta))
        cancelled = state.moved_to(RunStatus.CANCELLED)
        self.store.commit(cancelled, token, step, step, [*closers, done], "ended")
        if cancelled.webhook_url:  # the sweeper sends it if this process dies before (the run is still watched)
            self._publisher.notify(cancelled, step)
        self.store.status_changed(cancelled)
        self.store.session_release(state.session_id, run_id)
        self.store.leave_line(state.session_id, run_id)  # if it was waiting for its session
        self._start_next(state.session_id)
        if state.parent_run_id is not None:  # a child stopped alone: its parent collects the error result
            self._child_stopped(cancelled, state.parent_run_id)

    def _child_stopped(self, child: RunState, parent_id: str) -> None:
        """Wake the parent of a child stopped alone; a parent paused for that child's calls only goes on."""
        wake_parent(self.store, lambda rid, step, agent: self._resend(rid, step, agent), child)
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

    def run(self, agent: Agent | str, message: str, *, timeout: float | None = None, **kwargs: Any) -> RunView:
        """Start a run and block until it ends or pauses. Caller-bound: on Ctrl-C or timeout the run is stopped."""
        stream = self.stream(agent, message, **kwargs)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for _event in stream.events():
                if deadline is not None and time.monotonic() > deadline:
                    raise RunTimeoutError(
                        f"run {stream.id!r} did not finish within {timeout}s; it was stopped", stream.id
                    )
        except (KeyboardInterrupt, TimeoutError):
            with contextlib.suppress(RunFinishedError):
                self.stop(stream.id, "caller gave up")
            raise
        return self.get(stream.id)

    def close(self) -> None:
        """Close the Redis client, and the broker connections of the Celery app this Runtime made."""
        self.redis.close()
        self._publisher.close()
        if self._owns_celery_app:
            self.celery_app.close()

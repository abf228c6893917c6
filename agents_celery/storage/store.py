"""Run store: create, load, claim, commit and stop runs, and the live index the sweeper works from.

Every write that touches one run goes through a Lua script in :mod:`agents_celery.storage.scripts`, fenced by the
run's lease token; the keys are documented in :mod:`agents_celery.storage.keys` (per run, and ``<p>:live``).
What crosses to the two busiest scripts is typed (:mod:`.records`): ``CommitArgs`` and ``ClaimArgs`` build
``lua/commit.lua``'s and ``lua/claim.lua``'s ARGV by the names the scripts give them, ``ClaimReply`` reads the
claim's reply by name.

The other nouns have modules of their own, which the store holds as attributes: ``store.ledger`` (the effect
ledger, :mod:`.ledger`), ``store.sessions`` (:mod:`.sessions`), ``store.states`` (the state cache,
:mod:`.states`), ``store.agents`` (manifests, :mod:`.manifests`), ``store.index`` (run and session listings,
:mod:`.index`) and ``store.log`` (the event log, :mod:`.eventlog`). Session and global keys are written with
separate commands (they live in other slots).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import redis

from ..content import text_of
from ..errors import RedisUnavailableError, RunExpiredError, RunNotFoundError, StateError
from ..events import NewEvent
from ..ids import random_hex
from ..runs import RunState, RunStatus, load_state
from ..settings import Settings
from .connections import IdleCheck, ThreadClients, atomic, is_cluster, reconnect_if_closed
from .eventlog import EventLog, LogStatus
from .fence import Fence
from .index import IndexEntry, RunIndex
from .keys import Keys
from .ledger import Effect, Ledger
from .manifests import Manifests
from .parts import Parts
from .pending import Pending, SendAhead, call_now
from .records import ClaimArgs, ClaimReply, CommitArgs
from .renders import Renders
from .replies import as_text
from .scripts import refusal, register
from .sessions import Sessions
from .states import CachedState, StateCache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ack:
    """A delivered step message the commit acks: kombu's unacked index and hash keys, and its delivery tag."""

    index_key: str
    hash_key: str
    tag: str


@dataclass(frozen=True)
class Claim:
    """What an attempt got when it asked for a step."""

    outcome: Literal["OK", "STALE", "BUSY", "ENDED", "NOTFOUND"]
    attempt: int = 0
    step_offset: int | None = None
    next_offset: int = 0
    state: RunState | None = None
    stop_reason: str = ""
    #: A tool step's calls the claim started in the effect ledger: the entry an earlier attempt left, or None
    #: where this claim recorded ``started`` (the call is this attempt's to run).
    effects: dict[str, Effect | None] = field(default_factory=dict)
    #: Messages in the run's inbox (sent with ``Runtime.send_message``); the state took in ``inbox_taken``.
    inbox: int = 0
    #: Attempts of this step that died of a connection error (:meth:`RunStore.give_back`): numbered like the
    #: others, but not counted against ``max_step_attempts``.
    blips: int = 0
    #: Attempts of this step that saved new work before they died (a guest's journal units:
    #: :mod:`agents_celery.storage.journal`): not counted against ``max_step_attempts`` either.
    advanced: int = 0
    #: ``BUSY`` because a connection error lost the claim's reply: it may or may not have run.
    lost: bool = False

    @property
    def counted(self) -> int:
        """This attempt's number in the step's attempt budget (blips and attempts that advanced left out)."""
        return self.attempt - self.blips - self.advanced


@dataclass(frozen=True)
class SentClaim:
    """A claim sent ahead (:meth:`RunStore.claim_sent`) and the cached state it named."""

    run_id: str
    sent: Pending
    known: CachedState | None


def entry_of(state: RunState) -> IndexEntry:
    """What the indexes know of a run."""
    return IndexEntry(state.run_id, state.created_at, state.agent_id, state.session_id, state.user_id)


def _no_check(client: redis.Redis) -> None:
    """The idle check of a cluster client: none (it keeps no connection aside)."""


class RunStore:
    """Redis-backed run state. Shared by workers (sync) and callers (Runtime, API)."""

    def __init__(
        self,
        client: redis.Redis,
        settings: Settings,
        *,
        cached_states: int = 128,
        own_connections: bool = False,
        send_ahead: SendAhead = call_now,
        idle_check: IdleCheck = reconnect_if_closed,
    ) -> None:
        self.redis = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix, settings.buckets)
        #: On a Redis Cluster the client routes each command to its slot's node: no kept connections, no fast
        #: paths (they work on one ``redis.Redis`` connection), no idle check of a kept connection.
        self.cluster = is_cluster(client)
        if self.cluster:
            own_connections, send_ahead, idle_check = False, call_now, _no_check
        #: A worker's step threads claim, commit and append through connections of their own (see
        #: :class:`~agents_celery.storage.connections.ThreadClients`); callers (Runtime, API) use the shared pool.
        self._own = ThreadClients(client, idle_check) if own_connections else None
        #: Run before a command on a kept connection (readers of this store's logs use it too).
        self.idle_check = idle_check
        #: How a call whose reply is read later is made (the worker's fast path sends it at once).
        self._send_ahead = send_ahead
        self.log = EventLog(
            client,
            self.keys,
            retention_ms=settings.retention_ms,
            tombstone_ms=settings.tombstone_ms,
            own_connections=self._own,
            idle_check=idle_check,
        )
        self._claim = register(client, "claim")
        self._give_back = register(client, "give_back")
        self._commit = register(client, "commit")
        self._inbox_push = register(client, "inbox_push")
        #: Versions of live runs' states this process committed: its next claim of the run skips the load.
        self.states = StateCache(cached_states)
        self.index = RunIndex(client, self.keys, settings)
        self.ledger = Ledger(client, self.keys, self._client, send_ahead)
        #: The images and files of user messages (:mod:`.parts`).
        self.parts = Parts(client, self.keys)
        #: The renderers' checkpoints (:mod:`.renders`): where a resume deep in a response starts.
        self.renders = Renders(client, self.keys, settings.retention_ms)
        self.sessions = Sessions(client, self.keys, settings, self.index, self.parts)
        self.agents = Manifests(client, self.keys)
        #: The failover fence (``wait_replicas``): commits, creations, status changes and started tool calls
        #: wait for replicas to hold them.
        self.fence = Fence(client, self.keys, settings.wait_replicas, settings.wait_replicas_timeout_ms)
        if self.fence:
            self.log.fence = self.fence
            self.ledger.fence = self.fence.hold  # a tool runs after its ``started`` record: never on an unanswered one
            self.sessions.fence = self.fence.session

    def _client(self) -> redis.Redis | None:
        """The calling thread's own client, or None (the scripts' registered, shared one)."""
        return self._own.get() if self._own is not None else None

    # -- runs --------------------------------------------------------------------------------------

    def create(self, state: RunState, events: Sequence[NewEvent], fields: dict[str, str] | None = None) -> None:
        """Write a new run (state, log, first events and ``fields`` of its record) in one script.

        Raises:
            StateError: the run exists already.
        """
        # Schema 1 (messages inside) so the run appears in one atomic write; its first commit stores schema 2.
        record = {**(fields or {}), "state": state.to_json_v1()}
        self.log.create(state.run_id, state.session_id, state.agent_id, events, fields=record)

    def create_indexed(
        self, state: RunState, events: Sequence[NewEvent], fields: dict[str, str], in_seconds: float
    ) -> None:
        """:meth:`create`, then :meth:`index_new_run`, in one round trip (two on a Redis Cluster, where the indexes
        sit in other slots). The run is indexed even when it existed already (StateError, raised after): a step
        that created it before it crashed makes sure it is moving.

        Raises:
            StateError: the run exists already.
        """
        record = {**fields, "state": state.to_json_v1()}
        if is_cluster(self.redis):
            try:
                self.create(state, events, fields)
            except StateError:
                self.index_new_run(state, in_seconds)
                raise
            self.index_new_run(state, in_seconds)
            return
        script = self.log.create_script
        keys, args = self.log.create_call(state.run_id, state.session_id, state.agent_id, events, record)
        try:
            with self.redis.pipeline(transaction=False) as pipe:
                pipe.evalsha(script.sha, len(keys), *keys, *args)  # first: the run, then its entries
                self._index_new(pipe, state, in_seconds)
                replies = pipe.execute(raise_on_error=False)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisUnavailableError(f"Redis does not answer: {exc}") from exc
        created, rest = replies[0], replies[1:]
        for reply in rest:
            if isinstance(reply, Exception):
                raise reply
        if isinstance(created, redis.exceptions.NoScriptError):  # Redis lost its scripts: this call loads it
            self.create(state, events, fields)
        elif isinstance(created, redis.ResponseError):
            raise refusal(created, state.run_id) or created
        elif self.log.fence:
            self.log.fence(state.run_id)

    def run_fields(self, run_id: str, *names: str) -> list[str | None]:
        """Fields of the run's record (``queue``, ``root_task``, ``last_task`` ...), None where absent."""
        return [as_text(v) if v is not None else None for v in self.redis.hmget(self.keys.run(run_id).run, names)]

    def load(self, run_id: str) -> tuple[RunState, int]:
        """The run's committed state and step number. Raises RunNotFoundError / RunExpiredError."""
        k = self.keys.run(run_id)
        try:
            with atomic(self.redis) as pipe:
                pipe.hmget(k.run, "state", "step")
                pipe.lrange(k.messages, 0, -1)
                (raw, step), messages = pipe.execute()
            if raw is None:
                if self.redis.exists(k.gone):
                    raise RunExpiredError(f"run {run_id!r} has expired; its state is no longer kept")
                raise RunNotFoundError(f"run {run_id!r} does not exist")
        except redis.ConnectionError as exc:
            raise RedisUnavailableError(f"Redis does not answer: {exc}") from exc
        return load_state(raw, messages), int(step or 0)

    def claim(self, run_id: str, step: int, token: str, started: tuple[NewEvent, NewEvent]) -> Claim:
        """Take the lease for an attempt at ``step`` and load what it needs, in one round trip.

        ``started`` holds the STEP_STARTED of a model turn and of a tool step; a first attempt writes the
        one that fits (its offset is ``next_offset``), a retried one writes neither.
        """
        known = self.states.get(run_id)
        keys, args = self._claim_call(run_id, step, token, started, known)
        return self._claimed(run_id, self._claim(keys=keys, args=args.argv(), client=self._client()), known)

    def claim_sent(self, run_id: str, step: int, token: str, started: tuple[NewEvent, NewEvent]) -> SentClaim:
        """:meth:`claim`, sent now and answered later (:meth:`claim_read`): the worker's consumer sends it as
        it receives the step's message, so the round trip overlaps Celery handing the message to a thread."""
        known = self.states.get(run_id)
        keys, args = self._claim_call(run_id, step, token, started, known)
        return SentClaim(run_id, self._send_ahead(self.redis, self._claim, keys, args.argv(), False), known)

    def claim_read(self, sent: SentClaim) -> Claim:
        """The claim's outcome; ``BUSY`` when its reply was lost (it may have taken the lease: the sweeper
        gives the step to a new attempt once that lease expires)."""
        try:
            reply = sent.sent.wait()
        except redis.ConnectionError as exc:
            log.warning("run=%s: a claim's reply was lost (%s); the sweeper will retry the step", sent.run_id, exc)
            self.connection_lost()
            return Claim("BUSY", lost=True)
        return self._claimed(sent.run_id, reply, sent.known)

    def _claim_call(
        self, run_id: str, step: int, token: str, started: tuple[NewEvent, NewEvent], known: CachedState | None
    ) -> tuple[list[str], ClaimArgs]:
        k = self.keys.run(run_id)
        known_id = known.state_id if known else ""
        args = ClaimArgs(token, step, self.settings.lease_ttl_ms, started[0].json, started[1].json, known_id)
        return k.claiming, args

    def _claimed(self, run_id: str, reply: Any, known: CachedState | None) -> Claim:
        r = ClaimReply.parse(reply)
        if r.outcome != "OK":
            return Claim(r.outcome)  # type: ignore[arg-type]
        if r.state_json:
            state = load_state(r.state_json, r.messages)
        elif known is not None and known.wait(self.settings.lease_ttl_ms / 1000):
            state = known.state  # Redis holds the version this process committed
        elif known is not None:  # that version is in Redis, but its commit did not return here: read it back
            state = self.load(run_id)[0]
        else:
            raise StateError(f"run {run_id!r} has no stored state")
        return Claim(
            "OK",
            attempt=r.attempt,
            step_offset=r.step_offset,
            next_offset=r.next_offset,
            state=state,
            stop_reason=r.stop_reason,
            effects=r.effects,
            inbox=r.inbox,
            blips=r.blips,
            advanced=r.advanced,
        )

    def give_back(self, run_id: str, step: int, token: str, not_run: Sequence[str] = ()) -> bool:
        """Give up the lease of an attempt at ``step`` that died of a connection error, recording it as a blip
        (not counted as an attempt) while the step has blips left (``max_step_blips``); whether it was.
        ``not_run``: tool calls the attempt never invoked, whose ``started`` entries it wrote are forgotten."""
        k = self.keys.run(run_id)
        args: list[str | int] = [token, step, self.settings.max_step_blips, *not_run]
        return int(self._give_back(keys=[k.run, k.lease, k.effects], args=args, client=self._client())) == 2

    def delivered(self, run_id: str) -> None:
        """A step message of the run was consumed but handed back unclaimed (a worker refusing work): the
        sweeper's copy is no longer queued, so it may send another (see :mod:`agents_celery.engine.sweeper`)."""
        self.redis.delete(self.keys.run(run_id).sent)

    def connection_lost(self) -> None:
        """A command failed with a connection error: drop the pool's idle connections and have every thread's
        kept one made again before its next command. A reset (a Redis restart, a failover, a load balancer that
        lost its state) broke them all, but each would otherwise be found broken only by the command it fails.
        A cluster client does this itself (it drops a failed node's connections and asks the cluster again)."""
        if self.cluster:
            return
        self.redis.connection_pool.disconnect(inuse_connections=False)
        if self._own is not None:
            self._own.renew()

    def commit(
        self,
        state: RunState,
        token: str,
        expected_step: int,
        new_step: int,
        events: Sequence[NewEvent],
        log_status: LogStatus,
        *,
        release: bool = True,
        task: tuple[str, str] | None = None,
        ack: Ack | None = None,
        task_id: str = "",
        awaiting: Sequence[str] | None = None,
    ) -> int:
        """Compare-and-set the state on its step number, with events and the log status; first offset.

        With ``release`` (the default) the lease is given up in the same round trip. ``task`` (the step
        queue's key and the next step's message, when the broker is this Redis) is pushed in the same script,
        only if the commit succeeds; so is ``ack`` done (the step's own message leaves kombu's unacked keys).
        ``task_id`` (the Celery task committing) is kept as the parent of the run's next step message.
        ``awaiting`` (the child runs the next step waits for; none: it waits for none now) is noted in the run's
        record in the same script; the sweeper wakes such a run only once one of them paused or ended.

        Raises:
            FencedError: the lease is no longer ours. StateError: another attempt committed this step.
        """
        k = self.keys.run(state.run_id)
        state = state.model_copy(update={"updated_at": int(time.time() * 1000)})
        state_id = random_hex()
        keep, new_messages = state.message_changes()
        stored = state._stored
        v1 = self.settings.state_schema == 1  # messages inside the JSON; the list is left alone
        if v1:
            keep, new_messages, stored = -1, [], None
        args = CommitArgs(
            token=token,
            expected_step=expected_step,
            new_step=new_step,
            state_json=state.to_json_v1() if v1 else state.to_json(),
            log_status=log_status,
            retention_ms=self.settings.retention_ms,
            tombstone_ms=self.settings.tombstone_ms,
            release=release,
            next_kind=state.next,
            now_ms=state.updated_at,
            state_id=state_id,
            task_message=task[1] if task else "",
            ledger_calls=json.dumps(state.ledger_calls) if log_status == "live" else "",
            keep=-1 if v1 or (stored is not None and keep == len(stored)) else keep,
            ack_tag=ack.tag if ack else "",
            task_id=task_id,
            inbox_taken=state.inbox_taken if log_status == "ended" and state.status == RunStatus.COMPLETED else None,
            awaiting="" if awaiting is None else "=" + ",".join(awaiting),
            messages=[json.dumps(m) for m in new_messages],
            events=[e.json for e in events],
        )
        keys = k.ending
        if task or ack:  # keys the script does not touch stand in for the missing ones: it reads ARGV first
            keys += [task[0] if task else k.run, *((ack.index_key, ack.hash_key) if ack else (k.run, k.run))]
        # Entered before it is sent: the next step's claim may go out before this reply is read.
        entry = self.states.expect(state.run_id, state_id, state) if log_status == "live" else None
        if entry is None:
            self.states.forget(state.run_id)
        try:
            first = self._commit_once(state.run_id, state_id, keys, args.argv())
        except BaseException as exc:
            self.states.forget(state.run_id, entry)
            mapped = refusal(exc, state.run_id) if isinstance(exc, redis.ResponseError) else None
            if mapped is not None:
                raise mapped from None
            raise
        state.stored_as(None if v1 else state.messages)
        if entry is not None:
            entry.confirm()
        if self.fence:
            self.fence(state.run_id)
        return first

    def _commit_once(self, run_id: str, state_id: str, keys: list[str], args: list[str]) -> int:
        """The commit script, exactly once even when a connection error hides whether it ran.

        After a connection error, the record says: its ``state_id`` is this commit's (it ran; its reply was lost:
        -1 stands for the first offset), or the commit did not run, and being a compare-and-set on the step
        number fenced by the lease it is sent once more, on a fresh connection. Any other error is raised."""
        try:
            return int(self._commit(keys=keys, args=args, client=self._client()))
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self.connection_lost()
            try:
                landed = self.redis.hget(self.keys.run(run_id).run, "state_id")
            except redis.RedisError:
                raise exc from None
            if landed is not None and as_text(landed) == state_id:
                log.warning("run=%s: a commit's reply was lost (%s); it was committed", run_id, exc)
                return -1
            log.warning("run=%s: a commit failed on its connection (%s); sent again", run_id, exc)
            try:
                return int(self._commit(keys=keys, args=args, client=self._client()))
            except redis.ResponseError:  # refused: the first one may have run after all, late
                if as_text(self.redis.hget(self.keys.run(run_id).run, "state_id") or b"") == state_id:
                    return -1
                raise

    # -- stop --------------------------------------------------------------------------------------

    def request_stop(self, run_id: str, reason: str = "stopped by request") -> None:
        """Store a stop request; it is honoured whatever state the run is in, even before it starts."""
        self.redis.set(self.keys.run(run_id).stop, reason, px=self.settings.retention_ms)

    def stop_requested(self, run_id: str) -> bool:
        return bool(self.redis.exists(self.keys.run(run_id).stop))

    # -- the live index (sweeper) --------------------------------------------------------------------

    def live_key(self, run_id: str) -> str:
        """The bucket of the live index that holds ``run_id``."""
        return self.keys.bucket(self.keys.live, run_id)

    def watch(self, run_id: str, in_seconds: float) -> None:
        """Ask the sweeper to look at the run after ``in_seconds`` unless it moved on."""
        deadline = int((time.time() + in_seconds) * 1000)
        self.redis.zadd(self.live_key(run_id), {run_id: deadline})

    # -- child runs (agents as tools) ------------------------------------------------------------------

    def any_settled(self, child_ids: Sequence[str]) -> bool:
        """Whether one of these runs paused, ended or is gone (its parent has something to collect)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for child_id in child_ids:
                pipe.hget(self.keys.run(child_id).run, "log")
            return any(status != b"live" for status in pipe.execute())

    def live_step(self, run_id: str) -> tuple[int, str] | None:
        """A live run's current step and agent (None: the run paused, ended or is gone)."""
        step, status, agent_id = self.run_fields(run_id, "step", "log", "agent_id")
        if status != "live" or agent_id is None:
            return None
        return int(step or 0), agent_id

    def keep_with(self, *states: RunState) -> None:
        """Ended child runs are kept as long as their parent, which ended now: their retention starts over (one
        round trip for them all)."""
        retention, tombstone = self.settings.retention_ms, self.settings.tombstone_ms
        with self.redis.pipeline(transaction=False) as pipe:
            for state in states:
                k = self.keys.run(state.run_id)
                for key in (k.run, k.events, k.effects, k.stop, k.messages, k.inbox):
                    pipe.pexpire(key, retention)
                pipe.set(k.gone, "1", px=retention + tombstone)
                self.index.retain(pipe, entry_of(state))  # its status class is set: its own end moved it there
            pipe.execute()

    def states_of(self, run_ids: list[str]) -> dict[str, RunState]:
        """The committed states of runs that exist, in one round trip, without their conversations (what a
        parent needs of its children: status and index entry)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hget(self.keys.run(run_id).run, "state")
            raws = pipe.execute()
        return {run_id: load_state(raw) for run_id, raw in zip(run_ids, raws, strict=True) if raw is not None}

    def inbox_push(self, run_id: str, content: str | list[dict[str, Any]]) -> int:
        """Add a user message (text, or content parts as the conversation keeps them) to the run's inbox
        (RunFinishedError once it ended); the inbox's length."""
        k = self.keys.run(run_id)
        entry = {"text": content} if isinstance(content, str) else {"text": text_of(content), "content": content}
        try:
            return int(self._inbox_push(keys=[k.run, k.inbox], args=[json.dumps(entry)]))
        except redis.ResponseError as exc:
            raise (refusal(exc, run_id) or exc) from None

    def inbox(self, run_id: str, start: int) -> list[str | list[dict[str, Any]]]:
        """The messages of the run's inbox from position ``start`` on: texts, or content parts."""
        entries = [json.loads(m) for m in self.redis.lrange(self.keys.run(run_id).inbox, start, -1)]
        return [e.get("content", e["text"]) for e in entries]

    def started_waiting(self, run_id: str) -> None:
        """A run that waited for its session has it now: the sweeper treats it as any live run."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hdel(self.keys.run(run_id).run, "waiting")
            pipe.hset(self.keys.run(run_id).run, "committed_ms", int(time.time() * 1000))
            pipe.execute()

    def started_delayed(self, run_id: str, now_ms: int) -> None:
        """A delayed run's first step is being sent: it is no longer waiting for its time."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hdel(self.keys.run(run_id).run, "start_at")
            pipe.hset(self.keys.run(run_id).run, "committed_ms", now_ms)
            pipe.execute()

    def index_new_run(self, state: RunState, in_seconds: float) -> None:
        """A new run: the sweeper looks at it after ``in_seconds``, and it joins the run and session indexes
        (one round trip)."""
        with self.redis.pipeline(transaction=False) as pipe:
            self._index_new(pipe, state, in_seconds)
            pipe.execute()

    def _index_new(self, pipe: Any, state: RunState, in_seconds: float) -> None:
        pipe.zadd(self.live_key(state.run_id), {state.run_id: int((time.time() + in_seconds) * 1000)})
        self.index.add(pipe, entry_of(state), state.status)

    def reindex(self, state: RunState, watch_in: float | None = None) -> None:
        """After a commit that changed the run's status: the sweeper watches it again in ``watch_in`` seconds
        (live) or lets it go (paused, ended), and the indexes follow, in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            if watch_in is None:
                pipe.zrem(self.live_key(state.run_id), state.run_id)
            else:
                pipe.zadd(self.live_key(state.run_id), {state.run_id: int((time.time() + watch_in) * 1000)})
            self.index.move(pipe, entry_of(state), state.status)
            pipe.execute()

    def delete_run(self, state: RunState) -> None:
        """Remove an ended run: its keys and its index entries (one round trip)."""
        k = self.keys.run(state.run_id)
        with self.redis.pipeline(transaction=False) as pipe:
            for key in k.every:
                pipe.delete(key)  # one key a command: a cluster pipeline takes no other
            pipe.zrem(self.live_key(state.run_id), state.run_id)
            self.index.forget(pipe, entry_of(state))
            pipe.execute()

    def unwatch(self, run_id: str) -> None:
        self.redis.zrem(self.live_key(run_id), run_id)

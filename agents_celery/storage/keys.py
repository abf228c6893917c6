"""Every Redis key agents-celery uses, written once.

All keys start with a configurable prefix (``AGENTS_CELERY_KEY_PREFIX``, default ``ac``). Every key of
one run carries the run id as a hash tag (``{run_id}``), so each Lua script touches a single slot, the layout
Redis Cluster needs. Session keys carry the session id as their hash tag.

**Buckets** (Redis Cluster, :doc:`docs/cluster.md`): every *global* key below (the run and session indexes, the
live index, manifests, schedules) is split into ``buckets`` keys, ``<name>:{<tag>}``, a member (run id, session
id, agent name, schedule id) going to the bucket of its own slot's share (:meth:`Keys.bucket`): the tags are
chosen so bucket ``i`` hashes into the ``i``-th equal share of the 16384 slots, and a member whose slot is in
that share goes there. So the buckets spread over the masters as evenly as the slot ranges do, and a run's
index entries mostly sit on the master of the run's own keys (``{run_id}``), a session's on that of the
session. With one bucket (plain Redis and Sentinel, the default) every name is exactly the unsplit one below.
A new *per-run* key must carry the run's hash tag (build it from :meth:`Keys.run`'s ``base``); a new *global*
key must be read and written through :meth:`Keys.bucket` / :meth:`Keys.buckets`.

Each noun's module documents its keys by pointing here: the run store (:mod:`.store`: the run record, its
messages, inbox, lease, stop, gone and ``<p>:live``), the event log (:mod:`.eventlog`), the effect ledger
(:mod:`.ledger`), sessions (:mod:`.sessions`), manifests (:mod:`.manifests`), the indexes (:mod:`.index`), the
state cache (:mod:`.states`, which keeps versions of ``state`` named by ``state_id`` and has no key of its own).

Per run (``<p>:run:{<run_id>}...``):

- ``<p>:run:{<rid>}`` *hash* — the run record. Fields: ``state`` (RunState JSON), ``step`` (number of
  committed steps), ``next`` (next event offset), ``log`` (``live`` | ``paused`` | ``ended``),
  ``attempt`` (attempts of the current step), ``blips`` (those of them that died of a connection error, not
  counted in ``max_step_attempts``; absent: none), ``advanced`` (those of them that journaled a new unit of a
  guest's segment, not counted either; ``advanced_at``: the last attempt counted there), ``step_offset``
  (first offset of the step's first attempt), ``next_kind`` (``model`` | ``tools``: which STEP_STARTED the
  next claim writes), ``committed_ms`` (when
  the last commit happened: the sweeper's clock for a next step that never started), ``state_id`` (version
  of ``state``: a worker holding that version skips loading it), ``ledger_calls`` (JSON list of the tool
  call ids the next tool step's claim starts in the effect ledger), ``session_id``, ``agent_id``, ``start_at``
  (a delayed run's start, Unix ms, until the sweeper sends its first step), ``part:<n>`` (a content part of the
  run's user messages, an image or file, as Chat Completions part JSON; the conversation holds reference parts
  ``<rid>/<n>`` instead: :mod:`.parts`), ``parts`` and ``part_bytes`` (how many part numbers are taken, and the
  bytes of the run's parts: its ``max_input_bytes``). No TTL
  while the run is live or paused; ``retention`` once it ended.
- ``<p>:run:{<rid>}:a2apush`` *hash* — the run's A2A push notification configs and how far each one's deliveries
  got (:mod:`.pushes`). ``PX`` the retention, renewed while deliveries go on; deleted with the run.
- ``<p>:run:{<rid>}:messages`` *list* — the run's conversation (one OpenAI message JSON per element) for
  state schema 2, which stores ``state`` without it: a commit appends the new messages instead of rewriting
  the conversation. Same TTL as the run record.
- ``<p>:run:{<rid>}:events`` *stream* — the event log. Entry id ``<offset>-1`` (so the id *is* the
  offset), one field ``event`` holding the event JSON. Never trimmed; same TTL as the run record.
- ``<p>:run:{<rid>}:inbox`` *list* — user messages sent to the live run (``Runtime.send_message``), taken in
  at its next model turn; the state's ``inbox_taken`` counts those taken. Same TTL as the run record.
- ``<p>:run:{<rid>}:lease`` *string* — token of the attempt that owns the run now. ``PX lease_ttl``,
  renewed by the heartbeat. Every write to the run is refused unless it carries this token.
- ``<p>:run:{<rid>}:effects`` *hash* — effect ledger (:mod:`.ledger`), ``tool_call_id`` -> JSON ``{status, token,
  result, error}``; ``status`` is ``started`` or ``done``. Same TTL as the run record. A pydantic-ai run's replay
  journal lives here too (:mod:`.journal`): fields ``j:<segment>:<seq>`` -> JSON ``{name, ordinal, digest, result}``.
- ``<p>:run:{<rid>}:sent`` *string* — ``<step>:<attempt>`` of the step the sweeper last sent again: while no
  claim changed ``attempt`` since, that message is still queued and the sweeper sends no other copy.
  ``PX`` the sweeper's resend window (:data:`agents_celery.engine.sweeper.RESEND_WINDOW_SECONDS` or more).
- ``<p>:run:{<rid>}:stop`` *string* — a stop request (its reason). May exist before the run does;
  ``PX retention``.
- ``<p>:run:{<rid>}:fence`` *string* — written by the failover fence (:mod:`.fence`) just before its ``WAIT``,
  on the connection that sends it; ``PX`` 1 s. Only with ``wait_replicas`` set.
- ``<p>:run:{<rid>}:gone`` *string* — tombstone written when the run ends, ``PX retention + tombstone``;
  tells an expired run (410) from one that never existed (404).
- ``<p>:run:{<rid>}:renders`` *hash* — renderers' checkpoints (:mod:`.renders`): ``<renderer>:<base>:<seq>`` ->
  JSON ``{position, state}``, the state of a dialect's fold over the response segment at ``base`` after sequence
  number ``seq``, the last few per segment. Written by API processes as they render. ``PX`` the run record's TTL
  once it has one, else the retention (so never past the run); deleted with the run.

Per session (``<p>:session:{<sid>}...``; :mod:`.sessions`). ``<sid>`` is the session id itself, unless the id
has a ``}`` or starts with ``#``: then it is ``#`` and the id's SHA-256 (:func:`session_tag`), so that every key
of the session still hashes to one slot on Redis Cluster (a ``}`` would end the hash tag early, and an id
starting with it would make an empty tag, whose keys spread over the slots) and no plain id can name it.

- ``<p>:session:{<sid>}:active`` *string* — id of the session's queued/running/paused run.
- ``<p>:session:{<sid>}:history`` *list* — the session's conversation (OpenAI message JSON), appended when
  a run completes. ``PX session_ttl``, refreshed on each append.
- ``<p>:session:{<sid>}:synced`` *set* — run ids already appended to the history (makes it idempotent).
- ``<p>:session:{<sid>}:waiting`` *list* — runs created with ``multitask_strategy`` ``enqueue`` or
  ``interrupt`` while another run held the session, in order; the first starts when the session is free.
  Such a run's record has ``waiting`` = 1 until it starts.
- ``<p>:session:{<sid>}:owner`` *string* — who the session belongs to: ``u:<user id>`` of its first run's user,
  or ``-`` when that run had none (API-key callers). Set once (first run wins), ``PX`` at least as long as the
  history lives (max of ``session_ttl`` and retention), extended at each run start and history append.
- ``<p>:session:{<sid>}:parts`` *hash* — the content parts (images, files) named by the history's messages:
  ``<rid>/<n>`` -> part JSON, copied from each run's record as its messages enter the history (:mod:`.parts`).
  ``PX`` the history's TTL (and a minute), refreshed at each append.
- ``<p>:session:{<sid>}:fence`` *string* — the failover fence's write before its ``WAIT`` after a history
  append, as ``<p>:run:{<rid>}:fence`` for a run's writes.
- ``<p>:session:{<sid>}:agui`` *hash* — the AG-UI endpoint's segments: an AG-UI ``runId`` (or
  ``resume:<interrupt ids>``) -> ``<run_id> <offset>``, the run and the offset its stream starts after.
  ``PX session_ttl``, refreshed on each write.

Global:

- ``<p>:agents`` *hash* — agent name -> manifest JSON published by workers at start-up (:mod:`.manifests`). No TTL.
- ``<p>:runs`` *sorted set* — run id -> creation time (ms), every run: what lists runs (storage/index.py).
- ``<p>:runs:agent:<name>``, ``<p>:runs:session:<sid>``, ``<p>:runs:user:<uid>`` *sorted sets* — the same, per
  agent, session and user; ``<p>:runs:status:<class>`` per status class (``live``, ``paused``, ``completed``,
  ``failed``, ``cancelled``). Written in the round trips that follow a change of status.
- ``<p>:runs:expiring`` *sorted set* — ended runs' index entries (JSON) -> when they leave every index
  (end + retention + tombstone); the sweeper works it off.
- ``<p>:sessions``, ``<p>:sessions:user:<uid>`` *sorted sets* — session id -> last activity (ms); entries
  older than ``session_ttl`` are trimmed at each write.
- ``<p>:live`` *sorted set* — run id -> deadline (ms). The sweeper re-enqueues runs past their deadline
  whose lease is free. Members leave when the run pauses or ends.
- ``<p>:sweeper`` *string* — lock so one sweeper runs per interval across workers. ``PX interval``.
- ``<p>:idem:<key>`` *string* — run id created for an ``Idempotency-Key``. ``PX retention``.
- ``<p>:v1retry:<fingerprint>`` *string* — the response a ``POST /v1/responses`` made, by a fingerprint of its
  caller and body (``-`` while it is being made), so an identical retry joins it (:mod:`..http.responses.retry`).
  ``PX`` the retry window (10 min).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot


@dataclass(frozen=True)
class RunKeys:
    """The keys of one run."""

    run: str
    events: str
    lease: str
    effects: str
    stop: str
    gone: str
    messages: str
    inbox: str
    sent: str
    fence: str
    a2apush: str
    renders: str

    @property
    def claiming(self) -> list[str]:
        """``lua/claim.lua``'s KEYS, in its order."""
        return [self.run, self.lease, self.stop, self.events, self.effects, self.messages, self.inbox]

    @property
    def ending(self) -> list[str]:
        """The keys whose TTL becomes the retention when the run ends (the ``Same TTL as the run record`` ones
        above, the lease and the tombstone): ``lua/commit.lua``'s and ``lua/set_status.lua``'s first KEYS, in
        their order."""
        return [self.run, self.events, self.lease, self.effects, self.gone, self.stop, self.messages, self.inbox]

    @property
    def every(self) -> list[str]:
        """Every key of the run: what deleting it deletes."""
        return [*self.ending, self.sent, self.fence, self.a2apush, self.renders]


@dataclass(frozen=True)
class SessionKeys:
    """The keys of one session."""

    active: str
    history: str
    synced: str
    agui: str
    waiting: str
    owner: str
    parts: str
    fence: str


@dataclass(frozen=True)
class Keys:
    """Builds key names under one prefix."""

    prefix: str = "ac"
    #: How many keys each global key is split into (1: not split, the names are the plain ones).
    buckets: int = 1

    def bucket(self, name: str, member: str) -> str:
        """The bucket of global key ``name`` that holds ``member``."""
        if self.buckets == 1:
            return name
        i = key_slot(member.encode()) * self.buckets // REDIS_CLUSTER_HASH_SLOTS
        return f"{name}:{{{bucket_tag(i, self.buckets)}}}"

    def buckets_of(self, name: str) -> list[str]:
        """Every bucket of global key ``name`` (``[name]`` when not split)."""
        if self.buckets == 1:
            return [name]
        return [f"{name}:{{{bucket_tag(i, self.buckets)}}}" for i in range(self.buckets)]

    def run(self, run_id: str) -> RunKeys:
        """The keys of one run (the same frozen object for a run while it is among the latest few thousand asked for:
        the hot paths ask for them per command, and building the names took 3 us)."""
        return _run_keys(self.prefix, run_id)

    def session(self, session_id: str) -> SessionKeys:
        base = f"{self.prefix}:session:{{{session_tag(session_id)}}}"
        return SessionKeys(
            f"{base}:active",
            f"{base}:history",
            f"{base}:synced",
            f"{base}:agui",
            f"{base}:waiting",
            f"{base}:owner",
            f"{base}:parts",
            f"{base}:fence",
        )

    @property
    def agents(self) -> str:
        return f"{self.prefix}:agents"

    @property
    def runs(self) -> str:
        return f"{self.prefix}:runs"

    def runs_of(self, field: str, value: str) -> str:
        """Runs of one ``agent``, ``session`` or ``user``."""
        return f"{self.prefix}:runs:{field}:{value}"

    def runs_status(self, name: str) -> str:
        return f"{self.prefix}:runs:status:{name}"

    @property
    def runs_expiring(self) -> str:
        return f"{self.prefix}:runs:expiring"

    @property
    def sessions(self) -> str:
        return f"{self.prefix}:sessions"

    def sessions_of(self, user_id: str) -> str:
        return f"{self.prefix}:sessions:user:{user_id}"

    @property
    def live(self) -> str:
        return f"{self.prefix}:live"

    @property
    def sweeper(self) -> str:
        return f"{self.prefix}:sweeper"

    def idempotency(self, key: str) -> str:
        return f"{self.prefix}:idem:{key}"

    def responses_retry(self, fingerprint: str) -> str:
        return f"{self.prefix}:v1retry:{fingerprint}"


@functools.cache
def session_tag(session_id: str) -> str:
    """The hash tag of a session's keys: its id, or ``#`` and the id's SHA-256 when the id has a ``}`` (which
    would end the tag early, or leave it empty) or starts with ``#`` (so no plain id names a digest's keys)."""
    if "}" in session_id or session_id.startswith("#"):
        return "#" + hashlib.sha256(session_id.encode()).hexdigest()
    return session_id


def bucket_tag(i: int, buckets: int) -> str:
    """A hash tag whose slot lies in the ``i``-th of ``buckets`` equal shares of the cluster's slots, so that
    buckets spread over the masters (``redis-cli --cluster create`` gives each master one contiguous range)."""
    low = i * REDIS_CLUSTER_HASH_SLOTS // buckets
    high = (i + 1) * REDIS_CLUSTER_HASH_SLOTS // buckets
    j = 0
    while not low <= key_slot(f"b{i}.{j}".encode()) < high:
        j += 1
    return f"b{i}.{j}"


@functools.lru_cache(maxsize=4096)
def _run_keys(prefix: str, run_id: str) -> RunKeys:
    base = f"{prefix}:run:{{{run_id}}}"
    return RunKeys(
        run=base,
        events=f"{base}:events",
        lease=f"{base}:lease",
        effects=f"{base}:effects",
        stop=f"{base}:stop",
        gone=f"{base}:gone",
        messages=f"{base}:messages",
        inbox=f"{base}:inbox",
        sent=f"{base}:sent",
        fence=f"{base}:fence",
        a2apush=f"{base}:a2apush",
        renders=f"{base}:renders",
    )

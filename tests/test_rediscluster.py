"""Run state on a real Redis Cluster (3 masters, 3 replicas: tests/rediscluster.py), the Celery broker on the
session's plain Redis: runs, crash recovery, child runs and the AG-UI endpoint work there, a run's keys and the
split indexes spread over every master, and a listing of 1,000 runs merges the shards in order."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from redis.exceptions import RedisClusterException

from agents_celery.errors import (
    ConfigurationError,
    LogRewoundError,
    RedisUnavailableError,
    RunBusyError,
    RunNotPausedError,
)
from agents_celery.events import EventType, make_event
from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.runs import RunStatus
from agents_celery.settings import load_settings
from agents_celery.storage.connections import answers, connect, is_cluster
from agents_celery.storage.store import RunStore
from agents_celery.testing.openai_server import FakeReply, ScriptResponder
from agents_celery.testing.rediscluster import LocalCluster

from .conftest import TEST_REDIS_URL, all_events, wait_for
from .support.apis import ApiServer, frames, free_port
from .support.invariants import assert_agui_stream, assert_run_sound
from .support.workers import Deployment

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def on_cluster(deploy: Any, redis_cluster: LocalCluster) -> Deployment:
    """A deployment whose run state is on the cluster and whose broker is the session's plain Redis."""
    deployment: Deployment = deploy("rc", redis_url=redis_cluster.url, broker_url=TEST_REDIS_URL)
    return deployment


def keys_by_master(cluster: LocalCluster, pattern: str) -> dict[int, list[str]]:
    found = {}
    for port in cluster.masters():
        node = redis.Redis(port=port, decode_responses=True)
        found[port] = list(node.scan_iter(match=pattern, count=1000))
        node.close()
    return found


def test_a_cluster_url_is_refused_as_the_broker_and_needs_a_broker_of_its_own() -> None:
    with pytest.raises(ConfigurationError, match="celery#2852"):
        load_settings(redis_url="redis://127.0.0.1:6379/0", broker_url="redis+cluster://127.0.0.1:7000")
    with pytest.raises(ConfigurationError, match="CELERY_BROKER_URL"):
        load_settings(redis_url="redis+cluster://127.0.0.1:7000", broker_url=None)
    with pytest.raises(ConfigurationError, match="host:port"):
        load_settings(redis_url="redis+cluster://127.0.0.1", broker_url=TEST_REDIS_URL)
    s = load_settings(redis_url="redis+cluster://10.0.0.1:7000,10.0.0.2:7001", broker_url=TEST_REDIS_URL)
    assert s.cluster and s.buckets == 16 and s.celery_broker_url == TEST_REDIS_URL
    assert load_settings(redis_url=TEST_REDIS_URL).buckets == 1
    with pytest.raises(RedisUnavailableError, match="no node of the Redis Cluster"):  # nobody there: a clear 503
        connect("redis+cluster://127.0.0.1:1", socket_connect_timeout=0.2)
    assert not answers("redis+cluster://127.0.0.1:1", timeout=0.2)


def test_runs_complete_with_their_keys_and_indexes_spread_over_every_master(
    on_cluster: Deployment, redis_cluster: LocalCluster, fake_openai: Any
) -> None:
    on_cluster.start(1, concurrency=8)
    rt = on_cluster.runtime
    assert is_cluster(rt.redis)
    fake_openai.responder = ScriptResponder(["hello from the cluster"])
    runs = [rt.stream("fake", f"hi {i}") for i in range(24)]
    for run in runs:
        events = all_events(rt, run.id, timeout=60)
        assert_run_sound(events)
        assert rt.get(run.id).status is RunStatus.COMPLETED
    prefix = on_cluster.prefix
    run_keys = keys_by_master(redis_cluster, f"{prefix}:run:*")
    assert all(run_keys.values()), f"every master holds keys of runs: { {p: len(k) for p, k in run_keys.items()} }"
    index_keys = keys_by_master(redis_cluster, f"{prefix}:runs*")
    assert all(index_keys.values()), "every master holds buckets of the run indexes"
    for port, found in run_keys.items():  # every key of a run is on the node of its hash tag
        tags = {k.split("{", 1)[1].split("}", 1)[0] for k in found}
        for tag in tags:
            assert all(f"{{{tag}}}" not in k for p, ks in run_keys.items() if p != port for k in ks)
    page = rt.runs(limit=50)
    assert {v.run_id for v in page.runs} == {r.id for r in runs}
    assert [v.created_at for v in page.runs] == sorted((v.created_at for v in page.runs), reverse=True)
    assert rt.agents() and rt.agent_manifest("fake")["name"] == "fake"  # manifests read across buckets

    async def read_async() -> list[str]:  # the asyncio cluster client (Django's async views, Runtime.aevents)
        return [e.position async for e in rt.get_stream(runs[0].id).aevents(-1)]

    assert asyncio.run(read_async()) == [e.position for e in all_events(rt, runs[0].id)]


def test_a_parent_and_its_children_on_the_cluster_and_their_agui_stream(
    on_cluster: Deployment, fake_openai: Any
) -> None:
    """Child runs (agents as tools) live in other slots than their parent. The parent's AG-UI stream tails the
    parent and both children (per-slot reads on a cluster): the children's deltas reach it while they run,
    each once, and the stream passes the AG-UI verifier."""
    from .test_subagents import by_agent, lead_asks, researcher_talks

    fake_openai.responder = by_agent(lead=lead_asks("alpha", "beta"), researcher=researcher_talks)
    on_cluster.start(1, concurrency=6)
    rt = on_cluster.runtime
    server = ApiServer({**on_cluster.env, "AGENTS_CELERY_KEEPALIVE_SECONDS": "0.3"}).wait_ready()
    seen: list[dict[str, Any]] = []
    live: set[str] = set()
    try:
        run_id = rt.stream("lead", "research").id
        with httpx.Client(base_url=server.url, timeout=60) as client:
            params = {"format": "agui", "until": "end"}
            with client.stream("GET", f"/runs/{run_id}/events", params=params) as resp:
                assert resp.status_code == 200, resp.read()
                for f in frames(resp):
                    seen.append(f.data)
                    child = f.data.get("subagentRunId")
                    delta = child and f.data["type"] == "TEXT_MESSAGE_CONTENT" and child not in live
                    if delta and rt.get(child).status is RunStatus.RUNNING:
                        live.add(child)
    finally:
        server.stop()
    assert_agui_stream(seen)
    assert seen[-1]["type"] == "RUN_FINISHED"
    full = rt.get(run_id)
    assert full.status is RunStatus.COMPLETED and len(full.children) == 2
    kids = [c["run_id"] for c in full.children]
    assert live, "a child's delta reached the parent's stream while the child was still running"
    assert_run_sound(list(rt.store.log.read(run_id)))
    for kid in kids:
        child_log = list(rt.store.log.read(kid))
        assert_run_sound(child_log)
        words = [e for e in seen if e["type"] == "TEXT_MESSAGE_CONTENT" and e.get("subagentRunId") == kid]
        assert len(words) == sum(e.type is EventType.TEXT_MESSAGE_CONTENT for e in child_log)  # each once
    slots = {rt.redis.keyslot(rt.store.keys.run(r).run) for r in [run_id, *kids]}
    assert len(slots) == 3


def test_listing_a_thousand_runs_merges_the_shards_newest_first(
    on_cluster: Deployment, redis_cluster: LocalCluster
) -> None:
    """1,000 runs (no worker: they stay queued) spread over every master's buckets; pages of 200 walk them all
    once, newest first, and a filter still merges the shards."""
    from .agents.fixture import fake, lead

    rt = on_cluster.runtime
    rt.store.agents.publish([fake.manifest(), lead.manifest()])  # as a worker would, without one taking the runs
    made = [rt.stream("fake" if i % 2 else "lead", f"n{i}").id for i in range(1000)]
    counts = {p: len(k) for p, k in keys_by_master(redis_cluster, f"{on_cluster.prefix}:runs:{{*").items()}
    assert all(counts.values())
    seen: list[Any] = []
    cursor = None
    while True:
        page = rt.runs(limit=200, cursor=cursor)
        seen += page.runs
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sorted(v.run_id for v in seen) == sorted(made)
    order = [(v.created_at, v.run_id) for v in seen]
    assert order == sorted(order, reverse=True)
    fakes = rt.runs(agent_id="fake", limit=200)
    assert len(fakes.runs) == 200 and all(v.agent_id == "fake" for v in fakes.runs)
    assert [v.created_at for v in fakes.runs] == sorted((v.created_at for v in fakes.runs), reverse=True)
    queued = rt.runs(status=RunStatus.QUEUED, limit=10)
    assert len(queued.runs) == 10


def test_the_fence_waits_for_the_replica_of_the_runs_master(redis_cluster: LocalCluster) -> None:
    """``wait_replicas``: the fence's WAIT goes to the master holding the run and counts its replica; with that
    replica stopped it gets no acknowledgement and says so (after its timeout), without failing."""
    settings = load_settings(
        redis_url=redis_cluster.url, broker_url=TEST_REDIS_URL, key_prefix=f"fence-{uuid.uuid4().hex[:6]}",
        wait_replicas=1, wait_replicas_timeout_ms=300,
    )  # fmt: skip
    client = connect(settings.redis_url)
    store = RunStore(client, settings)
    try:
        run_id = uuid.uuid4().hex
        store.log.create(run_id, "s", "a")  # fenced: waits for the replica
        assert store.fence.short == 0
        assert store.fence(run_id) == 1
        master = client.get_node_from_key(store.keys.run(run_id).run).port  # type: ignore[attr-defined]
        replica = redis_cluster.replica_of(master)
        redis_cluster.pause(replica)
        try:
            t0 = time.monotonic()
            assert store.fence(run_id) == 0
            assert 0.25 < time.monotonic() - t0 < 2
        finally:
            redis_cluster.resume(replica)
        assert store.fence.short == 1
        assert wait_for(lambda: store.fence(run_id) == 1, timeout=10, what="the replica to acknowledge again")
    finally:
        client.close()


def test_a_fence_whose_master_does_not_answer_stops_a_tool_not_a_commit() -> None:
    """A ``WAIT`` that gets no answer at all (the master is gone, and maybe the write with it): after a commit the
    fence logs and counts it and the step goes on (every later write is checked against the master's state);
    before a tool runs (:meth:`Fence.hold`) it raises, so the tool does not run on a record that may be lost."""
    from agents_celery.storage.fence import Fence
    from agents_celery.storage.keys import Keys

    client = connect(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.2)
    fence = Fence(client, Keys("nobody"), 1, 100)
    assert fence("r1") is None and fence.short == 1
    with pytest.raises(RedisUnavailableError, match="before a tool call"):
        fence.hold("r1")
    assert fence.short == 2
    assert Fence(client, Keys("nobody"), 0, 100).hold("r1") is None  # off: no round trip at all
    client.close()


class Reader(threading.Thread):
    """Follows one run as a client would: from the start, resuming after a connection error from the position
    of the last event it saw (``offset.tag``, checked by the log). ``seen`` holds what it was given since it
    was last told the log rewound (it then starts over); ``told`` counts those times; ``passes`` keeps what it
    was given in each pass (one more after each time it was told), for :meth:`past_commits`."""

    def __init__(self, rt: Any, run_id: str) -> None:
        super().__init__(daemon=True)
        self.rt, self.run_id = rt, run_id
        self.seen: dict[int, str] = {}
        self.passes: list[list[tuple[int, str, EventType]]] = [[]]
        self.told = 0
        self.errors = 0
        self.done = False

    def run(self) -> None:
        position: str | None = None
        deadline = time.monotonic() + 150
        while not self.done and time.monotonic() < deadline:
            try:
                for ev in self.rt.get_stream(self.run_id).events(position, until_pause=False):
                    self.seen[ev.offset] = ev.tag
                    self.passes[-1].append((ev.offset, ev.tag, ev.type))
                    position = ev.position
                    if ev.is_terminal:
                        self.done = True
                        return
                self.done = True
            except LogRewoundError:
                self.told += 1
                self.seen, position = {}, None
                self.passes.append([])
            except (redis.RedisError, RedisClusterException, RedisUnavailableError):
                self.errors += 1
                time.sleep(0.1)

    def past_commits(self) -> list[tuple[int, str]]:
        """What it saw that the fence says no failover loses: in each pass, every event before the last
        STEP_STARTED it saw. That step was claimed after the commit before it returned, and with the fence on a
        commit returns once the master's replica acknowledged it (so the events it and earlier writes made)."""
        kept: list[tuple[int, str]] = []
        for seen in self.passes:
            starts = [offset for offset, _, kind in seen if kind is EventType.STEP_STARTED]
            if starts:
                kept += [(offset, tag) for offset, tag, _ in seen if offset < max(starts)]
        return kept


#: Model turns of each soak run: all but the last stream some words and call slow_count.
SOAK_TURNS = 6
SOAK_FINAL = " ".join(f"end{i}" for i in range(30))


def soak_responder(key: str) -> Any:
    """The soak's model: run ``soak <n>`` streams ``12 + 3n`` words a turn (so the runs' commits do not fall
    together), each turn but the last calling slow_count(``key``), then answers :data:`SOAK_FINAL`."""

    def respond(request: dict[str, Any]) -> FakeReply:
        messages = request["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        n = int(str(messages[last_user]["content"]).split()[-1])
        turn = sum(1 for m in messages[last_user:] if m["role"] == "assistant")
        if turn >= SOAK_TURNS - 1:
            return FakeReply(text=SOAK_FINAL, token_delay=0.02)
        words = " ".join(f"t{turn}.{j}" for j in range(12 + 3 * n))
        call = ScriptedToolCall("slow_count", {"key": key}, f"call_{turn}")
        return FakeReply(text=words, tool_calls=[call], token_delay=0.02)

    return respond


def holds_a_wait(port: int) -> bool:
    """Whether a client of the node on ``port`` is blocked in ``WAIT`` (a fenced write waiting for a replica)."""
    with redis.Redis(port=port, socket_timeout=2) as node:
        return any(c.get("cmd") == "wait" for c in node.client_list())


def settle(rt: Any, run_id: str) -> bool:
    """Whether the run completed; a run paused because a tool may have run in an attempt the failover cut short
    (its ``started`` record kept, its result lost) is told not to run it again."""
    try:
        state, _ = rt.store.load(run_id)
        if state.status is RunStatus.PAUSED:
            pending = [c.id for c in state.tool_calls if c.decision == "pending"]
            rt.continue_run(run_id, [{"tool_call_id": c, "confirmed": False} for c in pending])
        return bool(state.status is RunStatus.COMPLETED)
    except (redis.RedisError, RedisClusterException, RedisUnavailableError, RunBusyError, RunNotPausedError):
        return False


@pytest.mark.serial  # its deadlines assume the machine to itself: runs alone, after the parallel tiers
@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("fenced", [False, True], ids=["fence-off", "fence-on"])
def test_a_master_killed_mid_soak_fails_over_and_readers_are_told_of_lost_writes(
    deploy: Any, fake_openai: Any, tmp_path: Path, fenced: bool
) -> None:
    """kill -9 of a master while runs stream and call tools, its replica paused just before (so the writes of that
    moment never reach it, as asynchronous replication allows): the replica takes over, every run completes
    soundly, readers of runs whose writes were lost are told (``log_rewound``), and no reader holds an event at
    an offset that differs from the final log's.

    With the fence on (``AGENTS_CELERY_WAIT_REPLICAS=1``, one replica per master, a timeout longer than the
    outage) it promises more, and the master is killed only once a fenced write waits for the cut-off replica:
    no tool runs twice (a ``started`` record is on the replica before its tool runs; one whose master is gone
    stops the step first), and no commit a later step went past is lost (no reader saw a step start and then
    the events before it rewritten). The tools count on the plain Redis, which stays up."""
    cluster = LocalCluster(tmp_path / "cluster").start()
    counts = redis.Redis.from_url(TEST_REDIS_URL)
    key = f"soak-{uuid.uuid4().hex[:6]}"
    extra = {"TEST_COUNTS_REDIS_URL": TEST_REDIS_URL}
    if fenced:
        extra |= {"AGENTS_CELERY_WAIT_REPLICAS": "1", "AGENTS_CELERY_WAIT_REPLICAS_TIMEOUT_MS": "5000"}
    d: Deployment = deploy("fo", extra, redis_url=cluster.url, broker_url=TEST_REDIS_URL)  # default step attempts
    executed = f"{d.prefix}:test:count:{key}:idem"
    try:
        fake_openai.responder = soak_responder(key)
        d.start(2, concurrency=8)
        rt = d.runtime
        runs = [rt.stream("fake", f"soak {i}").id for i in range(12)]
        readers = [Reader(rt, run_id) for run_id in runs]
        for reader in readers:
            reader.start()
        wait_for(lambda: all(len(r.seen) > 15 for r in readers), timeout=30, what="every run to stream")
        by_master: dict[int, list[Reader]] = {}
        for reader in readers:
            port = rt.redis.get_node_from_key(rt.store.keys.run(reader.run_id).run).port
            by_master.setdefault(port, []).append(reader)
        victim, hit = max(by_master.items(), key=lambda kv: len(kv[1]))
        replica = cluster.replica_of(victim)
        cluster.pause(replica)
        # the master drops its replica's link: what it writes from now on reaches no replica
        redis.Redis(port=victim).client_kill_filter(_type="slave")
        marks = {r.run_id: len(r.seen) for r in hit}

        def cut_off() -> bool:  # readers were given unreplicated events; with the fence, a fenced write waits
            lost = any(len(r.seen) >= marks[r.run_id] + 5 for r in hit)
            return lost and (not fenced or holds_a_wait(victim))

        wait_for(cut_off, timeout=10, what="unreplicated events (and a fenced write waiting)")
        cluster.kill(victim)
        cluster.resume(replica)
        wait_for(lambda: replica in cluster.masters(), timeout=30, what="the replica to take over")
        cluster.restart(victim)  # it comes back as the new master's replica: the fence has one to wait for again
        for run_id in runs:
            wait_for(lambda run_id=run_id: settle(rt, run_id), timeout=120, what=f"run {run_id} to complete")
        for reader in readers:
            reader.join(timeout=60)
        assert all(r.done for r in readers), [(r.run_id, len(r.seen), r.told, r.errors) for r in readers]
        told = {r.run_id for r in readers if r.told}
        calls = [c.decode() for c in counts.lrange(executed, 0, -1)]
        twice = sorted({c for c in calls if calls.count(c) > 1})
        print(
            f"\nfailover (fence {'on' if fenced else 'off'}): readers of {len(told)} of the {len(hit)} runs on the"
            f" killed master were told of lost writes; {len(calls)} tool calls ran, {len(twice)} of them twice"
        )
        assert told, "readers of the runs whose writes were lost were told"
        assert told <= {r.run_id for r in hit}, "only runs of the failed master rewound"
        for reader in readers:
            view = rt.get(reader.run_id)
            assert view.status is RunStatus.COMPLETED and view.output == SOAK_FINAL, view
            final = list(rt.store.log.read(reader.run_id))
            assert_run_sound(final)
            tags = {e.offset: e.tag for e in final}
            wrong = [o for o, tag in reader.seen.items() if tags.get(o) != tag]
            assert not wrong, f"run {reader.run_id}: a reader was silently given other events at {wrong[:5]}"
            if fenced:
                lost = [o for o, tag in reader.past_commits() if tags.get(o) != tag]
                assert not lost, f"run {reader.run_id}: a commit a later step went past was lost: offsets {lost[:5]}"
        if fenced:
            assert not twice, f"tool calls run twice with the fence on: {twice}"
    finally:
        cluster.stop()
        counts.delete(executed, f"{d.prefix}:test:count:{key}")
        counts.close()


#: tests/test_recovery.py's crash tests that run as they are on the cluster deployment.
RECOVERY = [
    "test_kill_during_model_streaming",
    "test_kill_during_tool_asks_before_running_again",
    "test_kill_after_tool_finished_reuses_its_result",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", RECOVERY)
def test_the_crash_recovery_tests_pass_on_the_cluster(name: str, on_cluster: Deployment, fake_openai: Any) -> None:
    """tests/test_recovery.py's crash tests (kill -9 while the model streams, while a tool runs, after it finished),
    run as they are on a deployment whose state is on the cluster
    (their counters, pid and crash keys are on it too: tests/agents/fixture.py connects to the state URL)."""
    from . import test_recovery

    rt = on_cluster.runtime
    getattr(test_recovery, name)(rt, on_cluster, fake_openai, rt.redis, on_cluster.prefix)


@pytest.mark.slow
def test_the_child_run_crash_test_passes_on_the_cluster(on_cluster: Deployment, fake_openai: Any) -> None:
    """tests/test_subagents.py's kill -9 of the worker after the parent started its children, on the cluster."""
    from .test_subagents import test_kill_after_the_parent_started_its_children

    test_kill_after_the_parent_started_its_children(on_cluster, fake_openai)


def test_schedules_and_sessions_are_listed_across_the_shards(on_cluster: Deployment) -> None:
    """Schedules and the session index are split into buckets too: all of them come back, due ones earliest
    first, sessions newest first page after page."""
    from agents_celery.schedule import Schedule
    from agents_celery.storage.schedules import ScheduleStore

    rt = on_cluster.runtime
    store = ScheduleStore(rt.redis, rt.store.keys)
    now = int(time.time() * 1000)
    made = [Schedule(uuid.uuid4().hex, "fake", f"tick {i}", every_seconds=60, created_at=now + i) for i in range(40)]
    for i, schedule in enumerate(made):
        store.save(schedule, now - 1000 + i)
    assert [s.schedule_id for s in store.all()] == [s.schedule_id for s in made]
    due = store.due(now, limit=100)
    assert [sid for sid, _ in due] == [s.schedule_id for s in made]  # earliest first, across buckets
    assert store.next_due() == now - 1000
    assert store.delete(made[0].schedule_id) and store.get(made[0].schedule_id) is None
    keys = {rt.redis.keyslot(store._keys(s.schedule_id)[0]) for s in made}  # type: ignore[attr-defined]
    assert len(keys) > 3  # several buckets
    index = rt.store.index
    sessions = [uuid.uuid4().hex for _ in range(30)]
    with rt.redis.pipeline(transaction=False) as pipe:
        for i, sid in enumerate(sessions):
            index._touch_session(pipe, sid, "u1", now + i)
            pipe.rpush(rt.store.keys.session(sid).history, "{}")
        pipe.execute()
    seen, cursor = [], None
    while True:
        page = rt.sessions(user_id="u1", limit=7, cursor=cursor)
        seen += [s.session_id for s in page.sessions]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == list(reversed(sessions))


def test_session_ids_with_braces_keep_their_keys_in_one_slot(on_cluster: Deployment, fake_openai: Any) -> None:
    """A session id is any string (AG-UI's threadId, a schedule's session_id): one starting with ``}`` made an
    empty hash tag (CROSSSLOT: 503 "Redis does not answer"); ``#`` and a digest tag such ids (#39)."""
    on_cluster.start(1)
    rt = on_cluster.runtime
    fake_openai.responder = ScriptResponder(["first", "second"])
    for sid in ["}odd", "{a}b}", "#" + uuid.uuid4().hex]:
        sk = rt.store.keys.session(sid)
        assert len({rt.redis.keyslot(k) for k in (sk.active, sk.history, sk.owner, sk.parts)}) == 1, sid
        first = rt.run("fake", "one", session_id=sid, timeout=60)
        second = rt.run("fake", "two", session_id=sid, timeout=60)
        assert (first.status, second.status) == ("completed", "completed"), (sid, first, second)
        messages = [m["content"] for m in rt.session(sid).messages]
        assert messages[:2] == ["one", "first"], (sid, messages)
        fake_openai.responder = ScriptResponder(["first", "second"])


def test_the_lease_keeper_checks_stops_of_runs_in_many_slots(redis_cluster: LocalCluster) -> None:
    """On a single Redis the keeper reads every stop key with one MGET; a cluster refuses keys of several slots in
    one command, so there each is its own EXISTS, and a stop is still seen (and only that run's)."""
    from agents_celery.storage.leases import LeaseKeeper, Leases

    settings = load_settings(
        redis_url=redis_cluster.url, broker_url=TEST_REDIS_URL, key_prefix=f"lk-{uuid.uuid4().hex[:6]}"
    )
    client = connect(settings.redis_url)
    store = RunStore(client, settings)
    leases = Leases(client, store.keys)
    runs = [uuid.uuid4().hex for _ in range(6)]
    assert len({client.keyslot(store.keys.run(run_id).stop) for run_id in runs}) > 1
    keeper = LeaseKeeper(leases, ttl_ms=5000, renew=0.05, poll=0.02)
    holdings = [keeper.hold(run_id, leases.acquire(run_id, 5000) or "") for run_id in runs]
    try:
        t0 = time.monotonic()
        wait_for(lambda: all(h.renewed > t0 for h in holdings), timeout=10, what="every lease renewed")
        store.request_stop(runs[2])
        wait_for(holdings[2].stop.is_set, timeout=10, what="the stop request to be seen")
        assert [h.stop.is_set() for h in holdings] == [i == 2 for i in range(6)]
        assert not any(h.lost.is_set() for h in holdings)
    finally:
        for h in holdings:
            keeper.drop(h)
        keeper.close()
        for run_id in runs:
            client.delete(store.keys.run(run_id).lease)
            client.delete(store.keys.run(run_id).stop)
        client.close()


def test_an_async_tail_reads_a_watched_child_in_another_slot(redis_cluster: LocalCluster) -> None:
    """The asyncio tail of a parent's log with a child watched (Django's async AG-UI stream): the child's events,
    in another slot, come out as ChildPages while the parent's log is quiet, then the parent's end ends it."""
    from agents_celery.storage.connections import connect_async
    from agents_celery.storage.eventlog import AsyncEventLog, ChildPage, Watching
    from agents_celery.storage.leases import Leases

    settings = load_settings(
        redis_url=redis_cluster.url, broker_url=TEST_REDIS_URL, key_prefix=f"at-{uuid.uuid4().hex[:6]}"
    )
    client = connect(settings.redis_url)
    store = RunStore(client, settings)
    leases = Leases(client, store.keys)
    parent, child = uuid.uuid4().hex, uuid.uuid4().hex
    assert client.keyslot(store.keys.run(parent).events) != client.keyslot(store.keys.run(child).events)
    tokens = {}
    for run_id in (parent, child):
        store.log.create(run_id, "s", "a", [make_event(EventType.RUN_STARTED, thread_id="s", run_id=run_id)])
        tokens[run_id] = leases.acquire(run_id, 60_000)
    delta = make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="m", delta="x")

    async def follow() -> tuple[list[int], list[int]]:
        aclient = connect_async(settings.redis_url)
        log = AsyncEventLog(aclient, store.keys)
        watching = Watching(store.keys)
        watching.last[child] = -1
        own: list[int] = []
        kids: list[int] = []
        try:
            async for page in log.tail(parent, -1, block_ms=2000, watching=watching):
                if isinstance(page, ChildPage):
                    kids += [offset for offset, _ in page.entries]
                    if len(kids) >= 4:  # the child's start and 3 deltas: now the parent ends
                        end = make_event(
                            EventType.RUN_FINISHED, thread_id="s", run_id=parent, outcome={"type": "success"}
                        )
                        await asyncio.to_thread(store.log.set_status, parent, "ended", tokens[parent], [end])
                    else:
                        await asyncio.to_thread(store.log.append, child, [delta], tokens[child])
                elif isinstance(page, list):
                    own += [offset for offset, _ in page]
        finally:
            await aclient.aclose()
        return own, kids

    try:
        own, kids = asyncio.run(asyncio.wait_for(follow(), timeout=30))
    finally:
        client.close()
    assert own == [0, 1] and kids == [0, 1, 2, 3]


def test_workers_with_the_fence_on_wait_for_replicas_at_each_fenced_write(
    deploy: Any, redis_cluster: LocalCluster, fake_openai: Any
) -> None:
    """``AGENTS_CELERY_WAIT_REPLICAS=1`` on the workers and the Runtime: a run with a tool call completes soundly,
    and the master holding the run served a ``WAIT`` for its creation, each commit and the tool call's ``started``
    record (which the tool step's claim writes: the step waits for it before the tool runs); the master holding
    its session one for the history append."""
    d: Deployment = deploy(
        "fenced", {"AGENTS_CELERY_WAIT_REPLICAS": "1"}, redis_url=redis_cluster.url, broker_url=TEST_REDIS_URL
    )
    d.start(1)
    rt = d.runtime
    assert rt.store.fence

    def waits() -> dict[int, int]:
        found = {}
        for port in redis_cluster.masters():
            stats = redis.Redis(port=port).info("commandstats")
            found[port] = int(stats.get("cmdstat_wait", {}).get("calls", 0))
        return found

    fake_openai.responder = ScriptResponder([ScriptedTurn("", [ScriptedToolCall("add", {"a": 2, "b": 3})]), "It is 5."])
    before = waits()
    stream = rt.stream("fake", "add 2 and 3")
    events = all_events(rt, stream.id)
    assert_run_sound(events)
    assert rt.get(stream.id).status is RunStatus.COMPLETED
    wait_for(lambda: sum(waits().values()) - sum(before.values()) >= 7, timeout=10, what="the history's fence")
    after = waits()
    served = {port: after[port] - before[port] for port in after if after[port] != before[port]}
    run_node = rt.redis.get_node_from_key(rt.store.keys.run(stream.id).fence).port
    session_node = rt.redis.get_node_from_key(rt.store.keys.session(stream.session_id).fence).port
    # the run's: created (1); the commits marking it running, of the model turn, the tool step and the last turn
    # (4); the tool call's started record, before the tool ran (1). The session's: its history append (1).
    expected = Counter({run_node: 6})
    expected[session_node] += 1
    assert served == dict(expected), (served, run_node, session_node)


def test_no_code_opens_a_transaction_a_cluster_client_of_redis_py_5_refuses() -> None:
    """MULTI/EXEC goes through ``storage.connections.atomic`` (a cluster client of redis-py 5 cannot open one),
    and script calls in a pipeline through ``storage.scripts.pipelined`` or beside a cluster's own way (a cluster
    pipeline refuses them: ``EventLog.append_many`` appends one run at a time there)."""
    root = Path(__file__).resolve().parent.parent / "agents_celery"
    found = []
    for path in root.rglob("*.py"):
        text = path.read_text()
        rel = path.relative_to(root).as_posix()
        if "transaction=True" in text and rel != "storage/connections.py":
            found.append(f"{rel}: pipeline(transaction=True)")
        if "client=pipe" in text and rel != "storage/scripts.py" and "is_cluster(" not in text:
            found.append(f"{rel}: a script called in a pipeline with no other way on a cluster")
    assert not found, found

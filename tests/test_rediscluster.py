"""Run state on a real Redis Cluster (3 masters, 3 replicas: tests/rediscluster.py), the Celery broker on the
session's plain Redis: runs, crash recovery, child runs and the AG-UI endpoint work there, a run's keys and the
split indexes spread over every master, and a listing of 1,000 runs merges the shards in order."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis

from agents_celery.errors import ConfigurationError
from agents_celery.events import EventType
from agents_celery.runs import RunStatus
from agents_celery.settings import load_settings
from agents_celery.storage.connections import is_cluster
from agents_celery.testing.openai_server import ScriptResponder

from .api_support import ApiServer, frames
from .cluster import Deployment
from .conftest import TEST_REDIS_URL, all_events, wait_event, wait_for
from .invariants import assert_agui_stream, assert_run_sound
from .rediscluster import LocalCluster

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


@pytest.mark.slow
def test_kill_during_model_streaming_recovers_on_the_cluster(on_cluster: Deployment, fake_openai: Any) -> None:
    on_cluster.start(2)
    rt = on_cluster.runtime
    text = " ".join(f"token{i}" for i in range(120))
    fake_openai.responder = ScriptResponder([text], token_delay=0.02)
    stream = rt.stream("fake", "talk")
    wait_event(rt, stream.id, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT and e.offset > 10)
    pid = int(wait_for(lambda: rt.redis.get(f"{on_cluster.prefix}:test:pid:{stream.id}"), what="the worker"))
    on_cluster.by_pid(pid).kill()
    events = all_events(rt, stream.id, timeout=60)
    assert_run_sound(events)
    assert any(e.type is EventType.CUSTOM and e.data["name"] == "attempt_abandoned" for e in events)
    view = rt.get(stream.id)
    assert view.status is RunStatus.COMPLETED and view.output == text


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
    from .agents_fixture import fake, lead

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

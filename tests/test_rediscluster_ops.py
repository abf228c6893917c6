"""Run state on a Redis Cluster, operated: the HTTP API's answer when the cluster's nodes fail (503, the JSON body
of a plain Redis outage, from the Flask blueprint and the Django app alike), and a gevent worker with its state
on the cluster, and beat firing schedules stored there (tests/test_rediscluster.py has the runs, the fence and
the failover)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from agents_celery import ScriptedToolCall
from agents_celery.events import EventType
from agents_celery.storage.connections import unavailable
from agents_celery.testing.openai_server import FakeReply, turn_index
from agents_celery.testing.rediscluster import LocalCluster

from .conftest import TEST_REDIS_URL, all_events, wait_for
from .support.apis import ApiServer
from .support.invariants import assert_run_sound, counter_of
from .test_api import assert_error

pytestmark = pytest.mark.timeout(120)


def test_cluster_errors_are_outages_and_misuse_is_not() -> None:
    """The errors redis-py's cluster client raises while nodes fail or a slot's master is elected stand for a
    503; a transaction across slots (the command's fault) does not, nor does any other error."""
    from redis.exceptions import (
        ClusterDownError,
        ClusterError,
        MasterDownError,
        MaxConnectionsError,
        RedisClusterException,
        ResponseError,
        SlotNotCoveredError,
        TryAgainError,
    )

    for exc in [
        RedisClusterException("Redis Cluster cannot be connected"), ClusterDownError("CLUSTERDOWN"),
        MasterDownError("MASTERDOWN"), TryAgainError("TRYAGAIN"), SlotNotCoveredError("slot 7 is not covered"),
        ClusterError("TTL exhausted."), MaxConnectionsError("Too many connections"), redis.TimeoutError("timed out"),
        redis.ReadOnlyError("READONLY You can't write against a read only replica."),
    ]:  # fmt: skip
        down = unavailable(exc)
        assert down is not None and down.code == "redis_unavailable" and str(exc) in str(down), exc
    misuse: list[Exception] = [ResponseError("WRONGTYPE"), ValueError()]
    cross_slot = getattr(redis.exceptions, "CrossSlotTransactionError", None)  # redis-py 5.1+: the oldest lacks it
    if cross_slot is not None:
        misuse.append(cross_slot("keys in more than one slot"))
    for exc in misuse:
        assert unavailable(exc) is None, exc
    # One list: what the engine retries as a blip is what the front ends answer 503 for (a replica's READONLY
    # after a failover was a blip for the one and a 500 for the other).
    from agents_celery.engine.engine import BLIPS
    from agents_celery.storage.connections import UNAVAILABLE

    assert BLIPS is UNAVAILABLE


@pytest.mark.slow
@pytest.mark.parametrize("front", ["flask", "django"])
def test_a_failing_cluster_is_a_503_with_the_outage_body(
    front: str, tmp_path: Path, worker_env: dict[str, str]
) -> None:
    """The API on a private cluster (the shared one is not broken): with one master and its replica killed, a
    listing that reads every bucket meets the dead slots; with the whole cluster stopped, every route meets
    redis-py's "cannot be connected". Each answers 503 ``redis_unavailable`` within seconds, as a plain Redis
    outage does, not a 500."""
    cluster = LocalCluster(tmp_path / "cluster").start()
    env = {**worker_env, "AGENTS_CELERY_REDIS_URL": cluster.url, "CELERY_BROKER_URL": TEST_REDIS_URL}
    server = ApiServer(env, django=front == "django").wait_ready()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            assert c.get("/runs").status_code == 200, c.get("/runs").text
            master = cluster.masters()[0]
            cluster.kill(cluster.replica_of(master))
            cluster.kill(master)
            survivor = next(p for p in cluster.masters() if p != master)

            def fails() -> bool:
                with redis.Redis(port=survivor, socket_timeout=2) as node:
                    return node.cluster("info").get("cluster_state") == "fail"

            wait_for(fails, timeout=30, what="the cluster to see a master and its replica gone")
            started = time.monotonic()
            assert_error(c.get("/runs"), 503, "redis_unavailable")
            assert time.monotonic() - started < 10
            cluster.stop()
            for method, url in [("GET", "/agents"), ("GET", "/runs/x"), ("GET", "/runs"), ("POST", "/agents/a/runs")]:
                started = time.monotonic()
                resp = c.request(method, url, data={"message": "x"} if method == "POST" else None)
                body = assert_error(resp, 503, "redis_unavailable")
                assert body["detail"].startswith("Redis does not answer"), body
                assert time.monotonic() - started < 10, (url, time.monotonic() - started)
            assert c.get("/health").status_code == 503
    finally:
        server.stop()
        cluster.stop()


def two_tools_then_text(request: dict[str, Any]) -> FakeReply:
    """Turn 0: a 1 s sync tool and an async one side by side (keyed by the user's message); then a streamed
    answer."""
    messages = request.get("messages") or []
    if turn_index(messages) > 0:
        return FakeReply(text="Both tools answered.", token_delay=0.01)
    key = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
    calls = (
        ScriptedToolCall("slow_count", {"key": key, "seconds": 1.0}, "call_s"),
        ScriptedToolCall("async_lookup", {"word": key}, "call_a"),
    )
    return FakeReply(tool_calls=calls)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_gevent_worker_with_its_state_on_the_cluster(
    deploy: Any, redis_cluster: LocalCluster, fake_openai: Any
) -> None:
    """``agents-celery worker --pool gevent`` with ``AGENTS_CELERY_REDIS_URL`` the cluster and the broker on plain
    Redis: fifty runs, each with two tools side by side (a 1 s sync one, an async one), complete on one process
    in far less than the 50 s they would take one at a time; each log is sound, each tool ran once, and the
    runs' keys are on every master."""
    from .test_rediscluster import keys_by_master

    d = deploy("gvc", redis_url=redis_cluster.url, broker_url=TEST_REDIS_URL)
    fake_openai.responder = two_tools_then_text
    worker = d.worker(pool="gevent", concurrency=100)
    assert "(gevent)" in worker.log.read_text(errors="replace")  # celery's banner: "concurrency: 100 (gevent)"
    rt = d.runtime
    t0 = time.monotonic()
    ids = [rt.stream("fake", f"g{i}").id for i in range(50)]

    def ended(run_id: str) -> Any:
        view = rt.get(run_id)
        return view if view.status.is_final else None

    views = [wait_for(lambda i=i: ended(i), timeout=60, what=f"run {i} to end: {worker.output()}") for i in ids]
    took = time.monotonic() - t0
    assert [v.status.value for v in views] == ["completed"] * 50, [(v.status, v.error) for v in views]
    assert took < 30, f"50 runs with a 1 s tool each took {took:.1f}s on one gevent worker: not side by side"
    count = counter_of(rt.redis, d.prefix)
    for i, run_id in enumerate(ids):
        events = all_events(rt, run_id, timeout=10)
        assert_run_sound(events, tool_counts={f"g{i}": 1}, counter=count)
        results = {e.data["tool_call_id"]: e.data["content"] for e in events if e.type is EventType.TOOL_CALL_RESULT}
        assert results == {"call_s": f"counted g{i}", "call_a": f"G{i}"}, results
    assert count("async_lookup") == 50
    run_keys = keys_by_master(redis_cluster, f"{d.prefix}:run:*")
    assert all(run_keys.values()), f"every master holds keys of runs: { {p: len(k) for p, k in run_keys.items()} }"
    print(f"\ngevent worker, state on the cluster: 50 runs with 2 tools each in {took:.1f}s")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_beats_fire_a_schedule_once_per_tick_with_state_on_the_cluster(
    deploy: Any, redis_cluster: LocalCluster
) -> None:
    """``agents-celery beat`` reads the schedules from the cluster (their due sets split into buckets): two beats
    at once start every tick of a 2 s schedule once, and the runs complete on a worker whose state is there too."""
    import itertools

    from agents_celery import RunStatus, Runtime

    from .test_schedules import Beat, ticks

    d = deploy("bcl", redis_url=redis_cluster.url, broker_url=TEST_REDIS_URL)
    runtime = Runtime(settings=d.settings, agents=[])
    d.worker()
    beats = [Beat(d.env), Beat(d.env)]
    try:
        wait_for(lambda: runtime.store.agents.get("offline") is not None, what="the agents to be published")
        made = runtime.schedule("offline", "tick", every=2)
        wait_for(lambda: len(ticks(runtime, made.schedule_id)) >= 4, timeout=40, what="four ticks")
        runtime.pause_schedule(made.schedule_id)
        got = ticks(runtime, made.schedule_id)
        assert len(got) == len(set(got)), f"a tick started twice: {got}"
        assert all(b - a == 2000 for a, b in itertools.pairwise(got)), got
        wait_for(
            lambda: all(r.status is RunStatus.COMPLETED for r in runtime.runs(limit=200).runs),
            timeout=30,
            what="every scheduled run to complete",
        )
        assert {r.schedule_id for r in runtime.runs(limit=200).runs} == {made.schedule_id}
    finally:
        for beat in beats:
            beat.stop()
        runtime.close()

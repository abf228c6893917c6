"""Run state on a Redis Cluster, operated: the HTTP API's answer when the cluster's nodes fail (503, the JSON body
of a plain Redis outage, from the Flask blueprint and the Django app alike), and a gevent worker with its state
on the cluster (tests/test_rediscluster.py has the runs, the fence and the failover)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from agents_celery.storage.connections import unavailable
from agents_celery.testing.rediscluster import LocalCluster

from .api_support import ApiServer
from .conftest import TEST_REDIS_URL, wait_for
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
    ]:  # fmt: skip
        down = unavailable(exc)
        assert down is not None and down.code == "redis_unavailable" and str(exc) in str(down), exc
    from redis.exceptions import CrossSlotTransactionError

    for exc in [CrossSlotTransactionError("keys in more than one slot"), ResponseError("WRONGTYPE"), ValueError()]:
        assert unavailable(exc) is None, exc


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

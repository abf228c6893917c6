"""Run state on Redis Cluster: 3 masters against 1, and the failover fence's cost per commit, in one run.

Two local clusters are started for the bench (``agents_celery.testing.rediscluster``): 1 master with 1 replica,
and 3 masters with a replica each, all on this machine. The load comes from :data:`PROCESSES` client
processes (forked), each on its own runs (so their keys spread over the slots), for :data:`SECONDS` each:

- events appended per second: ``EventLog.append`` of 50 events per call, each process on runs of its own;
- runs per second through the state store: a run's storage life without its model (create with RUN_STARTED,
  the live and run indexes, the lease, the end with RUN_FINISHED and the indexes moved), what every run
  costs Redis besides its steps;
- a listing of the newest 100 of 5,000 runs: 16 buckets merged on 3 masters, against one key on plain Redis;
- the fence: the median time of one ``RunStore.commit`` (one event, live) with ``wait_replicas=1`` against
  the same with the fence off, one process, on the 3-master cluster.

The floor of the first two is the 1-master cluster measured in the same run: the ratio is what 2 more
masters bring. On one machine the masters share its cores with the client processes, so the ratio says
where the limit is: the busiest master's share of a core during those runs is reported beside them (a
master well under 100% is not what limits; see docs/cluster.md).
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from agents_celery.events import EventType, make_event
from agents_celery.runs import RunState, RunStatus
from agents_celery.settings import load_settings
from agents_celery.storage.connections import connect
from agents_celery.storage.index import IndexEntry
from agents_celery.storage.leases import Leases
from agents_celery.storage.store import RunStore
from agents_celery.testing.rediscluster import LocalCluster

from .common import REDIS_URL, Row, cli_main, cpu_seconds, log, median, prefixed, timed

BATCH = 50
PROCESSES = 4
SECONDS = 3.0
LISTED = 5000


def _store(url: str, prefix: str, **overrides: Any) -> RunStore:
    settings = load_settings(redis_url=url, broker_url=REDIS_URL, key_prefix=prefix, **overrides)
    return RunStore(connect(url, socket_timeout=30), settings)


def _new_run(store: RunStore, leases: Leases) -> tuple[RunState, str]:
    run_id = uuid.uuid4().hex
    state = RunState(run_id=run_id, agent_id="bench", session_id=f"s{run_id[:8]}", created_at=int(time.time() * 1000))
    store.create(state, [make_event(EventType.RUN_STARTED, thread_id=state.session_id, run_id=run_id)])
    store.index_new_run(state, 600)
    token = leases.acquire(run_id, 600_000)
    assert token is not None
    return state, token


def _appends(url: str, prefix: str, seconds: float) -> int:
    store = _store(url, prefix)
    leases = Leases(store.redis, store.keys)
    batch = [make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="m", delta="hello ")] * BATCH
    runs = [_new_run(store, leases) for _ in range(8)]
    done, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        state, token = runs[done // BATCH % len(runs)]
        store.log.append(state.run_id, batch, token)
        done += BATCH
    return done


def _lives(url: str, prefix: str, seconds: float) -> int:
    store = _store(url, prefix)
    leases = Leases(store.redis, store.keys)
    done, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        state, token = _new_run(store, leases)
        finished = make_event(EventType.RUN_FINISHED, thread_id=state.session_id, run_id=state.run_id)
        store.log.set_status(state.run_id, "ended", token, [finished])
        store.reindex(state.model_copy(update={"status": RunStatus.COMPLETED}))
        done += 1
    return done


#: The busiest master's CPU (share of one core) during the last :func:`_parallel` on each cluster.
BUSIEST: dict[int, list[float]] = {}


def _parallel(target: Any, url: str, prefix: str, cluster: LocalCluster) -> float:
    """Per second, all :data:`PROCESSES` together; notes the busiest master's share of a core meanwhile."""
    ctx = multiprocessing.get_context("fork")
    masters = [cluster.procs[p].pid for p in cluster.masters()]
    before = [cpu_seconds(pid) for pid in masters]
    t0 = time.monotonic()
    with ctx.Pool(PROCESSES) as pool:
        counts = pool.starmap(target, [(url, prefix, SECONDS)] * PROCESSES)
    wall = time.monotonic() - t0
    busiest = max(cpu_seconds(pid) - b for pid, b in zip(masters, before, strict=True)) / wall
    BUSIEST.setdefault(len(masters), []).append(busiest * 100)
    return sum(counts) / SECONDS


def _fill(store: RunStore, runs: int) -> None:
    now = int(time.time() * 1000) - runs
    for start in range(0, runs, 500):
        with store.redis.pipeline(transaction=False) as pipe:
            for i in range(start, min(start + 500, runs)):
                run_id = uuid.uuid4().hex
                state = RunState(run_id=run_id, agent_id="bench", session_id=f"s{i}", created_at=now + i)
                pipe.hset(store.keys.run(run_id).run, mapping={"state": state.to_json_v1(), "next": 3, "log": "live"})
                store.index.add(pipe, IndexEntry(run_id, now + i, "bench", state.session_id))
            pipe.execute()


def _listing(store: RunStore) -> float:
    _fill(store, LISTED)
    store.index.page(_all(), 100, None)  # warm-up
    return median([timed(lambda: store.index.page(_all(), 100, None)) * 1000 for _ in range(30)])


def _all() -> Any:
    from agents_celery.storage.index import Filters

    return Filters()


def _commit_ms(url: str, prefix: str, replicas: int, n: int) -> float:
    store = _store(url, prefix, wait_replicas=replicas, wait_replicas_timeout_ms=1000)
    leases = Leases(store.redis, store.keys)
    state, token = _new_run(store, leases)
    event = make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="m", delta="hi")
    times = []
    for step in range(n):
        t0 = time.perf_counter()
        store.commit(state, token, step, step + 1, [event], "live", release=False)
        times.append((time.perf_counter() - t0) * 1000)
    assert store.fence.short == 0, "a replica did not acknowledge in time"
    store.redis.close()
    return statistics.median(times)


def run(quick: bool) -> list[Row]:
    global SECONDS
    SECONDS = 1.5 if quick else 3.0
    commits = 300 if quick else 1000
    repeats = 2 if quick else 3
    base = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    log("cluster: starting a 1-master and a 3-master local cluster")
    one = LocalCluster(base / "one", masters=1, replicas=1)
    three = LocalCluster(base / "three", masters=3, replicas=1)
    try:
        one.start()
        three.start()
        samples: dict[str, dict[str, list[float]]] = {"one": {}, "three": {}}
        for round_ in range(repeats):  # interleaved, so drift in the machine's load hits both alike
            for name, cluster in (("one", one), ("three", three)):
                prefix = f"bench-cluster-{uuid.uuid4().hex[:6]}"
                log(f"cluster: round {round_ + 1}, {name} master(s): appends, run lives")
                samples[name].setdefault("appends", []).append(_parallel(_appends, cluster.url, prefix, cluster))
                samples[name].setdefault("runs", []).append(_parallel(_lives, cluster.url, prefix, cluster))
        figures = {name: {k: median(v) for k, v in found.items()} for name, found in samples.items()}
        store = _store(three.url, f"bench-cluster-list-{uuid.uuid4().hex[:6]}")
        figures["three"]["list"] = _listing(store)
        store.redis.close()
        with prefixed("cluster-list") as plain_prefix:
            log("cluster: listing on plain Redis")
            store = _store(REDIS_URL, plain_prefix)
            plain_list = _listing(store)
            store.redis.close()
        log("cluster: the fence's cost per commit")
        prefix = f"bench-fence-{uuid.uuid4().hex[:6]}"
        _commit_ms(three.url, prefix, 0, 50)  # warm-up
        off = _commit_ms(three.url, prefix, 0, commits)
        on = _commit_ms(three.url, prefix, 1, commits)
    finally:
        one.stop()
        three.stop()
    f1, f3 = figures["one"], figures["three"]
    cores = os.cpu_count()
    return [
        Row(f"events appended/s, 3 masters ({PROCESSES} procs, {BATCH}/call, {cores} cores)", f3["appends"],
            "ev/s", "the same on 1 master", f1["appends"], ">=", None),
        Row(f"runs/s through the state store, 3 masters ({PROCESSES} procs)", f3["runs"], "runs/s",
            "the same on 1 master", f1["runs"], ">=", None, readme=True),
        Row(f"list newest 100 of {LISTED:,}, 3 masters (16 buckets merged)", f3["list"], "ms",
            "the same on plain Redis (one key)", plain_list, "<=", None),
        Row("busiest master's CPU, 3 masters (share of one core)", median(BUSIEST[3]), "%",
            "the same, 1 master", median(BUSIEST[1]), "<=", None),
        Row("RunStore.commit with the fence (wait_replicas=1), 3 masters", on, "ms",
            "the same commit, fence off", off, "<=", None),
    ]  # fmt: skip


if __name__ == "__main__":
    cli_main(run)

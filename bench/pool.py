"""The worker's default pool: N concurrent runs whose turns mostly wait on the model (``waiter``: ~1 s each).

``agents-celery worker`` defaults to the threads pool with concurrency 16; Celery's own default is prefork
with one child per core. Floor: one such run alone, on the default worker (the time a run takes unqueued).
Ratio: the time N concurrent runs take to all complete, over that floor.
"""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from .common import Row, bench_env, celery_worker, cli_main, log, prefixed, runtime_for, stop_all

CONCURRENT = 16


def _all_done(prefix: str, queue: str, n: int) -> float:
    runtime = runtime_for(prefix, queue)
    try:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=n) as pool:
            views = list(pool.map(lambda i: runtime.run("waiter", f"go {i}", timeout=120), range(n)))
        took = time.perf_counter() - t0
        assert all(v.status.value == "completed" for v in views), [v.status for v in views]
        return took
    finally:
        runtime.close()


def _measure(pool: str, concurrency: int, n: int, *extra: str) -> float:
    with prefixed(f"pool-{pool}") as prefix:
        queue = f"bench-pool-{uuid.uuid4().hex[:6]}"
        env = bench_env(prefix, queue)
        worker = celery_worker("bench.worker", env, queue, f"pool-{pool}", concurrency, pool, extra)
        try:
            worker.wait_ready()
            return _all_done(prefix, queue, n)
        finally:
            stop_all()


def run(quick: bool = False) -> list[Row]:
    cores = os.cpu_count() or 1
    log(f"pool: {CONCURRENT} concurrent runs of ~1 s model wait; threads x16 vs prefork x{cores}")
    alone = _measure("threads", 16, 1)
    threads = _measure("threads", 16, CONCURRENT)
    prefork = _measure("prefork", cores, CONCURRENT)
    # A worker shared with the host's tasks keeps the host's prefetch (Celery's default: 4 per slot): steps
    # then wait behind messages a busy slot reserved. Threads x4, 16 runs, prefetch 4 vs 1.
    shared = _measure("threads", 4, CONCURRENT, "--prefetch-multiplier", "4")
    own = _measure("threads", 4, CONCURRENT, "--prefetch-multiplier", "1")
    return [
        Row(f"{CONCURRENT} waiting runs, threads x4, prefetch 4 (a shared worker)", shared, "s", "prefetch 1", own),
        Row(f"{CONCURRENT} waiting runs, threads pool x16", threads, "s", "one such run alone", alone),
        Row(f"{CONCURRENT} waiting runs, prefork pool x{cores} (Celery's default)", prefork, "s", "one alone", alone),
    ]


if __name__ == "__main__":
    cli_main(run)

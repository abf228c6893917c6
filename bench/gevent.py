"""A thousand runs in flight on one worker process: ``--pool gevent --concurrency 1000``.

Each run is one model turn through the real openai SDK against the fake OpenAI server (its own process, a
thread per stream): 50 tokens 0.1 s apart, 5 s a turn. The runs are created first (queued), then one worker is
started, so every figure is the worker's. Floor: one such run alone on the same gevent worker. Rows: the wall
time of 1,000 runs over that floor (target <= 3x), the worker's peak RSS per in-flight run against the threads
pool holding 16 (its default), the worker's CPU per run, and the Redis commands per step (``INFO
commandstats`` of a private ``redis-server`` the bench starts, before and after; each run is one step, the
bench's own polling taken off) against the same runs on the threads pool. On a shared machine the worker
waits for a core (the run-queue time of its ``schedstat`` is in the log line): the wall ratio then measures the
machine, the CPU row the worker.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from .common import (
    PrivateRedis,
    Row,
    bench_env,
    celery_worker,
    cli_main,
    fake_openai_server,
    log,
    prefix_broker_keys,
    prefixed,
    stop_all,
)

RUNS = 1000
THREADS = 16
#: Runs sent at once to a ready worker through the Runtime (bench/langgraph_side.py sends them over HTTP, as to
#: LangGraph's server).
SIDE = 100
TOKENS, TOKEN_DELAY = 50, 0.1


def _runtime(url: str, prefix: str, queue: str) -> object:
    from agents_celery import Runtime
    from agents_celery.broker.celery_app import create_celery_app
    from agents_celery.settings import load_settings

    settings = load_settings(redis_url=url, broker_url=url, key_prefix=prefix, queue=queue)
    app = create_celery_app(settings, agents={})
    prefix_broker_keys(app, prefix)
    return Runtime(settings=settings, celery_app=app)


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _waited(pid: int) -> float:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9


def _measure(url: str, pool: str, concurrency: int, n: int, queued: bool = True) -> dict[str, float]:
    private = PrivateRedis()
    try:
        return _measure_on(private, url, pool, concurrency, n, queued)
    finally:
        private.close()


def _measure_on(private: PrivateRedis, url: str, pool: str, concurrency: int, n: int, queued: bool) -> dict[str, float]:
    """Wall time, peak RSS, CPU and Redis commands of ``n`` runs queued before one worker starts (``queued``;
    else sent to a ready worker, the way a server is sent requests: then also the median time to first token)."""
    with prefixed(f"gevent-{pool}") as prefix:
        queue = f"bench-gevent-{uuid.uuid4().hex[:6]}"
        env = bench_env(prefix, queue, {"FAKE_OPENAI_URL": url, "AGENTS_CELERY_LEASE_TTL_SECONDS": "10",
                                         "AGENTS_CELERY_HEARTBEAT_SECONDS": "2", "AGENTS_CELERY_REDIS_URL": private.url,
                                         "CELERY_BROKER_URL": private.url})  # fmt: skip
        runtime: Any = _runtime(private.url, prefix, queue)
        try:
            from .agents import streamer

            ids = [runtime.stream(streamer, f"go {i}").id for i in range(n)] if queued else []
            worker = celery_worker("bench.worker", env, queue, f"gevent-{pool}", concurrency, pool)
            worker.wait_ready()
            base_rss, base_cpu, base_cmds = _rss(worker.pid), _cpu(worker.pid), private.commands()
            t0 = time.perf_counter()
            ids = ids or [runtime.stream(streamer, f"go {i}").id for i in range(n)]
            peak, left, held = base_rss, list(ids), 0
            polled = 0  # the bench's own commands, taken off the count
            while left:
                peak = max(peak, _rss(worker.pid))
                polled += 2 * len(left)
                left, holding = _live(runtime.store, left)
                held = max(held, holding)
                time.sleep(0.2)
            took = time.perf_counter() - t0
            cmds = private.commands() - base_cmds - polled
            cpu, waited = _cpu(worker.pid) - base_cpu, _waited(worker.pid)
            views = [runtime.get_stream(i).get().status.value for i in ids]
            assert views.count("completed") == n, {s: views.count(s) for s in set(views)}
            log(
                f"gevent: {pool} x{concurrency}, {n} runs: {took:.1f}s, cpu {cpu:.1f}s, waited for a core {waited:.1f}s"
            )
            first = sorted(_first_token(runtime, i) for i in ids[:100])
            return {"wall": took, "peak": peak - base_rss, "rss": peak, "cpu": cpu, "cmds_per_step": cmds / n,
                    "first": first[len(first) // 2], "held": held}  # fmt: skip
        finally:
            runtime.close()
            stop_all()


def _first_token(runtime: object, run_id: str) -> float:
    """Seconds from the run's first event (written when it was created) to its first text token."""
    events = list(runtime.get_stream(run_id).events())  # type: ignore[attr-defined]
    token = next(e for e in events if e.type.value == "TEXT_MESSAGE_CONTENT")
    return (token.timestamp - events[0].timestamp) / 1000


def _live(store: object, ids: list[str]) -> tuple[list[str], int]:
    """The runs not ended yet, and how many of them hold their lease now (a step working), in one round trip."""
    r, keys = store.redis, store.keys  # type: ignore[attr-defined]
    with r.pipeline(transaction=False) as pipe:
        for run_id in ids:
            pipe.hget(keys.run(run_id).run, "log")
            pipe.exists(keys.run(run_id).lease)
        replies = pipe.execute()
    live = [i for i, status in zip(ids, replies[0::2], strict=True) if status != b"ended"]
    return live, sum(bool(x) for x in replies[1::2])


def _cpu(pid: int) -> float:
    from .common import cpu_seconds

    return cpu_seconds(pid)


def run(quick: bool = False) -> list[Row]:
    n = 200 if quick else RUNS
    server, url = fake_openai_server(TOKENS, TOKEN_DELAY)
    try:
        log(f"gevent: {n} runs of 50 tokens over 5 s on one gevent worker; one alone; threads x{THREADS}")
        alone = _measure(url, "gevent", n, 1)
        many = _measure(url, "gevent", n, n)
        threads = _measure(url, "threads", THREADS, THREADS)
        side = _measure(url, "gevent", SIDE, SIDE, queued=False)
    finally:
        server.terminate()
        server.wait(timeout=10)
    per_run = many["peak"] / n / 1e6
    per_thread_run = threads["peak"] / THREADS / 1e6
    return [
        Row(f"{n} runs in flight, one gevent worker process: wall", many["wall"], "s", "one run alone", alone["wall"],
            target=3.0, readme=True),
        Row(f"{n} runs, one gevent worker process: most holding their lease at once", many["held"], "", "-", None),
        Row(f"worker RSS per in-flight run, gevent x{n}", per_run, "MB", f"threads x{THREADS}", per_thread_run),
        Row(f"worker CPU per run, gevent x{n}", many["cpu"] / n, "s", f"threads x{THREADS}",
            threads["cpu"] / THREADS),
        Row("Redis commands per step, gevent", many["cmds_per_step"], "", f"threads x{THREADS}",
            threads["cmds_per_step"], target=1.0),
        Row(f"{SIDE} runs sent at once to a ready gevent worker (Runtime, no HTTP): runs/s", SIDE / side["wall"],
            "/s", "-", None),
        Row(f"{SIDE} runs sent at once (Runtime, no HTTP): median time to first token", side["first"], "s", "-", None),
    ]  # fmt: skip


if __name__ == "__main__":
    cli_main(run)

"""Per-step overhead of a durable run, against a bare Celery chain hop and a plain Redis SET loop.

A run of N no-op tool calls with a zero-latency scripted model (``bench.agents.steps``) on a real worker process
(threads pool, concurrency 1) takes 2N + 1 steps, counted from its STEP_STARTED events. Its wall time (start to
the client receiving the final event) / steps is compared with (a) a Celery chain hop (SET + apply_async) over the
same number of hops on a separate worker of the same pool and concurrency, same broker; (b) one Redis SET per
step in a plain loop. Runs of the two workers are interleaved so drift hits both.

The hop chain's client blocks on one BLPOP for the last hop; the durable run's client likewise blocks on the
run's final event alone (and checks every event afterwards). A second figure has the client read every event as
it comes, as a run's reader would: on a 2-core machine that reader competes with the worker and Redis for CPU.

The same interleaved measure runs again beside a process spinning on one core (``burner``): a controlled load,
the same from run to run, under which a durable step should still cost no more than a hop.

A profile pass (Redis ``MONITOR`` read through redis-py, our database only) counts the Redis commands per step and
per hop.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agents_celery.events import EventType

from .common import (
    Row,
    agents_worker,
    bench_env,
    celery_worker,
    cli_main,
    client,
    cpu_seconds,
    log,
    median,
    prefixed,
    runtime_for,
    settings_for,
)

DEFAULT_N = 50


@dataclass
class RunTiming:
    seconds: float
    steps: int

    @property
    def per_step(self) -> float:
        return self.seconds / self.steps


def durable_run(rt: Any, n: int) -> RunTiming:
    """One run of n tool calls, timed from start to the client receiving the final event."""
    t0 = time.perf_counter()
    stream = rt.stream("steps", str(n))
    steps = 0
    last = None
    for ev in stream.events():
        last = ev
        if ev.type is EventType.STEP_STARTED:
            steps += 1
    elapsed = time.perf_counter() - t0
    assert last is not None and last.type is EventType.RUN_FINISHED, f"run ended with {last}"
    assert last.data.get("outcome", {}).get("type") == "success", last.data
    assert steps == 2 * n + 1, f"expected {2 * n + 1} steps, saw {steps}"
    return RunTiming(elapsed, steps)


def durable_run_final(rt: Any, n: int, events: int) -> RunTiming:
    """One run of n tool calls, timed from start to the client receiving the final event, with the client
    blocked on that event alone (``XREAD BLOCK`` from the offset before it; Redis serves a blocked reader
    only once an entry past its id exists), as the hop chain's client blocks on one BLPOP. The run's
    events are read and checked afterwards, untimed. ``events``: how many the run writes (from a warm-up)."""
    t0 = time.perf_counter()
    stream = rt.stream("steps", str(n))
    key = rt.store.keys.run(stream.id).events
    got = rt.redis.xread({key: f"{events - 2}-1"}, count=1, block=120_000)
    elapsed = time.perf_counter() - t0
    assert got, "the run did not finish"
    everything = list(stream.events())
    assert len(everything) == events and everything[-1].offset == events - 1, "the run wrote other events"
    last = everything[-1]
    assert last.type is EventType.RUN_FINISHED and last.data.get("outcome", {}).get("type") == "success", last
    steps = sum(1 for ev in everything if ev.type is EventType.STEP_STARTED)
    assert steps == 2 * n + 1, f"expected {2 * n + 1} steps, saw {steps}"
    return RunTiming(elapsed, steps)


def events_of_run(rt: Any, n: int) -> int:
    """How many events a run of n tool calls writes."""
    return len(list(rt.stream("steps", str(n)).events()))


def hop_chain(prefix: str, hops: int) -> float:
    """Seconds for a chain of ``hops`` Celery hops (first send to the last hop's push)."""
    from .hop import hop

    r = client()
    key = f"{prefix}:hop:{uuid.uuid4().hex[:8]}"
    t0 = time.perf_counter()
    hop.apply_async((key, hops))
    got = r.blpop([f"{key}:done"], timeout=120)
    elapsed = time.perf_counter() - t0
    assert got is not None, "hop chain did not finish"
    r.delete(key)
    r.close()
    return elapsed


def set_loop(prefix: str, steps: int) -> float:
    """Seconds per step of a plain loop doing one Redis SET per step."""
    r = client()
    key = f"{prefix}:setloop"
    r.set(key, 0)
    t0 = time.perf_counter()
    for i in range(steps):
        r.set(key, i)
    elapsed = time.perf_counter() - t0
    r.close()
    return elapsed / steps


@contextlib.contextmanager
def monitor() -> Iterator[Counter[str]]:
    """Count the commands Redis executes on our database (top level; Lua's inner calls apart) meanwhile.

    A thread reads ``MONITOR`` through redis-py (no ``redis-cli`` needed). The window closes at an ``ECHO`` of a
    marker this process sends 0.2 s after the measured work: what a step or a hop does just after the client
    saw its end (an ack, the next fetch) counts too."""
    db = int(client().connection_pool.connection_kwargs.get("db", 0))
    marker = f"bench-monitor-end-{uuid.uuid4().hex}"
    counts: Counter[str] = Counter()
    failed: list[BaseException] = []
    r = client()

    def read(mon: Any) -> None:
        try:
            while True:
                cmd = mon.next_command()
                words = str(cmd["command"]).split(" ", 1)
                if words[0].upper() == "ECHO" and marker in cmd["command"]:
                    return
                if cmd["db"] == db:
                    counts[("lua:" if cmd["client_type"] == "lua" else "") + words[0].upper()] += 1
        except Exception as exc:  # the bench reports it once the window closes
            failed.append(exc)

    try:
        with r.monitor() as mon:
            reader = threading.Thread(target=read, args=(mon,), name="bench-monitor", daemon=True)
            reader.start()
            yield counts
            time.sleep(0.2)
            r.echo(marker)
            reader.join(timeout=60)
            if failed or reader.is_alive():
                raise RuntimeError(f"reading MONITOR failed: {failed[0] if failed else 'no marker within 60 s'}")
    finally:
        r.close()


def top_level(counts: Counter[str]) -> int:
    return sum(v for k, v in counts.items() if not k.startswith("lua:"))


def describe(counts: Counter[str], per: int) -> str:
    parts = [f"{k} {v / per:.2f}" for k, v in counts.most_common() if not k.startswith("lua:")]
    return ", ".join(parts)


def start_pair(prefix: str, extra: dict[str, str] | None = None, pool: str = "threads") -> tuple[Any, Any, str, str]:
    """An agents worker and a hop worker (threads pool by default, concurrency 1), both ready."""
    tail = "" if pool == "threads" else f"-{pool}"
    queue, hop_queue = f"{prefix}-agents{tail}", f"{prefix}-hop{tail}"
    worker = agents_worker(prefix, queue, f"{prefix}-steps{tail}", extra, pool=pool)
    hop_worker = celery_worker("bench.hop", bench_env(prefix, hop_queue), hop_queue, f"{prefix}-hop{tail}", pool=pool)
    worker.wait_ready()
    hop_worker.wait_ready()
    from .hop import configure

    configure(prefix, hop_queue)
    return worker, hop_worker, queue, hop_queue


def measure(
    prefix: str,
    queue: str,
    n: int,
    runs: int,
    hop_worker: bool = True,
    pids: tuple[int, int] = (0, 0),
    **overrides: Any,
) -> dict[str, Any]:
    """Interleaved durable runs and hop chains; medians of seconds per step and per hop, and the CPU seconds the
    agents worker (``pids[0]``) and the hop worker (``pids[1]``) used per step and per hop.

    ``durable``: the client blocks on the final event alone; ``durable_reading``: the client reads every event
    as it comes (a run's usual reader, which on this 2-core machine also competes with the worker for CPU)."""
    rt = runtime_for(prefix, queue, **overrides)
    try:
        durable_run(rt, 2)  # warm-up: connections, imports, first task
        events = events_of_run(rt, n)
        if hop_worker:
            hop_chain(prefix, 5)
        durable: list[float] = []
        reading: list[float] = []
        hops: list[float] = []
        cpu = [0.0, 0.0]
        steps = 0
        for _ in range(runs):
            before = cpu_seconds(pids[0])
            timing = durable_run_final(rt, n, events)
            cpu[0] += cpu_seconds(pids[0]) - before
            durable.append(timing.per_step)
            steps = timing.steps
            reading.append(durable_run(rt, n).per_step)
            if hop_worker:
                before = cpu_seconds(pids[1])
                hops.append(hop_chain(prefix, steps) / steps)
                cpu[1] += cpu_seconds(pids[1]) - before
        per = runs * steps
        return {
            "durable": median(durable),
            "durable_reading": median(reading),
            "hop": median(hops) if hops else None,
            "steps": steps,
            "rt": rt,
            "cpu": (cpu[0] / per, cpu[1] / per),
        }
    except BaseException:
        rt.close()
        raise


def in_process(prefix: str, n: int, profile: bool = False) -> RunTiming:
    """The engine's own cost: the same run with its steps executed in this process, one after another (no
    broker, no Celery). With ``profile``, the top functions by cumulative time go to stderr."""
    import cProfile
    import io
    import pstats

    from agents_celery import Runtime
    from agents_celery.engine.engine import Engine
    from agents_celery.hooks import LoggingHooks
    from agents_celery.storage.store import RunStore

    from .agents import steps as steps_agent

    queue = f"{prefix}-inproc"
    pending: list[tuple[str, int]] = []
    rt = Runtime(
        settings=settings_for(prefix, queue), enqueue=lambda run_id, step, *_, **__: pending.append((run_id, step))
    )
    store = RunStore(client(), rt.settings)
    engine = Engine(store, {"steps": steps_agent}, lambda run_id, step, agent_id: pending.append((run_id, step)),
                    [LoggingHooks()])  # fmt: skip
    prof = cProfile.Profile() if profile else None
    t0 = time.perf_counter()
    stream = rt.stream("steps", str(n))
    if prof:
        prof.enable()
    executed = 0
    while pending:
        run_id, step = pending.pop(0)
        assert engine.execute(run_id, step) == "committed"
        executed += 1
    if prof:
        prof.disable()
    elapsed = time.perf_counter() - t0
    assert rt.get(stream.id).status.value == "completed"
    rt.close()
    store.redis.close()
    if prof:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(os.environ.get("BENCH_SORT", "cumulative")).print_stats(25)
        log("steps: in-process engine profile (cumulative):\n" + buf.getvalue())
    return RunTiming(elapsed, executed)


def durable_settings_hop(prefix: str, steps: int, runs: int) -> float:
    """Seconds per hop of the bare chain on a worker with acks_late, reject_on_worker_lost and prefetch 1."""
    from .hop import configure

    queue = f"{prefix}-hop-durable"
    env = {**bench_env(prefix, queue), "BENCH_HOP_DURABLE": "1"}
    hop_worker = celery_worker("bench.hop", env, queue, f"{prefix}-hop-durable")
    try:
        hop_worker.wait_ready()
        configure(prefix, queue)
        hop_chain(prefix, 5)
        return median([hop_chain(prefix, steps) / steps for _ in range(runs)])
    finally:
        hop_worker.stop()
        configure(prefix, f"{prefix}-hop")


def prefork_pair(prefix: str, n: int, runs: int) -> dict[str, Any]:
    """The durable run and the hop chain again, both workers on Celery's default pool (prefork, one child).

    The consumer and the task are then in two processes: the commit still acks the message in Redis, but
    the parent cannot free the prefetch slot before the child's result comes back, so it acks as Celery
    always does (a round trip on keys the commit already cleared)."""
    worker, hop_worker, queue, _ = start_pair(prefix, pool="prefork")
    try:
        return measure(prefix, queue, n, runs)
    finally:
        worker.stop()
        hop_worker.stop()
        from .hop import configure

        configure(prefix, f"{prefix}-hop")


@contextlib.contextmanager
def burner() -> Iterator[None]:
    """A process spinning on one core while the block runs: a load the same from run to run, unlike the other
    processes of a busy machine (#44 point 1)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # let it take its core before the measure starts
        yield
    finally:
        proc.kill()
        proc.wait(timeout=10)


def run(quick: bool) -> list[Row]:
    n = int(os.environ.get("BENCH_STEPS_N", DEFAULT_N))
    runs = 3 if quick else 9
    with prefixed("steps") as prefix:
        log(f"steps: starting workers (N={n}, {runs} runs)")
        worker, hop_worker, queue, _ = start_pair(prefix)
        try:
            result = measure(prefix, queue, n, runs, pids=(worker.pid, hop_worker.pid))
            steps = result["steps"]
            log("steps: the same with one core burnt by another process (the controlled load)")
            with burner():
                loaded = measure(prefix, queue, n, runs, pids=(worker.pid, hop_worker.pid))
            loaded["rt"].close()
            loop = median([set_loop(prefix, 2000) for _ in range(3)])
            in_process(prefix, 5)  # warm-up
            engine = median([in_process(prefix, n).per_step for _ in range(3)])
            in_process(prefix, n, profile=os.environ.get("BENCH_PROFILE") == "1")
            log("steps: profile (MONITOR)")
            with monitor() as durable_cmds:
                durable_run(result["rt"], 10)
            with monitor() as hop_cmds:
                hop_chain(prefix, 21)
            result["rt"].close()
            durable_hop = durable_settings_hop(prefix, steps, runs)
        finally:
            worker.stop()
            hop_worker.stop()
        log("steps: both workers on the prefork pool")
        prefork = prefork_pair(prefix, n, 3)
        prefork["rt"].close()
    durable_per_step = top_level(durable_cmds) / 21
    hop_per = top_level(hop_cmds) / 21
    log(f"steps: Redis commands per durable step: {describe(durable_cmds, 21)}")
    log(f"steps: Redis commands per Celery hop: {describe(hop_cmds, 21)}")
    ms = 1000.0
    return [
        Row(f"durable step (run of {steps} steps)", result["durable"] * ms, "ms",
            "bare Celery chain hop", result["hop"] * ms, "<=", 1.0, readme=True),
        Row("durable step, one core burnt by another process", loaded["durable"] * ms, "ms",
            "bare Celery chain hop, same load", loaded["hop"] * ms, "<=", 1.0),
        Row("worker CPU per durable step, one core burnt (info)", loaded["cpu"][0] * ms, "ms",
            "hop worker CPU per hop, same load", loaded["cpu"][1] * ms, "<=", None),
        Row("durable step, client reading every event (info)", result["durable_reading"] * ms, "ms",
            "bare Celery chain hop", result["hop"] * ms, "<=", None),
        Row("durable step, both workers on the prefork pool (info)", prefork["durable"] * ms, "ms",
            "bare hop, prefork pool", prefork["hop"] * ms, "<=", None),
        Row("durable step vs plain SET loop", result["durable"] * ms, "ms",
            "1 Redis SET per step, plain loop", loop * ms, "<=", None),
        Row("bare hop with the step task's ack settings (info)", durable_hop * ms, "ms",
            "bare Celery chain hop", result["hop"] * ms, "<=", None),
        Row("durable step vs that hop (info)", result["durable"] * ms, "ms",
            "hop with acks_late, prefetch 1", durable_hop * ms, "<=", None),
        Row("engine step in-process, no Celery (info)", engine * ms, "ms",
            "bare Celery chain hop", result["hop"] * ms, "<=", None),
        Row("Redis commands per durable step", durable_per_step, "cmds",
            "Redis commands per Celery hop", hop_per, "<=", None),
        # Both workers are CPU-bound (their threads take turns on the GIL): CPU per step is most of the story.
        Row("worker CPU per durable step (info)", result["cpu"][0] * ms, "ms",
            "hop worker CPU per hop", result["cpu"][1] * ms, "<=", None),
    ]  # fmt: skip


if __name__ == "__main__":
    cli_main(run)

"""Scheduled runs: how late a schedule's run starts after its tick, against bare Celery beat -> task.

- figure: a schedule ``every=1`` second fired by ``agents_celery.broker.beat:RunScheduler`` (in ``celery -A
  bench.worker beat``, so its messages reach the bench worker's prefixed queue) starts runs of the ``steps``
  agent (one model turn); per tick, its run's first STEP_STARTED (a worker took the first step) minus the
  tick's time, and its RUN_STARTED (the run was created) minus the tick's time;
- floor (:mod:`bench.beatfloor`): bare beat sending a task at every whole second to a bare Celery worker,
  the task noting how late it started: the beat loop, broker and worker pool any scheduled task goes through.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from .beatfloor import lateness_key
from .common import (
    Proc,
    Row,
    agents_worker,
    bench_env,
    celery_worker,
    cli_main,
    client,
    log,
    median,
    percentile,
    prefixed,
    runtime_for,
)


def _beat(app: str, scheduler: str, env: dict[str, str], name: str) -> Proc:
    schedule_file = Path(tempfile.mkdtemp(prefix="bench-beat-")) / "schedule"
    cmd = [sys.executable, "-m", "celery", "-A", app, "beat", "-S", scheduler, "-s", str(schedule_file)]
    return Proc([*cmd, "--loglevel", "WARNING"], env, name)


def _wait(what: str, done: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"schedules bench: {what} did not happen within {timeout:g}s")
        time.sleep(0.1)


def ours(prefix: str, ticks: int) -> tuple[list[float], list[float]]:
    """(tick -> first step started, tick -> run created) in ms, one per tick."""
    queue = f"{prefix}-runs"
    worker = agents_worker(prefix, queue, "sched").wait_ready()
    beat = _beat("bench.worker", "agents_celery.broker.beat:RunScheduler", bench_env(prefix, queue), "beat-ours")
    runtime = runtime_for(prefix, queue)
    try:
        _wait("the agents to be published", lambda: runtime.store.agents.get("steps") is not None, 60)
        made = runtime.schedule("steps", "0", every=1)

        def runs() -> list[str]:
            return [r.run_id for r in runtime.runs(limit=200).runs if r.schedule_id == made.schedule_id]

        _wait(f"{ticks + 1} scheduled runs", lambda: len(runs()) > ticks, ticks * 3 + 60)
        runtime.pause_schedule(made.schedule_id)
        step, created = [], []
        for run_id in runs():
            state, _ = runtime.store.load(run_id)
            events = list(runtime.get_stream(run_id).events(until_pause=False))
            due = state.scheduled_for or 0
            created.append(events[0].timestamp - due)
            step.append(next(e.timestamp for e in events if e.type.value == "STEP_STARTED") - due)
        return step[1:], created[1:]  # the first tick may find beat still warming up
    finally:
        runtime.close()
        beat.stop()
        worker.stop()


def floor(prefix: str, ticks: int) -> list[float]:
    """Bare beat -> task: how late each task started after its tick (ms)."""
    queue = f"{prefix}-bare"
    env = bench_env(prefix, queue)
    worker = celery_worker("bench.beatfloor", env, queue, "beatfloor").wait_ready()
    beat = _beat("bench.beatfloor", "bench.beatfloor:AlignedScheduler", env, "beat-bare")
    r = client()
    try:
        _wait(f"{ticks + 1} bare ticks", lambda: r.llen(lateness_key(prefix)) > ticks, ticks * 3 + 60)
        late = [float(v) for v in r.lrange(lateness_key(prefix), 0, -1)]
        return late[1:]
    finally:
        r.close()
        beat.stop()
        worker.stop()


def run(quick: bool) -> list[Row]:
    ticks = 6 if quick else 20
    with prefixed("schedules") as prefix:
        log(f"schedules: {ticks} ticks of bare beat -> task")
        bare = floor(prefix, ticks)
        log(f"schedules: {ticks} ticks of a schedule every second")
        step, created = ours(prefix, ticks)
    floor_name = "bare beat -> task started, median"
    return [
        Row(
            "schedule tick -> run's first step started, median",
            median(step),
            "ms",
            floor_name,
            median(bare),
            "<=",
            3.0,
            readme=True,
        ),
        Row("the same, p95", percentile(step, 95), "ms", "bare beat -> task, p95", percentile(bare, 95)),
        Row("schedule tick -> run created (RUN_STARTED), median", median(created), "ms", floor_name, median(bare)),
    ]


if __name__ == "__main__":
    cli_main(run)

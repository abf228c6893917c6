"""Listing runs out of many: ``Runtime.runs`` against the least Redis work that lists the same runs.

100,000 runs (20,000 in quick mode) are written straight into Redis as a run creation leaves them (the run
record with its state, the index entries); 1 in 100 is paused, agents alternate over 10 names. Figures, each
the median time of one call:

- the newest 100 runs (``Runtime.runs(limit=100)``), and page 50 of them (a cursor deep in the index);
- the newest 100 paused runs (the ``paused`` status index), and 100 runs of one agent;
- floor: ``ZREVRANGEBYSCORE`` of 100 ids plus one pipelined ``HMGET`` of their records: the round trips and
  bytes any listing of 100 runs needs. What the listing adds is parsing 100 states into RunViews.
"""

from __future__ import annotations

import time
import uuid

from agents_celery.runs import RunState, RunStatus
from agents_celery.settings import load_settings
from agents_celery.storage.index import IndexEntry, RunIndex
from agents_celery.storage.keys import Keys

from .common import REDIS_URL, Row, cli_main, client, log, median, prefixed, timed

PAGE = 100


def fill(r: object, index: RunIndex, keys: Keys, runs: int) -> None:
    """``runs`` runs as their creation (and a pause, for 1 in 100) leaves them in Redis."""
    now = int(time.time() * 1000) - runs
    for start in range(0, runs, 1000):
        with index.redis.pipeline(transaction=False) as pipe:
            for i in range(start, min(start + 1000, runs)):
                run_id, created = uuid.uuid4().hex, now + i
                status = RunStatus.PAUSED if i % 100 == 0 else RunStatus.COMPLETED
                state = RunState(
                    run_id=run_id, agent_id=f"agent{i % 10}", session_id=f"s{i}", user_id=f"u{i % 1000}",
                    messages=[{"role": "user", "content": "hi"}], status=status, created_at=created,
                )  # fmt: skip
                pipe.hset(keys.run(run_id).run, mapping={"state": state.to_json_v1(), "next": 12, "log": "ended"})
                entry = IndexEntry(run_id, created, state.agent_id, state.session_id, state.user_id)
                index.add(pipe, entry)
                index.move(pipe, entry, status, created)
            pipe.execute()


def run(quick: bool) -> list[Row]:
    from agents_celery import Runtime

    runs = 20_000 if quick else 100_000
    repeats = 15 if quick else 40
    with prefixed("listing") as prefix:
        r = client()
        settings = load_settings(redis_url=REDIS_URL, key_prefix=prefix)
        runtime = Runtime(settings=settings)
        keys = Keys(prefix)
        index = runtime.store.index
        log(f"listing: writing {runs:,} runs")
        fill(r, index, keys, runs)
        try:

            def floor() -> None:
                ids = r.zrevrangebyscore(keys.runs, "+inf", "-inf", start=0, num=PAGE)
                with r.pipeline(transaction=False) as pipe:
                    for run_id in ids:  # type: ignore[union-attr]
                        pipe.hmget(keys.run(run_id.decode()).run, "state", "next", "queue")
                    pipe.execute()

            deep = None
            for _ in range(49):
                deep = runtime.runs(limit=PAGE, cursor=deep).next_cursor
            figures = {
                "raw": lambda: floor(),
                "newest": lambda: runtime.runs(limit=PAGE),
                "deep": lambda: runtime.runs(limit=PAGE, cursor=deep),
                "paused": lambda: runtime.runs(limit=PAGE, status="paused"),
                "agent": lambda: runtime.runs(limit=PAGE, agent_id="agent3"),
            }
            for fn in figures.values():
                fn()  # warm-up
            times: dict[str, list[float]] = {name: [] for name in figures}
            for _ in range(repeats):
                for name, fn in figures.items():
                    times[name].append(timed(fn) * 1000)
            assert len(runtime.runs(limit=PAGE, status="paused").runs) == PAGE
        finally:
            runtime.close()
            r.close()
    raw = median(times["raw"])
    floor_name = "ZREVRANGE + pipelined HMGET of 100"
    return [
        Row(
            f"list the newest 100 of {runs:,} runs",
            median(times["newest"]),
            "ms",
            floor_name,
            raw,
            "<=",
            3.0,
            readme=True,
        ),
        Row("the same, page 50 (cursor)", median(times["deep"]), "ms", floor_name, raw, "<=", 3.0),
        Row("100 paused runs (1 in 100)", median(times["paused"]), "ms", floor_name, raw, "<=", 3.0),
        Row("100 runs of one agent (1 in 10)", median(times["agent"]), "ms", floor_name, raw, "<=", 3.0),
    ]


if __name__ == "__main__":
    cli_main(run)

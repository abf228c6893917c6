"""Agents as tools: a run whose one tool call runs another agent as a child run, against the same run calling a
plain tool instead.

Both runs use zero-latency scripted models (``bench.agents``): ``delegate`` calls ``helper`` as a tool (the
parent's turn, its tool step starting the child and ending waiting, the child's one turn, the parent's tool
step woken to collect the answer, the parent's last turn: five steps and a second run created); ``plain``
calls the no-op tool ``noop`` (turn, tool step, turn). Figure: the median time from ``stream()`` to the
client receiving the final event, on one worker process (threads pool, concurrency 1: the parent holds no
worker while its child runs), runs of the two interleaved so drift hits both.
"""

from __future__ import annotations

import time
from typing import Any

from agents_celery.events import EventType

from .common import Row, agents_worker, cli_main, log, median, percentile, prefixed, runtime_for


def one_run(rt: Any, agent: str) -> float:
    """Seconds from starting a run of ``agent`` to its successful RUN_FINISHED reaching the client."""
    t0 = time.perf_counter()
    stream = rt.stream(agent, "go")
    last = None
    for ev in stream.events():
        last = ev
    elapsed = time.perf_counter() - t0
    assert last is not None and last.type is EventType.RUN_FINISHED, f"{agent}: run ended with {last}"
    assert last.data.get("outcome", {}).get("type") == "success", last.data
    return elapsed


def run(quick: bool) -> list[Row]:
    runs = 10 if quick else 40
    with prefixed("subagents") as prefix:
        queue = f"{prefix}-runs"
        worker = agents_worker(prefix, queue, "subagents").wait_ready()
        rt = runtime_for(prefix, queue)
        try:
            deadline = time.monotonic() + 60
            while rt.store.agents.get("delegate") is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("subagents bench: the agents were not published within 60 s")
                time.sleep(0.1)
            for _ in range(3):  # warm-up
                one_run(rt, "plain")
                one_run(rt, "delegate")
            plain: list[float] = []
            child: list[float] = []
            log(f"subagents: {runs} runs of each, interleaved")
            for _ in range(runs):
                plain.append(one_run(rt, "plain"))
                child.append(one_run(rt, "delegate"))
        finally:
            rt.close()
            worker.stop()
    ms = 1000.0
    log(f"subagents: plain tool p50 {median(plain) * ms:.2f} ms, agent as tool p50 {median(child) * ms:.2f} ms")
    return [
        Row("run with an agent-as-tool call, p50", median(child) * ms, "ms",
            "same run, plain tool call", median(plain) * ms, "<=", 3.0, readme=True),
        Row("run with an agent-as-tool call, p95 (info)", percentile(child, 95) * ms, "ms",
            "same run, plain tool call, p95", percentile(plain, 95) * ms, "<=", None),
    ]  # fmt: skip


if __name__ == "__main__":
    cli_main(run)

"""What the two guest-framework benches (:mod:`bench.pydantic_ai`, :mod:`bench.openai_agents`) measure alike: the
recovery after ``kill -9`` of the worker running a tool, and a DBOS workflow timed run by run."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from .common import agents_worker, client, log, runtime_for


def recovery(
    prefix: str, queue: str, env: dict[str, str], kills: int, *, agent: str, started_key: Callable[[str, str], str]
) -> list[float]:
    """Seconds from kill -9 of the worker running ``agent``'s tool to the tool running again on the other worker.

    The tool pushes ``<pid>:<time_ns>`` to ``started_key(prefix, run_id)`` each time it starts; two workers serve
    ``queue`` (``env`` names the agents module), a fresh one joins after each kill."""
    workers = {w.pid: w for w in (agents_worker(prefix, queue, f"{prefix}-r{i}", env) for i in range(2))}
    for w in workers.values():
        w.wait_ready()
    rt = runtime_for(prefix, queue)
    r = client()
    out: list[float] = []
    try:
        for i in range(kills):
            stream = rt.stream(agent, "go")
            key = started_key(prefix, stream.id)
            deadline = time.monotonic() + 60
            while not r.llen(key):
                if time.monotonic() > deadline:
                    raise RuntimeError("the tool never started")
                time.sleep(0.002)
            pid = int(str(r.lindex(key, 0), "utf-8").split(":")[0])
            t_kill = time.time()
            workers.pop(pid).kill9()
            while r.llen(key) < 2:
                if time.time() - t_kill > 60:
                    raise RuntimeError("the tool never started again")
                time.sleep(0.005)
            out.append(int(str(r.lindex(key, 1), "utf-8").split(":")[1]) / 1e9 - t_kill)
            log(f"{agent}: recovery round {i + 1}: killed {pid}; the tool ran again after {out[-1]:.2f} s")
            fresh = agents_worker(prefix, queue, f"{prefix}-r{i + 2}", env).wait_ready()
            workers[fresh.pid] = fresh
    finally:
        r.close()
        rt.close()
        for w in workers.values():
            w.stop()
    return out


async def timed(workflow: Callable[[str], Awaitable[Any]], runs: int, expected: str) -> list[float]:
    """Seconds of each of ``runs`` awaits of ``workflow("go")`` after two warm-up ones, each checked to answer
    ``expected``."""
    out: list[float] = []
    for _ in range(runs + 2):
        t0 = time.perf_counter()
        answer = await workflow("go")
        out.append(time.perf_counter() - t0)
        assert answer == expected, answer
    return out[2:]

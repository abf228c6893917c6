"""A pydantic-ai agent on our backend (``CeleryDurability``) against the same agent in-process and on pydantic-ai's
DBOS engine (on the local PostgreSQL), same fake model, one window.

The run: 3 tool calls, one per model turn, then the answer (4 model requests, 3 tool calls). Figures, medians:
per-run latency on our backend (a Runtime in this process, one worker, threads pool, concurrency 1) with the
in-process run as its floor (target <= 1.5x); per-step overhead, ``(run - in-process run) / 7`` (the run's 7
units), ours against DBOS's (target: ours lower); recovery after ``kill -9`` of the worker running a tool (two
workers, the product's default timings), from the kill to the tool running again on the other worker (target
<= 10 s). DBOS runs in this process (``DBOS.launch()``), each function tool a ``@DBOS.step``; its recovery is not
measured here (DBOS recovers a killed process's workflows when a process of the same executor launches again).
Needs ``dbos`` (the ``[bench]`` extra) and PostgreSQL at ``BENCH_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing.openai_server import FakeOpenAIServer, ScriptResponder

from .common import Row, agents_worker, cli_main, client, log, median, prefixed, runtime_for

SCRIPT = ScriptResponder(
    [ScriptedTurn(tool_calls=[ScriptedToolCall("noop", {"i": i})]) for i in range(3)] + ["All three done."]
)
RECOVER = ScriptResponder([ScriptedTurn(tool_calls=[ScriptedToolCall("sleepy", {})]), "Rested."])


def respond(request: dict[str, Any]) -> Any:
    """``pai_recover``'s script for a request offering its tool, else the 3-tool script."""
    names = {t.get("function", {}).get("name") for t in request.get("tools") or []}
    return RECOVER(request) if "sleepy" in names else SCRIPT(request)


UNITS = 7
POSTGRES = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _worker_env(url: str) -> dict[str, str]:
    return {"AGENTS_CELERY_AGENTS": "bench.pai_agents", "BENCH_FAKE_OPENAI_URL": url}


def in_process(runs: int) -> list[float]:
    from . import pai_agents

    out = []
    for _ in range(runs + 2):
        t0 = time.perf_counter()
        result = pai_agents.bench.run_sync("go")
        out.append(time.perf_counter() - t0)
        assert result.output == "All three done.", result.output
    return out[2:]


def ours(rt: Any, runs: int) -> list[float]:
    out = []
    for _ in range(runs + 2):
        t0 = time.perf_counter()
        view = rt.run("pai_bench", "go", timeout=60)
        out.append(time.perf_counter() - t0)
        assert view.output == "All three done.", view
    return out[2:]


def dbos_runs(url: str, runs: int) -> list[float]:
    """The same agent on pydantic-ai's DBOS engine, a system database of its own (dropped afterwards)."""
    import psycopg
    from dbos import DBOS
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.dbos import DBOSDurability

    from .pai_agents import model

    database = f"bench_dbos_{uuid.uuid4().hex[:8]}"
    DBOS(config={"name": database, "system_database_url": POSTGRES.rsplit("/", 1)[0] + f"/{database}"})
    agent = Agent(model(), name="dbos_bench", capabilities=[DBOSDurability()])

    @agent.tool_plain
    @DBOS.step()
    def noop(i: int) -> str:
        return f"ok {i}"

    @DBOS.workflow()
    async def workflow(prompt: str) -> str:
        return str((await agent.run(prompt)).output)

    DBOS.launch()
    out: list[float] = []
    try:

        async def all_runs() -> None:
            for _ in range(runs + 2):
                t0 = time.perf_counter()
                answer = await workflow("go")
                out.append(time.perf_counter() - t0)
                assert answer == "All three done.", answer

        asyncio.run(all_runs())
    finally:
        DBOS.destroy(destroy_registry=True)
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    return out[2:]


def recovery(prefix: str, queue: str, url: str, kills: int) -> list[float]:
    """Seconds from kill -9 of the worker running ``sleepy`` to the tool running again on the other worker."""
    from .pai_agents import started_key

    env = _worker_env(url)
    workers = {w.pid: w for w in (agents_worker(prefix, queue, f"{prefix}-r{i}", env) for i in range(2))}
    for w in workers.values():
        w.wait_ready()
    rt = runtime_for(prefix, queue)
    r = client()
    out: list[float] = []
    try:
        for i in range(kills):
            stream = rt.stream("pai_recover", "go")
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
            log(f"pydantic_ai: recovery round {i + 1}: killed {pid}; the tool ran again after {out[-1]:.2f} s")
            fresh = agents_worker(prefix, queue, f"{prefix}-r{i + 2}", env).wait_ready()
            workers[fresh.pid] = fresh
    finally:
        r.close()
        rt.close()
        for w in workers.values():
            w.stop()
    return out


def run(quick: bool) -> list[Row]:
    runs = 10 if quick else 30
    kills = 2 if quick else 5
    with FakeOpenAIServer(respond) as server, prefixed("pai") as prefix:
        os.environ["BENCH_FAKE_OPENAI_URL"] = server.url  # the in-process agents read it at import
        queue = f"{prefix}-runs"
        worker = agents_worker(prefix, queue, f"{prefix}-w", _worker_env(server.url)).wait_ready()
        rt = runtime_for(prefix, queue)
        try:
            log(f"pydantic_ai: {runs} runs each, in-process / ours / DBOS, interleaved in rounds")
            floor, backend, dbos = [], [], []
            for _ in range(2):  # two rounds, so a drift of the machine hits all three alike
                floor += in_process(runs // 2)
                backend += ours(rt, runs // 2)
                dbos += dbos_runs(server.url, runs // 2)
        finally:
            rt.close()
            worker.stop()
        log(f"pydantic_ai: recovery, {kills} kill -9 rounds")
        recovered = recovery(prefix, f"{prefix}-recover", server.url, kills)
    inproc, mine, theirs = median(floor), median(backend), median(dbos)
    per_step_ours, per_step_dbos = (mine - inproc) / UNITS, (theirs - inproc) / UNITS
    return [
        Row("pydantic-ai run of 3 tools on our backend (median)", mine * 1000, "ms",
            "the same agent in-process", inproc * 1000, "<=", 1.5, readme=True),
        Row("pydantic-ai run of 3 tools on DBOS (median)", theirs * 1000, "ms",
            "the same agent in-process", inproc * 1000, "<=", None),
        Row("pydantic-ai per-unit overhead, ours", per_step_ours * 1000, "ms",
            "DBOS's per-unit overhead", per_step_dbos * 1000, "<=", 1.0, readme=True),
        Row(f"pydantic-ai recovery after kill -9 (median of {kills})", median(recovered), "s",
            "-", None, "<=", None, 10.0),
    ]  # fmt: skip


if __name__ == "__main__":
    cli_main(run)

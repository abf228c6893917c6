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

from .common import Row, agents_worker, cli_main, log, median, prefixed, runtime_for
from .guests import recovery, timed

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
    try:
        return asyncio.run(timed(workflow, runs, "All three done."))
    finally:
        DBOS.destroy(destroy_registry=True)
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


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
        from .pai_agents import started_key  # after BENCH_FAKE_OPENAI_URL is set: the agents read it at import

        recovered = recovery(
            prefix, f"{prefix}-recover", _worker_env(server.url), kills, agent="pai_recover", started_key=started_key
        )
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

"""An OpenAI Agents SDK agent served as it is on our backend, against the same agent in-process (``Runner.run``) and
on DBOS's Agents SDK integration (``dbos-openai-agents``, on the local PostgreSQL), same fake model, one window.

The run: 3 tool calls, one per model call, then the answer (4 model calls, 3 tool calls: 7 units). Figures,
medians: per-run latency on our backend (a Runtime in this process, one worker, threads pool, concurrency 1) with
the in-process run as its floor (target <= 1.2x); per-unit overhead, ``(run - in-process run) / 7``, ours against
DBOS's (target: ours lower); recovery after ``kill -9`` of the worker running a tool (two workers, the product's
default timings), from the kill to the tool running again on the other worker (target <= 10 s); and Redis bytes per
model call of a run of 100 tool calls (101 model calls) whose conversation grows by a kilobyte a call, against the
conversation's size at its last call: the journal keeps each call's response, not its input, so it grows by the
step (target: a call's bytes under a tenth of the conversation). DBOS runs in this process (``DBOS.launch()``), its
``DBOSRunner.run`` inside a ``@DBOS.workflow``, each tool a ``@DBOS.step`` (the integration makes model calls steps,
not tools); its recovery is not measured (DBOS recovers a killed process's workflows when a process of the same
executor launches again). Needs ``dbos-openai-agents`` (the ``[bench]`` extra) and PostgreSQL at
``BENCH_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``).
"""

from __future__ import annotations

import json
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
CALLS = 100
LONG = ScriptResponder(
    [ScriptedTurn(tool_calls=[ScriptedToolCall("fetch", {"i": i})]) for i in range(CALLS)] + ["Read."]
)


def respond(request: dict[str, Any]) -> Any:
    """Each agent's script, told by the tools its requests offer."""
    names = {t.get("function", {}).get("name") for t in request.get("tools") or []}
    if "sleepy" in names:
        return RECOVER(request)
    if "fetch" in names:
        return LONG(request)
    return SCRIPT(request)


UNITS = 7
POSTGRES = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
#: The first message of the long run (its conversation starts at 16 KB).
LONG_PROMPT = "Read every page. " + "background " * 1500


def _worker_env(url: str) -> dict[str, str]:
    return {"AGENTS_CELERY_AGENTS": "bench.sdk_agents", "BENCH_FAKE_OPENAI_URL": url}


def in_process(runs: int) -> list[float]:
    from agents import Runner

    from agents_celery.greenlets import run_coroutine

    from . import sdk_agents

    out = []
    for _ in range(runs + 2):
        t0 = time.perf_counter()
        result = run_coroutine(Runner.run(sdk_agents.bench, "go"))
        out.append(time.perf_counter() - t0)
        assert result.final_output == "All three done.", result.final_output
    return out[2:]


def ours(rt: Any, runs: int) -> list[float]:
    out = []
    for _ in range(runs + 2):
        t0 = time.perf_counter()
        view = rt.run("sdk_bench", "go", timeout=60)
        out.append(time.perf_counter() - t0)
        assert view.output == "All three done.", view
    return out[2:]


_DBOS_WORKFLOW: list[Any] = []


def _dbos_workflow() -> Any:
    """The DBOS workflow running the bench agent through ``DBOSRunner``, each tool a ``@DBOS.step``: registered
    once (after the first ``DBOS()``, as dbos-openai-agents' own model step is when first imported), then reused."""
    if _DBOS_WORKFLOW:
        return _DBOS_WORKFLOW[0]
    from agents import Agent, function_tool
    from dbos import DBOS
    from dbos_openai_agents import DBOSRunner

    from .sdk_agents import model

    @function_tool
    @DBOS.step()
    def noop(i: int) -> str:
        """Do nothing, quickly."""
        return f"ok {i}"

    agent = Agent(name="sdk_bench", instructions="Call the tools.", model=model(), tools=[noop])

    @DBOS.workflow()
    async def workflow(prompt: str) -> str:
        return str((await DBOSRunner.run(agent, prompt)).final_output)

    _DBOS_WORKFLOW.append(workflow)
    return workflow


def dbos_runs(runs: int) -> list[float]:
    """The same agent through ``DBOSRunner`` in a ``@DBOS.workflow``, a system database of its own (dropped
    afterwards)."""
    import psycopg
    from dbos import DBOS

    from agents_celery.greenlets import run_coroutine

    database = f"bench_dbos_sdk_{uuid.uuid4().hex[:8]}"
    DBOS(config={"name": database, "system_database_url": POSTGRES.rsplit("/", 1)[0] + f"/{database}"})
    workflow = _dbos_workflow()
    DBOS.launch()
    try:
        return run_coroutine(
            timed(workflow, runs, "All three done.")
        )  # the process loop: the agent's model client outlives one round's loop
    finally:
        # The registry stays: the workflow, its steps and dbos-openai-agents' model step are registered once.
        DBOS.destroy(destroy_registry=False)
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def journal_bytes(rt: Any, server: FakeOpenAIServer) -> tuple[float, float, float]:
    """The long run (100 tool calls, a kilobyte each, after a 16 KB first message): its Redis bytes per model call
    (the run's journal, and all its keys), and the size of the conversation the last model call was sent."""
    stream = rt.stream("sdk_long", LONG_PROMPT, client={"openai_agents": {"max_turns": CALLS + 5}})
    view = None
    for _ in stream.events():
        pass
    view = stream.get()
    assert view.status.value == "completed" and view.output == "Read.", (view.status, view.error)
    k = rt.store.keys.run(stream.id)
    r = rt.redis
    fields = [f for f in r.hkeys(k.effects) if f.startswith(b"j:")]
    journal = sum(int(r.hstrlen(k.effects, f)) for f in fields)
    keys = [name for name in (k.run, k.events, k.effects) if r.exists(name)]
    stored = sum(int(r.memory_usage(name, samples=0) or 0) for name in keys)
    stored += sum(int(r.memory_usage(name, samples=0) or 0) for name in r.scan_iter(match=f"*{stream.id}*"))
    last = json.dumps(server.requests[-1]["messages"])
    calls = CALLS + 1
    return journal / calls, stored / calls, len(last.encode())


def run(quick: bool) -> list[Row]:
    runs = 10 if quick else 30
    kills = 2 if quick else 5
    with FakeOpenAIServer(respond) as server, prefixed("sdk") as prefix:
        os.environ["BENCH_FAKE_OPENAI_URL"] = server.url  # the in-process agents read it at import
        queue = f"{prefix}-runs"
        worker = agents_worker(prefix, queue, f"{prefix}-w", _worker_env(server.url)).wait_ready()
        rt = runtime_for(prefix, queue)
        try:
            log(f"openai_agents: {runs} runs each, in-process / ours / DBOS, interleaved in rounds")
            floor, backend, dbos = [], [], []
            for _ in range(2):  # two rounds, so a drift of the machine hits all three alike
                floor += in_process(runs // 2)
                backend += ours(rt, runs // 2)
                dbos += dbos_runs(runs // 2)
            log(f"openai_agents: a run of {CALLS} tool calls over a growing conversation")
            per_call, per_call_all, conversation = journal_bytes(rt, server)
        finally:
            rt.close()
            worker.stop()
        log(f"openai_agents: recovery, {kills} kill -9 rounds")
        from .sdk_agents import started_key  # after BENCH_FAKE_OPENAI_URL is set: the agents read it at import

        recovered = recovery(
            prefix, f"{prefix}-recover", _worker_env(server.url), kills, agent="sdk_recover", started_key=started_key
        )
    inproc, mine, theirs = median(floor), median(backend), median(dbos)
    per_unit_ours, per_unit_dbos = (mine - inproc) / UNITS, (theirs - inproc) / UNITS
    return [
        Row("Agents SDK run of 3 tools on our backend (median)", mine * 1000, "ms",
            "the same agent in-process (Runner.run)", inproc * 1000, "<=", 1.2, readme=True),
        Row("Agents SDK run of 3 tools on DBOS (dbos-openai-agents, median)", theirs * 1000, "ms",
            "the same agent in-process (Runner.run)", inproc * 1000, "<=", None),
        Row("Agents SDK per-unit overhead, ours", per_unit_ours * 1000, "ms",
            "DBOS's per-unit overhead", per_unit_dbos * 1000, "<=", 1.0, readme=True),
        Row(f"Agents SDK recovery after kill -9 (median of {kills})", median(recovered), "s",
            "-", None, "<=", None, 10.0),
        Row(f"Agents SDK journal bytes per model call, {CALLS}-tool-call run", per_call, "B",
            "the conversation's size at the last call", conversation, "<=", 0.1, readme=True),
        Row(f"Agents SDK Redis bytes per model call (all the run's keys), {CALLS}-tool-call run", per_call_all, "B",
            "the conversation's size at the last call", conversation, "<=", None),
    ]  # fmt: skip


if __name__ == "__main__":
    cli_main(run)

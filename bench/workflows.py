"""Workflows (issue #45): what a durable workflow costs against doing the same by hand.

- **Ten function steps** (``ten_functions`` in :mod:`bench.agents`: each step calls ``passes``, which passes its
  input on) against **the same function as a plain Celery chain** of ten tasks (``bench.passes`` on
  :mod:`bench.hop`'s app: Celery's defaults, no result backend; the last task pushes to a list the client waits on).
  The workflow runs each function through the effect ledger and commits after it (the step number unchanged), all
  in one engine step; the chain sends a message per task. Figure: seconds from ``stream()`` to the client reading
  the workflow's RUN_FINISHED, against seconds from sending the chain to its last task's push. Target <= 1.5x.
- **Three agent steps** (``three_agents``: three steps of ``helper``, a zero-latency scripted agent that answers at
  once) against **the same three runs started one after another by a client** (``stream("helper")``, read to its
  end, three times). Each agent step is a child run woken by its end, as agents as tools are. Target <= 1.1x.

One agents worker and one chain worker (threads pool, concurrency 1). Each figure is measured beside its floor, in
turn, the one that goes first alternating from round to round: what a measurement leaves behind on the workers (a
run's follow-through after its last event, a chain task's ack) falls on the other as often as on it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from celery import chain

from agents_celery.events import EventType

from .common import Row, cli_main, client, log, median, prefixed, runtime_for
from .steps import start_pair


def one_run(rt: Any, agent: str, message: str = "go") -> float:
    """Seconds from starting a run to its successful RUN_FINISHED reaching the client."""
    t0 = time.perf_counter()
    last = None
    for ev in rt.stream(agent, message).events():
        last = ev
    elapsed = time.perf_counter() - t0
    assert last is not None and last.type is EventType.RUN_FINISHED, f"{agent}: run ended with {last}"
    assert last.data.get("outcome", {}).get("type") == "success", last.data
    return elapsed


def plain_chain(prefix: str, tasks: int) -> float:
    """Seconds for a Celery chain of ``tasks`` tasks of ``passes`` (first send to the last task's push)."""
    from .hop import app, passes

    r = client()
    key = f"{prefix}:chain:{uuid.uuid4().hex[:8]}"
    sigs = [passes.s("go", key, False), *(passes.s(key, False) for _ in range(tasks - 2)), passes.s(key, True)]
    t0 = time.perf_counter()
    # A connection made now, with the prefix start_pair configured: the app's cached producer pool may hold
    # connections made for another bench's prefix (steps runs first in one `python -m bench`).
    with app.connection_for_write() as conn:
        chain(*sigs).apply_async(connection=conn)
    got = r.blpop([f"{key}:done"], timeout=120)
    elapsed = time.perf_counter() - t0
    assert got is not None, "the chain did not finish"
    r.delete(f"{key}:done")
    r.close()
    return elapsed


def by_hand(rt: Any) -> float:
    """Seconds for three runs of ``helper`` started one after another, each read to its end."""
    return sum(one_run(rt, "helper") for _ in range(3))


def run(quick: bool) -> list[Row]:
    rounds = 30 if quick else 100  # the machine drifts: fewer rounds spread the ratio over +-15%
    with prefixed("workflows") as prefix:
        worker, chain_worker, queue, _chain_queue = start_pair(prefix)
        rt = runtime_for(prefix, queue)
        try:
            deadline = time.monotonic() + 60
            while rt.store.agents.get("three_agents") is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("workflows bench: the workflows were not published within 60 s")
                time.sleep(0.1)
            for _ in range(3):  # warm-up
                one_run(rt, "ten_functions")
                plain_chain(prefix, 10)
                one_run(rt, "three_agents")
                by_hand(rt)
            functions: list[float] = []
            chains: list[float] = []
            agents: list[float] = []
            hand: list[float] = []
            log(f"workflows: {rounds} rounds of each, interleaved")
            pairs = [
                ((functions, lambda: one_run(rt, "ten_functions")), (chains, lambda: plain_chain(prefix, 10))),
                ((agents, lambda: one_run(rt, "three_agents")), (hand, lambda: by_hand(rt))),
            ]
            for i in range(rounds):  # each pair in turn, which of the two goes first alternating
                for pair in pairs:
                    for figures, measure in pair if i % 2 == 0 else pair[::-1]:
                        figures.append(measure())
        finally:
            rt.close()
            worker.stop()
            chain_worker.stop()
    ms = 1000.0
    log(
        f"workflows: ten function steps p50 {median(functions) * ms:.2f} ms (chain {median(chains) * ms:.2f} ms); "
        f"three agent steps p50 {median(agents) * ms:.2f} ms (by hand {median(hand) * ms:.2f} ms)"
    )
    return [
        Row("workflow of 10 function steps, p50", median(functions) * ms, "ms",
            "the same function as a plain Celery chain of 10 tasks", median(chains) * ms, "<=", 1.5, readme=True),
        Row("workflow of 3 agent steps, p50", median(agents) * ms, "ms",
            "the same 3 runs started one after another by a client", median(hand) * ms, "<=", 1.1, readme=True),
    ]  # fmt: skip


if __name__ == "__main__":
    cli_main(run)

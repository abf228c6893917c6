"""What a bench run writes: the whole of ``docs/benchmarks.md``, and the README's Performance section (an excerpt).

Both come from the one run that printed the table (``python -m bench --write docs/benchmarks.md --readme
README.md``, which ``make bench`` runs), so neither can show a figure the bench did not print. The prose here and
each bench module's docstring (its method) are the only hand-written parts; edit them, not the outputs.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .common import ROOT, Row, format_table


def now_utc() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def load() -> str:
    """What ``uptime`` shows (its load averages), or ``/proc/loadavg`` where it is missing."""
    if shutil.which("uptime"):
        out = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
        if out:
            return " ".join(out.split())
    one, five, fifteen = os.getloadavg()
    return f"load average: {one:.2f}, {five:.2f}, {fifteen:.2f}"


def code_version() -> str:
    """The commit measured, and whether the working tree differed from it (package or bench code)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "unknown (not a git checkout)"
    dirty = git("status", "--porcelain", "--", "agents_celery", "bench")
    return f"commit {commit}" + (" plus uncommitted changes to agents_celery/ or bench/" if dirty else "")


@dataclass
class RunInfo:
    """When and where a run happened; filled in by :mod:`bench.__main__`."""

    benches: list[str]
    quick: bool
    machine: str = ""
    started: str = field(default_factory=now_utc)
    load_start: str = field(default_factory=load)
    ended: str = ""
    load_end: str = ""
    took: float = 0.0
    code: str = field(default_factory=code_version)
    notes: list[str] = field(default_factory=list)

    def finish(self, machine: str, took: float) -> None:
        self.machine, self.took, self.ended, self.load_end = machine, took, now_utc(), load()


def verdict(rows: Sequence[Row]) -> str:
    targets = [r for r in rows if r.met is not None]
    missed = [r.figure for r in targets if r.met is False]
    failed = [r.figure for r in rows if r.skipped and r.skipped.startswith("FAILED")]
    parts = []
    if missed:
        parts.append(f"**{len(missed)} of {len(targets)} targets missed**: {'; '.join(missed)}")
    else:
        parts.append(f"all {len(targets)} targets met")
    if failed:
        parts.append(f"**benches failed**: {'; '.join(failed)}")
    return ". ".join(parts) + "."


INTRO = """\
# Benchmarks

<!-- Written by `python -m bench --write docs/benchmarks.md` (`make bench`) from one run: do not edit. The prose
is in bench/report.py, each method in its bench module's docstring. -->

How fast agents-celery is against Celery and Redis themselves. Every figure below comes from the one run
described here, and is printed next to a **floor measured in the same run** (a raw Redis command, a bare
Celery task or chain hop doing the same job) and their ratio. The README's [Performance](../README.md#performance)
section is an excerpt of this same run, written by it.
"""

READING = """\
## Reading the table

- **ratio** = value / floor value. A target of `<= 1x` (times) or `>= 0.5x` (rates) applies to the ratio; a
  target with a unit (`<= 10 s`) applies to the value itself, where the product promises an absolute bound.
  Rows without a target, and rows marked (info), say where the time goes.
- **met?** is `yes` or `NO` as the bench decides it; a missed target makes `python -m bench` (and `make bench`)
  exit 1, a bench that failed exits 2. Nothing here is rounded in our favour: a `NO` stays a `NO`.
- Read the ratios, not the absolute times: on a shared 2-core machine absolute figures drift about 25% from
  run to run, and the machine changes from one session to the next. The load above says how busy the machine
  was; figures measured under load (other processes using the cores) are worth repeating before reading
  anything into a miss. The row "durable step, heartbeat 1 s" compares two settings that cost the same: far
  from 1.0x, the run was noisy.
"""

RUNNING = """\
## Running them

```bash
make bench                      # every bench; writes this file and the README's Performance section
.venv/bin/python -m bench --quick                 # fewer samples, prints the table only
.venv/bin/python -m bench --only steps --only latency   # some: {benches}
.venv/bin/python -m bench --write docs/benchmarks.md --readme README.md   # what make bench runs
AGENTS_CELERY_FAST_PATHS=0 .venv/bin/python -m bench --only steps    # the same on public APIs only
```

The benches use the Redis at `BENCH_REDIS_URL` (default `redis://127.0.0.1:6379/11`) under a key prefix of
their own, start their own workers and API processes, and delete their keys afterwards. `make bench` runs
`scripts/ensure-redis` first. They need the `[dev]` install (`make install`: gunicorn, gevent, uvicorn,
Django, httpx, psutil) and no command-line tool; a missing piece stops the run before it starts, naming it.
"""

FINDINGS = """\
## Findings of earlier rounds

What earlier rounds measured and decided; their figures came from other runs and are in this file's git
history (`git log -p docs/benchmarks.md`), not repeated here.

- **The commit acks the step's own message** (it removes the delivery tag from kombu's unacked hash in the
  script that stores the checkpoint and pushes the next task), the consumer fetches the next message while the
  commit's reply is on its way, and on the threads and solo pools the claim is sent as the message arrives
  (`agents_celery/broker/fastpaths/`, switched off by `AGENTS_CELERY_FAST_PATHS=0`). With them off a step
  pays five Redis commands more and Celery's own ack round trip.
- **Prefork pool** (Celery's default): the parent cannot free the prefetch slot before the child's result
  arrives, and the child claims when it starts, so a step costs more there than on the threads pool that
  `agents-celery worker` defaults to (the "prefork pool" rows).
- **Worker threads keep one Redis connection each** for claims, commits and appends, checked for a close with
  one `poll` before each command: redis-py's pool made nine system calls per script call, which on a VM doubled
  the CPU of a small call after an idle gap.
- **1,000 runs on one gevent worker are CPU-bound on the HTTP client** (py-spy, 2026-12-04, 100 Hz over 25 s of
  the gevent bench): reading the model's stream is 40% of the worker's CPU (httpx2 -> httpcore2 -> h11 per chunk
  on gevent sockets), our commit 7.6%, event appends 4.5%, claims 3.6%, the lease keeper 2.7%. The openai SDK's
  typed `create` re-walked the whole request body every turn (7.8%) and its pool kept 100 of 1,000 connections
  (new TCP connections 3.9%): `OpenAIChat` now posts the body as built through the SDK's `client.post` and keeps
  1,000 connections (28.9 s -> 24.1-25.5 s for the 1,000 runs); httpcore's scan of its pool per request is 5%.
- **A thousand runs held at once on one gevent worker** (tests/test_gevent_capacity.py, 2026-12-07, 2 cores, bare
  hop 1.9-2.6 ms when measured beside it): the test failed about half the time, "N runs lost their lease" (37 of
  1,000 at load 5-7). No lease was lost: the worker's log had 117 "Too many connections" (redis-py 6+ caps a pool at
  100 connections; more than 100 greenlets waited on a reply at once as a burst of turns ended), each taken for
  Redis being away, so the attempt was given back and its model turn ran again. The engine's pool now has two
  connections per slot plus 16 and waits when full (`storage/connections.worker_pool`; a PING through it costs 84-90
  us of CPU on greenlets against 92-98 us through redis-py's plain pool, same run: no dearer). With a core burnt
  beside it (load 8-12), 824 of 1,000 commits were then refused: the keeper stopped renewing a lease when the step's
  work ended, and the commit reached Redis more than a TTL later on a hub busy with a thousand turns ending
  together; the keeper now renews until the commit gives the lease up. The keeper itself was not the cause: measured
  in those runs, its renewals came at most 3.2-3.3 s after the previous one (TTL 10 s, heartbeat 2 s), one pipelined
  beat for 1,000 leases took 47-78 ms on average and at most 0.75-1.0 s, and a step held its lease 4-9 ms after its
  claim at the median (p99 92-337 ms, at most 0.4-2.1 s). After the fixes: 5 of 5 runs pass at load 2.8-4.4 (all
  1,000 in flight 13.5-28.1 s after the first was sent, the test 37-71 s) and 5 of 5 with a core burnt beside it,
  load 3.0-10.6 (28-84 s, the test 68-147 s), then 3 and 3 more after merging main (load 1.4-17; the test 31-48 s);
  no attempt ended before its commit; in one run the sweeper sent again a step still in the worker's intake past the
  enqueue grace (its copy found the lease held and did nothing).
- **A Responses `starting_after` resume** re-rendered the segment from its start: 4.0x the `/runs/<id>/events?after=`
  resume on a 308-event response and 18x on a 1,208-event one (the "folded from its start" rows, same run). Streams
  now save the renderer's fold every 64 sequence numbers (`storage/renders.py`, the last 4 per response, expiring
  with the run) and a resume starts from the latest one at or before N: 1.71x and 1.80x, 1.01x between the two
  lengths (2026-12-07, bare hop 1.90-2.59 ms, load 2.0-2.6).
- **Why a durable step costs more than a bare hop on a loaded machine** (#44, 2026-12-07, bare hop 2.1 ms, one core
  burnt by another process): per step, the worker's threads switched 15 times voluntarily quiet, like the hop's
  two threads (15.6), but with the core burnt the hop's threads almost stopped blocking (1.0 per hop) while ours
  still did (9.5): a step crossed four threads (consumer, step, call, event flusher) where a hop crosses two, and
  each hand-off waits for a core there. The flusher woke once or twice a step for events the commit then took:
  a step's own burst now waits for its thread (`engine/writer.py`), which took the step from 1.00-1.03x the hop to
  0.96-1.00x quiet (three interleaved runs each); with the core burnt, 1.15-1.26x before and after. Running calls
  on the step's thread as well (an experiment, not kept: a step could then not walk away from a call that hangs)
  brought that to 1.07-1.13x: the rest of the excess under load is the hand-off to the call thread.
- **1,000 runs on one gevent worker, profiled again** (py-spy, 2026-12-07, 200 Hz over 16 s): httpcore's scan of
  a pool of 1,000 connections on each request and response end was 5.9% of the worker's CPU; a model now spreads
  its turns over SDK clients of 64 open streams each (built when first needed, the first reused while the worker
  is quiet) and the scan left the profile. The steps waiting on their calls woke every 0.2 s to look for a stop
  (6-7%: gevent's timed waits); they now sleep until the call returns, the lease keeper signals a stop or a lost
  lease, the worker shuts down, or the call's deadline comes (a 5 s backstop). 1,000 runs: 18.6 s -> 17.5-18.2 s,
  worker CPU 14.3-14.7 s -> 13.9-14.1 s (back to back, same machine).
- **First-use costs, found in the profiles of 2026-12-07 (AMD EPYC, hop 2.2 ms)**: a fresh worker's first turn
  imported the openai SDK (0.9 s; 5.3% of the 1,000-run profile, and most of the 1 s by which one run alone
  exceeded its 5 s stream), built a TLS context per SDK client (26 ms each, CA bundle loaded) and redis-py 8 looked
  its own version up per new connection (0.5 ms). A worker now warms its models up in `worker_init`; clients share
  one TLS context and connections one `DriverInfo`. One run alone: 6.0 s -> 5.2 s, so the 1,000-run ratio rose
  (3.67x -> 4.07x) while its wall fell (22.1 s -> 21.2-21.3 s, worker CPU 18.5 s -> 17.2-17.6 s). What is left of
  that CPU is about half the HTTP client reading the model streams (httpx2, httpcore2, h11, gevent's socket: a
  recv that would block raises, waits on the hub, and reads again, per chunk), the rest the step (15%), the event
  flusher (10%) and Celery's consumer (13%).
- **The API per streamed run against LangGraph's** (100 runs at once over HTTP, 2026-12-07): API + worker + Redis
  6.2 s against LangGraph's 5.0 s (1.24x) at the start of the day. A stream's connection now goes back to its pool
  open (the reaper closes idle ones), a creation reads the manifest once and its SSE response is given the run's
  ids: 2.7 connects per run -> 2.1-2.4 (a burst still grows both pools), API CPU 2.5-2.8 s -> 2.4-2.5 s (three
  interleaved pairs), 1.11x in the full bench. The fast path's check of the kept connection before each read
  used gevent's `select.poll` (20 us; the OS's takes 1 us): 2.4-2.8 s -> 2.1-2.2 s. The rest is one XREAD and one
  SSE write per token; the system call of each send was a third of the API's CPU.
- **Event round trips on a gevent worker** (2026-12-08, Intel Xeon, bare hop 2.3-2.5 ms): with 100 runs streaming
  a token every 0.1 s each, the flusher made 4,200 round trips for their 5,000 tokens (a pass of one or two runs;
  22-24% of the worker's CPU, and the hub's switches around each). While runs stream side by side the flusher now
  makes at most one pass per `green_batch_ms` (5 ms): 1,000 round trips, worker CPU 2.2-2.5 s -> 1.9-2.1 s (four
  interleaved pairs), Redis 0.7 s -> 0.5 s, and the 100 streamed runs over HTTP went from 1.09x LangGraph's server
  CPU to 0.89-0.99x. A run streaming alone is not held (a window after each pass locked onto a 5 ms token pace and
  delayed every token by 4-5 ms): token p50 on a gevent worker 0.7-0.8 ms. The 1,000-run bench barely moved (worker
  CPU 15.2 s -> 14.9 s, 3.63x): its passes already carried 12 runs each. Its wall is the time to take the 1,000
  runs in (70-100 step starts a second, the last at 14 s, the CPU at 100% meanwhile) plus one run's 5 s stream:
  2/3 of that CPU goes to the runs already streaming, about 90 us per token in the HTTP client (httpcore's chunk
  reading, a gevent timeout and hub switch per `recv`); reading the lines raw instead saves 2-3 us of those. The
  lease keeper's stop checks (1,000 `EXISTS` per 0.2 s poll, each run's key names built per call; the keeper was
  5.4% of the profile) are now one `MGET` with the names built once: 9.5 -> 1.8 ms of CPU per beat, the bench's
  worker CPU 15.5-15.8 s -> 14.8-15.0 s, its wall within the noise (19.7 s against 19.8-20.4 s).
- **hiredis** is not a dependency: it made the step ~3% faster but the readers slower, and an SSE subscriber
  cost about twice the memory (its parser keeps a 64 KiB buffer per connection).
- With a real model (hundreds of ms per turn) the per-step overhead measured here is noise; it matters for
  runs of many cheap tool steps.
"""


def method(name: str) -> str:
    """A bench's method: its module docstring."""
    doc = inspect.getdoc(importlib.import_module(f"bench.{name}")) or "(no description)"
    return f"### {name} (`bench/{name}.py`)\n\n{doc}\n"


def document(rows: Sequence[Row], info: RunInfo, all_benches: Sequence[str]) -> str:
    mode = "quick (fewer samples)" if info.quick else "full"
    ran = ", ".join(info.benches)
    run = f"""\
## This run

- **When**: {info.started} to {info.ended} ({info.took:.0f} s).
- **Load** (`uptime`): at the start `{info.load_start}`; at the end `{info.load_end}`.
- **Machine**: {info.machine}.
- **Code**: {info.code}.
- **Benches**: {ran}; mode {mode}.
- **Result**: {verdict(rows)}
""" + "".join(f"- **Note**: {note}\n" for note in info.notes)
    methods = "\n".join(method(name) for name in info.benches)
    parts = [
        INTRO,
        run,
        "## Results\n\n" + format_table(rows) + "\n",
        READING,
        RUNNING.format(benches=", ".join(all_benches)),
        "## How each figure is measured\n\n" + methods,
        FINDINGS,
    ]
    return "\n".join(parts)


def readme_section(rows: Sequence[Row], info: RunInfo) -> str:
    """The README's Performance section: the ``readme`` rows of this run, as the bench printed them."""
    picked = [r for r in rows if r.readme]
    when = info.started[:16] + " UTC"
    loads = re.search(r"load averages?: ([\d.]+)", info.load_start)
    load_text = f", load {loads.group(1)}" if loads else ""
    mode = ", quick mode" if info.quick else ""
    return (
        "## Performance\n\n"
        f"The latest `make bench` ({when}{load_text}{mode}; {info.machine.split(';')[0]}), figures against floors "
        "measured in the same run; all rows and the method: [docs/benchmarks.md](docs/benchmarks.md). "
        f"Result: {verdict(rows)}\n\n" + format_table(picked, padded=False) + "\n"
    )


def write_readme(path: Path, section: str) -> None:
    """Replace the ``## Performance`` section of ``path`` (up to the next ``## `` heading) with ``section``."""
    text = path.read_text()
    match = re.search(r"^## Performance\n.*?(?=^## )", text, flags=re.S | re.M)
    if match is None:
        raise SystemExit(f"{path}: no '## Performance' section followed by another '## ' heading to replace")
    path.write_text(text[: match.start()] + section + "\n" + text[match.end() :])

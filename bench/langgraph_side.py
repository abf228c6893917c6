"""LangGraph's dev server side by side with ours: 100 runs sent at once over HTTP, runs/s and time to first event.

Both servers get the same 100 requests from the same client (httpx on asyncio in this process, one connection per
run), each run one model turn against the fake OpenAI server bench/gevent.py uses (50 tokens 0.1 s apart, 5 s):

- LangGraph: ``langgraph dev`` (``langgraph-api`` in-memory, ``--n-jobs-per-worker 100``, one process) serving
  bench/langgraph/graph.py; ``POST /runs/stream``, threadless, ``stream_mode: custom`` (one event per token): the
  request ``langgraph_sdk``'s ``runs.stream(None, ...)`` sends. Its pins conflict with our lock, so it runs from a
  venv of its own, ``.venv-langgraph/`` at the repository root (``BENCH_LANGGRAPH_VENV`` to move it), built once
  from bench/langgraph/requirements.txt and again when that file changes. When the venv cannot be built (no
  network) or the server fails, its rows say why and are not measured; the rest of the bench goes on.
- agents-celery: the production API (gunicorn, one gevent worker, :mod:`bench.api_app`) and one ``--pool gevent
  --concurrency 100`` worker, on a private ``redis-server`` (LangGraph's state is in its own memory); ``POST
  /agents/streamer/runs`` with ``stream: true``.

Each server first serves one run alone (warm-up; logged). Figures per server: runs/s (100 over the time from the
first request to the end of the last stream), the median time from a request to its stream's first event
(LangGraph's ``metadata``, our ``RunStarted``) and to its first token (``custom``, ``RunContent``), and the CPU the
server used per run (LangGraph's process; our API, worker and Redis, each logged): on 2 shared cores that bounds the
rest. Each of our rows has LangGraph's as its floor, so the ratio is ours over theirs. bench/gevent.py's side rows
time the same 100 runs from the Runtime instead (no HTTP).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from agents_celery.storage.keys import Keys

from .common import (
    ROOT,
    PrivateRedis,
    Row,
    bench_env,
    celery_worker,
    cli_main,
    fake_openai_server,
    log,
    median,
    prefixed,
    stop_all,
)
from .gevent import SIDE, TOKEN_DELAY, TOKENS
from .sse import free_port, start_api

GRAPH = ROOT / "bench" / "langgraph"
REQUIREMENTS = GRAPH / "requirements.txt"
VENV = Path(os.environ.get("BENCH_LANGGRAPH_VENV") or ROOT / ".venv-langgraph")
LANGGRAPH = f"LangGraph dev server (--n-jobs-per-worker {SIDE})"
OURS = f"agents-celery (API + --pool gevent x{SIDE})"


class NotMeasured(Exception):
    """Why LangGraph's side has no figures (its rows are reported skipped, the bench goes on)."""


# -- LangGraph's server --------------------------------------------------------------------------------


def langgraph_command(venv: Path = VENV) -> Path:
    """The venv's ``langgraph`` command, the venv built first when it is absent or was built from other pins."""
    stamp, command = venv / "bench-requirements.txt", venv / "bin" / "langgraph"
    wanted = REQUIREMENTS.read_text()
    if command.exists() and stamp.exists() and stamp.read_text() == wanted:
        return command
    if venv.exists() and not (venv / "pyvenv.cfg").exists():
        raise NotMeasured(f"{venv} exists and is not a venv: move it or set BENCH_LANGGRAPH_VENV")
    log(f"langgraph: building {venv} from {REQUIREMENTS.relative_to(ROOT)} (once; about two minutes)")
    shutil.rmtree(venv, ignore_errors=True)
    _step([sys.executable, "-m", "venv", str(venv)], "python -m venv", 300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _step([*pip, "--retries", "1", "--timeout", "20", "-r", str(REQUIREMENTS)], "pip install", 1200)
    stamp.write_text(wanted)  # last: a build cut short is built again next time
    return command


def _step(cmd: list[str], what: str, timeout: float) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise NotMeasured(f"{what} took over {timeout:.0f} s") from None
    except OSError as exc:
        raise NotMeasured(f"{what}: {exc}") from None
    if done.returncode:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.startswith("ERROR")]
        raise NotMeasured(f"{what} failed: {lines[-1] if lines else f'exit status {done.returncode}'}")


@contextlib.contextmanager
def langgraph_server(command: Path, fake_url: str) -> Iterator[tuple[str, list[int]]]:
    """``langgraph dev`` on a free port, in a copy of bench/langgraph (it writes its in-memory state's snapshots
    to ``.langgraph_api/`` where it runs); yields its URL and process id, and stops its process group after."""
    with tempfile.TemporaryDirectory(prefix="bench-langgraph-") as tmp:
        for name in ("graph.py", "langgraph.json"):
            shutil.copy(GRAPH / name, tmp)
        port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update({"FAKE_OPENAI_URL": fake_url, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false"})
        cmd = [str(command), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port),
               "--n-jobs-per-worker", str(SIDE), "--server-log-level", "WARNING"]  # fmt: skip
        output = Path(tmp) / "server.log"
        with output.open("wb") as out:
            proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                _wait_up(proc, f"http://127.0.0.1:{port}/ok", output)
                yield f"http://127.0.0.1:{port}", [proc.pid]
            finally:
                _stop_group(proc)


def _wait_up(proc: subprocess.Popen[bytes], url: str, output: Path, timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        if proc.poll() is not None:
            raise NotMeasured(f"langgraph dev exited ({proc.returncode}): {output.read_text(errors='replace')[-300:]}")
        time.sleep(0.2)
    raise NotMeasured(f"langgraph dev not up after {timeout:.0f} s")


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's own process group (it was started in a session of its own), SIGKILL if it lingers."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# -- ours ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def our_server(fake_url: str) -> Iterator[tuple[str, list[int]]]:
    """One gevent worker (concurrency 100) and the API, both on a private Redis; yields the API's URL and the
    process ids of the three."""
    private = PrivateRedis()
    try:
        with prefixed("lgside") as prefix:
            queue = f"bench-lgside-{uuid.uuid4().hex[:6]}"
            urls = {"AGENTS_CELERY_REDIS_URL": private.url, "CELERY_BROKER_URL": private.url}
            worker = celery_worker("bench.worker", bench_env(prefix, queue, {"FAKE_OPENAI_URL": fake_url, **urls}),
                                   queue, "lgside", SIDE, "gevent")  # fmt: skip
            manifests = redis.Redis.from_url(private.url)
            # The API refuses an agent whose manifest the worker has not published yet (it does so once ready).
            worker.also_ready = lambda r: bool(manifests.hlen(Keys(prefix).agents))
            worker.wait_ready()
            manifests.close()
            api, port = start_api(prefix, queue, 2000, {"BENCH_REDIS_URL": private.url, **urls})
            yield f"http://127.0.0.1:{port}", [api.pid, worker.pid, private.proc.pid]
    finally:
        stop_all()
        private.close()


# -- the client ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    """How to ask one server for a streamed run, and the SSE event names its stream carries."""

    url: str
    body: Callable[[int], dict[str, Any]]
    token: str
    #: The last event of a completed run's stream; None: the stream just ends.
    last: str | None = None


def langgraph_api(base: str) -> Server:
    def body(i: int) -> dict[str, Any]:
        return {"assistant_id": "agent", "input": {"message": f"go {i}", "answer": ""}, "stream_mode": "custom"}

    return Server(f"{base}/runs/stream", body, "custom")


def our_api(base: str) -> Server:
    return Server(f"{base}/agents/streamer/runs", lambda i: {"message": f"go {i}", "stream": True}, "RunContent",
                  "RunCompleted")  # fmt: skip


@dataclass
class Timings:
    alone: float
    wall: float
    first_event: list[float]
    first_token: list[float]
    #: CPU seconds each of the server's processes used while the runs went through.
    cpus: list[float]

    @property
    def cpu(self) -> float:
        return sum(self.cpus)

    def figure(self, name: str) -> float:
        return {"runs/s": SIDE / self.wall, "median time to first event": median(self.first_event),
                "median time to first token": median(self.first_token), "server CPU per run": self.cpu / SIDE,
                }[name]  # fmt: skip


#: The rows of each server, with their units.
FIGURES = (("runs/s", "/s"), ("median time to first event", "s"), ("median time to first token", "s"),
           ("server CPU per run", "s"))  # fmt: skip


def tree_cpu(pids: list[int]) -> list[float]:
    """CPU seconds (user + system) each process and its children have used so far."""
    import psutil

    totals = []
    for pid in pids:
        total = 0.0
        with contextlib.suppress(psutil.NoSuchProcess):
            parent = psutil.Process(pid)
            for proc in [parent, *parent.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    times = proc.cpu_times()
                    total += times.user + times.system
        totals.append(total)
    return totals


async def _one(http: Any, server: Server, i: int) -> tuple[float, float]:
    """One streamed run: seconds from the request to its first event and to its first token."""
    t0 = time.perf_counter()
    first_event = first_token = None
    tokens, last = 0, ""
    async with http.stream("POST", server.url, json=server.body(i)) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{server.url} answered {resp.status_code}: {(await resp.aread())[:300]!r}")
        async for line in resp.aiter_lines():
            if not line.startswith("event:"):
                continue
            last, now = line[6:].strip(), time.perf_counter() - t0
            first_event = now if first_event is None else first_event
            if last == server.token:
                tokens += 1
                first_token = now if first_token is None else first_token
    if first_event is None or first_token is None or tokens != TOKENS or last != (server.last or server.token):
        raise RuntimeError(f"run {i} of {server.url}: {tokens} of {TOKENS} tokens, last event {last!r}")
    return first_event, first_token


async def _drive(server: Server, pids: list[int]) -> Timings:
    import httpx

    limits = httpx.Limits(max_connections=SIDE + 10, max_keepalive_connections=SIDE + 10)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        t0 = time.perf_counter()
        await _one(http, server, -1)
        alone = time.perf_counter() - t0
        t0, cpu, mine = time.perf_counter(), tree_cpu(pids), time.process_time()
        got = await asyncio.gather(*(_one(http, server, i) for i in range(SIDE)))
        wall, cpus = time.perf_counter() - t0, [b - a for a, b in zip(cpu, tree_cpu(pids), strict=True)]
        log(f"langgraph_side: the client's CPU: {time.process_time() - mine:.1f} s")
    return Timings(alone, wall, [g[0] for g in got], [g[1] for g in got], cpus)


def drive(server: Server, name: str, pids: list[int]) -> Timings:
    """One run alone, then ``SIDE`` at once."""
    timings = asyncio.run(_drive(server, pids))
    cpus = " + ".join(f"{c:.1f}" for c in timings.cpus)
    log(f"langgraph_side: {name}: one alone {timings.alone:.2f}s; {SIDE} at once {timings.wall:.2f}s, first event "
        f"{timings.figure('median time to first event'):.3f}s, first token "
        f"{timings.figure('median time to first token'):.3f}s (medians); server CPU {cpus} s")  # fmt: skip
    return timings


# -- the bench -----------------------------------------------------------------------------------------


def _theirs(fake_url: str) -> tuple[Timings | None, str]:
    """LangGraph's timings, or None and why not."""
    try:
        command = langgraph_command()
        with langgraph_server(command, fake_url) as (base, pids):
            return drive(langgraph_api(base), "LangGraph", pids), ""
    except NotMeasured as exc:
        why = str(exc)
    except Exception as exc:  # the peer failing is its rows' business, not the bench's
        traceback.print_exc()
        why = f"{type(exc).__name__}: {exc}"
    log(f"langgraph_side: LangGraph not measured: {why}")
    return None, why


def run(quick: bool = False) -> list[Row]:
    """Same figures in quick mode: 100 runs of 5 s are the measurement, there is nothing to cut."""
    log(f"langgraph_side: {SIDE} runs of {TOKENS} tokens {TOKEN_DELAY} s apart, sent at once over HTTP to each")
    fake, url = fake_openai_server(TOKENS, TOKEN_DELAY)
    try:
        theirs, why = _theirs(url)
        with our_server(url) as (base, pids):
            ours = drive(our_api(base), "agents-celery", pids)
    finally:
        fake.terminate()
        fake.wait(timeout=10)
    rows = []
    for name, unit in FIGURES:
        if theirs is not None:
            rows.append(Row(f"{SIDE} runs at once via HTTP, {LANGGRAPH}: {name}", theirs.figure(name), unit))
        rows.append(Row(f"{SIDE} runs at once via HTTP, {OURS}: {name}", ours.figure(name), unit,
                        "LangGraph" if theirs else "-", theirs.figure(name) if theirs else None))  # fmt: skip
    if theirs is None:
        rows.insert(0, Row(f"{SIDE} runs at once via HTTP, {LANGGRAPH}", None, "", skipped=f"not measured: {why}"))
    return rows


if __name__ == "__main__":
    cli_main(run)

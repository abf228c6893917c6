"""Shared helpers for the benches: timing, rows and the table, bench worker processes, key hygiene.

Every bench uses Redis db 11 (``BENCH_REDIS_URL``) under a key prefix of its own (``bench-<hex>``), and deletes
exactly the keys under that prefix when it is done (never FLUSHDB). Celery's broker keys get the same prefix
through kombu's ``global_keyprefix`` transport option (see :mod:`bench.worker`), so queues, bindings and the
unacked hashes of a bench never mix with anybody else's.

Figures drift on a shared 2-core machine: every figure is printed next to a floor measured in the same run,
and targets are ratios against that floor.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import redis

from agents_celery.cli.processes import stop_process

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")

# -- numbers -------------------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100), nearest-rank."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def timed(fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` took (perf_counter)."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def best_of(fn: Callable[[], Any], repeat: int) -> list[float]:
    """The durations of ``repeat`` calls of ``fn``."""
    return [timed(fn) for _ in range(repeat)]


# -- rows and the table --------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the results table.

    ``ratio`` is ``value / floor_value``. ``cmp``/``target`` is the goal for the ratio (``"<="`` for times,
    ``">="`` for rates); ``target_abs`` is a goal for the value itself (used when the product states one, e.g.
    a recovery time in seconds). A row with no target is informational; a skipped row says why. ``readme``
    rows make the README's excerpt of the run (:mod:`bench.report`).
    """

    figure: str
    value: float | None
    unit: str
    floor: str = ""
    floor_value: float | None = None
    cmp: Literal["<=", ">="] = "<="
    target: float | None = None
    target_abs: float | None = None
    skipped: str | None = None
    readme: bool = False

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.floor_value:
            return None
        return self.value / self.floor_value

    @property
    def target_text(self) -> str:
        if self.skipped:
            return "-"
        if self.target_abs is not None:
            return f"{self.cmp} {_num(self.target_abs)} {self.unit}"
        if self.target is not None:
            return f"{self.cmp} {self.target:g}x"
        return "-"

    @property
    def met(self) -> bool | None:
        if self.skipped or self.value is None:
            return None
        if self.target_abs is not None:
            return _compare(self.value, self.cmp, self.target_abs)
        ratio = self.ratio
        if self.target is None or ratio is None:
            return None
        return _compare(ratio, self.cmp, self.target)

    def cells(self) -> list[str]:
        if self.skipped:
            return [self.figure, "skipped", "-", "-", "-", "-", f"skipped: {self.skipped}"]
        value = f"{_num(self.value)} {self.unit}" if self.value is not None else "-"
        floor_value = f"{_num(self.floor_value)} {self.unit}" if self.floor_value is not None else "-"
        ratio = f"{self.ratio:.2f}x" if self.ratio is not None else "-"
        met = {True: "yes", False: "NO", None: "-"}[self.met]
        return [self.figure, value, self.floor or "-", floor_value, ratio, self.target_text, met]


def _compare(value: float, cmp: str, target: float) -> bool:
    return value <= target if cmp == "<=" else value >= target


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


HEADERS = ["figure", "value", "floor", "floor value", "ratio", "target", "met?"]


def format_table(rows: Sequence[Row], padded: bool = True) -> str:
    """The rows as a Markdown table; ``padded``: columns aligned for a terminal (the README's is compact)."""
    table = [HEADERS, *[r.cells() for r in rows]]
    if not padded:
        lines = ["| " + " | ".join(line) + " |" for line in table]
        return "\n".join([lines[0], "|" + "---|" * len(HEADERS), *lines[1:]])
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADERS))]
    out = []
    for n, line in enumerate(table):
        out.append("| " + " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)) + " |")
        if n == 0:
            out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


def print_table(rows: Sequence[Row]) -> None:
    print(format_table(rows), flush=True)


def log(message: str) -> None:
    """Progress on stderr, so stdout carries only the table."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- what the benches need ----------------------------------------------------------------------------

#: The Python modules each bench imports beyond the core install (``make install`` brings them all, through the
#: ``[dev]`` extra). No bench runs a command-line tool of its own: Redis's MONITOR is read through redis-py.
NEEDS: dict[str, tuple[str, ...]] = {
    "latency": ("httpx", "gunicorn", "gevent", "flask"),
    "langgraph_side": ("httpx", "gunicorn", "gevent", "flask", "psutil"),  # LangGraph itself: a venv of its own
    "sse": ("httpx", "gunicorn", "gevent", "flask", "psutil", "uvicorn", "django"),
    "pydantic_ai": ("pydantic_ai", "dbos", "psycopg"),  # the [pydantic-ai] and [bench] extras
    "openai_agents": ("agents", "dbos_openai_agents", "psycopg"),  # the [openai-agents] and [bench] extras
    "mcp": ("mcp", "uvicorn"),
}


def missing(benches: Sequence[str]) -> list[str]:
    """What the ``benches`` need and this machine lacks, one sentence each (empty: all there)."""
    import importlib.util

    problems = []
    modules = sorted({m for name in benches for m in NEEDS.get(name, ())})
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    if absent:
        names = ", ".join(absent)
        problems.append(f"Python modules {names} are not installed (make install, or pip install -e '.[dev]')")
    try:
        r = client()
        r.ping()
        r.close()
    except redis.RedisError as exc:
        problems.append(f"Redis does not answer at {REDIS_URL} ({exc}): start one (scripts/ensure-redis) or set "
                        "BENCH_REDIS_URL")  # fmt: skip
    return problems


# -- Redis keys ----------------------------------------------------------------------------------------


def unique_prefix(name: str = "") -> str:
    return f"bench-{name + '-' if name else ''}{uuid.uuid4().hex[:8]}"


def client(url: str = REDIS_URL) -> redis.Redis:
    # redis-py 8 defaults to a 5 s socket timeout; the benches block longer than that on purpose.
    return redis.Redis.from_url(url, socket_timeout=180)


def cleanup(prefix: str, url: str = REDIS_URL) -> int:
    """Delete every key under ``prefix:`` (and only those); returns how many."""
    r = client(url)
    deleted = 0
    try:
        batch: list[bytes] = []
        for key in r.scan_iter(match=f"{prefix}:*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                deleted += int(r.delete(*batch))
                batch = []
        if batch:
            deleted += int(r.delete(*batch))
    finally:
        r.close()
    return deleted


@contextlib.contextmanager
def prefixed(name: str) -> Iterator[str]:
    """A fresh prefix whose keys are deleted on exit."""
    prefix = unique_prefix(name)
    try:
        yield prefix
    finally:
        cleanup(prefix)


# -- worker processes ----------------------------------------------------------------------------------

_LIVE: list[Proc] = []


def bench_env(prefix: str, queue: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of a bench worker: our Redis db, key prefix, queue and agents module."""
    env = dict(os.environ)
    env.update(
        {
            "AGENTS_CELERY_REDIS_URL": REDIS_URL,
            "CELERY_BROKER_URL": REDIS_URL,
            "AGENTS_CELERY_KEY_PREFIX": prefix,
            "AGENTS_CELERY_QUEUE": queue,
            "AGENTS_CELERY_AGENTS": "bench.agents",
            # Runs of 50+ tool calls need more turns than the default guard of 25.
            "AGENTS_CELERY_MAX_TURNS": "10000",
            # Teardown only: an idle worker exits at once on SIGTERM instead of a soft-shutdown window.
            "AGENTS_CELERY_SOFT_SHUTDOWN_SECONDS": "0",
            "BENCH_PREFIX": prefix,
            "PYTHONPATH": str(ROOT),
        }
    )
    env.update(extra or {})
    return env


class Proc:
    """A worker process started by a bench, its output in a temp file. Stopped by its own pid only."""

    def __init__(self, cmd: list[str], env: dict[str, str], name: str) -> None:
        self.name = name
        self.prefix = env["BENCH_PREFIX"]
        self.log = Path(tempfile.mkstemp(prefix=f"bench-{name}-", suffix=".log")[1])
        self._out = self.log.open("wb")
        self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=self._out, stderr=subprocess.STDOUT)
        #: Something else that must hold before the process counts as ready (see :func:`agents_worker`).
        self.also_ready: Callable[[redis.Redis], bool] = lambda r: True
        _LIVE.append(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 60) -> Proc:
        """Wait for the key :func:`mark_ready` sets from the worker_ready signal (logs stay at WARNING)."""
        r = client()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if r.exists(ready_key(self.prefix, self.name)) and self.also_ready(r):
                r.close()
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited early:\n{self.output()}")
            time.sleep(0.05)
        raise RuntimeError(f"worker {self.name} not ready after {timeout}s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._close()

    def stop(self) -> None:
        stop_process(self.proc)
        self._close()

    def _close(self) -> None:
        if self in _LIVE:
            _LIVE.remove(self)
        self._out.close()
        with contextlib.suppress(OSError):
            self.log.unlink()


def celery_worker(
    app: str,
    env: dict[str, str],
    queue: str,
    name: str,
    concurrency: int = 1,
    pool: str = "threads",
    extra: Sequence[str] = (),
) -> Proc:
    """``celery -A <app> worker`` with the threads pool (by default): the command ``agents-celery worker`` runs.

    ``agents-celery worker`` is ``app.worker_main(["worker", "-Q", queue, ...])`` on
    ``agents_celery.broker.worker:app``; :mod:`bench.worker` is that same app plus a broker key prefix.
    """
    cmd = [
        sys.executable, "-m", "celery", "-A", app, "worker", "-Q", queue,
        "--pool", pool, "--concurrency", str(concurrency), "-n", f"{name}@%h",
        "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING", *extra,
    ]  # fmt: skip
    return Proc(cmd, env, name)


def agents_worker(
    prefix: str, queue: str, name: str, extra: dict[str, str] | None = None, pool: str = "threads"
) -> Proc:
    """A real agents-celery worker (threads pool by default, concurrency 1) serving :mod:`bench.agents`; ready once
    its agents' manifests are published too (the worker does that on the same worker_ready signal as
    :func:`mark_ready`, in no set order, and a Runtime refuses an agent it finds no manifest for)."""
    from agents_celery.storage.keys import Keys

    proc = celery_worker("bench.worker", bench_env(prefix, queue, extra), queue, name, pool=pool)
    agents_key = Keys(prefix).agents
    proc.also_ready = lambda r: bool(r.hlen(agents_key))
    return proc


def fake_openai_server(tokens: int, token_delay: float) -> tuple[subprocess.Popen[str], str]:
    """The fake OpenAI server in a process of its own (a thread per stream), ``tokens`` words ``token_delay`` s
    apart per completion; returns the process and its ``/v1`` URL. The caller stops it."""
    cmd = [sys.executable, "-m", "agents_celery.testing.openai_server", "--tokens", str(tokens)]
    proc = subprocess.Popen([*cmd, "--token-delay", str(token_delay)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline() if proc.stdout else ""
    match = re.search(r"(http://\S+)", line)
    if not match:
        proc.terminate()
        raise RuntimeError(f"the fake OpenAI server did not start: {line!r}")
    return proc, match.group(1)


class PrivateRedis:
    """A private ``redis-server`` for one bench (no persistence), so its command counts are the bench's own and
    other work on the machine's Redis does not slow it."""

    def __init__(self) -> None:
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        cmd = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(self.url).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def commands(self) -> int:
        stats = redis.Redis.from_url(self.url).info("commandstats")
        return sum(int(v["calls"]) for v in stats.values())

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) a process has used so far, from ``/proc`` (0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_all() -> None:
    for proc in list(_LIVE):
        with contextlib.suppress(Exception):
            proc.stop()


atexit.register(stop_all)


def settings_for(prefix: str, queue: str, **overrides: Any) -> Any:
    """Runtime-side settings matching :func:`bench_env` (``overrides`` as in ``load_settings``)."""
    from agents_celery.settings import load_settings

    return load_settings(
        redis_url=REDIS_URL,
        broker_url=REDIS_URL,
        key_prefix=prefix,
        queue=queue,
        max_turns=10000,
        **overrides,
    )


def runtime_for(prefix: str, queue: str, **overrides: Any) -> Any:
    """A Runtime that sends to the bench workers (same broker key prefix)."""
    from agents_celery import Runtime
    from agents_celery.broker.celery_app import create_celery_app

    settings = settings_for(prefix, queue, **overrides)
    app = create_celery_app(settings, agents={})
    prefix_broker_keys(app, prefix)
    return Runtime(settings=settings, celery_app=app)


def ready_key(prefix: str, name: str) -> str:
    return f"{prefix}:bench:ready:{name}"


def mark_ready(app: Any, prefix: str) -> None:
    """Set :func:`ready_key` when a worker of ``app`` is ready (the hostname's part before ``@`` is its name)."""
    from celery import signals

    @signals.worker_ready.connect(weak=False)  # type: ignore[untyped-decorator]
    def _ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            name = str(sender.hostname).split("@", 1)[0]
            r = client()
            r.set(ready_key(prefix, name), "1", ex=3600)
            r.close()


def prefix_broker_keys(app: Any, prefix: str) -> None:
    """Put every broker key of ``app`` (queues, bindings, unacked) under ``prefix:kombu:``; no remote control."""
    options = dict(app.conf.broker_transport_options or {})
    options["global_keyprefix"] = f"{prefix}:kombu:"
    app.conf.broker_transport_options = options
    # No pidbox: its keys and fanout channels are shared by every worker on the database.
    app.conf.worker_enable_remote_control = False


def cli_main(run: Callable[[bool], list[Row]]) -> None:
    """``python -m bench.<name> [--quick]``: run one bench and print its table."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    try:
        rows = run(args.quick)
    finally:
        stop_all()
    print_table(rows)

"""``agents-celery demo``: the two durability stories, end to end, on a machine with nothing but Python.

1. A consumer drops mid-answer, keeps the run id and the last offset it saw, reconnects from there and
   gets every event exactly once.
2. A worker is killed with SIGKILL while a tool runs; another worker takes the run over once the lease
   expires (seconds) and finishes it.

It uses a private key prefix and queue, a private Redis when none is configured (or when
``AGENTS_CELERY_DEMO_EMBEDDED=1``), its own worker processes, and removes all of it on exit, even on error or
Ctrl-C. It exits 0 when every invariant held (contiguous offsets, no duplicate, runs completed), 1 otherwise.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import redis
from rich.console import Console

from ..errors import AgentsCeleryError
from ..events import Event, EventType
from ..runs import RunStatus
from ..runtime import Runtime
from ..settings import load_settings
from ..storage.connections import answers
from ..testing.embedded import EmbeddedRedis
from .processes import stop_process

T = TypeVar("T")

#: Lease timings that make crash recovery take about two seconds.
FAST_ENV = {
    "AGENTS_CELERY_LEASE_TTL_SECONDS": "2",
    "AGENTS_CELERY_HEARTBEAT_SECONDS": "0.4",
    "AGENTS_CELERY_SWEEP_INTERVAL_SECONDS": "0.3",
    "AGENTS_CELERY_ENQUEUE_GRACE_SECONDS": "2",
    "AGENTS_CELERY_STOP_POLL_SECONDS": "0.05",
}
DEFAULT_URL = "redis://localhost:6379/0"


class DemoFailure(Exception):
    """An invariant of the demo did not hold."""


@dataclass
class RedisChoice:
    url: str
    broker_url: str
    embedded: EmbeddedRedis | None
    why: str


def choose_redis() -> RedisChoice:
    """The configured Redis, else one answering on localhost:6379, else a private embedded server."""
    forced = os.environ.get("AGENTS_CELERY_DEMO_EMBEDDED", "").lower() in ("1", "true", "yes")
    configured = os.environ.get("AGENTS_CELERY_REDIS_URL")
    if not forced and configured:
        return RedisChoice(
            configured, os.environ.get("CELERY_BROKER_URL") or configured, None, "AGENTS_CELERY_REDIS_URL"
        )
    if not forced and _answers(DEFAULT_URL):
        return RedisChoice(DEFAULT_URL, DEFAULT_URL, None, "found on localhost:6379")
    server = EmbeddedRedis().start()
    return RedisChoice(server.url, server.broker_url, server, "embedded, private to this demo")


def _answers(url: str) -> bool:
    return answers(url, timeout=0.3)


class DemoWorker:
    """One ``agents-celery worker`` subprocess serving the demo agents; its log goes to a temp file."""

    def __init__(self, name: str, env: dict[str, str], logdir: Path) -> None:
        self.name = name
        self.log = logdir / f"{name}.log"
        cmd = [
            sys.executable, "-m", "agents_celery.cli", "worker", "--agents", "agents_celery.cli.demo_agents",
            "--pool", "threads", "--concurrency", "2", "-n", f"{name}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "INFO",
        ]  # fmt: skip
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise DemoFailure(f"worker {self.name} exited early:\n{self.output()}")
        return b" ready." in self.log.read_bytes()

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        stop_process(self.proc, timeout=10)


def wait_until(predicate: Callable[[], T], timeout: float, what: str) -> T:
    """Poll ``predicate`` until it returns something truthy; DemoFailure after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DemoFailure(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.02)


def describe(event: Event) -> str:
    """A short, one-line description of an event."""
    d = event.data
    if event.type is EventType.TEXT_MESSAGE_CONTENT:
        return repr(d.get("delta", ""))
    if event.type is EventType.TOOL_CALL_START:
        return str(d.get("tool_call_name", ""))
    if event.type in (EventType.TOOL_CALL_ARGS,):
        return str(d.get("delta", ""))
    if event.type is EventType.TOOL_CALL_RESULT:
        return repr(d.get("content", ""))
    if event.type in (EventType.STEP_STARTED, EventType.STEP_FINISHED):
        meta = d.get("metadata") or {}
        return f"{d.get('step_name', '')} attempt {meta.get('attempt', 1)}"
    if event.type is EventType.RUN_FINISHED:
        return str((d.get("outcome") or {}).get("type", ""))
    if event.type is EventType.RUN_ERROR:
        return str(d.get("message", ""))
    if event.type is EventType.CUSTOM:
        return f"{d.get('name')} {d.get('value')}"
    return ""


def check_offsets(offsets: list[int], last_offset: int) -> None:
    """Every offset from 0 to ``last_offset`` exactly once, in order; DemoFailure otherwise."""
    if offsets != list(range(last_offset + 1)):
        dupes = sorted({o for o in offsets if offsets.count(o) > 1})
        missing = sorted(set(range(last_offset + 1)) - set(offsets))
        raise DemoFailure(f"offsets not contiguous: duplicates {dupes}, missing {missing}")


class Demo:
    """Both stories against one runtime and a set of worker processes."""

    def __init__(self, runtime: Runtime, workers: list[DemoWorker], out: Console) -> None:
        self.rt = runtime
        self.workers = workers
        self.out = out

    def show(self, event: Event, prefix: str = "") -> None:
        line = f"  {prefix}offset {event.offset:>3}  {event.type.value:<21} {describe(event)}"
        self.out.print(line, markup=False, highlight=False)

    def reconnect_story(self) -> None:
        """Drop the consumer after the first text chunk, reconnect from the saved offset, check no gap."""
        self.out.rule("1. a consumer drops mid-answer and reconnects")
        stream = self.rt.stream("weather", "What is the weather in Lisbon?")
        self.out.print(f"started run {stream.id} (agent weather)", markup=False)
        offsets: list[int] = []
        for event in stream.events():
            self.show(event)
            offsets.append(event.offset)
            if event.type is EventType.TEXT_MESSAGE_CONTENT:
                break
        run_id, saved = stream.id, offsets[-1]
        self.out.print(
            f"consumer dropped after the first text chunk; saved run_id={run_id} offset={saved}", markup=False
        )
        moved = wait_until(lambda: self.rt.get(run_id).last_offset >= saved + 5, 30, "the run to go on")
        self.out.print(f"while nobody listened the run went on (last offset now {self.rt.get(run_id).last_offset})")
        assert moved
        self.out.print(f"reconnecting: runtime.get_stream({run_id!r}).events(offset={saved})", markup=False)
        for event in self.rt.get_stream(run_id).events(offset=saved):
            self.show(event, "↻ ")
            offsets.append(event.offset)
        view = self.rt.get(run_id)
        check_offsets(offsets, view.last_offset)
        if view.status is not RunStatus.COMPLETED:
            raise DemoFailure(f"run {run_id} ended {view.status.value}, not completed: {view.error}")
        self.out.print(
            f"✓ reconnect: {len(offsets)} events, offsets 0..{view.last_offset}, no gap, no duplicate; "
            f"answer: {view.output!r}",
            markup=False,
        )

    def crash_story(self) -> None:
        """Kill -9 the worker running a slow tool; another worker finishes the run."""
        from .demo_agents import tool_pid_key

        self.out.rule("2. a worker is killed with SIGKILL in the middle of a tool")
        stream = self.rt.stream("reporter", "Build the uptime report.")
        self.out.print(f"started run {stream.id} (agent reporter)", markup=False)
        offsets: list[int] = []
        for event in stream.events():
            self.show(event)
            offsets.append(event.offset)
            if event.type is EventType.STEP_STARTED and (event.data.get("metadata") or {}).get("kind") == "tools":
                break
        key = tool_pid_key(self.rt.settings.key_prefix, stream.id)
        pid = _as_int(wait_until(lambda: self.rt.redis.lindex(key, 0), 30, "build_report to start"))
        victim = next((w for w in self.workers if w.proc.pid == pid), None)
        if victim is None:
            raise DemoFailure(f"the tool runs in pid {pid}, which is none of the demo's workers")
        victim.kill()
        killed = time.monotonic()
        self.out.print(f"✗ killed worker {victim.name} (pid {pid}) with SIGKILL while build_report was running")
        recovered = self._follow_recovery(stream.id, offsets, killed)
        done = time.monotonic() - killed
        view = self.rt.get(stream.id)
        check_offsets(offsets, view.last_offset)
        if view.status is not RunStatus.COMPLETED:
            raise DemoFailure(f"run {stream.id} ended {view.status.value}, not completed: {view.error}")
        pids = [int(p) for p in self.rt.redis.lrange(key, 0, -1)]
        rescuer = next((w.name for w in self.workers if w.proc.pid == pids[-1]), f"pid {pids[-1]}")
        self.out.print(
            f"✓ recovery: worker {rescuer} took the run over {recovered:.1f}s after the kill "
            f"and completed it {done:.1f}s after the kill (lease 2 s); offsets 0..{view.last_offset}, no gap, "
            f"no duplicate; build_report ran {len(pids)} times (idempotent, so re-run safely)",
            markup=False,
        )

    def _follow_recovery(self, run_id: str, offsets: list[int], killed: float) -> float:
        recovered: float | None = None
        with self._spinner("waiting for another worker to take the run over (lease expiry)..."):
            for event in self.rt.get_stream(run_id).events(offset=offsets[-1]):
                if recovered is None and (event.data.get("metadata") or {}).get("attempt", 1) > 1:
                    recovered = time.monotonic() - killed
                self.show(event, f"+{time.monotonic() - killed:4.1f}s ")
                offsets.append(event.offset)
        if recovered is None:
            raise DemoFailure(f"run {run_id} ended without a retried step after the kill")
        return recovered

    @contextmanager
    def _spinner(self, text: str) -> Iterator[None]:
        if self.out.is_terminal:
            with self.out.status(text):
                yield
        else:
            self.out.print(text)
            yield


def _start(stack: ExitStack, out: Console) -> tuple[Runtime, list[DemoWorker]]:
    with _status(out, "preparing Redis..."):
        choice = choose_redis()
    if choice.embedded is not None:
        stack.callback(choice.embedded.stop)
    tag = uuid.uuid4().hex[:8]
    prefix, queue = f"acdemo-{tag}", f"agents-demo-{tag}"
    out.print(f"Redis: {choice.url} ({choice.why}); key prefix {prefix!r}, queue {queue!r}", markup=False)
    env = {**os.environ, **FAST_ENV}
    env.update(
        AGENTS_CELERY_REDIS_URL=choice.url,
        CELERY_BROKER_URL=choice.broker_url,
        AGENTS_CELERY_KEY_PREFIX=prefix,
        AGENTS_CELERY_QUEUE=queue,
    )
    env.pop("AGENTS_CELERY_AGENTS", None)
    if choice.embedded is None:
        stack.callback(_delete_keys, choice.url, choice.broker_url, prefix, queue, tag)
    logdir = Path(tempfile.mkdtemp(prefix="agents-celery-demo-"))
    stack.push(lambda exc_type, exc, tb: _remove_logs(logdir, exc_type))
    workers = [DemoWorker(f"demo{i}-{tag}", env, logdir) for i in (1, 2)]
    for worker in workers:
        stack.callback(worker.stop)
    with _status(out, "starting 2 worker processes..."):
        wait_until(lambda: all(w.ready() for w in workers), 60, "the workers to be ready")
    out.print(f"workers ready: {', '.join(f'{w.name} (pid {w.proc.pid})' for w in workers)}", markup=False)
    overrides = {k.removeprefix("AGENTS_CELERY_").lower(): v for k, v in FAST_ENV.items()}
    settings = load_settings(
        redis_url=choice.url, broker_url=choice.broker_url, key_prefix=prefix, queue=queue, **overrides
    )
    runtime = Runtime(settings=settings)
    stack.callback(runtime.close)
    return runtime, workers


@contextmanager
def _status(out: Console, text: str) -> Iterator[None]:
    if out.is_terminal:
        with out.status(text):
            yield
    else:
        yield


def _remove_logs(logdir: Path, failing: type[BaseException] | None) -> None:
    """Remove the workers' logs, unless the demo is failing (then say where they are)."""
    if failing is None or failing is KeyboardInterrupt:
        shutil.rmtree(logdir, ignore_errors=True)
    else:
        print(f"worker logs kept in {logdir}", file=sys.stderr)


def _delete_keys(url: str, broker_url: str, prefix: str, queue: str, tag: str) -> None:
    """Delete the demo's keys and broker leftovers from a shared Redis; the database is never flushed."""
    for target, clean in (
        (url, lambda c: _delete_matching(c, f"{prefix}:*")),
        (broker_url, _broker_cleaner(queue, tag)),
    ):
        if not target.startswith(("redis://", "rediss://", "unix://")):
            continue  # e.g. a RabbitMQ broker: its queue is left to its operator
        client = redis.Redis.from_url(target)
        try:
            clean(client)
        except redis.RedisError:
            pass
        finally:
            client.close()


def _delete_matching(client: redis.Redis, pattern: str) -> None:
    for key in client.scan_iter(match=pattern, count=1000):
        client.delete(key)


def _broker_cleaner(queue: str, tag: str) -> Callable[[redis.Redis], None]:
    """Removes what kombu left for the demo's queue and workers (a killed worker leaves its unacked message)."""

    def clean(client: redis.Redis) -> None:
        _delete_matching(client, f"{queue}*")
        _delete_matching(client, f"_kombu.binding*.{queue}")
        for member in client.smembers("_kombu.binding.celery.pidbox"):
            if f"-{tag}@".encode() in member:
                client.srem("_kombu.binding.celery.pidbox", member)
        if not client.exists("_kombu.binding.celery.pidbox"):  # nobody else uses the pidbox: drop its deadline
            client.zrem("_kombu.binding_deadlines", "celery.pidbox")
        for delivery_tag, payload in client.hgetall("unacked").items():
            if f'"{queue}"'.encode() in payload:
                client.hdel("unacked", delivery_tag)
                client.zrem("unacked_index", delivery_tag)

    return clean


def run_demo(out: Console | None = None) -> int:
    """Run both stories; 0 when every invariant held, 1 when one failed."""
    out = out or Console(highlight=False, soft_wrap=True)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with ExitStack() as stack:
            runtime, workers = _start(stack, out)
            demo = Demo(runtime, workers, out)
            demo.reconnect_story()
            demo.crash_story()
            with _status(out, "cleaning up..."):
                stack.close()
    except DemoFailure as exc:
        out.print(f"FAILED: {exc}", markup=False)
        return 1
    except AgentsCeleryError as exc:
        out.print(f"FAILED: {type(exc).__name__}: {exc}", markup=False)
        return 1
    except KeyboardInterrupt:
        out.print("interrupted; cleaned up")
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    out.print("demo passed: every event delivered exactly once, both runs completed; workers, keys and Redis removed")
    return 0


def _as_int(value: Any) -> int:
    return int(value)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt

"""The HTTP API under load: SSE replay, 1,000 concurrent subscribers, end-to-end streamed runs.

One API process: gunicorn, ``--worker-class gevent --workers 1 --worker-connections 2000`` as
``agents_celery/api/serve.py`` documents, serving :func:`bench.api_app.create`.

- Replay: ``GET /runs/<id>/events`` of a finished 10,000-event run, events/s, against raw XRANGE in Python.
- Subscribers: 1,000 sockets subscribe to one live run, then its events are appended and it ends; how many got
  the final event, and RSS growth of the API worker per subscriber.
- End to end: streamed runs (``POST /agents/streamer/runs``, stream) per second against a local FakeOpenAIServer
  at 0 ms per token, one worker (threads, concurrency 1), 4 concurrent clients. Informational (no floor).
- Django under ASGI: the same 1,000 subscribers against the example Django project served by one uvicorn
  process (``examples.django_app.asgi``, the app ``agents_celery.contrib.django`` under ``/ai/``, API key).
"""

from __future__ import annotations

import importlib.util
import selectors
import socket
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from agents_celery.events import EventType, make_event
from agents_celery.storage.eventlog import EventLog
from agents_celery.storage.keys import Keys
from agents_celery.storage.leases import Leases

from .common import Proc, Row, agents_worker, bench_env, cli_main, client, log, median, prefixed, timed

REPLAY = 10_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_api(
    prefix: str, queue: str, connections: int = 2000, extra: dict[str, str] | None = None
) -> tuple[Proc, int]:
    """One gunicorn gevent worker (the production command of ``agents_celery/api/serve.py``) on a free port;
    ``extra``: more environment (``BENCH_REDIS_URL`` points its Runtime at another Redis)."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "gunicorn", "bench.api_app:create()", "--worker-class", "gevent",
        "--workers", "1", "--worker-connections", str(connections), "--bind", f"127.0.0.1:{port}",
        "--backlog", "2048", "--log-level", "warning",
    ]  # fmt: skip
    proc = Proc(cmd, bench_env(prefix, queue, extra), f"{prefix}-api")
    wait_up(proc, f"http://127.0.0.1:{port}/health")
    return proc, port


def wait_up(proc: Proc, url: str, headers: dict[str, str] | None = None) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, headers=headers, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
        if proc.proc.poll() is not None:
            raise RuntimeError(f"API exited:\n{proc.output()}")
    raise RuntimeError(f"API not up:\n{proc.output()}")


def start_asgi_api(prefix: str, queue: str, api_key: str, db: str) -> tuple[Proc, int]:
    """One uvicorn process serving the example Django project (``/ai/`` is agents-celery) on a free port."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "uvicorn", "examples.django_app.asgi:application", "--host", "127.0.0.1",
        "--port", str(port), "--backlog", "2048", "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    env = bench_env(prefix, queue, {"AGENTS_CELERY_API_KEY": api_key, "DJANGO_DB": db})
    proc = Proc(cmd, env, f"{prefix}-asgi")
    wait_up(proc, f"http://127.0.0.1:{port}/ai/health", {"Authorization": f"Bearer {api_key}"})
    return proc, port


def api_rss(proc: Proc) -> int:
    """RSS of the API's processes: gunicorn's workers, or the process itself when it has none (uvicorn)."""
    import psutil

    parent = psutil.Process(proc.pid)
    children = parent.children(recursive=True)
    return sum(p.memory_info().rss for p in children or [parent])


def make_log(log_: EventLog, leases: Leases, events: int, end: bool) -> tuple[str, str]:
    run_id = uuid.uuid4().hex
    log_.create(run_id, "s", "bench", [make_event(EventType.RUN_STARTED, thread_id="s", run_id=run_id)])
    token = leases.acquire(run_id, 600_000)
    assert token is not None
    content = make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="msg_bench", delta="hello ")
    left = events
    while left > 0:
        n = min(500, left)
        log_.append(run_id, [content] * n, token)
        left -= n
    if end:
        finish(log_, run_id, token)
    return run_id, token


def finish(log_: EventLog, run_id: str, token: str) -> None:
    done = make_event(EventType.RUN_FINISHED, thread_id="s", run_id=run_id, outcome={"type": "success"})
    log_.set_status(run_id, "ended", token, [done])


def sse_replay(port: int, run_id: str) -> int:
    """Frames (``id:`` lines) received from a full replay."""
    import httpx

    frames = 0
    with httpx.stream("GET", f"http://127.0.0.1:{port}/runs/{run_id}/events", timeout=60) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if line.startswith("id:"):
                frames += 1
    return frames


def subscribers(
    port: int, run_id: str, count: int, publish: Any, timeout: float = 60, base: str = "", api_key: str = ""
) -> tuple[int, int]:
    """Open ``count`` SSE connections, call ``publish()`` once every one got its first event; return
    (subscribed, got the final event)."""
    sel = selectors.DefaultSelector()
    auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
    request = (
        f"GET {base}/runs/{run_id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n{auth}\r\n"
    ).encode()
    buffers: dict[socket.socket, bytearray] = {}
    for _ in range(count):
        conn = socket.create_connection(("127.0.0.1", port), timeout=30)
        conn.sendall(request)
        conn.setblocking(False)
        sel.register(conn, selectors.EVENT_READ)
        buffers[conn] = bytearray()
    subscribed: set[socket.socket] = set()
    finished: set[socket.socket] = set()
    published = False
    deadline = time.monotonic() + timeout
    while len(finished) < count and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            s: Any = key.fileobj
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            buf = buffers[s]
            buf += data
            if b"RUN_STARTED" in buf:
                subscribed.add(s)
            if b"RUN_FINISHED" in buf:
                finished.add(s)
            if not data or s in finished:
                sel.unregister(s)
                s.close()
            elif len(buf) > 4096:
                del buf[:-64]
        waited = time.monotonic() - (deadline - timeout)
        # Publish once all subscribed, or after 10 s with whoever made it (the rest are counted as missing).
        if not published and (len(subscribed) >= count or waited > 10):
            published = True
            publish()
    for s in list(buffers):
        if s.fileno() != -1:
            sel.unregister(s)
            s.close()
    return len(subscribed), len(finished)


def e2e_runs(port: int, runs: int, clients: int) -> float:
    """Streamed runs per second through the API."""
    import httpx

    done = 0
    lock = threading.Lock()
    errors: list[str] = []

    def one_client(n: int) -> None:
        nonlocal done
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            for _ in range(n):
                with http.stream("POST", "/agents/streamer/runs", json={"message": "hi", "stream": True}) as resp:
                    body = "".join(resp.iter_text())
                if resp.status_code != 200 or "RunCompleted" not in body:
                    errors.append(f"{resp.status_code}: {body[-300:]}")
                with lock:
                    done += 1

    per = runs // clients
    threads = [threading.Thread(target=one_client, args=(per,)) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} streamed runs failed, e.g. {errors[0]}")
    return done / elapsed


def fan_out(
    api: Proc, port: int, log_: EventLog, leases: Leases, subs: int, timeout: float, base: str = "", key: str = ""
) -> tuple[int, int, float | None]:
    """``subs`` subscribers of one live run, which then gets 10 events and ends: (subscribed, got the final
    event, API memory per subscriber in bytes)."""
    live_id, token = make_log(log_, leases, 0, end=False)
    before = api_rss(api)
    rss_during: list[int] = []

    def publish() -> None:
        rss_during.append(api_rss(api))
        content = make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="msg_bench", delta="hi ")
        log_.append(live_id, [content] * 10, token)
        finish(log_, live_id, token)

    subscribed, got_final = subscribers(port, live_id, subs, publish, timeout, base, key)
    log(f"sse: {subscribed} subscribed, {got_final} got the final event")
    per_sub = (rss_during[0] - before) / max(subscribed, 1) if rss_during else None
    return subscribed, got_final, per_sub


def run(quick: bool) -> list[Row]:
    if importlib.util.find_spec("agents_celery.contrib.flask") is None:
        print("skipped: API not present", file=sys.stderr)
        return [Row("SSE benches", None, "", skipped="API not present")]
    from agents_celery.testing.openai_server import FakeOpenAIServer, ScriptResponder

    subs = 1000
    repeats = 2 if quick else 3
    e2e = 40 if quick else 100
    with prefixed("sse") as prefix, tempfile.TemporaryDirectory() as tmp:
        queue = f"{prefix}-agents"
        r = client()
        keys = Keys(prefix)
        log_ = EventLog(r, keys, retention_ms=600_000, tombstone_ms=600_000)
        leases = Leases(r, keys)
        server = FakeOpenAIServer(ScriptResponder(["Hello from the fake server, streamed at full speed."])).start()
        worker = agents_worker(prefix, queue, f"{prefix}-w", {"FAKE_OPENAI_URL": server.url})
        api, port = start_api(prefix, queue, 2000)
        try:
            worker.wait_ready()
            log("sse: replay of a 10,000-event run over HTTP")
            run_id, _ = make_log(log_, leases, REPLAY - 2, end=True)
            stream_key = keys.run(run_id).events
            sse_replay(port, run_id)  # warm-up
            raw, http = [], []
            for _ in range(repeats):
                raw.append(REPLAY / timed(lambda: r.xrange(stream_key)))
                t0 = time.perf_counter()
                frames = sse_replay(port, run_id)
                http.append(REPLAY / (time.perf_counter() - t0))
                assert frames == REPLAY, frames

            log(f"sse: {e2e} end-to-end streamed runs")
            e2e_runs(port, 4, 4)  # warm-up
            runs_per_s = e2e_runs(port, e2e, 4)
            log(f"sse: {subs} concurrent subscribers (gunicorn gevent, Flask)")
            subscribed, got_final, per_sub = fan_out(api, port, log_, leases, subs, 25 if quick else 40)
            api.stop()
            log(f"sse: {subs} concurrent subscribers (uvicorn, Django ASGI)")
            api, port = start_asgi_api(prefix, queue, "bench-key", str(Path(tmp) / "db.sqlite3"))
            asgi = fan_out(api, port, log_, leases, subs, 25 if quick else 40, "/ai", "bench-key")
        finally:
            api.stop()
            worker.stop()
            server.stop()
            r.close()
    return [
        Row(f"SSE replay of {REPLAY:,} events", median(http), "ev/s",
            f"raw XRANGE of {REPLAY:,}", median(raw), ">=", 0.3, readme=True),
        Row(f"SSE subscribers getting the final event (of {subs})", float(got_final), "subs",
            "subscribers connected", float(subscribed), ">=", None, float(subs), readme=True),
        Row("API memory per SSE subscriber", per_sub / 1024 if per_sub is not None else None, "KiB"),
        Row(f"Django ASGI subscribers getting the final event (of {subs})", float(asgi[1]), "subs",
            "subscribers connected", float(asgi[0]), ">=", None, float(subs)),
        Row("Django ASGI memory per SSE subscriber", asgi[2] / 1024 if asgi[2] is not None else None, "KiB"),
        Row("end-to-end streamed runs via API (0 ms/token)", runs_per_s, "runs/s"),
    ]  # fmt: skip


if __name__ == "__main__":
    cli_main(run)
